//! `--clickhouse`: calls and streams written to a real ClickHouse server
//! (Debian's, started by the test) equal the SQLite run's, field by field
//! and in both directions; a batch sent twice is stored once; rows wait in
//! the spool while the server is down and are sent when it answers; what
//! cannot be kept is counted and fails the run, saying why.

mod common;

use common::clickhouse::{free_port, Server, CLUSTER, PASSWORD};
use common::{hostile, scratch};
use rusqlite::types::Value as Sql;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `analyze FILE --db DB --clickhouse URL --probe-name PROBE EXTRA...`.
fn analyze(file: &Path, db: &Path, url: &str, probe: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args([
            "analyze",
            "--progress",
            "never",
            "--format",
            "jsonl",
            "-o",
            "/dev/null",
        ])
        .arg("--db")
        .arg(db)
        .args(["--clickhouse", url, "--probe-name", probe])
        .args(extra)
        .arg(file)
        .env("CALLIPER_CLICKHOUSE_PASSWORD", PASSWORD)
        .output()
        .unwrap()
}

fn succeeded(out: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{what}: {}\n{err}",
        out.status
    );
    err
}

/// A value as text both databases' forms reduce to: `i:N`, `r:X`, `t:TEXT`, `null`.
fn canon_sqlite(v: &Sql) -> String {
    match v {
        Sql::Null => "null".into(),
        Sql::Integer(i) => format!("i:{i}"),
        Sql::Real(f) => format!("r:{f:?}"),
        Sql::Text(t) => format!("t:{t}"),
        Sql::Blob(b) => format!("t:{}", String::from_utf8_lossy(b)),
    }
}

/// A ClickHouse JSON value of column type `ty` in the same form.
fn canon_clickhouse(v: &Value, ty: &str) -> String {
    if v.is_null() {
        return "null".into();
    }
    if ty.contains("Int") {
        let i: i64 = match v {
            Value::String(s) => s.parse().unwrap(),
            _ => v.as_i64().unwrap(),
        };
        format!("i:{i}")
    } else if ty.contains("Float") {
        let f: f64 = v
            .as_str()
            .expect("floats are selected as text")
            .parse()
            .unwrap();
        format!("r:{f:?}")
    } else {
        format!("t:{}", v.as_str().unwrap())
    }
}

type Row = BTreeMap<String, String>;

/// SQLite's rows of `sql`, without `skip`ped columns.
fn sqlite_rows(db: &Path, sql: &str, skip: &[&str]) -> Vec<Row> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut q = conn.prepare(sql).unwrap();
    let names: Vec<String> = q.column_names().iter().map(|s| s.to_string()).collect();
    let rows = q
        .query_map([], |r| {
            let mut row = Row::new();
            for (i, n) in names.iter().enumerate() {
                if !skip.contains(&n.as_str()) {
                    row.insert(n.clone(), canon_sqlite(&r.get::<_, Sql>(i)?));
                }
            }
            Ok(row)
        })
        .unwrap();
    let mut v: Vec<Row> = rows.map(Result::unwrap).collect();
    v.sort();
    v
}

/// Column types of a ClickHouse table.
fn types(ch: &Server, table: &str) -> HashMap<String, String> {
    ch.rows(&format!(
        "DESCRIBE TABLE calliper.{table} FORMAT JSONEachRow"
    ))
    .into_iter()
    .map(|r| {
        (
            r["name"].as_str().unwrap().to_string(),
            r["type"].as_str().unwrap().to_string(),
        )
    })
    .collect()
}

/// ClickHouse's rows of a probe's table (FINAL: one per record id), in
/// the same form, without the columns SQLite has not; streams' call ids
/// become their call's Call-ID (`parent_call_id`), as SQLite's do.
fn clickhouse_rows(ch: &Server, table: &str, probe: &str) -> Vec<Row> {
    let ty = types(ch, table);
    // Floats as ClickHouse's own text, read here by Rust's exact parser
    // (serde_json's may be a unit in the last place off).
    let columns: Vec<String> = ty
        .iter()
        .map(|(name, t)| match t.contains("Float") {
            true => format!("toString({name}) AS {name}"),
            false => name.clone(),
        })
        .collect();
    let columns = columns.join(", ");
    let calls: HashMap<String, Value> = ch
        .rows(&format!(
            "SELECT toString(record_id) AS id, call_id FROM calliper.calls FINAL WHERE probe = '{probe}' FORMAT JSONEachRow"
        ))
        .into_iter()
        .map(|r| (r["id"].as_str().unwrap().to_string(), r["call_id"].clone()))
        .collect();
    let mut v: Vec<Row> = ch
        .rows(&format!(
            "SELECT {columns}{parent} FROM calliper.{table} FINAL WHERE probe = '{probe}' FORMAT JSONEachRow",
            parent = if table == "streams" { ", toString(call_record_id) AS parent" } else { "" }
        ))
        .into_iter()
        .map(|r| {
            let mut row = Row::new();
            for (k, val) in r.as_object().unwrap() {
                match k.as_str() {
                    "probe" | "record_id" | "day" | "call_record_id" => {}
                    "parent" => {
                        let id = val.as_str().map(str::to_string).unwrap_or_default();
                        let call = calls.get(&id).cloned().unwrap_or(Value::Null);
                        row.insert("parent_call_id".into(), canon_clickhouse(&call, "String"));
                    }
                    _ => {
                        row.insert(k.clone(), canon_clickhouse(val, &ty[k]));
                    }
                }
            }
            row
        })
        .collect();
    v.sort();
    v
}

