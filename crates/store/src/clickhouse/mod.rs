//! ClickHouse: many probes writing to one database (docs/scale-out.md).
//!
//! The sink turns records into rows on the writer's thread and hands
//! batches (so many rows or so much time, whichever comes first) to a
//! delivery thread of its own, so a slow or absent server never holds up
//! the analysis. What the server does not take goes to the spool
//! ([`spool`]) and is sent again, oldest first, when it answers. Every row
//! carries a stable id (`record_id`) and the tables are
//! `ReplacingMergeTree`s keyed by it, so a batch sent twice (a timeout
//! after the server had taken it) is one row to a reader using `FINAL`.
//!
//! The tables' columns come from [`crate::columns`], as SQLite's do.

mod deliver;
mod http;
mod read;
mod retention;
mod row_binary;
mod schema;
mod spool;
mod tables;

pub use deliver::Report;
pub use http::{Endpoint, External, HttpError};
pub use read::{index_query, search_query, Indexed, Narrowed, Query, Reader};
use schema::{check_names, insert, Schema};
pub use schema::{checked_schema, schema};
pub use tables::Table;

use crate::columns::{self, Type};
use crate::StoreError;
use calliper_model::{CallRecord, Record, StreamRecord};
use serde_json::Value;
use spool::Batch;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The database the tables go in unless one is named.
pub const DEFAULT_DATABASE: &str = "calliper";
/// Rows per batch, at most.
pub const DEFAULT_BATCH_ROWS: usize = 10_000;
/// Time a row waits for its batch to fill, at most.
pub const DEFAULT_BATCH_INTERVAL: Duration = Duration::from_secs(1);
/// The most a spool directory holds.
pub const DEFAULT_SPOOL_BYTES: u64 = 1 << 30;
/// The most held in memory when no spool directory is given.
pub const MEMORY_SPOOL_BYTES: u64 = 64 << 20;
/// Batches waiting for the delivery thread before the writer spools them itself.
const QUEUE: usize = 4;

/// Where and how to write.
/// (No `Debug`: it holds the password.)
#[derive(Clone)]
pub struct Config {
    /// `http://HOST:PORT` of each server's HTTP interface (several: nodes
    /// of one cluster, tried in turn).
    pub urls: Vec<String>,
    /// The database the tables are in.
    pub database: String,
    /// Write through `Distributed` tables over this cluster ([`schema`]).
    pub cluster: Option<String>,
    /// The user ClickHouse knows the probe as.
    pub user: String,
    /// Its password (empty for none).
    pub password: String,
    /// This probe's name, in every row.
    pub probe: String,
    /// Where undelivered batches wait (in memory when None).
    pub spool_dir: Option<PathBuf>,
    /// The most the spool holds, bytes.
    pub spool_bytes: u64,
    /// Rows per batch, at most.
    pub batch_rows: usize,
    /// Time a row waits for its batch, at most.
    pub batch_interval: Duration,
    /// Keep this many days, dropping older partitions (at least 2).
    pub keep_days: Option<u16>,
    /// When the server is slow (answering, but behind), wait for it
    /// rather than spool: for an offline run, which has no clock to keep
    /// up with. A live probe never waits (false).
    pub wait_when_slow: bool,
}

impl Config {
    /// Writing to `url` (or several, comma-separated) as `probe`, with the defaults above.
    pub fn new(url: &str, probe: &str) -> Config {
        Config {
            urls: url.split(',').map(|u| u.trim().to_string()).collect(),
            database: DEFAULT_DATABASE.to_string(),
            cluster: None,
            user: "default".to_string(),
            password: String::new(),
            probe: probe.to_string(),
            spool_dir: None,
            spool_bytes: DEFAULT_SPOOL_BYTES,
            batch_rows: DEFAULT_BATCH_ROWS,
            batch_interval: DEFAULT_BATCH_INTERVAL,
            wait_when_slow: false,
            keep_days: None,
        }
    }
}

/// Makes the tables on the first server at start, so that what no retry
/// mends (a refused login, tables of another layout) stops the run at once
/// with its reason, rather than rows being refused one batch at a time. A
/// server that does not answer yet is no error: rows wait in the spool.
/// Returns whether the server has the tables.
fn first_contact(
    schema: &Schema,
    e: &Endpoint,
    shared: &deliver::Shared,
) -> Result<bool, StoreError> {
    match schema.make(e) {
        Ok(()) => Ok(true),
        Err(err @ HttpError::Server { status: 0, .. }) => {
            Err(StoreError::Invalid(format!("clickhouse: {err}")))
        }
        Err(err @ HttpError::Server { status: 401 | 403, .. }) => {
            Err(StoreError::Invalid(format!("clickhouse: {}: {err}{}", e.host(), err.hint())))
        }
        Err(err) => {
            shared.say(&format!(
                "clickhouse: {}: {err}; rows wait in the spool until it answers",
                e.host()
            ));
            Ok(false)
        }
    }
}

