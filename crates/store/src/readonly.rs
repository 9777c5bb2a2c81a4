//! Reading a database that may come from anywhere (the console serves
//! what it is given): opened read-only, its tables checked to be plain
//! tables without computed columns, values longer than any calliper writes
//! refused, and rows read into JSON within a byte budget.

use crate::StoreError;
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use serde_json::{Map, Value};
use std::path::Path;

/// Longest value a read may meet: calliper writes messages of at most
/// 16 KiB and texts of at most 256 bytes, so a longer value is a crafted
/// database (and a wildcard match over it could run for minutes).
pub const MAX_VALUE_BYTES: i32 = 256 << 10;
/// Most schema entries (tables, indexes, views, triggers): calliper's
/// schema has a few dozen, and parsing a huge one costs seconds per
/// connection, before any time limit applies.
pub const MAX_SCHEMA_ENTRIES: i64 = 1000;
/// The tables every calliper database has.
const REQUIRED: &[&str] = &["calls", "streams", "runs"];

/// Columns holding JSON text, parsed when read.
const JSON_COLUMNS: &[&str] =
    &["labels", "dtmf", "jitter_buffers", "delay_inputs", "rtcp_xr", "unscored", "restarts_ns"];

/// Opens `path` for the console: read-only, with the function searches
/// use. Refuses a file that is not a calliper database, or whose tables
/// are views, have computed (generated) columns or no row ids; a table an
/// older version did not have is stood in for by an empty temporary one.
pub fn open_searchable(path: &Path) -> Result<Connection, StoreError> {
    let conn = crate::open_read_only(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(2))?;
    conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES);
    let refuse = |why: String| {
        StoreError::Invalid(format!(
            "{}: {why}; write one with `calliper analyze CAPTURE --db FILE`",
            path.display()
        ))
    };
    let entries: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(|e| refuse(format!("not an SQLite database ({e})")))?;
    if entries > MAX_SCHEMA_ENTRIES {
        return Err(refuse(format!("{entries} schema entries, not a calliper database")));
    }
    for t in REQUIRED {
        if !is_table(&conn, t)? {
            return Err(refuse(format!("not a calliper call database (no {t} table)")));
        }
    }
    crate::tracked::stand_ins(&conn)?;
    for t in REQUIRED.iter().chain(crate::tracked::TABLES) {
        plain(&conn, t).map_err(|why| refuse(format!("table {t}: {why}")))?;
    }
    conn.create_scalar_function(
        "in_network",
        2,
        rusqlite::functions::FunctionFlags::SQLITE_UTF8
            | rusqlite::functions::FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            // Anything but text (a crafted row) is in no network.
            let text = |i| match ctx.get_raw(i) {
                ValueRef::Text(t) => std::str::from_utf8(t).ok(),
                _ => None,
            };
            Ok(match (text(0), text(1).and_then(crate::Network::parse)) {
                (Some(ip), Some(n)) => n.contains(ip),
                _ => false,
            })
        },
    )?;
    Ok(conn)
}

/// True when `main` has a table (not a view) of this name.
pub(crate) fn is_table(conn: &Connection, name: &str) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?1")?
        .exists([name])?)
}

/// Why table `t` is not a plain table of stored columns with row ids.
fn plain(conn: &Connection, t: &str) -> Result<(), String> {
    let computed: i64 = conn
        .query_row("SELECT count(*) FROM pragma_table_xinfo(?1) WHERE hidden != 0", [t], |r| {
            r.get(0)
        })
        .map_err(|e| e.to_string())?;
    if computed > 0 {
        return Err(format!("{computed} computed or hidden columns"));
    }
    conn.prepare(&format!("SELECT rowid FROM \"{t}\" LIMIT 0"))
        .map(drop)
        .map_err(|_| "no row ids (WITHOUT ROWID)".to_string())
}

/// Reads rows into JSON objects keyed by column name, counting the bytes
/// they take; beyond the budget it stops with an error rather than grow.
pub(crate) struct Budget {
    left: usize,
}

impl Budget {
    /// A budget of `bytes`.
    pub(crate) fn new(bytes: usize) -> Self {
        Budget { left: bytes }
    }

