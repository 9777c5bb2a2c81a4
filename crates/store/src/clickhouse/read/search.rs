//! The call search over ClickHouse: a [`Search`] as conditions on the
//! calls table (and subqueries on the streams), each value a column of
//! the external table `_p`.

use super::indexed::Indexed;
use super::{call_columns, day_set, decode, ids_table, ns, record_id, select_list, Params, Reader};
use crate::clickhouse::http::External;
use crate::clickhouse::row_binary;
use crate::columns::Type;
use crate::readonly::Budget;
use crate::search::{Search, Status, DETAIL_MARGIN_NS, MAX_ANSWER_BYTES, MAX_LIMIT, MAX_OFFSET};
use crate::StoreError;
use serde_json::{Map, Value};
use std::net::IpAddr;

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
            // Text that is not an address reads as 0: it must read back.
            format!(
                "(position({column}, ':') = 0 AND IPv4NumToString(IPv4StringToNum({column})) = {column} \
                 AND IPv4StringToNum({column}) BETWEEN {} AND {})",
                p.int(lo.into()),
                p.int(hi.into())
            )
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let mask = u128::MAX.checked_shl(128 - u32::from(n.prefix)).unwrap_or(0);
            let (lo, hi) = (bits & mask, bits | !mask);
            format!(
                "(position({column}, ':') > 0 AND ({column} = '::' OR IPv6StringToNum({column}) != toFixedString('', 16)) \
                 AND hex(IPv6StringToNum({column})) BETWEEN {} AND {})",
                p.text(&format!("{lo:032X}")),
                p.text(&format!("{hi:032X}"))
            )
        }
    }
}

/// The search's time range as conditions on a table with `invite_ns`
/// and its `day` (the day too, so that only its partitions are read).
pub(super) fn time_range(s: &Search, p: &mut Params) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(t) = s.from_ns {
        w.push(format!("invite_ns >= {} AND day >= {}", p.int(t), p.day(t, 0)));
    }
    if let Some(t) = s.to_ns {
        w.push(format!("invite_ns < {} AND day <= {}", p.int(t), p.day(t, 0)));
    }
    w
}

/// The conditions of a search, over the calls table, and their values.
fn conditions(s: &Search, db: &str, p: &mut Params) -> Result<Vec<String>, StoreError> {
    let mut w = time_range(s, p);
    let texts = [
        (&s.caller, &["from_user"][..]),
        (&s.callee, &["to_user"]),
        (&s.user_agent, &["caller_user_agent", "callee_user_agent"]),
    ];
    for (value, columns) in texts {
        if let Some(v) = value {
            w.push(text_match(p, columns, v));
        }
    }
    if let Some(v) = &s.probe {
        w.push(format!("probe = {}", p.text(v)));
    }
    if let Some(v) = &s.call_id {
        w.push(format!("call_id = {}", p.text(v)));
    }
    if let Some(n) = &s.ip {
        let streams_in = format!("({} OR {})", in_network(p, "src", n), in_network(p, "dst", n));
        w.push(format!(
            "({} OR {} OR {})",
            in_network(p, "caller_ip", n),
            in_network(p, "callee_ip", n),
            with_streams(s, db, p, streams_in)
        ));
    }
    w.extend(s.status.map(|status| status_condition(status, p)));
    if let Some(v) = &s.state {
        w.push(format!("state = {}", p.text(v)));
    }
    if let Some(v) = &s.codec {
        let cond = format!("lower(codec) = lower({})", p.text(v));
        w.push(with_streams(s, db, p, cond));
    }
    if let Some(v) = s.mos_below {
        w.push(format!("worst_mos < {}", p.real(v)));
    }
    if let Some(v) = s.loss_above {
        let cond = format!("loss_percent > {}", p.real(v));
        w.push(with_streams(s, db, p, cond));
    }
    if let Some(v) = s.min_duration_ms {
        w.push(format!("duration_ms >= {}", p.real(v)));
    }
    if let Some(v) = s.max_duration_ms {
        w.push(format!("duration_ms <= {}", p.real(v)));
    }
    if let Some(v) = &s.label {
        w.push(label_condition(p, v)?);
    }
    // The alert filter: see `Narrowed::alerted` (ClickHouse 18.16 has no
    // correlated subquery to say "an alert of this call's").
    Ok(w)
}

