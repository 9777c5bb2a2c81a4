//! The call index in a search: the days and INVITE times of the calls a
//! search names exactly (by Call-ID, caller or callee), read from the
//! server-filled `call_index` before the calls themselves.

use super::search::time_range;
use super::search::Query;
use super::{decode, ns, Params, Reader};
use crate::clickhouse::schema::IndexKey;
use crate::columns::Type;
use crate::readonly::Budget;
use crate::search::{Search, MAX_ANSWER_BYTES};
use crate::StoreError;

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
/// without the index): a literal list this long is about 4 KB of the query.
const MAX_INDEXED: usize = 200;

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
    keys.into_iter()
        .find_map(|(k, v)| Some((k, v.filter(|v| !v.is_empty())?)))
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
         ORDER BY invite_ns LIMIT {} FORMAT RowBinary",
        crate::clickhouse::schema::LOOKUP,
        w.join(" AND "),
        MAX_INDEXED + 1
    );
    Some(Query {
        sql,
        tables: p.tables(),
    })
}

impl Reader {
    /// The calls the search names exactly, from the call index (None:
    /// it names none, or more than the index narrows to).
    pub(super) fn indexed(&self, s: &Search) -> Result<Option<Indexed>, StoreError> {
        let Some(q) = index_query(&self.database, s) else {
            return Ok(None);
        };
        let answer = self.query(&q.sql, q.tables)?;
        let columns = [
            ("day", Type::Integer, true),
            ("invite_ns", Type::Integer, true),
        ];
        let mut budget = Budget::new(MAX_ANSWER_BYTES);
        let (rows, _) = decode(&answer, &columns, MAX_INDEXED + 1, &mut budget)?;
        if rows.len() > MAX_INDEXED {
            return Ok(None);
        }
        let mut days: Vec<i64> = rows.iter().filter_map(|r| ns(r, "day")).collect();
        days.sort_unstable();
        days.dedup();
        Ok(Some(Indexed {
            days,
            invites: rows.iter().filter_map(|r| ns(r, "invite_ns")).collect(),
        }))
    }
}