/// A stable id: the same record from the same probe has the same id in
/// every run, so a replayed row replaces itself. BLAKE3, a cryptographic
/// hash, not a fast one: a sender cannot choose a Call-ID whose row would
/// replace another call's.
fn record_id(parts: &[&[u8]]) -> u64 {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p);
    }
    let d = h.finalize();
    u64::from_le_bytes(d.as_bytes()[..8].try_into().unwrap_or([0; 8]))
}

/// A tracker's line's values for `table`'s columns, in order.
fn typed_values(table: Table, line: &Value) -> Vec<rusqlite::types::Value> {
    let null = Value::Null;
    table
        .def()
        .columns
        .iter()
        .map(|(name, ty, _): &(&str, Type, bool)| {
            tables::typed(line.get(*name).unwrap_or(&null), *ty)
        })
        .collect()
}

/// The rows of one table not yet handed over.
#[derive(Default)]
struct Open {
    /// The insert statement, then the rows.
    body: Vec<u8>,
    rows: u64,
    since: Option<Instant>,
    /// The days (partitions) its rows are in: ClickHouse refuses an insert
    /// touching over 100, so a batch is handed over at [`MOST_DAYS`].
    days: Vec<u16>,
}

/// Bytes after which a batch is handed over whatever its rows: bounds what
/// is held (two open, [`QUEUE`] queued twice, one in flight) and what one
/// request carries.
const MOST_BYTES: usize = 8 << 20;
/// Distinct days in one batch, at most.
const MOST_DAYS: usize = 64;

/// The ClickHouse sink.
pub struct ClickHouse {
    probe: String,
    batch_rows: u64,
    batch_interval: Duration,
    wait_when_slow: bool,
    /// Each table's insert statement, which starts each of its batches.
    inserts: Vec<String>,
    open: Vec<Open>,
    /// Rows of trackers' lines so far (their ids: a run read again gives
    /// the same ids, so its rows replace themselves).
    tracked_rows: u64,
    shared: Arc<deliver::Shared>,
    tx: Option<SyncSender<deliver::Msg>>,
    thread: Option<JoinHandle<()>>,
}