/// Calls whose streams match `cond`: the streams' day is their first
/// packet's, at or after their call's INVITE (a day's margin for clocks).
/// No FINAL: a row sent twice is the same member of the set.
fn with_streams(s: &Search, db: &str, p: &mut Params, cond: String) -> String {
    let after = match s.from_ns {
        Some(t) => format!(" AND day >= {}", p.day(t, -1)),
        None => String::new(),
    };
    format!(
        "record_id GLOBAL IN (SELECT assumeNotNull(call_record_id) FROM {db}.streams \
         PREWHERE call_record_id IS NOT NULL{after} AND {cond})"
    )
}

/// Any of `columns` equal to `pattern`, or matching it where it has
/// wildcards.
fn text_match(p: &mut Params, columns: &[&str], pattern: &str) -> String {
    let any: Vec<String> = columns
        .iter()
        .map(|c| match pattern.contains(['*', '?']) {
            true => format!("match({c}, {})", p.text(&regex(pattern))),
            false => format!("{c} = {}", p.text(pattern)),
        })
        .collect();
    format!("({})", any.join(" OR "))
}

fn status_condition(status: Status, p: &mut Params) -> String {
    match status {
        Status::Code(c) => format!("final_status = {}", p.int(c.into())),
        Status::Class(c) => format!(
            "final_status >= {} AND final_status < {}",
            p.int(i64::from(c) * 100),
            p.int(i64::from(c) * 100 + 100)
        ),
        Status::None => "final_status IS NULL".into(),
    }
}

/// Labels are a compact JSON array of strings: the label's JSON text, with
/// the bracket or comma around it, is found only where it is a whole
/// element (a quote inside a string is escaped).
fn label_condition(p: &mut Params, label: &str) -> Result<String, StoreError> {
    let element = serde_json::to_string(label)?;
    let any: Vec<String> = [("[", "]"), ("[", ","), (",", ","), (",", "]")]
        .iter()
        .map(|(a, b)| format!("position(labels, {}) > 0", p.text(&format!("{a}{element}{b}"))))
        .collect();
    Ok(format!("({})", any.join(" OR ")))
}

/// A query as the console sends it: its SQL and its external tables.
pub struct Query {
    /// The statement.
    pub sql: String,
    /// The tables sent with it.
    pub tables: Vec<External>,
}

/// The query of a search over the tables in `database`: the page's calls'
/// ids and days, in order (their rows, and their streams' codecs and
/// loss, are read next, by id: reading every column of every call that
/// matches, to sort them, took seconds). With the calls the index found
/// (`indexed`), only their days and INVITE times are read: the numbers
/// come from the server, and only literal sets choose partitions and
/// granules in 18.16.
/// Public so that a test can run it on another engine.
pub fn search_query(database: &str, s: &Search, n: &Narrowed) -> Result<Query, StoreError> {
    let mut p = Params::default();
    let mut w = conditions(s, database, &mut p)?;
    let mut tables = Vec::new();
    match (&s.alert, &n.alerted) {
        (Some(_), Some(ids)) => {
            w.push("record_id GLOBAL IN (SELECT id FROM _ids)".into());
            tables.push(ids_table(ids));
        }
        (Some(_), None) => {
            return Err(StoreError::Invalid(
                "the alert filter needs the calls the alerts named, read first".into(),
            ))
        }
        (None, _) => {}
    }
    if let Some(i) = &n.indexed {
        let times: Vec<String> = i.invites.iter().map(i64::to_string).collect();
        w.push(format!("day IN ({}) AND invite_ns IN ({})", day_set(&i.days), times.join(", ")));
    }
    let cond = match w.is_empty() {
        true => String::new(),
        // PREWHERE: the conditions' columns are read first and the rest
        // only for the rows that pass (18.16 does not move conditions
        // there under FINAL by itself; 30 times faster at 100 M calls).
        false => format!("PREWHERE {}", w.join(" AND ")),
    };
    // SQLite puts NULL first going up and last going down.
    let (dir, nulls) = match s.descending {
        true => ("DESC", "LAST"),
        false => ("ASC", "FIRST"),
    };
    let sql = format!(
        "SELECT toString(record_id) AS id, toInt64(day) AS page_day, invite_ns FROM {database}.calls FINAL {cond} \
         ORDER BY {} {dir} NULLS {nulls}, record_id {dir} LIMIT {}, {} FORMAT RowBinary",
        s.sort.column(),
        s.offset.min(MAX_OFFSET),
        s.limit.min(MAX_LIMIT) + 1
    );
    tables.extend(p.tables());
    Ok(Query { sql, tables })
}

