//! One call in full over ClickHouse, as [`crate::call_detail`] gives it
//! over SQLite: its record, its streams with their interval reports, its
//! SIP messages, its alerts and the streams without a call that carry its
//! SSRCs, each kind capped and flagged in `truncated` when cut. Everything
//! is the call's own probe's (another probe's view of the same Call-ID is
//! another call). A row sent twice is read once (`LIMIT 1 BY record_id`:
//! cheaper than `FINAL` on tables not sorted by what is looked for).

use super::{call_columns, decode, head_and, ns, select_list, Params, Reader};
use crate::columns::{self, Type};
use crate::detail::{
    Parts, Truncated, MAX_DETAIL_ALERTS, MAX_DETAIL_INTERVALS, MAX_DETAIL_MESSAGES,
    MAX_DETAIL_STREAMS, MAX_RELATED_STREAMS,
};
use crate::readonly::Budget;
use crate::search::{DETAIL_MARGIN_NS, MAX_ANSWER_BYTES};
use crate::StoreError;
use serde_json::{Map, Value};

/// The columns of a tracker's table as the console gives them.
fn tracked(table: &str, names: &[&str]) -> Vec<(&'static str, Type, bool)> {
    let def = crate::clickhouse::Table::from_name(table).map(|t| t.def());
    names
        .iter()
        .filter_map(|n| {
            let (name, ty, required) = def?.columns.iter().find(|c| c.0 == *n)?;
            Some((*name, *ty, *required))
        })
        .collect()
}

/// What one kind's query asks: its table, columns, conditions after the
/// probe's and the days', order and cap.
struct Ask<'a> {
    table: &'a str,
    columns: Vec<(&'static str, Type, bool)>,
    filter: String,
    order: &'a str,
    cap: usize,
}

