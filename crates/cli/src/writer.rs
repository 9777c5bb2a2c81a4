//! For the live probe, the sinks on a thread of their own behind a bounded
//! queue, so the packet path never waits for a disk: what does not fit is
//! dropped and counted (`output_dropped` in the summary, and a warning).
//! Offline runs write on the calling thread: they may wait, nothing is lost,
//! and no third thread competes with the analysis for the cores.

use crate::summary::{self, TextReport};
use anyhow::{anyhow, Result};
use calliper_engine::{Counters, Record};
use calliper_rules::RuleInfo;
use calliper_store::Sink;
use serde_json::Value;
use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;

/// Batches waiting for the writer (each holds what the engine finished in
/// up to 4 096 packets or one second).
const QUEUE: usize = 256;

/// What the writer writes to.
pub struct Sinks {
    /// JSON lines and databases.
    pub sinks: Vec<Box<dyn Sink + Send>>,
    /// The terminal report (`--format text`).
    pub text: Option<TextReport<Box<dyn Write + Send>>>,
}

/// Output finished together.
#[derive(Default)]
pub struct Batch {
    /// Call and stream records.
    pub records: Vec<Record>,
    /// Trackers' rows, by line type.
    pub tracked: Vec<(&'static str, Value)>,
    /// Event-log JSON lines.
    pub lines: Vec<u8>,
    /// Make everything durable after writing this.
    pub flush: bool,
}

impl From<calliper_trackers::TrackedRows> for Batch {
    /// The trackers' rows and event lines, without records.
    fn from(t: calliper_trackers::TrackedRows) -> Batch {
        Batch { tracked: t.rows, lines: t.lines, ..Batch::default() }
    }
}

impl Batch {
    /// True when there is nothing to write or do.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.tracked.is_empty() && self.lines.is_empty() && !self.flush
    }
    /// Records and rows it holds.
    fn items(&self) -> u64 {
        (self.records.len() + self.tracked.len()) as u64
    }
}

/// The end of a run, for the sinks.
pub struct Finish {
    /// What the trackers still held: written first, and never dropped
    /// (the summary has already counted the drops).
    pub last: Batch,
    /// Names of the inputs.
    pub input: String,
    /// Counters and extra fields, as JSON.
    pub summary: Value,
    /// The counters, for the terminal.
    pub counters: Counters,
    /// The rules and their hits.
    pub rules: Vec<RuleInfo>,
    /// Users at the end (rows and the text report).
    pub users: calliper_trackers::Users,
    /// The run's KPIs, all intervals together (the text report).
    pub kpis: calliper_trackers::KpiCounts,
}

enum Msg {
    Batch(Batch),
    Finish(Box<Finish>),
}

impl Sinks {
    fn write(&mut self, b: Batch) -> Result<()> {
        for r in &b.records {
            for s in self.sinks.iter_mut() {
                s.write(r)?;
            }
            if let Some(t) = self.text.as_mut() {
                t.record(r);
            }
        }
        for (kind, v) in &b.tracked {
            for s in self.sinks.iter_mut() {
                s.write_tracked(kind, v)?;
            }
            if let (Some(t), &"alert") = (self.text.as_mut(), kind) {
                t.alert(v)?;
            }
        }
        if !b.lines.is_empty() {
            for s in self.sinks.iter_mut() {
                s.write_json_lines(&b.lines)?;
            }
        }
        if b.flush {
            for s in self.sinks.iter_mut() {
                s.flush()?;
            }
            if let Some(t) = self.text.as_mut() {
                t.flush()?;
            }
        }
        Ok(())
    }

    fn finish(&mut self, mut f: Finish) -> Result<()> {
        self.write(std::mem::take(&mut f.last))?;
        for u in f.users.users.values() {
            let v = serde_json::to_value(u)?;
            for s in self.sinks.iter_mut() {
                s.write_tracked("user", &v)?;
            }
        }
        // Every sink finishes, even after one failed (a database sink
        // delivers or spools what it holds); the first failure is the run's.
        let mut failed = Ok(());
        for s in self.sinks.iter_mut() {
            let finished = s.finish(&f.input, &f.summary);
            if let Some(line) = s.delivery_report() {
                eprintln!("{line}");
            }
            if failed.is_ok() {
                failed = finished;
            }
        }
        failed?;
        if let Some(t) = self.text.as_mut() {
            t.users(&f.users)?;
            t.kpis(&f.kpis)?;
            t.finish(&f.counters, &f.rules, &f.summary)?;
        } else {
            let mut err = io::stderr().lock();
            summary::print_counters(&mut err, &f.counters)?;
            summary::print_recording(&mut err, &f.summary)?;
            summary::print_rules(&mut err, &f.rules)?;
        }
        Ok(())
    }
}

/// The writer thread and its queue, or the sinks themselves (offline).
pub struct Writer {
    tx: Option<SyncSender<Msg>>,
    handle: Option<JoinHandle<Result<()>>>,
    /// Offline: written on the caller's thread.
    inline: Option<Sinks>,
    /// Records and rows dropped because the queue was full.
    pub dropped: u64,
}

impl Writer {
    /// Writes to `sinks`: on a thread of its own dropping what does not fit
    /// (`lossy`, live capture), or on the caller's thread.
    pub fn start(sinks: Sinks, lossy: bool) -> Writer {
        if !lossy {
            return Writer { tx: None, handle: None, inline: Some(sinks), dropped: 0 };
        }
        let mut sinks = sinks;
        let (tx, rx): (SyncSender<Msg>, Receiver<Msg>) = sync_channel(QUEUE);
        let handle = std::thread::Builder::new()
            .name("calliper-writer".into())
            .spawn(move || {
                while let Ok(m) = rx.recv() {
                    match m {
                        Msg::Batch(b) => sinks.write(b)?,
                        Msg::Finish(f) => return sinks.finish(*f),
                    }
                }
                Ok(())
            })
            .ok();
        Writer { tx: Some(tx), handle, inline: None, dropped: 0 }
    }

