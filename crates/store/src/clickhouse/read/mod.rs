//! Reading for the console (`serve --clickhouse`): the call search and
//! one call's detail over the tables the sink writes, with the same
//! filters, the same JSON and the same caps as over SQLite.
//!
//! What a search has from its user reaches the server as the row of an
//! external table (`_p`), never as SQL: 18.16 has no query parameters,
//! and a scalar subquery `(SELECT p0 FROM _p)` is computed on the node
//! the console asks, before the query goes out to the shards. Rows come
//! back as RowBinary, exact for every float and every byte of text.

use super::http::{Endpoint, External, HttpError};
use super::row_binary::{self, Reader as Rows};
use crate::columns::{self, Column, Type};
use crate::readonly::{is_json_column, Budget};
use crate::StoreError;
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

mod alerted;
mod detail;
mod indexed;
mod pages;
mod search;
pub use indexed::{index_query, Indexed};
pub use search::{search_query, Narrowed, Query};

/// Longest a console's query may run on the server (seconds).
const MAX_EXECUTION_SECONDS: &str = "10";

/// The console's way to the tables: the nodes it may ask (the first that
/// answers is used) and the database.
#[derive(Clone)]
pub struct Reader {
    endpoints: Vec<Endpoint>,
    database: String,
    /// The node that answered last, asked first.
    answered: Arc<AtomicUsize>,
    /// Whether the call index is complete on every node listed.
    index: Arc<indexed::Readiness>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reader({:?}, {})", self.endpoints, self.database)
    }
}

/// The values of one query's `_p` row, each read back as a scalar
/// subquery.
#[derive(Default)]
struct Params {
    structure: Vec<String>,
    row: Vec<u8>,
}

impl Params {
    fn add(&mut self, ty: &str, write: impl FnOnce(&mut Vec<u8>)) -> String {
        let name = format!("p{}", self.structure.len());
        self.structure.push(format!("{name} {ty}"));
        write(&mut self.row);
        format!("(SELECT {name} FROM _p)")
    }

    fn text(&mut self, v: &str) -> String {
        self.add("String", |b| row_binary::text(b, v.as_bytes()))
    }

    fn int(&mut self, v: i64) -> String {
        self.add("Int64", |b| b.extend_from_slice(&v.to_le_bytes()))
    }

    fn uint(&mut self, v: u64) -> String {
        self.add("UInt64", |b| b.extend_from_slice(&v.to_le_bytes()))
    }

    fn real(&mut self, v: f64) -> String {
        self.add("Float64", |b| b.extend_from_slice(&v.to_le_bytes()))
    }

    /// The day of `ns`, moved by `days` (held to the type's range here:
    /// ClickHouse's Date arithmetic wraps).
    fn day(&mut self, ns: i64, days: i32) -> String {
        let d = i32::from(row_binary::day(ns)).saturating_add(days);
        let d = d.clamp(0, i32::from(u16::MAX)) as u16;
        self.add("Date", |b| b.extend_from_slice(&d.to_le_bytes()))
    }

    fn tables(self) -> Vec<External> {
        if self.structure.is_empty() {
            return Vec::new();
        }
        vec![External { name: "_p", structure: self.structure.join(", "), rows: self.row }]
    }
}

/// The calls' columns as the console gives them: `id` (the record id, as
/// text: JSON numbers lose digits past 2^53), `probe`, then each column.
fn call_columns() -> Vec<(&'static str, Type, bool)> {
    head_and(columns::CALLS, &[("id", Type::Text), ("probe", Type::Text)])
}

