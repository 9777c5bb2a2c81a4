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
use crate::detail::MAX_DETAIL_STREAMS;
use crate::readonly::{is_json_column, Budget};
use crate::search::{Search, Status, MAX_ANSWER_BYTES, MAX_LIMIT, MAX_OFFSET};
use crate::StoreError;
use serde_json::{Map, Value};
use std::net::IpAddr;

/// Longest a console's query may run on the server (seconds).
const MAX_EXECUTION_SECONDS: &str = "10";

/// The console's way to the tables: the nodes it may ask (the first that
/// answers is used) and the database.
#[derive(Clone)]
pub struct Reader {
    endpoints: Vec<Endpoint>,
    database: String,
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

    fn day(&mut self, ns: i64) -> String {
        let d = row_binary::day(ns);
        self.add("Date", |b| b.extend_from_slice(&d.to_le_bytes()))
    }

    fn tables(self) -> Vec<External> {
        if self.structure.is_empty() {
            return Vec::new();
        }
        vec![External {
            name: "_p",
            structure: self.structure.join(", "),
            rows: self.row,
        }]
    }
}

/// A wildcard pattern (`*` any run, `?` one character) as an RE2 regular
/// expression matching the whole text: every other ASCII character but
/// letters and digits escaped by its code, so none is an operator.
fn regex(pattern: &str) -> String {
    let mut re = String::from("(?s)^");
    for c in pattern.chars() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            c if c.is_ascii_alphanumeric() || !c.is_ascii() => re.push(c),
            c => re += &format!("\\x{{{:02x}}}", c as u32),
        }
    }
    re.push('$');
    re
}

/// `column` (text holding an address) in the network, for IPv4 or IPv6
/// text as SQLite's `in_network` takes them (an IPv4 network never
/// matches IPv6 text, nor the other way round).
fn in_network(p: &mut Params, column: &str, n: &crate::search::Network) -> String {
    match n.addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let mask = u32::MAX.checked_shl(32 - u32::from(n.prefix)).unwrap_or(0);
            let (lo, hi) = (bits & mask, bits | !mask);
            format!(
                "(position({column}, ':') = 0 AND IPv4StringToNum({column}) BETWEEN {} AND {})",
                p.int(lo.into()),
                p.int(hi.into())
            )
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let mask = u128::MAX
                .checked_shl(128 - u32::from(n.prefix))
                .unwrap_or(0);
            let (lo, hi) = (bits & mask, bits | !mask);
            format!(
                "(position({column}, ':') > 0 AND hex(IPv6StringToNum({column})) BETWEEN {} AND {})",
                p.text(&format!("{lo:032X}")),
                p.text(&format!("{hi:032X}"))
            )
        }
    }
}

