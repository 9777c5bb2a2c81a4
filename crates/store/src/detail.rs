//! One call in full, for the console: its record, its streams with their
//! interval reports, the SIP messages of every leg sharing its Call-ID and
//! the alerts that name it — each kind capped, the whole within a byte
//! budget, and a flag wherever something was left out.

use crate::readonly::Budget;
use crate::search::{DETAIL_MARGIN_NS, MAX_ANSWER_BYTES};
use crate::StoreError;
use rusqlite::Connection;
use serde_json::{Map, Value};

/// Most SIP messages one call's detail holds (the first ones).
pub const MAX_DETAIL_MESSAGES: usize = 5000;
/// Most streams one call's detail holds.
pub const MAX_DETAIL_STREAMS: usize = 1000;
/// Most interval reports one call's detail holds, over all its streams.
pub const MAX_DETAIL_INTERVALS: usize = 20_000;
/// Most alerts one call's detail holds.
pub const MAX_DETAIL_ALERTS: usize = 1000;

fn list(v: Vec<Map<String, Value>>) -> Value {
    Value::Array(v.into_iter().map(Value::Object).collect())
}

/// Reads at most `cap` rows (asks for one more to tell whether more
/// exist), and no more than the answer's byte budget holds: true with them
/// when rows were left out, for either reason (a call padded with large
/// messages gets its first ones and a notice, not an error).
fn capped(
    budget: &mut Budget,
    conn: &Connection,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
    cap: usize,
) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
    let mut all: Vec<&dyn rusqlite::ToSql> = params.to_vec();
    let ask = (cap + 1) as i64;
    all.push(&ask);
    let (mut rows, cut) = budget.rows_within(conn, &format!("{sql} LIMIT ?"), all.as_slice())?;
    let more = cut || rows.len() > cap;
    rows.truncate(cap);
    Ok((rows, more))
}

/// Most streams without a call listed beside one call, and most of its
/// SSRCs looked for.
pub const MAX_RELATED_STREAMS: usize = 32;

/// The call's streams' SSRCs a search for related streams looks for (each
/// once, the lowest [`MAX_RELATED_STREAMS`]), and whether any were left out.
pub(crate) fn ssrcs_to_relate(streams: &[Map<String, Value>]) -> (Vec<i64>, bool) {
    let mut ssrcs: Vec<i64> =
        streams.iter().filter_map(|s| s.get("ssrc").and_then(Value::as_i64)).collect();
    ssrcs.sort_unstable();
    ssrcs.dedup();
    let unsearched = ssrcs.len() > MAX_RELATED_STREAMS;
    ssrcs.truncate(MAX_RELATED_STREAMS);
    (ssrcs, unsearched)
}

/// Streams without a call that carry one of the call's streams' SSRCs
/// within its time (`from`..`to`, the call and its margin): a leg the
/// call's SDP did not name (a relay's, a phone's other address), linked
/// by what it carries.
fn related_streams(
    budget: &mut Budget,
    conn: &Connection,
    streams: &[Map<String, Value>],
    from: i64,
    to: i64,
) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
    let (ssrcs, unsearched) = ssrcs_to_relate(streams);
    if ssrcs.is_empty() {
        return Ok((Vec::new(), false));
    }
    let marks = vec!["?"; ssrcs.len()].join(", ");
    let sql = format!(
        "SELECT id, src, src_port, dst, dst_port, ssrc, codec, first_ns, last_ns, packets, lost, loss_percent, mos
         FROM streams WHERE first_ns BETWEEN ? AND ? AND +call IS NULL AND ssrc IN ({marks})
         ORDER BY first_ns, id"
    );
    let mut params: Vec<&dyn rusqlite::ToSql> = vec![&from, &to];
    params.extend(ssrcs.iter().map(|s| s as &dyn rusqlite::ToSql));
    // `+call`: no index for that term, so SQLite takes the time index and
    // reads only the call's time, not every stream without a call.
    let (rows, more) = capped(budget, conn, &sql, &params, MAX_RELATED_STREAMS)?;
    Ok((rows, more || unsearched))
}

