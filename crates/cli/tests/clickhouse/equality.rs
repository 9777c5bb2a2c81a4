//! Equal to SQLite: every capture, twice sent, older tables, a current engine.

use crate::common::clickhouse::{free_port, storable_strings, Server};
use crate::common::{self, hostile, scratch};
use crate::compare::*;
use crate::run::*;
use std::process::Command;

#[test]
fn every_call_and_stream_equals_the_sqlite_run_in_both_directions() {
    let Some(ch) = Server::start("equal") else {
        return;
    };
    let mut files = common::captures();
    files.push(storable_strings().save("storable-strings"));
    // Two calls sharing a Call-ID and a start time: two rows, not one.
    files.push(hostile::call_id_reuse().save("call-id-reuse"));
    files.push(impaired_at(scratch("impaired.pcap")));
    let mut total = 0;
    for (i, f) in files.iter().enumerate() {
        let probe = format!("p{i}");
        let db = db(&probe);
        succeeded(&analyze(f, &db, &ch.url, &probe, &[]), &f.display().to_string());
        total += assert_equal(&ch, &db, &probe, &f.display().to_string());
    }
    assert!(total > 1000, "only {total} rows compared");
    // The crafted strings came back byte for byte (the comparison above
    // is exact); and they are there to compare.
    let ids = ch.query("SELECT call_id FROM calliper.calls FINAL WHERE call_id LIKE '%DROP TABLE%' OR call_id LIKE 'q\"uo%' FORMAT TSV");
    assert_eq!(ids.lines().count(), 2, "{ids}");
    // Each row's day is its time's (UTC).
    let wrong = ch.query(
        "SELECT count() FROM calliper.calls WHERE day != toDate(toDateTime(intDiv(invite_ns, 1000000000), 'UTC'))",
    );
    assert_eq!(wrong.trim(), "0");
}

#[test]
fn a_run_sent_twice_is_stored_once() {
    let Some(ch) = Server::start("twice") else {
        return;
    };
    let file = &capture("sipp_calls");
    let db = db("twice");
    for _ in 0..2 {
        std::fs::remove_file(&db).ok();
        succeeded(&analyze(file, &db, &ch.url, "twice", &[]), "analyze");
    }
    let rows = assert_equal(&ch, &db, "twice", "sent twice");
    assert!(rows > 0);
    // Once merged, the table itself holds each row once.
    ch.query("OPTIMIZE TABLE calliper.calls FINAL");
    let calls = ch.query("SELECT count() FROM calliper.calls WHERE probe = 'twice'");
    let sqlite = sqlite_rows(&db, "SELECT * FROM calls", &[]).len();
    assert_eq!(calls.trim(), sqlite.to_string());
}

#[test]
fn tables_made_by_an_earlier_version_gain_the_columns_they_lack() {
    let Some(ch) = Server::start("older") else {
        return;
    };
    ch.query("CREATE DATABASE calliper");
    ch.query(
        "CREATE TABLE calliper.calls (probe String, record_id UInt64, day Date, call_id String, invite_ns Int64) \
         ENGINE = ReplacingMergeTree() PARTITION BY day ORDER BY (invite_ns, record_id)",
    );
    // Calls an earlier version wrote, before the Call-ID lookup existed.
    ch.query(
        "INSERT INTO calliper.calls (probe, record_id, day, call_id, invite_ns) VALUES \
         ('old', 1, '2024-01-02', 'old-1@x', 1704153600000000000), ('old', 2, '2024-01-03', 'old-2@x', 1704240000000000000)",
    );
    let (file, db) = (&capture("sipp_calls"), db("older"));
    succeeded(&analyze(file, &db, &ch.url, "older", &[]), "older tables");
    assert!(assert_equal(&ch, &db, "older", "older tables") > 0);
    // The call index holds every call: the earlier ones copied when it
    // was made, the new ones through its view.
    let count = |sql: &str| ch.query(sql).trim().parse::<u64>().unwrap();
    let calls = count("SELECT count(DISTINCT record_id) FROM calliper.calls");
    assert!(calls > 2);
    assert_eq!(
        count("SELECT count(DISTINCT record_id) FROM calliper.call_index WHERE kind = 0"),
        calls
    );
    assert_eq!(
        ch.query(
            "SELECT toString(day) FROM calliper.call_index WHERE kind = 0 AND key = 'old-2@x'"
        )
        .trim(),
        "2024-01-03"
    );
    // And says so, for the console to use it.
    assert_eq!(
        count("SELECT count() FROM system.tables WHERE database = 'calliper' AND name = 'call_index_filled'"),
        1
    );
}