/// The conditions of a search, over the calls table, and their values.
fn conditions(s: &Search, db: &str, p: &mut Params) -> Result<Vec<String>, StoreError> {
    let mut w = Vec::new();
    // Calls whose streams match: the streams' day is their first packet's,
    // at or after their call's INVITE (a day's margin for clocks).
    let streams = |p: &mut Params, cond: String| {
        let after = match s.from_ns {
            Some(t) => format!(" AND day >= {} - 1", p.day(t)),
            None => String::new(),
        };
        format!(
            "record_id GLOBAL IN (SELECT assumeNotNull(call_record_id) FROM {db}.streams FINAL \
             WHERE call_record_id IS NOT NULL{after} AND {cond})"
        )
    };
    if let Some(t) = s.from_ns {
        w.push(format!("invite_ns >= {} AND day >= {}", p.int(t), p.day(t)));
    }
    if let Some(t) = s.to_ns {
        w.push(format!("invite_ns < {} AND day <= {}", p.int(t), p.day(t)));
    }
    let mut text = |p: &mut Params, columns: &[&str], pattern: &str| {
        let any: Vec<String> = columns
            .iter()
            .map(|c| match pattern.contains(['*', '?']) {
                true => format!("match({c}, {})", p.text(&regex(pattern))),
                false => format!("{c} = {}", p.text(pattern)),
            })
            .collect();
        w.push(format!("({})", any.join(" OR ")));
    };
    if let Some(v) = &s.caller {
        text(p, &["from_user"], v);
    }
    if let Some(v) = &s.callee {
        text(p, &["to_user"], v);
    }
    if let Some(v) = &s.user_agent {
        text(p, &["caller_user_agent", "callee_user_agent"], v);
    }
    if let Some(v) = &s.probe {
        w.push(format!("probe = {}", p.text(v)));
    }
    if let Some(v) = &s.call_id {
        w.push(format!("call_id = {}", p.text(v)));
    }
    if let Some(n) = &s.ip {
        let streams_in = format!(
            "({} OR {})",
            in_network(p, "src", n),
            in_network(p, "dst", n)
        );
        w.push(format!(
            "({} OR {} OR {})",
            in_network(p, "caller_ip", n),
            in_network(p, "callee_ip", n),
            streams(p, streams_in)
        ));
    }
    match s.status {
        Some(Status::Code(c)) => w.push(format!("final_status = {}", p.int(c.into()))),
        Some(Status::Class(c)) => w.push(format!(
            "final_status >= {} AND final_status < {}",
            p.int(i64::from(c) * 100),
            p.int(i64::from(c) * 100 + 100)
        )),
        Some(Status::None) => w.push("final_status IS NULL".into()),
        None => {}
    }
    if let Some(v) = &s.state {
        w.push(format!("state = {}", p.text(v)));
    }
    if let Some(v) = &s.codec {
        let cond = format!("lower(codec) = lower({})", p.text(v));
        w.push(streams(p, cond));
    }
    if let Some(v) = s.mos_below {
        w.push(format!("worst_mos < {}", p.real(v)));
    }
    if let Some(v) = s.loss_above {
        let cond = format!("loss_percent > {}", p.real(v));
        w.push(streams(p, cond));
    }
    if let Some(v) = s.min_duration_ms {
        w.push(format!("duration_ms >= {}", p.real(v)));
    }
    if let Some(v) = s.max_duration_ms {
        w.push(format!("duration_ms <= {}", p.real(v)));
    }
    if let Some(v) = &s.label {
        // Labels are a compact JSON array of strings: the label's JSON
        // text, with the bracket or comma around it, is found only where
        // it is a whole element (a quote inside a string is escaped).
        let element = serde_json::to_string(v)?;
        let any: Vec<String> = [("[", "]"), ("[", ","), (",", ","), (",", "]")]
            .iter()
            .map(|(a, b)| {
                format!(
                    "position(labels, {}) > 0",
                    p.text(&format!("{a}{element}{b}"))
                )
            })
            .collect();
        w.push(format!("({})", any.join(" OR ")));
    }
    if s.alert.is_some() {
        return Err(StoreError::NotStored(
            "the alert filter needs the SQLite store: alerts are not written to ClickHouse yet (docs/scale-out.md)".into(),
        ));
    }
    Ok(w)
}

/// A query as the console sends it: its SQL and its external tables.
pub struct Query {
    /// The statement.
    pub sql: String,
    /// The tables sent with it.
    pub tables: Vec<External>,
}