/// One call in full: its columns, `streams` (each with its `intervals`),
/// `loss_by_leg` (where each direction's loss was introduced, for a call
/// seen on several media legs: [`crate::legs`]),
/// `messages` (every leg that shares its Call-ID, from 64 s before its
/// INVITE to 64 s after its end, in time order), `alerts`,
/// `related_streams` (streams without a call carrying its SSRCs in its
/// time: [`related_streams`]), and `truncated`: the kinds of which more were stored than are given. None
/// when no call has this id.
pub fn call_detail(conn: &Connection, id: i64) -> Result<Option<Value>, StoreError> {
    let mut budget = Budget::new(MAX_ANSWER_BYTES);
    let Some(call) = budget.rows(conn, "SELECT * FROM calls WHERE id = ?", [id])?.pop() else {
        return Ok(None);
    };
    let num = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_i64).unwrap_or(0);
    let text = |m: &Map<String, Value>, k: &str| {
        m.get(k).and_then(Value::as_str).unwrap_or_default().to_string()
    };
    let (invite, end) = (num(&call, "invite_ns"), num(&call, "end_ns"));
    let call_id = text(&call, "call_id");
    let mut truncated = Truncated::default();
    let (mut streams, more) = capped(
        &mut budget,
        conn,
        "SELECT * FROM streams WHERE call = ? ORDER BY first_ns, id",
        &[&id],
        MAX_DETAIL_STREAMS,
    )?;
    truncated.note("streams", more);
    let mut intervals_left = MAX_DETAIL_INTERVALS;
    for s in &mut streams {
        let (ssrc, src, src_port, dst, dst_port) = (
            num(s, "ssrc"),
            text(s, "src"),
            num(s, "src_port"),
            text(s, "dst"),
            num(s, "dst_port"),
        );
        let (from, to) = (num(s, "first_ns").saturating_sub(DETAIL_MARGIN_NS), num(s, "last_ns"));
        let (intervals, more) = capped(
            &mut budget,
            conn,
            "SELECT start_ns, end_ns, packets, expected, lost, loss_percent, duplicates, late,
                    loss_after_buffer_percent, buffer_delay_ms, jitter_ms, max_delta_ms, r_factor, mos
             FROM stream_intervals
             WHERE ssrc = ? AND start_ns BETWEEN ? AND ? AND src = ? AND src_port = ? AND dst = ? AND dst_port = ?
             ORDER BY start_ns",
            &[&ssrc, &from, &to, &src, &src_port, &dst, &dst_port],
            intervals_left,
        )?;
        truncated.note("intervals", more);
        intervals_left -= intervals.len();
        s.insert("intervals".into(), list(intervals));
    }
    let (from, to) =
        (invite.saturating_sub(DETAIL_MARGIN_NS), end.saturating_add(DETAIL_MARGIN_NS));
    // Alerts before messages: a call padded with messages keeps its alerts.
    let (mut alerts, more) = capped(
        &mut budget,
        conn,
        "SELECT ts_ns, kind, key, value, threshold FROM alerts
         WHERE call_id = ? AND ts_ns BETWEEN ? AND ? ORDER BY ts_ns",
        &[&call_id, &invite, &to],
        MAX_DETAIL_ALERTS,
    )?;
    truncated.note("alerts", more);
    alerts.iter_mut().for_each(crate::lists::with_unit);
    let (messages, more) = capped(
        &mut budget,
        conn,
        "SELECT id, ts_ns, src, src_port, dst, dst_port, transport, method, status, cseq_method, message, truncated
         FROM sip_messages WHERE call_id = ? AND ts_ns BETWEEN ? AND ? ORDER BY ts_ns, id",
        &[&call_id, &from, &to],
        MAX_DETAIL_MESSAGES,
    )?;
    truncated.note("messages", more);
    let (related, more) = related_streams(&mut budget, conn, &streams, from, to)?;
    truncated.note("related_streams", more);
    let parts = Parts { streams, messages, alerts, related, truncated };
    Ok(Some(parts.into_detail(call)?))
}

/// What a call's detail holds besides its record, read from either store.
pub(crate) struct Parts {
    pub(crate) streams: Vec<Map<String, Value>>,
    pub(crate) messages: Vec<Map<String, Value>>,
    pub(crate) alerts: Vec<Map<String, Value>>,
    pub(crate) related: Vec<Map<String, Value>>,
    /// The kinds of which more were stored than are given.
    pub(crate) truncated: Truncated,
}

/// The kinds of a call's detail of which more were stored than are given.
#[derive(Default)]
pub(crate) struct Truncated(Vec<&'static str>);

impl Truncated {
    /// Notes `kind` (once) when a capped read left some out.
    pub(crate) fn note(&mut self, kind: &'static str, more: bool) {
        if more && !self.0.contains(&kind) {
            self.0.push(kind);
        }
    }
}

impl Parts {
    /// The call's record with its parts, and where each direction's loss
    /// was introduced ([`crate::legs`]).
    pub(crate) fn into_detail(self, mut call: Map<String, Value>) -> Result<Value, StoreError> {
        let legs = crate::legs::loss_by_leg(&self.streams);
        call.insert("related_streams".into(), list(self.related));
        call.insert("loss_by_leg".into(), serde_json::to_value(legs)?);
        call.insert("streams".into(), list(self.streams));
        call.insert("messages".into(), list(self.messages));
        call.insert("alerts".into(), list(self.alerts));
        call.insert("truncated".into(), self.truncated.0.into());
        Ok(Value::Object(call))
    }
}