impl ClickHouse {
    /// Starts delivery to the server `cfg` names. The server need not be
    /// up: rows wait in the spool until it is. `say` receives what an
    /// operator should hear while it runs (the server down, back, refusing).
    pub fn open(
        cfg: &Config,
        say: Box<dyn Fn(&str) + Send + Sync>,
    ) -> Result<ClickHouse, StoreError> {
        check_names(&cfg.database, cfg.cluster.as_deref())?;
        if cfg.urls.len() > 1 && cfg.cluster.is_none() {
            return Err(StoreError::Invalid(
                "several servers are one cluster's nodes: name it with --clickhouse-cluster".into(),
            ));
        }
        let endpoints = cfg
            .urls
            .iter()
            .map(|u| Endpoint::new(u, &cfg.user, &cfg.password))
            .collect::<Result<Vec<_>, _>>()
            .map_err(StoreError::Invalid)?;
        let limit = if cfg.spool_dir.is_some() {
            cfg.spool_bytes
        } else {
            cfg.spool_bytes.min(MEMORY_SPOOL_BYTES)
        };
        let spool = spool::Spool::open(cfg.spool_dir.as_deref(), limit).map_err(|e| {
            StoreError::Invalid(format!(
                "cannot use spool directory {}: {e}",
                cfg.spool_dir.as_deref().unwrap_or(std::path::Path::new("")).display()
            ))
        })?;
        let shared = Arc::new(deliver::Shared::new(spool, say));
        let (tx, rx) = sync_channel(QUEUE);
        let inserts: Vec<String> = Table::all().map(|t| insert(&cfg.database, t)).collect();
        let schema = Schema::new(&cfg.database, cfg.cluster.as_deref());
        if cfg.keep_days.is_some_and(|d| d < 2) {
            return Err(StoreError::Invalid("keep at least 2 days (calls span midnight)".into()));
        }
        let first_ready = first_contact(&schema, &endpoints[0], &shared)?;
        let worker =
            deliver::Worker::new(endpoints, schema, shared.clone(), rx, cfg.keep_days, first_ready);
        let thread = std::thread::Builder::new()
            .name("calliper-clickhouse".into())
            .spawn(move || worker.run())
            .map_err(StoreError::Io)?;
        Ok(ClickHouse {
            probe: cfg.probe.clone(),
            batch_rows: cfg.batch_rows.max(1) as u64,
            batch_interval: cfg.batch_interval,
            wait_when_slow: cfg.wait_when_slow,
            open: inserts.iter().map(|_| Open::default()).collect(),
            inserts,
            tracked_rows: 0,
            shared,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Appends one row to `table`'s open batch: its head (probe, id, the
    /// parent's id for a table that has one, day), then each column's value.
    fn row(
        &mut self,
        table: Table,
        id: u64,
        ns: i64,
        parent: Option<Option<u64>>,
        values: Vec<rusqlite::types::Value>,
    ) {
        let day = row_binary::day(ns);
        let open = &self.open[table.index()];
        if !open.days.contains(&day) && open.days.len() >= MOST_DAYS {
            self.hand_over(table);
        }
        let open = &mut self.open[table.index()];
        if open.rows == 0 {
            open.body.extend_from_slice(self.inserts[table.index()].as_bytes());
        }
        if !open.days.contains(&day) {
            open.days.push(day);
            self.shared.note_day(day);
        }
        let b = &mut open.body;
        row_binary::text(b, self.probe.as_bytes());
        b.extend_from_slice(&id.to_le_bytes());
        match (parent, table.parent()) {
            (Some(p), Some((_, "Nullable(UInt64)"))) => row_binary::nullable_u64(b, p),
            (Some(p), Some(_)) => b.extend_from_slice(&p.unwrap_or(0).to_le_bytes()),
            _ => {}
        }
        b.extend_from_slice(&day.to_le_bytes());
        for ((_, ty, required), v) in table.def().columns.iter().zip(values) {
            row_binary::value(b, *ty, *required, v);
        }
        open.rows += 1;
        open.since.get_or_insert_with(Instant::now);
        if open.rows >= self.batch_rows || open.body.len() >= MOST_BYTES {
            self.hand_over(table);
        }
    }

    /// A tracker's line: a row of its kind's table, and one per item of
    /// its arrays (the time series' protocols and talkers) in theirs.
    fn tracked(&mut self, kind: &str, line: &Value) -> Result<(), StoreError> {
        let Some(table) = Table::of_kind(kind) else {
            return Ok(());
        };
        self.tracked_rows += 1;
        let id = record_id(&[
            b"tracked",
            self.probe.as_bytes(),
            kind.as_bytes(),
            &self.tracked_rows.to_le_bytes(),
            serde_json::to_string(line)?.as_bytes(),
        ]);
        let ns = tables::line_ns(line);
        let values = typed_values(table, line);
        self.row(table, id, ns, None, values);
        for (items_table, items) in table.item_tables() {
            let list = line.get(items.field).and_then(Value::as_array);
            for (n, item) in list.into_iter().flatten().enumerate() {
                let item_id = record_id(&[b"item", &id.to_le_bytes(), &n.to_le_bytes()]);
                let values = typed_values(items_table, item);
                self.row(items_table, item_id, ns, Some(Some(id)), values);
            }
        }
        self.hand_over_due(false);
        Ok(())
    }

    fn call(&mut self, c: &CallRecord) -> Result<u64, StoreError> {
        // Calls can share a Call-ID and a start (the engine keeps them apart):
        // their parties and the engine's serial tell them apart here too.
        let id = record_id(&[
            b"call",
            self.probe.as_bytes(),
            c.call_id.as_bytes(),
            &c.invite_ns.to_le_bytes(),
            &c.serial.to_le_bytes(),
            c.caller_ip.to_string().as_bytes(),
            &c.caller_port.to_le_bytes(),
            c.callee_ip.to_string().as_bytes(),
            &c.callee_port.to_le_bytes(),
            c.from.uri.as_bytes(),
            c.to.uri.as_bytes(),
        ]);
        let values = columns::values(columns::CALLS, c)?;
        self.row(Table::CALLS, id, c.invite_ns, None, values);
        Ok(id)
    }

    fn stream(&mut self, call: Option<u64>, s: &StreamRecord) -> Result<(), StoreError> {
        let id = record_id(&[
            b"stream",
            self.probe.as_bytes(),
            &call.unwrap_or(0).to_le_bytes(),
            s.src.to_string().as_bytes(),
            &s.src_port.to_le_bytes(),
            s.dst.to_string().as_bytes(),
            &s.dst_port.to_le_bytes(),
            &s.ssrc.to_le_bytes(),
            &s.first_ns.to_le_bytes(),
        ]);
        let values = columns::values(columns::STREAMS, s)?;
        self.row(Table::STREAMS, id, s.first_ns, Some(call), values);
        Ok(())
    }

    /// Hands `table`'s open batch to the delivery thread, or spools it
    /// when the thread's queue is full (never waits).
    fn hand_over(&mut self, table: Table) {
        let open = std::mem::take(&mut self.open[table.index()]);
        if open.rows == 0 {
            return;
        }
        let b = Batch { table, rows: open.rows, body: open.body };
        let Some(tx) = &self.tx else { return };
        if self.wait_when_slow {
            if let Err(std::sync::mpsc::SendError(deliver::Msg::Batch(b))) =
                tx.send(deliver::Msg::Batch(b))
            {
                self.shared.spool(b);
            }
            return;
        }
        match tx.try_send(deliver::Msg::Batch(b)) {
            Ok(()) => {}
            Err(TrySendError::Full(deliver::Msg::Batch(b)))
            | Err(TrySendError::Disconnected(deliver::Msg::Batch(b))) => self.shared.spool(b),
            Err(_) => {}
        }
    }

    /// Hands over every batch whose first row has waited long enough.
    fn hand_over_due(&mut self, all: bool) {
        for t in Table::all() {
            let due = self.open[t.index()]
                .since
                .is_some_and(|s| all || s.elapsed() >= self.batch_interval);
            if due {
                self.hand_over(t);
            }
        }
    }

    /// What was delivered, spooled and lost so far.
    pub fn report(&self) -> Report {
        self.shared.report()
    }

    /// A handle that reads [`ClickHouse::report`] from elsewhere (the
    /// probe's health page) while the sink is the writer's.
    pub fn delivery(&self) -> Delivery {
        Delivery(self.shared.clone())
    }
}

/// Reads a sink's delivery counts ([`ClickHouse::delivery`]).
#[derive(Clone)]
pub struct Delivery(Arc<deliver::Shared>);

impl Delivery {
    /// What was delivered, spooled and lost so far.
    pub fn report(&self) -> Report {
        self.0.report()
    }
}

impl crate::Sink for ClickHouse {
    fn write(&mut self, r: &Record) -> Result<(), StoreError> {
        match r {
            Record::Call(c) => {
                let id = self.call(c)?;
                for s in &c.streams {
                    self.stream(Some(id), s)?;
                }
            }
            Record::Stream(s) => self.stream(None, s)?,
        }
        self.hand_over_due(false);
        Ok(())
    }

    fn write_tracked(&mut self, kind: &'static str, value: &Value) -> Result<(), StoreError> {
        self.tracked(kind, value)
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.hand_over_due(false);
        Ok(())
    }

    /// Hands over what is open and waits for delivery: what the server does
    /// not take is left in the spool directory (for the next run), or, with
    /// no directory, is lost and the run fails saying so.
    fn finish(&mut self, _input: &str, _summary: &Value) -> Result<(), StoreError> {
        self.hand_over_due(true);
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(deliver::Msg::Finish);
        }
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| {
                StoreError::Invalid("the ClickHouse delivery thread panicked".into())
            })?;
        }
        let r = self.report();
        // What became of rows set aside, and what to do about rows lost.
        let (kept, remedy) = if self.shared.on_disk() {
            (
                "kept as .rejected files in the spool directory (docs/scale-out.md: sending them again)",
                "raise --clickhouse-spool-mib, or free its disk",
            )
        } else {
            (
                "lost: no spool directory",
                "give --clickhouse-spool DIR to keep them for the next run",
            )
        };
        let last = r.last_error.as_deref();
        if r.rejected > 0 {
            return Err(StoreError::Invalid(format!(
                "clickhouse: {} rows were refused by the server and set aside, {kept}; last failure: {}",
                r.rejected,
                last.unwrap_or("")
            )));
        }
        if r.dropped > 0 {
            return Err(StoreError::Invalid(format!(
                "clickhouse: {} rows were not delivered and are lost ({}); {remedy}",
                r.dropped,
                last.unwrap_or("the spool was full")
            )));
        }
        Ok(())
    }

    fn delivery_report(&self) -> Option<String> {
        Some(self.report().to_string())
    }
}

impl Drop for ClickHouse {
    /// Without `finish` (the run failed elsewhere): what is open is handed
    /// over and delivered or spooled as at the end of a run, and what
    /// happened is said.
    fn drop(&mut self) {
        if self.thread.is_none() {
            return;
        }
        self.hand_over_due(true);
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.say(&self.report().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_parts_do_not_run_together() {
        assert_eq!(record_id(&[b"a", b"bc"]), record_id(&[b"a", b"bc"]));
        assert_ne!(record_id(&[b"a", b"bc"]), record_id(&[b"ab", b"c"]));
    }

    #[test]
    fn the_tables_have_every_column_of_sqlite() {
        let ddl = schema("calliper", None).join("\n");
        for name in
            columns::CALLS.iter().map(|c| c.name).chain(columns::STREAMS.iter().map(|c| c.name))
        {
            assert!(ddl.contains(&format!("\n    {name} ")), "{name}");
        }
    }
}