/// What the sink sends, checked against a current ClickHouse (chdb, the
/// engine embedded: 25 or 26) where 18.16 is the server above: every
/// statement of `calliper clickhouse-schema`, then each spooled batch as
/// the sink would insert it, read back equal to SQLite's rows
/// (tests/clickhouse/chdb_check.py).
#[test]
fn a_current_clickhouse_takes_the_schema_and_every_batch() {
    let python = "python3";
    let has = Command::new(python).args(["-c", "import chdb"]).status();
    if !has.is_ok_and(|s| s.success())
        && common::skip_requested(
            "chdb",
            "the chdb Python package is not installed (the README's test command installs it)",
        )
    {
        return;
    }
    let dir = scratch("chdb");
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("schema.sql");
    let out =
        Command::new(env!("CARGO_BIN_EXE_calliper")).arg("clickhouse-schema").output().unwrap();
    assert!(out.status.success());
    std::fs::write(&schema, &out.stdout).unwrap();
    let files = [impaired_at(dir.join("impaired.pcap")), storable_strings().save("chdb-strings")];
    let dead = format!("http://127.0.0.1:{}", free_port());
    for (i, f) in files.iter().enumerate() {
        let (db, spool) = (dir.join(format!("{i}.db")), dir.join(format!("spool-{i}")));
        let spool_arg = spool.to_str().unwrap();
        succeeded(&analyze(f, &db, &dead, "chdb", &["--clickhouse-spool", spool_arg]), "spooling");
        let queries = console_queries(&db, &dir.join(format!("queries-{i}")));
        let check = Command::new(python)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/clickhouse/chdb_check.py"))
            .args([&schema, &spool, &db, &queries])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&check.stdout);
        assert!(
            check.status.success(),
            "{}: {said}{}",
            f.display(),
            String::from_utf8_lossy(&check.stderr)
        );
        assert!(said.contains("rows equal in both directions"), "{said}");
        assert!(said.contains("console searches equal"), "{said}");
    }
}

/// The console's search queries (`serve --clickhouse`), each with its
/// external table and the number of calls the same search finds in the
/// SQLite database `db`, written to `dir` for chdb_check.py to run.
fn console_queries(db: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let conn = calliper_store::open_searchable(db).unwrap();
    let searches = [
        "",
        "caller=*a*",
        "callee=?0*",
        "user_agent=*",
        "ip=10.0.0.0/8",
        "ip=::/0",
        "status=2xx",
        "status=none",
        "state=completed",
        "codec=pcmu",
        "mos_below=4",
        "loss_above=2",
        "min_duration=5&max_duration=60",
        "call_id=x",
        "label=x",
        "probe=chdb",
        "sort=mos&order=asc",
        "sort=setup_delay",
        "from=2020-01-01&to=2040-01-01",
    ];
    for (n, q) in searches.iter().enumerate() {
        let mut s = calliper_console::search_from_query(q).unwrap();
        s.limit = calliper_store::MAX_LIMIT;
        let query =
            calliper_store::clickhouse::search_query("calliper", &s, &Default::default()).unwrap();
        s.probe = None;
        let (found, _) = calliper_store::search_calls(&conn, &s).unwrap();
        std::fs::write(dir.join(format!("{n}.sql")), &query.sql).unwrap();
        std::fs::write(dir.join(format!("{n}.expected")), found.len().to_string()).unwrap();
        if let Some(p) = query.tables.first() {
            std::fs::write(dir.join(format!("{n}.structure")), &p.structure).unwrap();
            std::fs::write(dir.join(format!("{n}.bin")), &p.rows).unwrap();
        }
    }
    call_id_queries(&conn, dir, searches.len());
    dir.to_path_buf()
}

/// Two more queries for chdb_check.py, numbered from `n`: the call index's
/// answer for the Call-ID of the database's first call (a row per distinct
/// day and INVITE time), and the search for that Call-ID narrowed to the
/// times SQLite gives (the calls SQLite finds for it).
fn call_id_queries(conn: &rusqlite::Connection, dir: &std::path::Path, n: usize) {
    use calliper_store::clickhouse::{index_query, search_query, Indexed, Narrowed};
    let call_id: String =
        conn.query_row("SELECT call_id FROM calls ORDER BY id LIMIT 1", [], |r| r.get(0)).unwrap();
    let mut invites: Vec<i64> = conn
        .prepare("SELECT DISTINCT invite_ns FROM calls WHERE call_id = ?1")
        .unwrap()
        .query_map([&call_id], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    invites.sort_unstable();
    let mut days: Vec<i64> = invites.iter().map(|t| t.div_euclid(86_400_000_000_000)).collect();
    days.dedup();
    let s = calliper_store::Search {
        call_id: Some(call_id.clone()),
        limit: calliper_store::MAX_LIMIT,
        ..calliper_store::Search::default()
    };
    let (found, _) = calliper_store::search_calls(conn, &s).unwrap();
    let n_invites = invites.len();
    let narrowed = Narrowed { indexed: Some(Indexed { days, invites }), alerted: None };
    for (i, (query, expected)) in [
        (index_query("calliper", &s).unwrap(), n_invites),
        (search_query("calliper", &s, &narrowed).unwrap(), found.len()),
    ]
    .into_iter()
    .enumerate()
    {
        let k = n + i;
        std::fs::write(dir.join(format!("{k}.sql")), &query.sql).unwrap();
        std::fs::write(dir.join(format!("{k}.expected")), expected.to_string()).unwrap();
        let p = query.tables.first().unwrap();
        std::fs::write(dir.join(format!("{k}.structure")), &p.structure).unwrap();
        std::fs::write(dir.join(format!("{k}.bin")), &p.rows).unwrap();
    }
}