fn head_and<R>(
    cols: &[Column<R>],
    head: &[(&'static str, Type)],
) -> Vec<(&'static str, Type, bool)> {
    let mut all: Vec<_> = head.iter().map(|(n, t)| (*n, *t, true)).collect();
    all.extend(cols.iter().map(|c| (c.name, c.ty, c.required)));
    all
}

/// `toString(record_id) AS id, probe, a, b, ...` for `columns`.
fn select_list(columns: &[(&'static str, Type, bool)]) -> String {
    let names: Vec<String> = columns
        .iter()
        .map(|(n, _, _)| match *n {
            "id" => "toString(record_id) AS id".to_string(),
            n => n.to_string(),
        })
        .collect();
    names.join(", ")
}

/// Decodes an answer's rows by `columns`, at most `most` (a query asks
/// for no more: more is a server's error), within `budget`: true with
/// them when the budget ran out first.
fn decode(
    answer: &[u8],
    columns: &[(&'static str, Type, bool)],
    most: usize,
    budget: &mut Budget,
) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
    let mut rows = Rows::new(answer);
    let mut out = Vec::new();
    while !rows.is_empty() {
        if out.len() == most {
            return Err(StoreError::Invalid(format!(
                "clickhouse: more rows than the {most} asked for"
            )));
        }
        let mut m = Map::with_capacity(columns.len());
        for (name, ty, required) in columns {
            m.insert(name.to_string(), rows.value(*ty, *required, is_json_column(name))?);
        }
        if !budget.admit(&m) {
            return Ok((out, true));
        }
        out.push(m);
    }
    Ok((out, false))
}

impl Reader {
    /// Reading the `database` through the nodes at `urls`, as `user`.
    pub fn new(
        urls: &[String],
        database: &str,
        user: &str,
        password: &str,
    ) -> Result<Reader, StoreError> {
        super::check_names(database, None)?;
        let endpoints = urls
            .iter()
            .map(|u| Endpoint::new(u, user, password))
            .collect::<Result<Vec<_>, _>>()
            .map_err(StoreError::Invalid)?;
        if endpoints.is_empty() {
            return Err(StoreError::Invalid("clickhouse: no server given".into()));
        }
        Ok(Reader {
            endpoints,
            database: database.to_string(),
            answered: Arc::new(AtomicUsize::new(0)),
            index: Arc::default(),
        })
    }

    /// Checks that a node answers and has the tables, so a wrong address,
    /// login or database stops the console at its start.
    pub fn check(&self) -> Result<(), StoreError> {
        let sql = "SELECT name FROM system.tables WHERE database = (SELECT p0 FROM _p) FORMAT TSV";
        let mut p = Params::default();
        p.text(&self.database);
        let answer = self.query(sql, p.tables())?;
        let answer = String::from_utf8_lossy(&answer);
        if answer.trim().is_empty() {
            return Err(StoreError::Invalid(format!(
                "clickhouse: there is no database {} (or this user may not see it): give the one the probes \
                 write to with --clickhouse-database",
                self.database
            )));
        }
        // Every table the probes write, so the console's pages all answer.
        let lookup = std::iter::once(super::schema::INDEX);
        for table in super::Table::all().map(super::Table::name).chain(lookup) {
            if !answer.lines().any(|l| l == table) {
                return Err(StoreError::Invalid(format!(
                    "clickhouse: the database {} has no table {table}: give the one the probes write to \
                     (--clickhouse-database), or make the tables with `calliper clickhouse-schema`",
                    self.database
                )));
            }
        }
        Ok(())
    }

    /// Asks the nodes in turn until one answers, starting with the last
    /// that did (a node that hangs costs one request its wait, not every
    /// request). A query the server stopped (too long, too much memory,
    /// too many at once) is [`StoreError::Busy`].
    fn query(&self, sql: &str, tables: Vec<External>) -> Result<Vec<u8>, StoreError> {
        let settings = [("max_execution_time", MAX_EXECUTION_SECONDS)];
        let mut failed = Vec::new();
        let first = self.answered.load(Relaxed);
        let n = self.endpoints.len();
        for i in (0..n).map(|k| (first + k) % n) {
            let e = &self.endpoints[i];
            match e.query(sql, &tables, &settings) {
                Ok(answer) => {
                    self.answered.store(i, Relaxed);
                    return Ok(answer);
                }
                Err(HttpError::Network(io)) if io.kind() == std::io::ErrorKind::InvalidData => {
                    return Err(StoreError::Busy(format!(
                        "clickhouse: {}: the answer is not one the console reads ({io}): narrow the search",
                        e.host()
                    )))
                }
                Err(err @ HttpError::Network(_)) => failed.push(format!("{}: {err}", e.host())),
                Err(HttpError::Server { message, .. }) if stopped(&message) => {
                    return Err(StoreError::Busy(format!(
                        "the search was stopped by ClickHouse ({}): narrow it (a time range, a probe, an exact caller or callee)",
                        message.chars().take(200).collect::<String>()
                    )))
                }
                Err(err) => {
                    return Err(StoreError::Invalid(format!(
                        "clickhouse: {}: {err}{}",
                        e.host(),
                        err.hint()
                    )))
                }
            }
        }
        Err(StoreError::Busy(format!(
            "clickhouse: no node answered ({}): is ClickHouse listening on that address (its listen_host) \
             and reachable through the firewall?",
            failed.join("; ")
        )))
    }
}

/// Record ids as the external table `_ids` (`id UInt64`), for
/// `GLOBAL IN (SELECT id FROM _ids)`.
fn ids_table(ids: &[u64]) -> External {
    External {
        name: "_ids",
        structure: "id UInt64".into(),
        rows: ids.iter().flat_map(|i| i.to_le_bytes()).collect(),
    }
}

/// Days (since 1970) as a literal set, `toDate(N), ...`: numbers written
/// here, since only a literal set chooses partitions in 18.16 (a set from
/// a subquery read every day).
fn day_set<D: std::fmt::Display>(days: &[D]) -> String {
    let days: Vec<String> = days.iter().map(|d| format!("toDate({d})")).collect();
    days.join(", ")
}

/// True for ClickHouse's errors that stop a query for its cost: too long
/// (159), too much memory (241), too many queries at once (202).
fn stopped(message: &str) -> bool {
    ["Code: 159,", "Code: 241,", "Code: 202,"].iter().any(|c| message.contains(c))
}

fn ns(m: &Map<String, Value>, key: &str) -> Option<i64> {
    m.get(key).and_then(Value::as_i64)
}

fn record_id(m: &Map<String, Value>) -> Option<u64> {
    m.get("id").and_then(Value::as_str)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_held_to_the_date_range_and_costly_errors_are_told_apart() {
        let mut p = Params::default();
        p.day(0, -1);
        p.day(i64::MAX, 1);
        assert_eq!(p.row, [0, 0, 0xff, 0xff]);
        assert!(stopped("Code: 159, e.displayText() = DB::Exception: Timeout exceeded"));
        assert!(!stopped("Code: 60, e.displayText() = DB::Exception: Table doesn't exist"));
    }

    #[test]
    fn an_answer_with_more_rows_than_asked_is_refused() {
        let columns = [("call_id", Type::Text, true)];
        let mut answer = Vec::new();
        for _ in 0..3 {
            row_binary::text(&mut answer, b"x");
        }
        let mut budget = Budget::new(1 << 20);
        assert_eq!(decode(&answer, &columns, 3, &mut budget).unwrap().0.len(), 3);
        assert!(decode(&answer, &columns, 2, &mut budget).is_err());
    }
}
