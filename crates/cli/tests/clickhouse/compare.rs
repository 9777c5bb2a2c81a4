//! Rows of both databases in one form, and their comparison in both
//! directions.

use crate::common::clickhouse::Server;
use rusqlite::types::Value as Sql;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A value as text both databases' forms reduce to: `i:N`, `r:X`, `t:TEXT`, `null`.
pub fn canon_sqlite(v: &Sql) -> String {
    match v {
        Sql::Null => "null".into(),
        Sql::Integer(i) => format!("i:{i}"),
        Sql::Real(f) => format!("r:{f:?}"),
        Sql::Text(t) => format!("t:{t}"),
        Sql::Blob(b) => format!("t:{}", String::from_utf8_lossy(b)),
    }
}

/// A ClickHouse JSON value of column type `ty` in the same form.
pub fn canon_clickhouse(v: &Value, ty: &str) -> String {
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
        let f: f64 = v.as_str().expect("floats are selected as text").parse().unwrap();
        format!("r:{f:?}")
    } else {
        format!("t:{}", v.as_str().unwrap())
    }
}

pub type Row = BTreeMap<String, String>;

/// SQLite's rows of `sql`, without `skip`ped columns.
pub fn sqlite_rows(db: &Path, sql: &str, skip: &[&str]) -> Vec<Row> {
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
pub fn types(ch: &Server, table: &str) -> HashMap<String, String> {
    ch.rows(&format!("DESCRIBE TABLE calliper.{table} FORMAT JSONEachRow"))
        .into_iter()
        .map(|r| (r["name"].as_str().unwrap().to_string(), r["type"].as_str().unwrap().to_string()))
        .collect()
}

/// ClickHouse's rows of a probe's table (FINAL: one per record id), in
/// the same form, without the columns SQLite has not; streams' call ids
/// become their call's Call-ID (`parent_call_id`), as SQLite's do.
pub fn clickhouse_rows(ch: &Server, table: &str, probe: &str) -> Vec<Row> {
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
                    "probe" | "record_id" | "day" | "call_record_id" | "parent_record_id" => {}
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

/// The trackers' tables (registrations, SIP messages, KPIs, ...): their
/// rows are compared without their links to their parents.
pub const TRACKED: &[&str] = &[
    "registrations",
    "users",
    "traffic",
    "traffic_protocols",
    "traffic_talkers",
    "alerts",
    "sip_messages",
    "stream_intervals",
    "kpi",
];

/// A tracker's table in SQLite, its values read as ClickHouse's column
/// types have them (SQLite's columns are untyped: a JSON integer in a
/// column of reals stays an integer there; a key column is never NULL in
/// ClickHouse).
fn sqlite_tracked(db: &Path, table: &str, ty: &HashMap<String, String>) -> Vec<Row> {
    let mut rows = sqlite_rows(db, &format!("SELECT * FROM {table}"), &["id", "parent"]);
    for row in &mut rows {
        for (k, v) in row.iter_mut() {
            let t = &ty[k];
            if let (Some(i), true) = (v.strip_prefix("i:"), t.contains("Float")) {
                *v = format!("r:{:?}", i.parse::<i64>().unwrap() as f64);
            }
            if v == "null" && !t.starts_with("Nullable") {
                *v = if t.contains("Int") { "i:0" } else { "t:" }.into();
            }
        }
    }
    rows.sort();
    rows
}

/// Both runs' calls and streams, then the trackers' tables, as sorted rows.
pub fn both(ch: &Server, db: &Path, probe: &str) -> Vec<(Vec<Row>, Vec<Row>)> {
    let tracked = TRACKED.iter().map(|t| {
        let ty = types(ch, t);
        (sqlite_tracked(db, t, &ty), clickhouse_rows(ch, t, probe))
    });
    let mut all = vec![
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
    ];
    all.extend(tracked);
    all
}

/// Each table equal in both directions: every SQLite row is in ClickHouse
/// as often, and every ClickHouse row in SQLite.
pub fn assert_equal(ch: &Server, db: &Path, probe: &str, what: &str) -> usize {
    let mut rows = 0;
    let names = ["calls", "streams"].iter().chain(TRACKED);
    // A Distributed table forwards rows to the other shard in the
    // background: wait up to 30 s for as many rows as SQLite has.
    let started = std::time::Instant::now();
    let mut tables = both(ch, db, probe);
    while tables.iter().any(|(s, c)| s.len() != c.len()) && started.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(500));
        tables = both(ch, db, probe);
    }
    for (table, (sqlite, clickhouse)) in names.zip(tables) {
        for (r, there, here, other) in sqlite
            .iter()
            .map(|r| (r, &clickhouse, "SQLite", "ClickHouse"))
            .chain(clickhouse.iter().map(|r| (r, &sqlite, "ClickHouse", "SQLite")))
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
pub fn closest(r: &Row, rows: &[Row]) -> Vec<(String, String, String)> {
    let diff = |o: &Row| -> Vec<(String, String, String)> {
        r.keys()
            .chain(o.keys())
            .filter(|k| r.get(*k) != o.get(*k))
            .map(|k| (k.clone(), format!("{:?}", r.get(k)), format!("{:?}", o.get(k))))
            .collect()
    };
    rows.iter().map(diff).min_by_key(Vec::len).unwrap_or_default()
}
