//! The `alert` filter over ClickHouse: the calls an alert of a kind named.
//! SQLite asks, for each call, whether an alert of that kind with its
//! Call-ID fell between its INVITE and its end (plus a margin); 18.16 has
//! no correlated subquery, so the console reads the alerts of that kind,
//! then the calls with their Call-IDs, and decides in between, by probe:
//! an alert speaks of the calls its own probe saw.

use super::search::time_range;
use super::{call_columns, decode, ns, record_id, Params, Reader};
use crate::clickhouse::http::External;
use crate::clickhouse::row_binary;
use crate::columns::Type;
use crate::readonly::Budget;
use crate::search::{Search, DETAIL_MARGIN_NS, MAX_ANSWER_BYTES};
use crate::StoreError;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Most alerts of one kind, and most calls with their Call-IDs, one search
/// reads: past that it asks for a narrower time range.
const MOST: usize = 50_000;

impl Reader {
    /// The ids of the calls an alert of the searched kind named (None: the
    /// search has no alert filter).
    pub(super) fn alerted(&self, s: &Search) -> Result<Option<Vec<u64>>, StoreError> {
        let Some(kind) = &s.alert else {
            return Ok(None);
        };
        let alerts = self.alerts_of(kind, s)?;
        if alerts.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let mut times: HashMap<(&str, &str), Vec<i64>> = HashMap::new();
        for a in &alerts {
            let (Some(probe), Some(call_id), Some(t)) =
                (text(a, "probe"), text(a, "call_id"), ns(a, "ts_ns"))
            else {
                continue;
            };
            times.entry((probe, call_id)).or_default().push(t);
        }
        let calls = self.calls_with_call_ids(times.keys().map(|(_, c)| *c), s)?;
        let named = calls.iter().filter(|c| {
            let (Some(probe), Some(call_id), Some(invite)) =
                (text(c, "probe"), text(c, "call_id"), ns(c, "invite_ns"))
            else {
                return false;
            };
            // No end, no window: as SQLite's BETWEEN with NULL.
            let Some(end) = ns(c, "end_ns") else {
                return false;
            };
            let last = end.saturating_add(DETAIL_MARGIN_NS);
            times
                .get(&(probe, call_id))
                .is_some_and(|ts| ts.iter().any(|&t| t >= invite && t <= last))
        });
        Ok(Some(named.filter_map(record_id).collect()))
    }

    /// The alerts of `kind` that can fall within the search's calls: at or
    /// after its start (a call's alerts come after its INVITE).
    fn alerts_of(&self, kind: &str, s: &Search) -> Result<Vec<Map<String, Value>>, StoreError> {
        let mut p = Params::default();
        let mut w = vec![format!("kind = {} AND call_id IS NOT NULL", p.text(kind))];
        if let Some(t) = s.from_ns {
            w.push(format!("ts_ns >= {} AND day >= {}", p.int(t), p.day(t, 0)));
        }
        let sql = format!(
            "SELECT DISTINCT probe, assumeNotNull(call_id) AS call_id, ts_ns FROM {}.alerts PREWHERE {} \
             LIMIT {} FORMAT RowBinary",
            self.database,
            w.join(" AND "),
            MOST + 1
        );
        let columns = [
            ("probe", Type::Text, true),
            ("call_id", Type::Text, true),
            ("ts_ns", Type::Integer, true),
        ];
        self.at_most(&sql, p.tables(), &columns, "alerts of that kind")
    }

    /// The calls (id, probe, Call-ID, INVITE and end) with any of
    /// `call_ids`, within the search's time range.
    fn calls_with_call_ids<'a>(
        &self,
        call_ids: impl Iterator<Item = &'a str>,
        s: &Search,
    ) -> Result<Vec<Map<String, Value>>, StoreError> {
        let mut rows = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for c in call_ids.filter(|c| seen.insert(*c)) {
            row_binary::text(&mut rows, c.as_bytes());
        }
        let mut p = Params::default();
        let mut w = vec!["call_id GLOBAL IN (SELECT call_id FROM _alerted)".to_string()];
        w.extend(time_range(s, &mut p));
        // (FINAL over a Distributed table in 18.16 needs the sort key's
        // columns selected: `invite_ns`.)
        let sql = format!(
            "SELECT toString(record_id) AS id, probe, call_id, invite_ns, end_ns FROM {}.calls FINAL \
             PREWHERE {} LIMIT {} FORMAT RowBinary",
            self.database,
            w.join(" AND "),
            MOST + 1
        );
        let mut tables =
            vec![External { name: "_alerted", structure: "call_id String".into(), rows }];
        tables.extend(p.tables());
        // As the calls table defines them (whether each may be NULL).
        let wanted = ["id", "probe", "call_id", "invite_ns", "end_ns"];
        let columns: Vec<_> = wanted
            .iter()
            .filter_map(|w| call_columns().into_iter().find(|(n, _, _)| n == w))
            .collect();
        self.at_most(&sql, tables, &columns, "calls with those alerts' Call-IDs")
    }

    /// The rows of a query that asks for one more than [`MOST`]; more than
    /// that is refused, naming `what`.
    fn at_most(
        &self,
        sql: &str,
        tables: Vec<External>,
        columns: &[(&'static str, Type, bool)],
        what: &str,
    ) -> Result<Vec<Map<String, Value>>, StoreError> {
        let answer = self.query(sql, tables)?;
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let (rows, cut) = decode(&answer, columns, MOST + 1, &mut budget)?;
        if rows.len() > MOST || cut {
            return Err(StoreError::Invalid(format!(
                "the alert filter reads at most {MOST} {what}, and this search has more: narrow its time range (from, to)"
            )));
        }
        Ok(rows)
    }
}

fn text<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str)
}