/// Calls an export reads by id at a time.
const EXPORT_CHUNK: usize = 1_000;

/// What a search reads besides its conditions, found first by other
/// queries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Narrowed {
    /// The calls the search names exactly, from the call index.
    pub indexed: Option<Indexed>,
    /// The calls an alert of the searched kind named (the `alert` filter).
    pub alerted: Option<Vec<u64>>,
}

impl Narrowed {
    /// True when what was found first leaves no call to search.
    fn leaves_none(&self) -> bool {
        self.indexed.as_ref().is_some_and(|i| i.invites.is_empty())
            || self.alerted.as_ref().is_some_and(Vec::is_empty)
    }
}

impl Reader {
    /// The calls `s` selects, in its order, and whether more follow; each
    /// with its codecs and its streams' worst loss, as over SQLite.
    pub fn search_calls(&self, s: &Search) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        let (page, more) = self.page(s)?;
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let (mut calls, cut) = self.calls_by_id(&page, &mut budget)?;
        if cut {
            return Err(StoreError::Invalid(
                "the answer would be larger than the console sends at once: narrow the search"
                    .into(),
            ));
        }
        self.add_stream_summaries(&mut calls)?;
        Ok((calls, more))
    }

    /// Hands each call `s` selects to `each` as (column names, values), in
    /// its order: the page's ids first, then their rows [`EXPORT_CHUNK`] at
    /// a time (as `Source::for_each_call`).
    pub fn for_each_call(
        &self,
        s: &Search,
        mut each: impl FnMut(&[String], &[Value]) -> Result<bool, StoreError>,
    ) -> Result<bool, StoreError> {
        let (page, more) = self.page(s)?;
        let names: Vec<String> = call_columns()
            .iter()
            .map(|(n, _, _)| n.to_string())
            .chain(["codecs".into(), "worst_loss_percent".into()])
            .collect();
        for chunk in page.chunks(EXPORT_CHUNK) {
            let mut budget = Budget::new(MAX_ANSWER_BYTES);
            let (mut calls, cut) = self.calls_by_id(chunk, &mut budget)?;
            if cut {
                return Err(StoreError::Invalid(
                    "these calls' rows are larger than the console reads at once".into(),
                ));
            }
            self.add_stream_summaries(&mut calls)?;
            for c in &calls {
                let values: Vec<Value> =
                    names.iter().map(|n| c.get(n).cloned().unwrap_or(Value::Null)).collect();
                if !each(&names, &values)? {
                    return Ok(true);
                }
            }
        }
        Ok(more)
    }

    /// The ids and days of the calls `s` selects, in its order (at most
    /// its limit), and whether more follow.
    fn page(&self, s: &Search) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        let narrowed = Narrowed { indexed: self.indexed(s)?, alerted: self.alerted(s)? };
        if narrowed.leaves_none() {
            return Ok((Vec::new(), false));
        }
        let q = search_query(&self.database, s, &narrowed)?;
        let limit = s.limit.min(MAX_LIMIT) as usize;
        let answer = self.query(&q.sql, q.tables)?;
        // (An alias `day` would stand for the column in the conditions.)
        // (FINAL over a Distributed table in 18.16 needs the sort key's
        // columns selected: `invite_ns`.)
        let page = [
            ("id", Type::Text, true),
            ("page_day", Type::Integer, true),
            ("invite_ns", Type::Integer, true),
        ];
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let (mut page, _) = decode(&answer, &page, limit + 1, &mut budget)?;
        let more = page.len() > limit;
        page.truncate(limit);
        Ok((page, more))
    }

    /// The calls of `page` (ids and days), in its order.
    fn calls_by_id(
        &self,
        page: &[Map<String, Value>],
        budget: &mut Budget,
    ) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        let ids: Vec<u64> = page.iter().filter_map(record_id).collect();
        let mut days: Vec<i64> = page.iter().filter_map(|c| ns(c, "page_day")).collect();
        days.sort_unstable();
        days.dedup();
        if ids.is_empty() {
            return Ok((Vec::new(), false));
        }
        let columns = call_columns();
        let sql = format!(
            "SELECT {} FROM {}.calls FINAL PREWHERE day IN ({}) AND record_id GLOBAL IN (SELECT id FROM _ids) \
             FORMAT RowBinary",
            select_list(&columns),
            self.database,
            day_set(&days)
        );
        let answer = self.query(&sql, vec![ids_table(&ids)])?;
        let (rows, cut) = decode(&answer, &columns, ids.len(), budget)?;
        let mut by_id: std::collections::HashMap<Option<u64>, Map<String, Value>> =
            rows.into_iter().map(|r| (record_id(&r), r)).collect();
        let calls = page.iter().filter_map(|c| by_id.remove(&record_id(c))).collect();
        Ok((calls, cut))
    }

    /// Each call's `codecs` (distinct, in order, comma-separated) and
    /// `worst_loss_percent`, from its streams: one query for the page,
    /// grouped by the server (a row sent twice changes neither), reading
    /// only the days its calls span.
    fn add_stream_summaries(&self, calls: &mut [Map<String, Value>]) -> Result<(), StoreError> {
        let ids: Vec<u64> = calls.iter().filter_map(record_id).collect();
        let mut days: Vec<u16> = calls
            .iter()
            .flat_map(|c| {
                // A stream starts after its call's INVITE (a margin for
                // clocks) and before its end.
                let invite = ns(c, "invite_ns").unwrap_or(0);
                let first = row_binary::day(invite.saturating_sub(DETAIL_MARGIN_NS));
                let last = row_binary::day(ns(c, "end_ns").unwrap_or(0));
                first..=last.max(first).min(first.saturating_add(7))
            })
            .collect();
        days.sort_unstable();
        days.dedup();
        if ids.is_empty() {
            return Ok(());
        }
        let sql = format!(
            "SELECT toString(assumeNotNull(call_record_id)), arrayStringConcat(arraySort(groupUniqArray(codec)), ','), \
             max(loss_percent) FROM {}.streams PREWHERE day IN ({}) \
             AND call_record_id GLOBAL IN (SELECT id FROM _ids) GROUP BY call_record_id FORMAT RowBinary",
            self.database,
            day_set(&days)
        );
        let answer = self.query(&sql, vec![ids_table(&ids)])?;
        let columns = [
            ("call", Type::Text, true),
            ("codecs", Type::Text, true),
            ("worst_loss_percent", Type::Real, false),
        ];
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let (found, _) = decode(&answer, &columns, ids.len(), &mut budget)?;
        let by_call: std::collections::HashMap<&Value, &Map<String, Value>> =
            found.iter().filter_map(|s| Some((s.get("call")?, s))).collect();
        for call in calls.iter_mut() {
            let summary = call.get("id").and_then(|id| by_call.get(id));
            let codecs = summary
                .and_then(|s| s.get("codecs")?.as_str())
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            let worst = summary.and_then(|s| s.get("worst_loss_percent").cloned());
            call.insert("codecs".into(), codecs.into());
            call.insert("worst_loss_percent".into(), worst.unwrap_or(Value::Null));
        }
        Ok(())
    }
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
        let alert = Search { alert: Some("mos".into()), ..Search::default() };
        // The alert filter is never silently left out.
        assert!(search_query("calliper", &alert, &Narrowed::default()).is_err());
    }
}
