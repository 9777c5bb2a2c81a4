//! Where the console reads calls: one SQLite database, or the ClickHouse
//! tables many probes write to. The search and a call's detail read
//! either; the rest (KPIs, lists, recordings) is SQLite's alone for now,
//! and asking ClickHouse for it is a [`StoreError::NotStored`] that says so.

use crate::clickhouse::Reader;
use crate::search::Search;
use crate::StoreError;
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
