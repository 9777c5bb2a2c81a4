//! Two shards: two probes, and both servers stopped mid-run.

use crate::common::clickhouse::{Server, CLUSTER, PASSWORD};
use crate::common::scratch;
use crate::compare::*;
use crate::run::*;
use std::path::Path;
use std::process::Command;

#[test]
fn two_probes_on_a_two_shard_cluster_equal_their_sqlite_runs_from_either_server() {
    let Some(servers) = Server::cluster("two", 2) else {
        return;
    };
    let impaired = impaired_at(scratch("cluster-impaired.pcap"));
    let runs =
        [("site-a", capture("sipp_calls"), 0, db("site-a")), ("site-b", impaired, 1, db("site-b"))];
    let cluster = ["--clickhouse-cluster", CLUSTER];
    for (probe, file, first, db) in &runs {
        // Each probe lists both nodes, its own first: both get the tables.
        let urls = format!("{},{}", servers[*first].url, servers[1 - first].url);
        succeeded(&analyze(file, db, &urls, probe, &cluster), probe);
    }
    for (probe, _, _, db) in &runs {
        for table in ["calls", "streams"] {
            let sql = format!("SELECT count() FROM calliper.{table} FINAL WHERE probe = '{probe}'");
            wait_for(&servers[0], &sql, sqlite_count(db, table));
        }
        for s in &servers {
            assert!(assert_equal(s, db, probe, probe) > 0);
        }
    }
    // Sharded by record id: each shard holds part of each table.
    for s in &servers {
        for table in ["calls_local", "streams_local"] {
            let n: u64 =
                s.query(&format!("SELECT count() FROM calliper.{table}")).trim().parse().unwrap();
            assert!(n > 0, "{table} empty on {}", s.url);
        }
    }
}

#[test]
fn both_shards_stopped_in_the_middle_of_a_run_lose_nothing_and_duplicate_nothing() {
    use std::io::Write;
    let Some(mut servers) = Server::cluster("fault", 2) else {
        return;
    };
    let capture = calliper_testkit::generated::pcap(&calliper_testkit::generated::impaired());
    let (db, spool) = (db("fault"), scratch("fault-spool"));
    let urls = format!("{},{}", servers[0].url, servers[1].url);
    let extra = [
        "--clickhouse-cluster",
        CLUSTER,
        "--clickhouse-batch-ms",
        "100",
        "--clickhouse-batch-rows",
        "20",
        "--clickhouse-spool",
        spool.to_str().unwrap(),
    ];
    let mut child = analyze_command(Path::new("/dev/stdin"), &db, &urls, "fault", &extra)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let third = capture.len() / 3;
    input.write_all(&capture[..third]).unwrap();
    // Some rows have arrived (in either shard's own table: the Distributed
    // one answers only once both shards have theirs); then both servers
    // stop mid-run.
    let started = std::time::Instant::now();
    let arrived = |s: &Server| {
        s.try_query("SELECT count() FROM calliper.calls_local").is_ok_and(|n| n.trim() != "0")
    };
    while !servers.iter().any(arrived) {
        assert!(started.elapsed().as_secs() < 60, "no rows arrived");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    servers[0].stop();
    servers[1].stop();
    input.write_all(&capture[third..2 * third]).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    servers[1].restart();
    servers[0].restart();
    input.write_all(&capture[2 * third..]).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    let err = succeeded(&out, "the run");
    assert!(
        reported(&err, "spooled ") > 0,
        "nothing was spooled while the servers were down:\n{err}"
    );
    assert_eq!(reported(&err, "dropped "), 0, "{err}");
    // The end of a run with a spool directory tries for 10 s at most (many
    // small batches under load can take longer); what is left is sent by
    // clickhouse-flush, as an operator would.
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["clickhouse-flush", "--clickhouse", &urls, "--clickhouse-spool"])
        .arg(&spool)
        .args(["--clickhouse-cluster", CLUSTER])
        .env("CALLIPER_CLICKHOUSE_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    let flushed = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{flushed}");
    assert_eq!(reported(&flushed, "waiting in the spool "), 0, "{flushed}");
    for table in ["calls", "streams"] {
        let sql = format!("SELECT count() FROM calliper.{table} FINAL WHERE probe = 'fault'");
        wait_for(&servers[0], &sql, sqlite_count(&db, table));
    }
    assert!(assert_equal(&servers[0], &db, "fault", "stopped mid-run") > 400);
    // The sums too: packets, loss and MOS over all streams.
    let sums = servers[0].query("SELECT sum(packets), sum(lost), sum(expected) FROM calliper.streams FINAL WHERE probe = 'fault' FORMAT TSV");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (p, l, e): (i64, i64, i64) = conn
        .query_row("SELECT sum(packets), sum(lost), sum(expected) FROM streams", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(sums.trim(), format!("{p}\t{l}\t{e}"));
}
