//! Where records go: SQLite (the embedded default) and JSON lines.
//!
//! Both implement [`Sink`]; the CLI writes every record to each sink it was
//! given. Sinks never print and never exit; they return [`StoreError`].

use calliper_model::{CallRecord, Record, StreamRecord};
use rusqlite::types::Value as Sql;
use rusqlite::Connection;
use serde::Serialize;
use serde_json::Value;
use std::fmt;
use std::io::{self, Write};
use std::path::Path;
pub mod clickhouse;
mod columns;
mod daily;
mod kpi;
pub use kpi::{kpi_intervals, kpi_sums, kpi_sums_between, open_read_only, KpiSum, KpiWindow};
mod load;
pub use load::{load_between, mos_bands, LoadSum, MOS_BANDS};
mod lookup;
pub use calliper_model::stored::{StoredCall, StoredStream};
pub use lookup::{find_calls, runs_of, totals};
mod detail;
pub mod files;
pub use files::{append_private, create_private, is_sqlite_database};
pub mod legs;
mod lists;
pub use lists::{list_rows, List, ListQuery};
pub mod callpcap_paths;
mod readonly;
mod search;
mod source;
pub use detail::{
    call_detail, MAX_DETAIL_ALERTS, MAX_DETAIL_INTERVALS, MAX_DETAIL_MESSAGES, MAX_DETAIL_STREAMS,
};
pub use readonly::{json_value, open_searchable, MAX_SCHEMA_ENTRIES, MAX_VALUE_BYTES};
pub use search::{
    search_calls, Network, Search, Sort, Status, MAX_ANSWER_BYTES, MAX_LIMIT, MAX_OFFSET,
};
pub use source::Source;
mod schema;
use schema::migrate;
pub use schema::schema;
mod time;
mod tracked;
pub use daily::{day_file, Daily, Retention};
pub use time::{parse_rfc3339, rfc3339};

/// The clock, ns since the epoch (for what has no time of its own).
fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Why a sink failed.
#[derive(Debug)]
pub enum StoreError {
    /// Writing a file failed.
    Io(io::Error),
    /// SQLite failed.
    Sqlite(rusqlite::Error),
    /// A record could not be serialised.
    Json(serde_json::Error),
    /// The database is not what it should be.
    Invalid(String),
    /// What was asked is not in this kind of store (the reason).
    NotStored(String),
    /// The database stopped the request for its cost, or could not take
    /// it now (the reason): narrow it, or try again.
    Busy(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io(e) => write!(f, "write failed: {e}"),
            StoreError::Sqlite(e) => write!(f, "sqlite: {e}"),
            StoreError::Json(e) => write!(f, "json: {e}"),
            StoreError::Invalid(why) | StoreError::NotStored(why) | StoreError::Busy(why) => {
                f.write_str(why)
            }
        }
    }
}

impl std::error::Error for StoreError {}

impl From<io::Error> for StoreError {
    fn from(e: io::Error) -> Self {
        StoreError::Io(e)
    }
}
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}
impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Json(e)
    }
}

/// A destination for records.
pub trait Sink {
    /// Stores one record.
    fn write(&mut self, r: &Record) -> Result<(), StoreError>;
    /// Stores what a tracker produced (`kind` is its line type, e.g.
    /// `registration`, `user`); a sink that has no place for it yet ignores it.
    fn write_tracked(&mut self, kind: &'static str, value: &Value) -> Result<(), StoreError> {
        let _ = (kind, value);
        Ok(())
    }
    /// Stores events already written as JSON lines (each `{"type":...}`);
    /// a sink that has no place for them ignores them.
    fn write_json_lines(&mut self, lines: &[u8]) -> Result<(), StoreError> {
        let _ = lines;
        Ok(())
    }
    /// Makes what was written so far durable (buffers written, the open
    /// transaction committed): a long-running probe calls it periodically.
    fn flush(&mut self) -> Result<(), StoreError>;
    /// Flushes and records the run's summary (counters as JSON).
    fn finish(&mut self, input: &str, summary: &Value) -> Result<(), StoreError>;
    /// A line on what a sink that delivers elsewhere delivered, kept and
    /// lost, for the end of a run (None for files and databases here).
    fn delivery_report(&self) -> Option<String> {
        None
    }
}

#[derive(Serialize)]
struct CallLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    start: String,
    end: String,
    #[serde(flatten)]
    call: &'a CallRecord,
}

#[derive(Serialize)]
struct StreamLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    start: String,
    end: String,
    #[serde(flatten)]
    stream: &'a StreamRecord,
}

#[derive(Serialize)]
struct SummaryLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    input: &'a str,
    #[serde(flatten)]
    summary: &'a Value,
}

/// One JSON object per line: calls, streams without a call, and a final summary.
pub struct JsonLines<W: Write> {
    w: W,
    /// The line being written: serde writes a record in hundreds of small
    /// pieces, each a call through `W` (often a `dyn Write`) when written
    /// to it directly.
    line: Vec<u8>,
}

impl<W: Write> JsonLines<W> {
    /// Writes to `w` (buffer it yourself if it is a file).
    pub fn new(w: W) -> Self {
        JsonLines { w, line: Vec::new() }
    }