/// Both runs' calls and streams, as sorted rows.
fn both(ch: &Server, db: &Path, probe: &str) -> [(Vec<Row>, Vec<Row>); 2] {
    [
        (
            sqlite_rows(db, "SELECT * FROM calls", &["id"]),
            clickhouse_rows(ch, "calls", probe),
        ),
        (
            sqlite_rows(
                db,
                "SELECT s.*, c.call_id AS parent_call_id FROM streams s LEFT JOIN calls c ON s.call = c.id",
                &["id", "call"],
            ),
            clickhouse_rows(ch, "streams", probe),
        ),
    ]
}

/// Each table equal in both directions: every SQLite row is in ClickHouse
/// as often, and every ClickHouse row in SQLite.
fn assert_equal(ch: &Server, db: &Path, probe: &str, what: &str) -> usize {
    let mut rows = 0;
    for (table, (sqlite, clickhouse)) in ["calls", "streams"].iter().zip(both(ch, db, probe)) {
        for (r, there, here, other) in sqlite
            .iter()
            .map(|r| (r, &clickhouse, "SQLite", "ClickHouse"))
            .chain(
                clickhouse
                    .iter()
                    .map(|r| (r, &sqlite, "ClickHouse", "SQLite")),
            )
        {
            assert!(
                there.contains(r),
                "{what}: {table} row only in {here}:\n{r:?}\nwhere the closest {other} row differs in {:?}",
                closest(r, there)
            );
        }
        assert_eq!(sqlite.len(), clickhouse.len(), "{what}: {table}");
        rows += sqlite.len();
    }
    rows
}

/// The columns in which the row of `rows` most like `r` differs from it.
fn closest(r: &Row, rows: &[Row]) -> Vec<(String, String, String)> {
    let diff = |o: &Row| -> Vec<(String, String, String)> {
        r.keys()
            .chain(o.keys())
            .filter(|k| r.get(*k) != o.get(*k))
            .map(|k| {
                (
                    k.clone(),
                    format!("{:?}", r.get(k)),
                    format!("{:?}", o.get(k)),
                )
            })
            .collect()
    };
    rows.iter()
        .map(diff)
        .min_by_key(Vec::len)
        .unwrap_or_default()
}

fn db(name: &str) -> PathBuf {
    let path = scratch(&format!("{name}.db"));
    DBS.with(|d| d.borrow_mut().insert(name.to_string(), path.clone()));
    path
}