/// The query of a search over the tables in `database` (the page of calls;
/// their streams' codecs and loss are a second query): public so that a
/// test can run it on another engine.
pub fn search_query(database: &str, s: &Search) -> Result<Query, StoreError> {
    let mut p = Params::default();
    let w = conditions(s, database, &mut p)?;
    let cond = match w.is_empty() {
        true => String::new(),
        false => format!("WHERE {}", w.join(" AND ")),
    };
    // SQLite puts NULL first going up and last going down.
    let (dir, nulls) = match s.descending {
        true => ("DESC", "LAST"),
        false => ("ASC", "FIRST"),
    };
    let sql = format!(
        "SELECT {} FROM {database}.calls FINAL {cond} ORDER BY {} {dir} NULLS {nulls}, record_id {dir} \
         LIMIT {}, {} FORMAT RowBinary",
        select_list(&call_columns()),
        s.sort.column(),
        s.offset.min(MAX_OFFSET),
        s.limit.min(MAX_LIMIT) + 1
    );
    Ok(Query {
        sql,
        tables: p.tables(),
    })
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

/// Decodes an answer's rows by `columns`, within `budget`: true with them
/// when the budget ran out first.
fn decode(
    answer: &[u8],
    columns: &[(&'static str, Type, bool)],
    budget: &mut Budget,
) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
    let mut rows = Rows::new(answer);
    let mut out = Vec::new();
    while !rows.is_empty() {
        let mut m = Map::with_capacity(columns.len());
        for (name, ty, required) in columns {
            m.insert(
                name.to_string(),
                rows.value(*ty, *required, is_json_column(name))?,
            );
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
        for table in ["calls", "streams"] {
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

    /// Asks the nodes in turn until one answers.
    fn query(&self, sql: &str, tables: Vec<External>) -> Result<Vec<u8>, StoreError> {
        let settings = [("max_execution_time", MAX_EXECUTION_SECONDS)];
        let mut last = None;
        for e in &self.endpoints {
            match e.query(sql, &tables, &settings) {
                Ok(answer) => return Ok(answer),
                Err(err @ HttpError::Network(_)) => last = Some((e.host().to_string(), err)),
                Err(err) => {
                    return Err(StoreError::Invalid(format!(
                        "clickhouse: {}: {err}{}",
                        e.host(),
                        err.hint()
                    )))
                }
            }
        }
        let (host, err) = last.expect("at least one endpoint");
        Err(StoreError::Invalid(format!("clickhouse: {host}: {err}")))
    }

    /// The calls `s` selects, in its order, and whether more follow; each
    /// with its codecs and its streams' worst loss, as over SQLite.
    pub fn search_calls(&self, s: &Search) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        let q = search_query(&self.database, s)?;
        let limit = s.limit.min(MAX_LIMIT) as usize;
        let columns = call_columns();
        let answer = self.query(&q.sql, q.tables)?;
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let (mut calls, cut) = decode(&answer, &columns, &mut budget)?;
        if cut {
            return Err(StoreError::Invalid(
                "the answer would be larger than the console sends at once: narrow the search"
                    .into(),
            ));
        }
        let more = calls.len() > limit;
        calls.truncate(limit);
        self.add_stream_summaries(&mut calls)?;
        Ok((calls, more))
    }

    /// Each call's `codecs` (distinct, in order, comma-separated) and
    /// `worst_loss_percent`, from its streams: one query for the page.
    fn add_stream_summaries(&self, calls: &mut [Map<String, Value>]) -> Result<(), StoreError> {
        let ids: Vec<u64> = calls.iter().filter_map(record_id).collect();
        let (Some(first), Some(last)) = (
            calls.iter().filter_map(|c| ns(c, "invite_ns")).min(),
            calls.iter().filter_map(|c| ns(c, "end_ns")).max(),
        ) else {
            return Ok(());
        };
        let mut p = Params::default();
        let sql = format!(
            "SELECT toString(assumeNotNull(call_record_id)), codec, loss_percent FROM {}.streams FINAL \
             WHERE day BETWEEN {} - 1 AND {} + 1 AND call_record_id GLOBAL IN (SELECT id FROM _ids) FORMAT RowBinary",
            self.database,
            p.day(first),
            p.day(last)
        );
        let mut tables = p.tables();
        let mut rows = Vec::with_capacity(ids.len() * 8);
        ids.iter()
            .for_each(|i| rows.extend_from_slice(&i.to_le_bytes()));
        tables.push(External {
            name: "_ids",
            structure: "id UInt64".into(),
            rows,
        });
        let answer = self.query(&sql, tables)?;
        let columns = [
            ("call", Type::Text, true),
            ("codec", Type::Text, false),
            ("loss_percent", Type::Real, false),
        ];
        let (streams, _) = decode(&answer, &columns, &mut Budget::new(MAX_ANSWER_BYTES))?;
        for call in calls.iter_mut() {
            let mine: Vec<&Map<String, Value>> = streams
                .iter()
                .filter(|s| s.get("call") == call.get("id"))
                .collect();
            let mut codecs: Vec<&str> = mine
                .iter()
                .filter_map(|s| s.get("codec").and_then(Value::as_str))
                .collect();
            codecs.sort_unstable();
            codecs.dedup();
            let worst = mine
                .iter()
                .filter_map(|s| s.get("loss_percent").and_then(Value::as_f64))
                .reduce(f64::max);
            let codecs = (!codecs.is_empty()).then(|| codecs.join(","));
            call.insert("codecs".into(), codecs.into());
            call.insert("worst_loss_percent".into(), worst.into());
        }
        Ok(())
    }

    /// One call by its record id, with its streams: what ClickHouse holds
    /// of what [`crate::call_detail`] gives (`not_stored` names the rest).
    pub fn call_detail(&self, id: u64) -> Result<Option<Value>, StoreError> {
        let db = &self.database;
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let columns = call_columns();
        let mut p = Params::default();
        let sql = format!(
            "SELECT {} FROM {db}.calls FINAL WHERE record_id = {} LIMIT 1 FORMAT RowBinary",
            select_list(&columns),
            p.uint(id)
        );
        let answer = self.query(&sql, p.tables())?;
        let Some(mut call) = decode(&answer, &columns, &mut budget)?.0.pop() else {
            return Ok(None);
        };
        let (first, last) = (
            ns(&call, "invite_ns").unwrap_or(0),
            ns(&call, "end_ns").unwrap_or(0),
        );
        let stream_columns = head_and(columns::STREAMS, &[("id", Type::Text)]);
        let mut p = Params::default();
        let sql = format!(
            "SELECT {} FROM {db}.streams FINAL WHERE day BETWEEN {} - 1 AND {} + 1 AND call_record_id = {} \
             ORDER BY first_ns, record_id LIMIT {} FORMAT RowBinary",
            select_list(&stream_columns),
            p.day(first),
            p.day(last),
            p.uint(id),
            MAX_DETAIL_STREAMS + 1
        );
        let answer = self.query(&sql, p.tables())?;
        let (mut streams, cut) = decode(&answer, &stream_columns, &mut budget)?;
        let mut truncated = Vec::new();
        if cut || streams.len() > MAX_DETAIL_STREAMS {
            truncated.push("streams");
        }
        streams.truncate(MAX_DETAIL_STREAMS);
        for s in &mut streams {
            s.insert("intervals".into(), Value::Array(Vec::new()));
        }
        let legs = crate::legs::loss_by_leg(&streams);
        call.insert("related_streams".into(), Value::Array(Vec::new()));
        call.insert("loss_by_leg".into(), serde_json::to_value(legs)?);
        let streams = streams.into_iter().map(Value::Object).collect();
        call.insert("streams".into(), Value::Array(streams));
        call.insert("messages".into(), Value::Array(Vec::new()));
        call.insert("alerts".into(), Value::Array(Vec::new()));
        call.insert("truncated".into(), truncated.into());
        let not_stored = ["intervals", "messages", "alerts", "related_streams"];
        call.insert("not_stored".into(), not_stored.to_vec().into());
        Ok(Some(Value::Object(call)))
    }
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
    fn wildcards_become_anchored_expressions_with_nothing_else_special() {
        assert_eq!(regex("al*"), "(?s)^al.*$");
        assert_eq!(regex("a?c"), "(?s)^a.c$");
        assert_eq!(regex("a.b(é)"), "(?s)^a\\x{2e}b\\x{28}é\\x{29}$");
        assert_eq!(regex("\\\0"), "(?s)^\\x{5c}\\x{00}$");
    }

    #[test]
    fn every_value_is_a_row_of_the_external_table_never_sql() {
        let s = Search {
            caller: Some("x' OR 1=1 --".into()),
            label: Some("l\"]".into()),
            ..Search::default()
        };
        let mut p = Params::default();
        let w = conditions(&s, "calliper", &mut p).unwrap().join(" AND ");
        assert!(!w.contains("OR 1=1") && !w.contains("l\\\""), "{w}");
        assert_eq!(p.structure.len(), 5);
        let alert = Search {
            alert: Some("mos".into()),
            ..Search::default()
        };
        assert!(conditions(&alert, "calliper", &mut Params::default()).is_err());
    }
}