impl Reader {
    /// Rows of one kind for the call of `probe` whose time is within
    /// `from`..`to`: at most `cap` (true with them when more were stored,
    /// or the budget ran out).
    fn kind(
        &self,
        ask: Ask<'_>,
        mut p: Params,
        (probe, from, to): (&str, i64, i64),
        budget: &mut Budget,
    ) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        let sql = format!(
            "SELECT {} FROM {}.{} PREWHERE probe = {} AND day BETWEEN {} AND {} AND {} \
             ORDER BY {} LIMIT 1 BY record_id LIMIT {} FORMAT RowBinary",
            select_list(&ask.columns),
            self.database,
            ask.table,
            p.text(probe),
            p.day(from, -1),
            p.day(to, 1),
            ask.filter,
            ask.order,
            ask.cap + 1
        );
        let answer = self.query(&sql, p.tables())?;
        let (mut rows, cut) = decode(&answer, &ask.columns, ask.cap + 1, budget)?;
        let more = cut || rows.len() > ask.cap;
        rows.truncate(ask.cap);
        Ok((rows, more))
    }

    /// One call by its record id, in full, or None.
    pub fn call_detail(&self, id: u64) -> Result<Option<Value>, StoreError> {
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let columns = call_columns();
        let mut p = Params::default();
        let sql = format!(
            "SELECT {} FROM {}.calls FINAL PREWHERE record_id = {} LIMIT 1 FORMAT RowBinary",
            select_list(&columns),
            self.database,
            p.uint(id)
        );
        let answer = self.query(&sql, p.tables())?;
        let Some(call) = decode(&answer, &columns, 1, &mut budget)?.0.pop() else {
            return Ok(None);
        };
        let text = |k: &str| call.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (probe, call_id) = (text("probe"), text("call_id"));
        let (invite, end) = (ns(&call, "invite_ns").unwrap_or(0), ns(&call, "end_ns").unwrap_or(0));
        let (from, to) =
            (invite.saturating_sub(DETAIL_MARGIN_NS), end.saturating_add(DETAIL_MARGIN_NS));
        let span = (probe.as_str(), from, to);
        let mut truncated = Truncated::default();
        let mut p = Params::default();
        let filter = format!("call_record_id = {}", p.uint(id));
        let ask = Ask {
            table: "streams",
            columns: head_and(columns::STREAMS, &[("id", Type::Text)]),
            filter,
            order: "first_ns, record_id",
            cap: MAX_DETAIL_STREAMS,
        };
        let (mut streams, more) = self.kind(ask, p, span, &mut budget)?;
        truncated.note("streams", more);
        truncated.note("intervals", self.add_intervals(&mut streams, span, &mut budget)?);
        let (p, filter) = call_between(&call_id, invite, to);
        let names = ["ts_ns", "kind", "key", "value", "threshold"];
        let ask = Ask {
            table: "alerts",
            columns: tracked("alerts", &names),
            filter,
            order: "ts_ns, record_id",
            cap: MAX_DETAIL_ALERTS,
        };
        let (mut alerts, more) = self.kind(ask, p, span, &mut budget)?;
        truncated.note("alerts", more);
        alerts.iter_mut().for_each(crate::lists::with_unit);
        let (p, filter) = call_between(&call_id, from, to);
        let names = [
            "ts_ns",
            "src",
            "src_port",
            "dst",
            "dst_port",
            "transport",
            "method",
            "status",
            "cseq_method",
            "message",
            "truncated",
        ];
        let mut message_columns = vec![("id", Type::Text, true)];
        message_columns.extend(tracked("sip_messages", &names));
        let ask = Ask {
            table: "sip_messages",
            columns: message_columns,
            filter,
            order: "ts_ns, record_id",
            cap: MAX_DETAIL_MESSAGES,
        };
        let (messages, more) = self.kind(ask, p, span, &mut budget)?;
        truncated.note("messages", more);
        let (related, more) = self.related_streams(&streams, span, &mut budget)?;
        truncated.note("related_streams", more);
        let parts = Parts { streams, messages, alerts, related, truncated };
        Ok(Some(parts.into_detail(call)?))
    }

    /// Each stream's interval reports (`intervals`), as SQLite's detail
    /// finds them: its SSRC and addresses, from a margin before its first
    /// packet to its last. One query for all; true when some were left out.
    fn add_intervals(
        &self,
        streams: &mut [Map<String, Value>],
        span: (&str, i64, i64),
        budget: &mut Budget,
    ) -> Result<bool, StoreError> {
        let mut ssrcs: Vec<i64> = streams.iter().filter_map(|s| ns(s, "ssrc")).collect();
        ssrcs.sort_unstable();
        ssrcs.dedup();
        if ssrcs.is_empty() {
            return Ok(false);
        }
        let mut p = Params::default();
        let any: Vec<String> = ssrcs.iter().map(|s| p.int(*s)).collect();
        let names: Vec<&str> = STREAM_KEY
            .into_iter()
            .chain([
                "start_ns",
                "end_ns",
                "packets",
                "expected",
                "lost",
                "loss_percent",
                "duplicates",
                "late",
                "loss_after_buffer_percent",
                "buffer_delay_ms",
                "jitter_ms",
                "max_delta_ms",
                "r_factor",
                "mos",
            ])
            .collect();
        let ask = Ask {
            table: "stream_intervals",
            columns: tracked("stream_intervals", &names),
            filter: format!("ssrc IN ({})", any.join(", ")),
            order: "start_ns, record_id",
            cap: MAX_DETAIL_INTERVALS,
        };
        let (all, mut more) = self.kind(ask, p, span, budget)?;
        let mut left = MAX_DETAIL_INTERVALS;
        for s in streams.iter_mut() {
            let key = STREAM_KEY;
            let (first, last) = (
                ns(s, "first_ns").unwrap_or(0).saturating_sub(crate::search::DETAIL_MARGIN_NS),
                ns(s, "last_ns").unwrap_or(0),
            );
            let mut mine: Vec<Value> = all
                .iter()
                .filter(|i| key.iter().all(|k| i.get(*k) == s.get(*k)))
                .filter(|i| ns(i, "start_ns").is_some_and(|t| t >= first && t <= last))
                .map(|i| {
                    let mut i = i.clone();
                    key.iter().for_each(|k| {
                        i.remove(*k);
                    });
                    Value::Object(i)
                })
                .collect();
            more |= mine.len() > left;
            mine.truncate(left);
            left -= mine.len();
            s.insert("intervals".into(), Value::Array(mine));
        }
        Ok(more)
    }

    /// Streams without a call carrying one of `streams`' SSRCs in the
    /// call's time (a leg its SDP did not name).
    fn related_streams(
        &self,
        streams: &[Map<String, Value>],
        span: (&str, i64, i64),
        budget: &mut Budget,
    ) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        let (ssrcs, unsearched) = crate::detail::ssrcs_to_relate(streams);
        if ssrcs.is_empty() {
            return Ok((Vec::new(), false));
        }
        let mut p = Params::default();
        let any: Vec<String> = ssrcs.iter().map(|s| p.int(*s)).collect();
        let filter = format!(
            "call_record_id IS NULL AND first_ns BETWEEN {} AND {} AND ssrc IN ({})",
            p.int(span.1),
            p.int(span.2),
            any.join(", ")
        );
        let names = STREAM_KEY.into_iter().chain([
            "codec",
            "first_ns",
            "last_ns",
            "packets",
            "lost",
            "loss_percent",
            "mos",
        ]);
        let mut columns = vec![("id", Type::Text, true)];
        let all = head_and(columns::STREAMS, &[]);
        columns.extend(names.filter_map(|n| all.iter().find(|c| c.0 == n).copied()));
        let ask = Ask {
            table: "streams",
            columns,
            filter,
            order: "first_ns, record_id",
            cap: MAX_RELATED_STREAMS,
        };
        let (rows, more) = self.kind(ask, p, span, budget)?;
        Ok((rows, more || unsearched))
    }
}

/// The columns that name a stream (its flow and SSRC): what matches an
/// interval or a related stream to a call's stream.
const STREAM_KEY: [&str; 5] = ["src", "src_port", "dst", "dst_port", "ssrc"];

/// A filter on one Call-ID's rows timed from `from` to `to`, with its
/// parameters (the alerts' and the SIP messages' tables share it).
fn call_between(call_id: &str, from: i64, to: i64) -> (Params, String) {
    let mut p = Params::default();
    let filter = format!(
        "call_id = {} AND ts_ns BETWEEN {} AND {}",
        p.text(call_id),
        p.int(from),
        p.int(to)
    );
    (p, filter)
}