#[test]
fn every_call_and_stream_equals_the_sqlite_run_in_both_directions() {
    let Some(ch) = Server::start("equal") else {
        return;
    };
    let mut files = common::captures();
    files.push(hostile::storable_strings().save("storable-strings"));
    // Two calls sharing a Call-ID and a start time: two rows, not one.
    files.push(hostile::call_id_reuse().save("call-id-reuse"));
    let impaired = scratch("impaired.pcap");
    std::fs::write(
        &impaired,
        common::generated_capture("impaired", common::IMPAIRED),
    )
    .unwrap();
    files.push(impaired);
    let mut total = 0;
    for (i, f) in files.iter().enumerate() {
        let probe = format!("p{i}");
        let db = db(&probe);
        succeeded(
            &analyze(f, &db, &ch.url, &probe, &[]),
            &f.display().to_string(),
        );
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
    let files = common::captures();
    let file = files
        .iter()
        .find(|f| f.to_string_lossy().contains("sipp_calls"))
        .unwrap();
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

/// The rows a run reported sending, spooling and dropping.
fn reported(stderr: &str, what: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("clickhouse "))
        .unwrap_or_else(|| panic!("no clickhouse line in:\n{stderr}"));
    let after = line
        .split(what)
        .nth(1)
        .unwrap_or_else(|| panic!("no {what:?} in {line}"));
    after
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn rows_wait_in_the_spool_while_the_server_is_down_and_are_sent_when_it_answers() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let spool = scratch("spool");
    let files = common::captures();
    let named = |n: &str| {
        files
            .iter()
            .find(|f| f.to_string_lossy().contains(n))
            .unwrap()
    };
    let (a, b) = (named("sipp_calls"), named("rtp_rtcp_sip"));
    let (db_a, db_b) = (db("spool-a"), db("spool-b"));
    let spool_arg = spool.to_str().unwrap();
    // Nothing listens: the run finishes, its rows wait in the spool.
    let err = succeeded(
        &analyze(a, &db_a, &url, "a", &["--clickhouse-spool", spool_arg]),
        "down",
    );
    let waiting = reported(&err, "waiting in the spool ");
    assert!(waiting > 0, "{err}");
    assert_eq!(reported(&err, "spooled "), waiting);
    assert_eq!(reported(&err, "sent "), 0);
    assert!(err.contains("rows wait in the spool"), "{err}");
    assert_eq!(
        std::fs::metadata(&spool).unwrap().permissions().mode() & 0o777,
        0o700
    );
    for f in std::fs::read_dir(&spool).unwrap() {
        let m = f.unwrap().metadata().unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
    }
    let Some(ch) = Server::start_on("spool", port) else {
        return;
    };
    // clickhouse-flush sends what waited, with no input.
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args([
            "clickhouse-flush",
            "--clickhouse",
            &url,
            "--clickhouse-spool",
            spool_arg,
        ])
        .env("CALLIPER_CLICKHOUSE_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    let flushed = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{flushed}");
    assert_eq!(reported(&flushed, "retried "), waiting, "{flushed}");
    assert_eq!(assert_equal(&ch, &db_a, "a", "flushed") as u64, waiting);
    // The next run finds nothing waiting, and sends its own.
    let err = succeeded(
        &analyze(b, &db_b, &url, "b", &["--clickhouse-spool", spool_arg]),
        "up",
    );
    assert_eq!(reported(&err, "retried "), 0, "{err}");
    assert_eq!(reported(&err, "waiting in the spool "), 0, "{err}");
    let batches = std::fs::read_dir(&spool)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != ".lock")
        .count();
    assert_eq!(batches, 0);
    assert_eq!(assert_equal(&ch, &db_a, "a", "spooled run") as u64, waiting);
    assert!(assert_equal(&ch, &db_b, "b", "next run") > 0);
}

#[test]
fn rows_that_cannot_be_kept_fail_the_run_and_say_why() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let files = common::captures();
    let file = files
        .iter()
        .find(|f| f.to_string_lossy().contains("sipp_calls"))
        .unwrap();
    // A spool with no room (a batch set aside earlier fills its 1 MiB):
    // the analysis still finishes and its database is whole.
    let (dbf, spool) = (db("full"), scratch("full-spool"));
    std::fs::create_dir(&spool).unwrap();
    std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        spool.join("00000000000000000000-calls-1.rejected"),
        vec![0u8; 1 << 20],
    )
    .unwrap();
    let out = analyze(
        file,
        &dbf,
        &url,
        "full",
        &[
            "--clickhouse-spool",
            spool.to_str().unwrap(),
            "--clickhouse-spool-mib",
            "1",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the spool is full") && err.contains("are lost"),
        "{err}"
    );
    let dropped = reported(&err, "dropped ");
    let sqlite = sqlite_rows(&dbf, "SELECT * FROM calls", &[]).len()
        + sqlite_rows(&dbf, "SELECT * FROM streams", &[]).len();
    assert_eq!(dropped as usize, sqlite, "{err}");
    // No spool directory and no server: held in memory, then lost at the end, and said.
    let out = analyze(file, &db("memory"), &url, "memory", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("give --clickhouse-spool DIR"), "{err}");
    assert_eq!(reported(&err, "dropped ") as usize, sqlite, "{err}");
}

