//! The call index in a search: the days and INVITE times of the calls a
//! search names exactly (by Call-ID, caller or callee), read from the
//! server-filled `call_index` before the calls themselves.

use super::search::time_range;
use super::search::Query;
use super::{decode, ns, Params, Reader};
use crate::clickhouse::schema::{IndexKey, FILLED};
use crate::columns::Type;
use crate::readonly::Budget;
use crate::search::{Search, MAX_ANSWER_BYTES};
use crate::StoreError;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The calls a search names exactly (by Call-ID, caller or callee), from
/// the call index: their days and INVITE times. The search then reads only
/// those granules of the calls table (sorted by INVITE time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indexed {
    /// Days since 1970, in order.
    pub days: Vec<i64>,
    /// The INVITE times, in order (none: no call is named so).
    pub invites: Vec<i64>,
}

/// INVITE times past which a search does not narrow by them (it reads as
/// without the index): the query travels in the URL, where the days and
/// times of 64 calls, percent-encoded, take about 3.5 KB (under the 8 KB
/// a proxy's default header buffers take).
const MAX_INDEXED: usize = 64;

/// The value a search names exactly, which the call index can find:
/// the Call-ID, else the caller, else the callee (a wildcard is not exact).
fn index_key<'a>(s: &'a Search) -> Option<(IndexKey, &'a str)> {
    let exact = |v: Option<&'a str>| v.filter(|v| !v.contains(['*', '?']));
    // (The index keeps no empty value.)
    let keys = [
        (IndexKey::CallId, s.call_id.as_deref()),
        (IndexKey::Caller, exact(s.caller.as_deref())),
        (IndexKey::Callee, exact(s.callee.as_deref())),
    ];
    keys.into_iter().find_map(|(k, v)| Some((k, v.filter(|v| !v.is_empty())?)))
}

/// The call index's answer for a search that names a call exactly: its
/// distinct days and INVITE times within the search's time range, at most
/// one more than [`MAX_INDEXED`]. None when the search names none. Public
/// so that a test can run it on another engine.
pub fn index_query(database: &str, s: &Search) -> Option<Query> {
    let (kind, key) = index_key(s)?;
    let mut p = Params::default();
    let mut w = vec![format!("kind = {} AND key = {}", kind as u8, p.text(key))];
    w.extend(time_range(s, &mut p));
    let sql = format!(
        "SELECT DISTINCT toInt64(day), invite_ns FROM {database}.{} PREWHERE {} \
         LIMIT {} FORMAT RowBinary",
        crate::clickhouse::schema::INDEX,
        w.join(" AND "),
        MAX_INDEXED + 1
    );
    Some(Query { sql, tables: p.tables() })
}

/// Whether the call index holds every call on every node the console
/// lists: its marker (`call_index_filled`, made once a probe has copied in
/// the calls written before the index) on each. Asked at most once a
/// minute until it is so; an incomplete index would hide calls.
#[derive(Debug, Default)]
pub(super) struct Readiness {
    complete: AtomicBool,
    asked: Mutex<Option<Instant>>,
}

impl Reader {
    fn index_complete(&self) -> bool {
        let r = &self.index;
        if r.complete.load(Relaxed) {
            return true;
        }
        let Ok(mut asked) = r.asked.lock() else {
            return false;
        };
        if asked.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
            return false;
        }
        *asked = Some(Instant::now());
        let sql = format!(
            "SELECT count() FROM system.tables WHERE database = (SELECT p0 FROM _p) AND name = '{FILLED}' FORMAT TSV"
        );
        let complete = self.endpoints.iter().all(|e| {
            let mut p = Params::default();
            p.text(&self.database);
            e.query(&sql, &p.tables(), &[]).is_ok_and(|a| String::from_utf8_lossy(&a).trim() == "1")
        });
        r.complete.store(complete, Relaxed);
        complete
    }

    /// The calls the search names exactly, from the call index (None:
    /// it names none, or more than the index narrows to).
    pub(super) fn indexed(&self, s: &Search) -> Result<Option<Indexed>, StoreError> {
        let Some(q) = index_query(&self.database, s) else {
            return Ok(None);
        };
        if !self.index_complete() {
            return Ok(None);
        }
        let answer = match self.query(&q.sql, q.tables) {
            Ok(answer) => answer,
            // Stopped for its cost (a flood of calls with one caller):
            // the search goes on without the index.
            Err(StoreError::Busy(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let columns = [("day", Type::Integer, true), ("invite_ns", Type::Integer, true)];
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let (rows, _) = decode(&answer, &columns, MAX_INDEXED + 1, &mut budget)?;
        if rows.len() > MAX_INDEXED {
            return Ok(None);
        }
        let mut days: Vec<i64> = rows.iter().filter_map(|r| ns(r, "day")).collect();
        days.sort_unstable();
        days.dedup();
        let mut invites: Vec<i64> = rows.iter().filter_map(|r| ns(r, "invite_ns")).collect();
        invites.sort_unstable();
        Ok(Some(Indexed { days, invites }))
    }
}
