//! Where the console reads calls: one SQLite database, or the ClickHouse
//! tables many probes write to. The search and a call's detail read
//! either, and so do the KPI page, the lists and the CSV export; the
//! recordings are on each probe's disk, and asking ClickHouse for them is
//! a [`StoreError::NotStored`] that says so.

use crate::clickhouse::Reader;
use crate::search::Search;
use crate::StoreError;
use crate::{KpiSum, KpiWindow, List, ListQuery, LoadSum, MOS_BANDS};
use rusqlite::Connection;
use serde_json::{Map, Value};

/// A store the console reads.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// A database written by `analyze --db` or `probe --db`.
    Sqlite(&'a Connection),
    /// The tables written by `--clickhouse`.
    ClickHouse(&'a Reader),
}

impl<'a> Source<'a> {
    /// The calls `s` selects, in its order, and whether more follow.
    pub fn search_calls(self, s: &Search) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        match self {
            Source::Sqlite(c) => crate::search_calls(c, s),
            Source::ClickHouse(r) => r.search_calls(s),
        }
    }

    /// Hands each call `s` selects to `each` as (column names, values), in
    /// its order, without holding them all (an export of many calls);
    /// `each` returns false to stop early. Returns whether more calls
    /// follow the last one handed over.
    pub fn for_each_call(
        self,
        s: &Search,
        mut each: impl FnMut(&[String], &[Value]) -> Result<bool, StoreError>,
    ) -> Result<bool, StoreError> {
        match self {
            Source::Sqlite(c) => crate::search::for_each_call(c, s, |names, row| {
                let values = (0..names.len())
                    .map(|i| Ok(crate::json_value(row.get_ref(i)?)))
                    .collect::<Result<Vec<Value>, StoreError>>()?;
                each(names, &values)
            }),
            Source::ClickHouse(r) => r.for_each_call(s, each),
        }
    }

    /// One call in full by its id (SQLite's row id, ClickHouse's record
    /// id), or None.
    pub fn call_detail(self, id: u64) -> Result<Option<Value>, StoreError> {
        match self {
            Source::Sqlite(c) => match i64::try_from(id) {
                Ok(id) => crate::call_detail(c, id),
                Err(_) => Ok(None),
            },
            Source::ClickHouse(r) => r.call_detail(id),
        }
    }

    /// KPI counters summed per interval and key ([`crate::kpi_sums_between`]).
    pub fn kpi_sums_between(self, w: &KpiWindow) -> Result<Vec<KpiSum>, StoreError> {
        match self {
            Source::Sqlite(c) => crate::kpi_sums_between(c, w),
            Source::ClickHouse(r) => r.kpi_sums_between(w),
        }
    }

    /// Load per interval ([`crate::load_between`]).
    pub fn load_between(
        self,
        interval_ns: i64,
        from_ns: i64,
        until_ns: i64,
        max_rows: usize,
    ) -> Result<Vec<LoadSum>, StoreError> {
        match self {
            Source::Sqlite(c) => crate::load_between(c, interval_ns, from_ns, until_ns, max_rows),
            Source::ClickHouse(r) => r.load_between(interval_ns, from_ns, until_ns, max_rows),
        }
    }

    /// Calls per MOS band ([`crate::mos_bands`]).
    pub fn mos_bands(
        self,
        from_ns: i64,
        until_ns: i64,
    ) -> Result<([u64; MOS_BANDS.len()], u64), StoreError> {
        match self {
            Source::Sqlite(c) => crate::mos_bands(c, from_ns, until_ns),
            Source::ClickHouse(r) => r.mos_bands(from_ns, until_ns),
        }
    }

    /// A list's rows ([`crate::list_rows`]).
    pub fn list_rows(
        self,
        list: List,
        q: &ListQuery,
    ) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        match self {
            Source::Sqlite(c) => crate::list_rows(c, list, q),
            Source::ClickHouse(r) => r.list_rows(list, q),
        }
    }

    /// The SQLite database, for what only it holds (`what` names it in
    /// the error).
    pub fn sqlite(self, what: &str) -> Result<&'a Connection, StoreError> {
        match self {
            Source::Sqlite(c) => Ok(c),
            Source::ClickHouse(_) => Err(StoreError::NotStored(format!(
                "{what}: not in ClickHouse yet (the probes write calls and streams there; the rest stays in \
                 their SQLite databases: docs/scale-out.md)"
            ))),
        }
    }
}