/// Polls `sql` (a count) on `ch` until it gives `want`, for up to 30 s: a
/// `Distributed` table forwards its rows to the other shards in the background.
fn wait_for(ch: &Server, sql: &str, want: usize) {
    let started = std::time::Instant::now();
    loop {
        let got = ch.query(sql);
        if got.trim() == want.to_string() {
            return;
        }
        assert!(
            started.elapsed().as_secs() < 30,
            "{sql}: {} after 30 s, want {want}",
            got.trim()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn sqlite_count(db: &Path, table: &str) -> usize {
    sqlite_rows(db, &format!("SELECT id FROM {table}"), &[]).len()
}

#[test]
fn two_probes_on_a_two_shard_cluster_equal_their_sqlite_runs_from_either_server() {
    let Some(servers) = Server::cluster("two", 2) else {
        return;
    };
    let files = common::captures();
    let named = |n: &str| {
        files
            .iter()
            .find(|f| f.to_string_lossy().contains(n))
            .unwrap()
    };
    let impaired = scratch("cluster-impaired.pcap");
    std::fs::write(
        &impaired,
        common::generated_capture("cluster", common::IMPAIRED),
    )
    .unwrap();
    let runs = [
        ("site-a", named("sipp_calls").clone(), 0),
        ("site-b", impaired, 1),
    ];
    let cluster = ["--clickhouse-cluster", CLUSTER];
    for (probe, file, first) in &runs {
        // Each probe lists both nodes, its own first: both get the tables.
        let urls = format!("{},{}", servers[*first].url, servers[1 - first].url);
        succeeded(&analyze(file, &db(probe), &urls, probe, &cluster), probe);
    }
    for (probe, _, _) in &runs {
        let db = db_of(probe);
        for table in ["calls", "streams"] {
            let sql = format!("SELECT count() FROM calliper.{table} FINAL WHERE probe = '{probe}'");
            wait_for(&servers[0], &sql, sqlite_count(&db, table));
        }
        for s in &servers {
            assert!(assert_equal(s, &db, probe, probe) > 0);
        }
    }
    // Sharded by record id: each shard holds part of each table.
    for s in &servers {
        for table in ["calls_local", "streams_local"] {
            let n: u64 = s
                .query(&format!("SELECT count() FROM calliper.{table}"))
                .trim()
                .parse()
                .unwrap();
            assert!(n > 0, "{table} empty on {}", s.url);
        }
    }
}

/// The database of a probe name (as [`db`] named it).
fn db_of(probe: &str) -> PathBuf {
    DBS.with(|d| d.borrow()[probe].clone())
}

thread_local! {
    static DBS: std::cell::RefCell<HashMap<String, PathBuf>> = Default::default();
}

#[test]
fn both_shards_stopped_in_the_middle_of_a_run_lose_nothing_and_duplicate_nothing() {
    use std::io::Write;
    let Some(mut servers) = Server::cluster("fault", 2) else {
        return;
    };
    let capture = common::generated_capture("fault", common::IMPAIRED);
    let (db, spool) = (db("fault"), scratch("fault-spool"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args([
            "analyze",
            "--progress",
            "never",
            "--format",
            "jsonl",
            "-o",
            "/dev/null",
        ])
        .arg("--db")
        .arg(&db)
        .arg("--clickhouse")
        .arg(format!("{},{}", servers[0].url, servers[1].url))
        .args(["--clickhouse-cluster", CLUSTER])
        .args([
            "--probe-name",
            "fault",
            "--clickhouse-batch-ms",
            "100",
            "--clickhouse-batch-rows",
            "20",
        ])
        .arg("--clickhouse-spool")
        .arg(&spool)
        .arg("/dev/stdin")
        .env("CALLIPER_CLICKHOUSE_PASSWORD", PASSWORD)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let third = capture.len() / 3;
    input.write_all(&capture[..third]).unwrap();
    // Some rows have arrived; then both servers stop mid-run.
    let started = std::time::Instant::now();
    while servers[0]
        .try_query("SELECT count() FROM calliper.calls")
        .map_or(true, |n| n.trim() == "0")
    {
        assert!(started.elapsed().as_secs() < 30, "no rows arrived");
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
    assert_eq!(reported(&err, "waiting in the spool "), 0, "{err}");
    assert_eq!(reported(&err, "dropped "), 0, "{err}");
    for table in ["calls", "streams"] {
        let sql = format!("SELECT count() FROM calliper.{table} FINAL WHERE probe = 'fault'");
        wait_for(&servers[0], &sql, sqlite_count(&db, table));
    }
    assert!(assert_equal(&servers[0], &db, "fault", "stopped mid-run") > 400);
    // The sums too: packets, loss and MOS over all streams.
    let sums = servers[0].query("SELECT sum(packets), sum(lost), sum(expected) FROM calliper.streams FINAL WHERE probe = 'fault' FORMAT TSV");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (p, l, e): (i64, i64, i64) = conn
        .query_row(
            "SELECT sum(packets), sum(lost), sum(expected) FROM streams",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(sums.trim(), format!("{p}\t{l}\t{e}"));
}

#[test]
fn a_database_of_another_layout_is_refused_by_name() {
    let Some(ch) = Server::start("layout") else {
        return;
    };
    let files = common::captures();
    let file = files
        .iter()
        .find(|f| f.to_string_lossy().contains("sipp_calls"))
        .unwrap();
    succeeded(
        &analyze(file, &db("plain"), &ch.url, "plain", &[]),
        "without a cluster",
    );
    // The same database, now as a cluster's: its calls table is not Distributed.
    let out = analyze(
        file,
        &db("layout"),
        &ch.url,
        "layout",
        &["--clickhouse-cluster", CLUSTER],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("calliper.calls is ReplacingMergeTree")
            && err.contains("use another --clickhouse-database"),
        "{err}"
    );
    // Said at the start, before any row.
    assert!(!err.contains("clickhouse   sent"), "{err}");
    // Nothing of the refused run was written anywhere.
    assert_eq!(
        ch.query("SELECT count() FROM calliper.calls WHERE probe = 'layout'")
            .trim(),
        "0"
    );
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
    let files = common::captures();
    let file = files
        .iter()
        .find(|f| f.to_string_lossy().contains("sipp_calls"))
        .unwrap();
    succeeded(
        &analyze(file, &db("older"), &ch.url, "older", &[]),
        "older tables",
    );
    assert!(assert_equal(&ch, &db_of("older"), "older", "older tables") > 0);
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
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .arg("clickhouse-schema")
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&schema, &out.stdout).unwrap();
    let impaired = dir.join("impaired.pcap");
    std::fs::write(
        &impaired,
        common::generated_capture("chdb", common::IMPAIRED),
    )
    .unwrap();
    let files = [impaired, hostile::storable_strings().save("chdb-strings")];
    let dead = format!("http://127.0.0.1:{}", free_port());
    for (i, f) in files.iter().enumerate() {
        let (db, spool) = (dir.join(format!("{i}.db")), dir.join(format!("spool-{i}")));
        let spool_arg = spool.to_str().unwrap();
        succeeded(
            &analyze(f, &db, &dead, "chdb", &["--clickhouse-spool", spool_arg]),
            "spooling",
        );
        let check = Command::new(python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../tests/clickhouse/chdb_check.py"
            ))
            .args([&schema, &spool, &db])
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
    }
}

#[test]
fn keep_days_drops_the_days_before_the_kept_ones_and_no_others() {
    let Some(ch) = Server::start("keep") else {
        return;
    };
    let files = common::captures();
    // Calls of 2023-11-14 (the crafted strings), then of 2026 (SIPp's).
    let old = hostile::storable_strings().save("keep-old");
    let new = files
        .iter()
        .find(|f| f.to_string_lossy().contains("sipp_calls"))
        .unwrap();
    succeeded(&analyze(&old, &db("keep-old"), &ch.url, "keep", &[]), "old");
    let days =
        |ch: &Server| ch.query("SELECT DISTINCT day FROM calliper.calls ORDER BY day FORMAT TSV");
    assert_eq!(days(&ch).lines().count(), 1);
    let err = succeeded(
        &analyze(
            new,
            &db("keep-new"),
            &ch.url,
            "keep",
            &["--clickhouse-keep-days", "2"],
        ),
        "new",
    );
    assert!(err.contains("1 old partitions (days) dropped"), "{err}");
    let left = days(&ch);
    assert!(!left.contains("2023-11-14"), "{left}");
    assert!(assert_equal(&ch, &db_of("keep-new"), "keep", "the kept day") > 0);
    // A day kept is not enough: calls span midnight.
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--clickhouse-keep-days", "1", "x.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "keep-days 1 is refused");
}

#[test]
fn a_refused_login_stops_the_run_at_its_start_and_says_where_the_password_comes_from() {
    let Some(ch) = Server::start("login") else {
        return;
    };
    let files = common::captures();
    let file = files
        .iter()
        .find(|f| f.to_string_lossy().contains("sipp_calls"))
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args([
            "analyze",
            "--progress",
            "never",
            "--format",
            "jsonl",
            "-o",
            "/dev/null",
        ])
        .args(["--clickhouse", &ch.url])
        .arg(file)
        .env("CALLIPER_CLICKHOUSE_PASSWORD", "not-the-password")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("CALLIPER_CLICKHOUSE_PASSWORD"), "{err}");
    // A password in the URL is never repeated back.
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args([
            "analyze",
            "--clickhouse",
            "http://u:secret-word@127.0.0.1:1",
        ])
        .arg(file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("secret-word"), "{err}");
}