    /// Writes one value as a line.
    fn line(&mut self, value: &impl Serialize) -> Result<(), StoreError> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, value)?;
        self.line.push(b'\n');
        self.w.write_all(&self.line)?;
        Ok(())
    }
}

impl<W: Write> Sink for JsonLines<W> {
    fn flush(&mut self) -> Result<(), StoreError> {
        self.w.flush()?;
        Ok(())
    }

    fn write_json_lines(&mut self, lines: &[u8]) -> Result<(), StoreError> {
        self.w.write_all(lines)?;
        Ok(())
    }

    fn write_tracked(&mut self, kind: &'static str, value: &Value) -> Result<(), StoreError> {
        if tracked::DATABASE_ONLY.contains(&kind) {
            return Ok(());
        }
        #[derive(Serialize)]
        struct Line<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            #[serde(flatten)]
            value: &'a Value,
        }
        self.line(&Line { kind, value })
    }

    fn write(&mut self, r: &Record) -> Result<(), StoreError> {
        match r {
            Record::Call(c) => self.line(&CallLine {
                kind: "call",
                start: rfc3339(c.invite_ns),
                end: rfc3339(c.end_ns),
                call: c,
            }),
            Record::Stream(s) => self.line(&StreamLine {
                kind: "stream",
                start: rfc3339(s.first_ns),
                end: rfc3339(s.last_ns),
                stream: s,
            }),
        }
    }

    fn finish(&mut self, input: &str, summary: &Value) -> Result<(), StoreError> {
        self.line(&SummaryLine { kind: "summary", input, summary })?;
        self.w.flush()?;
        Ok(())
    }
}

/// A serialised enum's name (`"wideband"`, `"not_voice"`), or NULL.
fn label<T: serde::Serialize>(v: &Option<T>) -> Result<Option<String>, StoreError> {
    Ok(match v {
        Some(v) => serde_json::to_value(v)?.as_str().map(str::to_string),
        None => None,
    })
}

/// Records per transaction: large enough to amortise fsync, small enough
/// that a crash loses little.
const BATCH: usize = 2000;

/// SQLite sink: WAL mode, batched transactions.
pub struct Sqlite {
    conn: Connection,
    pending: usize,
}

impl Sqlite {
    /// Opens (or creates) the database and its schema.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        // SQLite would follow a link or wait on a FIFO: a database is a
        // regular file of its own.
        if std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_file()) {
            return Err(StoreError::Invalid(format!(
                "{} is not a regular file (a symbolic link, FIFO, device or directory): not a database to write",
                path.display()
            )));
        }
        if !path.exists() {
            // Created 0600 here; SQLite gives its -wal and -shm files the
            // database file's permissions.
            create_private(path)?;
        }
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(&schema())?;
        conn.execute_batch(&tracked::schema())?;
        migrate(&conn)?;
        conn.execute_batch("BEGIN")?;
        Ok(Sqlite { conn, pending: 0 })
    }

    /// One more row written: commits every [`BATCH`].
    fn counted(&mut self) -> Result<(), StoreError> {
        self.pending += 1;
        if self.pending >= BATCH {
            self.conn.execute_batch("COMMIT; BEGIN")?;
            self.pending = 0;
        }
        Ok(())
    }

    fn insert_stream(
        conn: &Connection,
        call: Option<i64>,
        s: &StreamRecord,
    ) -> Result<(), StoreError> {
        let mut values = vec![call.map_or(Sql::Null, Sql::Integer)];
        values.extend(columns::values(columns::STREAMS, s)?);
        conn.prepare_cached(&insert_sql("streams", "call, ", columns::STREAMS))?
            .execute(rusqlite::params_from_iter(values))?;
        Ok(())
    }
}

/// `INSERT INTO table (first, columns...) VALUES (?, ...)`.
fn insert_sql<R>(table: &str, first: &str, cols: &[columns::Column<R>]) -> String {
    let marks = vec!["?"; cols.len() + first.matches(',').count()].join(",");
    format!("INSERT INTO {table} ({first}{}) VALUES ({marks})", columns::names(cols))
}

impl Sink for Sqlite {
    fn write(&mut self, r: &Record) -> Result<(), StoreError> {
        match r {
            Record::Call(c) => {
                let values = columns::values(columns::CALLS, c)?;
                self.conn
                    .prepare_cached(&insert_sql("calls", "", columns::CALLS))?
                    .execute(rusqlite::params_from_iter(values))?;
                let id = self.conn.last_insert_rowid();
                for s in &c.streams {
                    Self::insert_stream(&self.conn, Some(id), s)?;
                }
            }
            Record::Stream(s) => Self::insert_stream(&self.conn, None, s)?,
        }
        self.counted()
    }

    fn write_tracked(&mut self, kind: &'static str, value: &Value) -> Result<(), StoreError> {
        if tracked::insert(&self.conn, kind, value)? {
            self.counted()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending > 0 {
            self.conn.execute_batch("COMMIT; BEGIN")?;
            self.pending = 0;
        }
        Ok(())
    }

    fn finish(&mut self, input: &str, summary: &Value) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO runs (input, summary) VALUES (?, ?)",
            rusqlite::params![input, summary.to_string()],
        )?;
        self.conn.execute_batch("COMMIT")?;
        self.pending = 0;
        Ok(())
    }
}
