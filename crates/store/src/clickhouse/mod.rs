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

pub use deliver::Report;
pub use http::{Endpoint, External, HttpError};
pub use read::{search_query, Query, Reader};
use schema::{check_names, insert, Schema};
pub use schema::{checked_schema, schema};

use crate::columns::{self, Column};
use crate::StoreError;
use calliper_model::{CallRecord, Record, StreamRecord};
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

/// A table the sink writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// One row per call.
    Calls,
    /// One row per RTP stream, with its call's `record_id`.
    Streams,
}

impl Table {
    /// Its name in the database.
    pub fn name(self) -> &'static str {
        match self {
            Table::Calls => "calls",
            Table::Streams => "streams",
        }
    }

    fn from_name(name: &str) -> Option<Table> {
        [Table::Calls, Table::Streams]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

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
        Err(
            err @ HttpError::Server {
                status: 401 | 403, ..
            },
        ) => Err(StoreError::Invalid(format!(
            "clickhouse: {}: {err}{}",
            e.host(),
            err.hint()
        ))),
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
    inserts: [String; 2],
    open: [Open; 2],
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
                cfg.spool_dir
                    .as_deref()
                    .unwrap_or(std::path::Path::new(""))
                    .display()
            ))
        })?;
        let shared = Arc::new(deliver::Shared::new(spool, say));
        let (tx, rx) = sync_channel(QUEUE);
        let inserts = [Table::Calls, Table::Streams].map(|t| insert(&cfg.database, t));
        let schema = Schema::new(&cfg.database, cfg.cluster.as_deref());
        if cfg.keep_days.is_some_and(|d| d < 2) {
            return Err(StoreError::Invalid(
                "keep at least 2 days (calls span midnight)".into(),
            ));
        }
        let first_ready = first_contact(&schema, &endpoints[0], &shared)?;
        let worker = deliver::Worker::new(
            endpoints,
            schema,
            shared.clone(),
            rx,
            cfg.keep_days,
            first_ready,
        );
        let thread = std::thread::Builder::new()
            .name("calliper-clickhouse".into())
            .spawn(move || worker.run())
            .map_err(StoreError::Io)?;
        Ok(ClickHouse {
            probe: cfg.probe.clone(),
            batch_rows: cfg.batch_rows.max(1) as u64,
            batch_interval: cfg.batch_interval,
            wait_when_slow: cfg.wait_when_slow,
            inserts,
            open: Default::default(),
            shared,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Appends one row to `table`'s open batch: its head (probe, id, day,
    /// for streams the call's id), then each column.
    fn row<R>(
        &mut self,
        table: Table,
        id: u64,
        ns: i64,
        call: Option<Option<u64>>,
        cols: &[Column<R>],
        record: &R,
    ) -> Result<(), StoreError> {
        let values = columns::values(cols, record)?;
        let day = row_binary::day(ns);
        let open = &self.open[table as usize];
        if !open.days.contains(&day) && open.days.len() >= MOST_DAYS {
            self.hand_over(table);
        }
        let open = &mut self.open[table as usize];
        if open.rows == 0 {
            open.body
                .extend_from_slice(self.inserts[table as usize].as_bytes());
        }
        if !open.days.contains(&day) {
            open.days.push(day);
            self.shared.note_day(day);
        }
        let b = &mut open.body;
        row_binary::text(b, self.probe.as_bytes());
        b.extend_from_slice(&id.to_le_bytes());
        if let Some(call) = call {
            row_binary::nullable_u64(b, call);
        }
        b.extend_from_slice(&day.to_le_bytes());
        for (c, v) in cols.iter().zip(values) {
            row_binary::value(b, c, v);
        }
        open.rows += 1;
        open.since.get_or_insert_with(Instant::now);
        if open.rows >= self.batch_rows || open.body.len() >= MOST_BYTES {
            self.hand_over(table);
        }
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
        self.row(Table::Calls, id, c.invite_ns, None, columns::CALLS, c)?;
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
        self.row(
            Table::Streams,
            id,
            s.first_ns,
            Some(call),
            columns::STREAMS,
            s,
        )
    }

    /// Hands `table`'s open batch to the delivery thread, or spools it
    /// when the thread's queue is full (never waits).
    fn hand_over(&mut self, table: Table) {
        let open = std::mem::take(&mut self.open[table as usize]);
        if open.rows == 0 {
            return;
        }
        let b = Batch {
            table,
            rows: open.rows,
            body: open.body,
        };
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
        for t in [Table::Calls, Table::Streams] {
            let due = self.open[t as usize]
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

    fn flush(&mut self) -> Result<(), StoreError> {
        self.hand_over_due(false);
        Ok(())
    }

    /// Hands over what is open and waits for delivery: what the server does
    /// not take is left in the spool directory (for the next run), or, with
    /// no directory, is lost and the run fails saying so.
    fn finish(&mut self, _input: &str, _summary: &serde_json::Value) -> Result<(), StoreError> {
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
        let on_disk = self.shared.on_disk();
        if r.rejected > 0 {
            let kept = if on_disk {
                "kept as .rejected files in the spool directory (docs/scale-out.md: sending them again)"
            } else {
                "lost: no spool directory"
            };
            return Err(StoreError::Invalid(format!(
                "clickhouse: {} rows were refused by the server and set aside, {kept}; last failure: {}",
                r.rejected,
                r.last_error.as_deref().unwrap_or("")
            )));
        }
        if r.dropped > 0 {
            let keep = if on_disk {
                "raise --clickhouse-spool-mib, or free its disk"
            } else {
                "give --clickhouse-spool DIR to keep them for the next run"
            };
            return Err(StoreError::Invalid(format!(
                "clickhouse: {} rows were not delivered and are lost ({}); {keep}",
                r.dropped,
                r.last_error.as_deref().unwrap_or("the spool was full")
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
        for name in columns::CALLS
            .iter()
            .map(|c| c.name)
            .chain(columns::STREAMS.iter().map(|c| c.name))
        {
            assert!(ddl.contains(&format!("\n    {name} ")), "{name}");
        }
    }
}