    fn spend(&mut self, n: usize) -> Result<(), StoreError> {
        self.left = self.left.checked_sub(n).ok_or_else(|| {
            StoreError::Invalid(
                "the answer would be larger than the console sends at once: the database holds oversized rows".into(),
            )
        })?;
        Ok(())
    }

    /// Rows of `sql` with `params`, as JSON objects; an error once the
    /// budget is spent.
    pub(crate) fn rows(
        &mut self,
        conn: &Connection,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<Map<String, Value>>, StoreError> {
        let (out, cut) = self.rows_within(conn, sql, params)?;
        if cut {
            self.spend(usize::MAX)?;
        }
        Ok(out)
    }

    /// Rows of `sql` with `params`, as JSON objects, as many as the budget
    /// holds: true with them when it ran out (the rows after were left out).
    pub(crate) fn rows_within(
        &mut self,
        conn: &Connection,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
        let mut q = conn.prepare(sql)?;
        let names = column_names(&q)?;
        let mut out = Vec::new();
        let mut rows = q.query(params)?;
        while let Some(r) = rows.next()? {
            let mut m = Map::with_capacity(names.len());
            let mut cost = 0;
            for (i, name) in names.iter().enumerate() {
                let v = value(r.get_ref(i)?, JSON_COLUMNS.contains(&name.as_str()));
                cost += name.len() + size(&v);
                m.insert(name.clone(), v);
            }
            if cost > self.left {
                self.left = 0;
                return Ok((out, true));
            }
            self.left -= cost;
            out.push(m);
        }
        Ok((out, false))
    }
}

impl Budget {
    /// Takes `row` into the budget when it fits: false when it does not
    /// (the rows from there on are left out).
    pub(crate) fn admit(&mut self, row: &Map<String, Value>) -> bool {
        let cost: usize = row.iter().map(|(k, v)| k.len() + size(v)).sum();
        match self.left.checked_sub(cost) {
            Some(left) => {
                self.left = left;
                true
            }
            None => {
                self.left = 0;
                false
            }
        }
    }
}

/// Whether a column holds JSON text (given to clients as JSON).
pub(crate) fn is_json_column(name: &str) -> bool {
    JSON_COLUMNS.contains(&name)
}

/// The statement's column names; an error (not a panic) for one that is
/// not UTF-8.
pub(crate) fn column_names(q: &rusqlite::Statement<'_>) -> Result<Vec<String>, StoreError> {
    (0..q.column_count())
        .map(|i| {
            q.column_name(i)
                .map(str::to_string)
                .map_err(|_| StoreError::Invalid("a column name is not UTF-8".into()))
        })
        .collect()
}

/// One value as JSON (text as text).
pub fn json_value(v: ValueRef<'_>) -> Value {
    value(v, false)
}

/// One value as JSON; `json` columns hold JSON text (kept as text when
/// they do not parse).
pub(crate) fn value(v: ValueRef<'_>, json: bool) -> Value {
    match v {
        ValueRef::Null | ValueRef::Blob(_) => Value::Null,
        ValueRef::Integer(n) => n.into(),
        ValueRef::Real(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        ValueRef::Text(t) => {
            let t = String::from_utf8_lossy(t);
            match json {
                true => serde_json::from_str(&t).unwrap_or(Value::String(t.into_owned())),
                false => Value::String(t.into_owned()),
            }
        }
    }
}

/// Roughly what a value takes in memory and in JSON.
/// What a value costs: its size as JSON text (a control character is
/// sent as a six-byte escape) and its bookkeeping, so the budget bounds
/// both the answer and the memory that builds it.
fn size(v: &Value) -> usize {
    match v {
        Value::String(s) => {
            let escapes: usize = s
                .bytes()
                .map(|b| match b {
                    b'"' | b'\\' => 1,
                    0..=0x1f => 5,
                    _ => 0,
                })
                .sum();
            s.len() + escapes + 24
        }
        Value::Array(a) => a.iter().map(size).sum::<usize>() + 24,
        Value::Object(o) => o.iter().map(|(k, v)| k.len() + size(v)).sum::<usize>() + 24,
        _ => 16,
    }
}