    /// Queues a batch. An error is the writer's (a full disk, a closed
    /// pipe): it has stopped, and says why.
    pub fn send(&mut self, b: Batch) -> Result<()> {
        if b.is_empty() {
            return Ok(());
        }
        if let Some(sinks) = &mut self.inline {
            return sinks.write(b);
        }
        let Some(tx) = &self.tx else {
            return Err(anyhow!("the writer has stopped"));
        };
        let items = b.items();
        match tx.try_send(Msg::Batch(b)) {
            Err(TrySendError::Full(_)) => {
                self.dropped += items;
                Ok(())
            }
            Err(TrySendError::Disconnected(_)) => Err(self.stopped()),
            Ok(()) => Ok(()),
        }
    }

    /// The error that stopped the writer.
    fn stopped(&mut self) -> anyhow::Error {
        self.tx = None;
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => anyhow!("the writer thread panicked"),
            _ => anyhow!("the writer stopped"),
        }
    }

    /// Waits for what is queued to be written, without a summary (the run
    /// failed).
    pub fn close(mut self) -> Result<()> {
        if self.inline.is_some() {
            return Ok(());
        }
        self.tx = None;
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            _ => Err(anyhow!("the writer thread panicked")),
        }
    }

    /// Writes the end of the run and waits for everything to be written.
    pub fn finish(mut self, f: Finish) -> Result<()> {
        if let Some(sinks) = &mut self.inline {
            return sinks.finish(f);
        }
        let Some(tx) = self.tx.take() else {
            return Err(anyhow!("the writer has stopped"));
        };
        // The end always waits: nothing after it could be lost.
        if tx.send(Msg::Finish(Box::new(f))).is_err() {
            return Err(self.stopped());
        }
        drop(tx);
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(anyhow!("the writer thread panicked")),
            None => Err(anyhow!("the writer thread could not start")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use calliper_store::StoreError;
    use std::sync::{Arc, Mutex};

    /// A sink whose disk hangs until the test lets it go, counting rows.
    struct Stalled {
        gate: Arc<Mutex<()>>,
        rows: Arc<Mutex<u64>>,
    }

    impl Sink for Stalled {
        fn write(&mut self, _: &Record) -> Result<(), StoreError> {
            Ok(())
        }
        fn write_tracked(&mut self, _: &'static str, _: &Value) -> Result<(), StoreError> {
            let _wait = self.gate.lock();
            *self.rows.lock().unwrap() += 1;
            Ok(())
        }
        fn flush(&mut self) -> Result<(), StoreError> {
            Ok(())
        }
        fn finish(&mut self, _: &str, _: &Value) -> Result<(), StoreError> {
            Ok(())
        }
    }

    /// A lossy writer to a sink that waits on `gate` and counts `rows`.
    fn stalled_writer(gate: &Arc<Mutex<()>>, rows: &Arc<Mutex<u64>>) -> Writer {
        let stalled = Stalled { gate: gate.clone(), rows: rows.clone() };
        Writer::start(Sinks { sinks: vec![Box::new(stalled)], text: None }, true)
    }

    fn row() -> Batch {
        Batch { tracked: vec![("traffic", Value::Null)], ..Batch::default() }
    }

    #[test]
    fn a_stalled_disk_costs_counted_rows_never_a_wait() {
        let (gate, rows) = (Arc::new(Mutex::new(())), Arc::new(Mutex::new(0)));
        let stall = gate.lock().unwrap();
        let mut w = stalled_writer(&gate, &rows);
        let sent = QUEUE as u64 + 100;
        for _ in 0..sent {
            w.send(row()).unwrap();
        }
        // The writer holds one batch, the queue QUEUE: the rest is dropped.
        assert!(w.dropped >= 99 && w.dropped <= 100, "{}", w.dropped);
        let w_dropped = w.dropped;
        drop(stall);
        w.close().unwrap();
        // Everything was either written or counted.
        assert_eq!(*rows.lock().unwrap() + w_dropped, sent);
    }

    /// The trackers' last rows go with the end, which waits: with the
    /// queue full when the run ends, they are written, not dropped
    /// uncounted after the summary took the drop count.
    #[test]
    fn the_last_rows_are_written_even_behind_a_full_queue() {
        let (gate, rows) = (Arc::new(Mutex::new(())), Arc::new(Mutex::new(0)));
        let stall = gate.lock().unwrap();
        let mut w = stalled_writer(&gate, &rows);
        for _ in 0..QUEUE + 10 {
            w.send(row()).unwrap();
        }
        let dropped = w.dropped;
        assert!(dropped > 0, "the queue never filled");
        let last = Batch { tracked: vec![("alert", Value::Null); 3], ..Batch::default() };
        let finish = Finish {
            last,
            input: "test".into(),
            summary: Value::Null,
            counters: Counters::default(),
            rules: Vec::new(),
            users: Default::default(),
            kpis: Default::default(),
        };
        let finishing = std::thread::spawn(move || w.finish(finish));
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(stall);
        finishing.join().unwrap().unwrap();
        assert_eq!(*rows.lock().unwrap(), (QUEUE + 10) as u64 - dropped + 3);
    }
}
