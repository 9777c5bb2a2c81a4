//! Newest-first lists of what the trackers stored — alerts and
//! registration transactions — for the console: a time range, equality
//! filters on a few columns, pages. Table and column names come from the
//! fixed lists here; every value is a parameter.

use crate::readonly::Budget;
use crate::search::{MAX_ANSWER_BYTES, MAX_LIMIT, MAX_OFFSET};
use crate::StoreError;
use rusqlite::types::Value as Sql;
use rusqlite::Connection;
use serde_json::{Map, Value};

/// A stored list the console shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    /// The `alerts` table.
    Alerts,
    /// The `registrations` table (one row per REGISTER transaction).
    Registrations,
}

impl List {
    /// Its table's name.
    pub fn table(self) -> &'static str {
        match self {
            List::Alerts => "alerts",
            List::Registrations => "registrations",
        }
    }

    /// The columns a list can be filtered on by equality.
    pub fn filters(self) -> &'static [&'static str] {
        match self {
            List::Alerts => &["kind", "call_id", "source", "key"],
            List::Registrations => &["aor", "outcome", "client", "registrar", "call_id"],
        }
    }
}

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// At or after, ns since the epoch (the row's `ts_ns`).
    pub from_ns: Option<i64>,
    /// Before, ns.
    pub to_ns: Option<i64>,
    /// (column, value): columns from [`List::filters`] only.
    pub equals: Vec<(&'static str, String)>,
    /// Rows to return.
    pub limit: u32,
    /// Rows to skip.
    pub offset: u32,
}

/// The rows of `list` that `q` selects, newest first, and whether more
/// follow.
pub fn list_rows(
    conn: &Connection,
    list: List,
    q: &ListQuery,
) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
    let mut cond = vec!["1".to_string()];
    let mut params: Vec<Sql> = Vec::new();
    if let Some(t) = q.from_ns {
        cond.push("ts_ns >= ?".into());
        params.push(Sql::Integer(t));
    }
    if let Some(t) = q.to_ns {
        cond.push("ts_ns < ?".into());
        params.push(Sql::Integer(t));
    }
    for (column, value) in &q.equals {
        let column =
            list.filters().iter().find(|c| *c == column).ok_or_else(|| {
                StoreError::Invalid(format!("{column}: not a filter of this list"))
            })?;
        cond.push(format!("{column} = ?"));
        params.push(Sql::Text(value.clone()));
    }
    let limit = q.limit.min(MAX_LIMIT);
    let sql = format!(
        "SELECT * FROM {} WHERE {} ORDER BY ts_ns DESC, id DESC LIMIT {} OFFSET {}",
        list.table(),
        cond.join(" AND "),
        limit + 1,
        q.offset.min(MAX_OFFSET)
    );
    let mut rows =
        Budget::new(MAX_ANSWER_BYTES).rows(conn, &sql, rusqlite::params_from_iter(params))?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    if list == List::Alerts {
        rows.iter_mut().for_each(with_unit);
    }
    Ok((rows, more))
}

/// Adds an alert row's unit, from its kind (not stored: one table says it).
pub(crate) fn with_unit(alert: &mut Map<String, Value>) {
    let unit = calliper_model::alert::unit(alert.get("kind").and_then(Value::as_str).unwrap_or(""));
    alert.insert("unit".into(), unit.into());
}
