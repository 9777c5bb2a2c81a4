//! Analysis on several threads with results identical to one engine.
//!
//! Media (UDP that is neither SIP nor RTCP) belongs to the shard its
//! address pair hashes to ([`crate::Flow::shard`]: both directions
//! together). Only the owner analyses it; the other shards let it move
//! their clocks and nothing else, and the first shard, which keeps the
//! traffic table, counts it. Everything else — SIP, RTCP, TCP, fragments,
//! IPv6 — every shard decodes; each removes capture duplicates exactly as a
//! single engine would and, with the same test, analyses the media it owns
//! and all the rest. Every shard therefore keeps the same call and media
//! tables and analyses only its own streams.
//!
//! Packets reach the shards two ways ([`crate::shard`]). From regular
//! files, each shard reads the files itself ([`Parallel::reading`]): no
//! packet crosses between cores, and routing costs a shard a skim of each
//! packet's headers at fixed offsets. Otherwise (live rings, pipes, HEP)
//! the caller's thread copies packets into chunks every shard reads, marked
//! with their owner ([`crate::Router`]).
//!
//! Calls stay identical across shards because they change activity lists
//! and expire only at batch ends ([`crate::Batcher`] decides where, from
//! every packet's time, as in one engine): at each end the shards exchange
//! the media activity they saw ([`crate::Engine::end_batch`]), apply all of it in
//! time order, then expire. Each shard writes its own version of a call
//! (with its streams); the caller merges the versions when all have arrived.

use crate::lru::Idx;
use crate::shard::{self, Shard};
use crate::shared::SharedCaps;
use crate::workers::{guard, Gate, WorkerFailed};
use crate::{Batcher, CallRecord, Config, Counters, Record, Routed, Router, Sum, TrackerHub};
use hashbrown::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Packets per chunk sent to the shards.
const CHUNK: usize = 1024;
/// Bytes after which a chunk is sent whatever its packet count, so chunks
/// held in the queues stay small however large the packets
/// (docs/hostile-input.md: at most about `2 × QUEUE + 2` chunks live).
const CHUNK_BYTES: usize = 256 << 10;
/// Chunks queued per shard before the reader waits.
const QUEUE: usize = 16;

/// The most bytes of packet chunks alive at once with `threads` shards:
/// the chunk being filled, the `2 × QUEUE + 2` the reader keeps for reuse,
/// and the one each shard is reading (all shards read the same chunks, so a
/// chunk a shard still queues is among those). A chunk is sent once past
/// [`CHUNK_BYTES`], so it holds at most that plus one packet, with its
/// vector's doubling slack.
pub(crate) fn queued_bytes(threads: usize) -> usize {
    let chunk =
        2 * (CHUNK_BYTES + calliper_capture::MAX_RECORD) + 2 * CHUNK * std::mem::size_of::<Entry>();
    (2 * QUEUE + 3 + threads) * chunk
}

#[derive(Default)]
pub(crate) struct Chunk {
    pub(crate) data: Vec<u8>,
    /// Each packet in `data`.
    pub(crate) index: Vec<Entry>,
}

/// Where a packet is in its chunk, and which shards take it.
pub(crate) struct Entry {
    pub(crate) ts_ns: i64,
    pub(crate) start: u32,
    pub(crate) len: u32,
    pub(crate) link_type: u16,
    /// Its owner when the reader could tell (else every shard decides).
    pub(crate) media: Option<Routed>,
}

pub(crate) enum Msg {
    Packets(Arc<Chunk>),
    /// A batch ends at this time; the capture's drop total so far.
    EndBatch(i64, u64),
    /// The input ended; the capture's drop total.
    Finish(u64),
}

/// What the shards share: touches published at a batch end, and what the
/// run reports while it goes.
pub(crate) struct Exchange {
    pub(crate) slots: Mutex<Vec<Vec<(i64, Idx)>>>,
    /// Where shards meet at a batch end; a shard's panic breaks it.
    pub(crate) gate: Arc<Gate>,
    /// The run's trackers: the first shard delivers signalling events.
    pub(crate) trackers: Option<TrackerHub>,
    /// Each shard's counters as of its last report (about once a second
    /// of capture time), for [`Parallel::counters_so_far`].
    pub(crate) progress: Mutex<Vec<(Counters, Counters)>>,
    /// Shards reading files: the first one's messages about the inputs,
    /// its bytes read, and whether every input read cleanly.
    pub(crate) messages: Mutex<Vec<String>>,
    pub(crate) position: AtomicU64,
    pub(crate) clean: AtomicBool,
    /// Set at a batch end, before the shards' last meeting, by the shard
    /// that delivers the time series: it will release a row, so every
    /// shard waits for that before going on.
    pub(crate) release_due: AtomicBool,
}

/// Where a shard's packets come from.
enum Input {
    /// Regular files it reads itself, each up to its length when opened.
    Files(Arc<Vec<(PathBuf, u64)>>),
    /// Chunks the caller sends.
    Pushed(Receiver<Msg>),
}

/// What a shard sends the merger: its index, the records it finished, and
/// its clock then.
pub(crate) type Results = (usize, Vec<Record>, i64);

/// Capture time between two reports of a shard's counters.
pub(crate) const PROGRESS_NS: i64 = 1_000_000_000;

/// The sharded analyser.
pub struct Parallel {
    n: usize,
    /// The shards read files themselves (else the caller hands packets over).
    reading: bool,
    senders: Vec<SyncSender<Msg>>,
    /// The chunk being filled.
    chunk: Chunk,
    /// Chunks sent, oldest first, reused once every shard has let go.
    sent: std::collections::VecDeque<Arc<Chunk>>,
    results: Receiver<Results>,
    /// Each shard's clock as of the last records it sent: none of its
    /// later records is held until before it.
    passed: Vec<i64>,
    handles: Vec<JoinHandle<Result<(Counters, Counters), WorkerFailed>>>,
    gate: Arc<Gate>,
    exchange: Arc<Exchange>,
    batcher: Batcher,
    /// Calls some shards have written, by serial: (versions so far, merged).
    partial: HashMap<u64, (usize, CallRecord)>,
    out: Vec<Record>,
    /// Receive the merged records.
    trackers: Option<TrackerHub>,
    packets: u64,
    bytes: u64,
    /// Anomalies of the packets' times ([`crate::time_guard`], judged
    /// before the packets come here), by kind.
    reader_anomalies: Vec<(&'static str, u64)>,
    counters: Counters,
    /// The capture's drop total, passed to the shards at batch ends.
    capture_dropped: u64,
    router: Router,
}

impl Parallel {
    /// Starts `shards` analysis threads (at least 2) fed by
    /// [`Parallel::packet`]. Trackers, if any, receive signalling events
    /// from the first shard and the merged records from the caller.
    pub fn new(cfg: Config, shards: usize, trackers: Option<TrackerHub>) -> Parallel {
        Parallel::start(cfg, shards, trackers, None)
    }

    /// Starts `shards` analysis threads (at least 2) that each read the
    /// capture files themselves (regular files, each opened anew and read
    /// up to the length given: `Inputs::reopenable`). The caller waits
    /// ([`Parallel::wait`]) and takes what they finish; no packet passes
    /// through its thread.
    pub fn reading(
        cfg: Config,
        shards: usize,
        trackers: Option<TrackerHub>,
        paths: Vec<(PathBuf, u64)>,
    ) -> Parallel {
        Parallel::start(cfg, shards, trackers, Some(Arc::new(paths)))
    }

    fn start(
        cfg: Config,
        shards: usize,
        trackers: Option<TrackerHub>,
        paths: Option<Arc<Vec<(PathBuf, u64)>>>,
    ) -> Parallel {
        let n = shards.max(2);
        let gate = Arc::new(Gate::new(n));
        let caps = Arc::new(SharedCaps::new(n, cfg.max_calls));
        let exchange = Arc::new(Exchange {
            slots: Mutex::new(vec![Vec::new(); n]),
            gate: gate.clone(),
            trackers: trackers.clone(),
            progress: Mutex::new(vec![Default::default(); n]),
            messages: Mutex::new(Vec::new()),
            position: AtomicU64::new(0),
            clean: AtomicBool::new(true),
            release_due: AtomicBool::new(false),
        });
        // Unbounded: a shard must never wait on the caller while the caller
        // waits on it; the caller drains results at every batch end.
        let (result_tx, results) = channel::<Results>();
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        for i in 0..n {
            // Streams, candidates and streams per call are capped across
            // shards (`caps`), as in one engine.
            let (shard_cfg, caps) = (cfg.clone(), caps.clone());
            let (exchange, result_tx) = (exchange.clone(), result_tx.clone());
            let input = match &paths {
                Some(paths) => Input::Files(paths.clone()),
                None => {
                    let (tx, rx) = sync_channel::<Msg>(QUEUE);
                    senders.push(tx);
                    Input::Pushed(rx)
                }
            };
            handles.push(std::thread::spawn(move || {
                let gate = exchange.gate.clone();
                guard(i, Some(&gate), || {
                    let s = Shard::new((i, n), shard_cfg.clone(), caps, &exchange, result_tx);
                    match input {
                        Input::Files(paths) => shard::reading(s, n, &shard_cfg, &paths),
                        Input::Pushed(rx) => shard::pushed(s, rx),
                    }
                })?
            }));
        }
        Parallel {
            n,
            reading: paths.is_some(),
            senders,
            chunk: Chunk::default(),
            sent: std::collections::VecDeque::new(),
            results,
            passed: vec![i64::MIN; n],
            handles,
            gate,
            exchange,
            batcher: Batcher::default(),
            partial: HashMap::new(),
            out: Vec::new(),
            packets: 0,
            reader_anomalies: Vec::new(),
            bytes: 0,
            counters: Counters::default(),
            trackers,
            capture_dropped: 0,
            router: Router::new(&cfg, n),
        }
    }

    /// Whether the shards read files themselves ([`Parallel::reading`]).
    pub fn is_reading(&self) -> bool {
        self.reading
    }

    /// Shards reading files: waits up to `timeout` for what they finish,
    /// and says whether any is still reading.
    pub fn wait(&mut self, timeout: std::time::Duration) -> bool {
        if let Ok(got) = self.results.recv_timeout(timeout) {
            self.take(got);
        }
        self.collect(false);
        self.handles.iter().any(|h| !h.is_finished())
    }

    /// Shards reading files: what the first said about the inputs since
    /// the last call, its bytes read, and whether every input read cleanly.
    pub fn reading_report(&self) -> (Vec<String>, u64, bool) {
        let said = self.exchange.messages.lock().map(|mut m| std::mem::take(&mut *m));
        (
            said.unwrap_or_default(),
            self.exchange.position.load(Ordering::Relaxed),
            self.exchange.clean.load(Ordering::Relaxed),
        )
    }

    /// Analyses one captured frame. An error means a shard failed: the run
    /// cannot go on (what was finished before is still in [`Parallel::drain`]).
    pub fn packet(&mut self, ts_ns: i64, link_type: u16, data: &[u8]) -> Result<(), WorkerFailed> {
        self.packets += 1;
        self.bytes += data.len() as u64;
        if self.batcher.boundary(ts_ns) {
            self.end_batch(ts_ns)?;
        }
        let c = &mut self.chunk;
        c.index.push(Entry {
            ts_ns,
            start: c.data.len() as u32,
            len: data.len() as u32,
            link_type,
            media: self.router.route(link_type, data),
        });
        c.data.extend_from_slice(data);
        if c.index.len() >= CHUNK || c.data.len() >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn end_batch(&mut self, ts_ns: i64) -> Result<(), WorkerFailed> {
        self.flush()?;
        let dropped = self.capture_dropped;
        self.send(|| Msg::EndBatch(ts_ns, dropped))?;
        self.collect(false);
        Ok(())
    }

    /// Lets time pass without packets (see [`Engine::tick`]).
    pub fn tick(&mut self, now_ns: i64) -> Result<(), WorkerFailed> {
        if self.batcher.due(now_ns) {
            self.end_batch(now_ns)?;
        }
        Ok(())
    }

    /// The capture's drop total so far (see [`Engine::set_capture_dropped`]).
    pub fn set_capture_dropped(&mut self, total: u64) {
        self.capture_dropped = total;
    }

    /// Sends a message to every shard. A shard stops reading only when it
    /// has failed (or been told to finish), so a refused send means failure.
    fn send(&self, msg: impl Fn() -> Msg) -> Result<(), WorkerFailed> {
        for (i, s) in self.senders.iter().enumerate() {
            if s.send(msg()).is_err() {
                return Err(self.failure(i));
            }
        }
        Ok(())
    }

    /// The failure that stopped the shards (shard `i` stopped reading).
    fn failure(&self, i: usize) -> WorkerFailed {
        self.gate.failed().unwrap_or(WorkerFailed {
            worker: i,
            message: "stopped without a reported panic".to_string(),
            bug: true,
        })
    }

    /// Sends the chunk being filled to every shard.
    fn flush(&mut self) -> Result<(), WorkerFailed> {
        if self.chunk.index.is_empty() {
            return Ok(());
        }
        // Each shard holds at most QUEUE + 1 chunks, so beyond that the
        // oldest sent is usually free again and its buffers are reused.
        let oldest_free = self.sent.len() > QUEUE + 1
            && self.sent.front().is_some_and(|c| Arc::strong_count(c) == 1);
        let mut fresh = if oldest_free {
            self.sent.pop_front().and_then(Arc::into_inner).unwrap_or_default()
        } else {
            Chunk::default()
        };
        fresh.data.clear();
        fresh.index.clear();
        let full = Arc::new(std::mem::replace(&mut self.chunk, fresh));
        self.send(|| Msg::Packets(full.clone()))?;
        self.sent.push_back(full);
        // Bounded: a chunk still held by a slow shard is simply freed later.
        if self.sent.len() > 2 * QUEUE + 2 {
            self.sent.pop_front();
        }
        Ok(())
    }

    /// Merges what the shards wrote; `wait` blocks until every shard is done.
    fn collect(&mut self, wait: bool) {
        loop {
            let got = if wait { self.results.recv().ok() } else { self.results.try_recv().ok() };
            let Some(got) = got else {
                return;
            };
            self.take(got);
        }
    }

    /// Merges what one shard sent, and notes its clock.
    fn take(&mut self, (shard, records, now): Results) {
        self.passed[shard] = self.passed[shard].max(now);
        for r in records {
            self.merge(r);
        }
    }

    fn merge(&mut self, r: Record) {
        let Record::Call(c) = r else {
            self.out.push(r);
            return;
        };
        let key = c.serial;
        let (count, merged) = match self.partial.remove(&key) {
            None => (1, *c),
            Some((count, mut m)) => {
                m.streams.extend(c.streams);
                m.end_ns = m.end_ns.max(c.end_ns);
                m.held_until_ns = m.held_until_ns.max(c.held_until_ns);
                m.duration_ms = m.duration_ms.max(c.duration_ms);
                // Every shard reads every RTCP packet: the versions agree.
                m.rtcp_packets = m.rtcp_packets.max(c.rtcp_packets);
                m.t38_packets += c.t38_packets;
                // Rules on media act in the shard that owns the stream.
                for l in c.labels {
                    if !m.labels.contains(&l) {
                        m.labels.push(l);
                    }
                }
                m.record_payload |= c.record_payload;
                (count + 1, m)
            }
        };
        if count < self.n {
            self.partial.insert(key, (count, merged));
            return;
        }
        let mut m = merged;
        m.streams.sort_by_key(|s| (s.first_ns, s.src_port, s.dst_port, s.ssrc));
        m.dtmf_digits = crate::dtmf_digits(&m.streams);
        m.summarise_quality();
        self.out.push(Record::Call(Box::new(m)));
    }

    /// Takes the records finished so far.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Record> {
        self.collect(false);
        if let Some(hub) = &self.trackers {
            // A call not merged yet is held until after the slowest clock.
            let before = self.passed.iter().copied().min().unwrap_or(i64::MIN);
            crate::events::deliver_records(hub, &self.out, before);
        }
        self.out.drain(..)
    }

    /// Ends the input: every shard finishes, counters are merged. After a
    /// shard's failure the others are stopped and the failure returned; the
    /// records every shard had finished are still in [`Parallel::drain`].
    pub fn finish(&mut self) -> Result<(), WorkerFailed> {
        let dropped = self.capture_dropped;
        let sent = self.flush().and_then(|_| self.send(|| Msg::Finish(dropped)));
        if let Err(f) = &sent {
            // Release shards waiting at the gate for the failed one.
            self.gate.break_with(f.clone());
        }
        self.senders.clear();
        let mut shards: Vec<(Counters, Counters)> = Vec::new();
        let mut failed = sent.err();
        for (i, h) in self.handles.drain(..).enumerate() {
            match h.join() {
                Ok(Ok(c)) => shards.push(c),
                Ok(Err(f)) => failed = failed.or(Some(f)),
                Err(_) => {
                    failed = failed.or(Some(self.gate.failed().unwrap_or(WorkerFailed {
                        worker: i,
                        message: "thread ended abnormally".to_string(),
                        bug: true,
                    })))
                }
            }
        }
        // Shards released by a failure report it as theirs: name the first.
        if let Some(f) = self.gate.failed() {
            failed = Some(f);
        }
        self.collect(true);
        self.counters = self.merged_counters(&shards);
        if let Some(f) = failed {
            // Calls not every shard had finished are incomplete: left out.
            self.partial.clear();
            return Err(f);
        }
        // Calls a shard never wrote (it cannot happen while shards agree)
        // are still reported, merged as far as they got.
        let rest: Vec<CallRecord> = self.partial.drain().map(|(_, (_, c))| c).collect();
        for c in rest {
            self.out.push(Record::Call(Box::new(c)));
        }
        Ok(())
    }

    /// Counters, merged (complete after [`Parallel::finish`]).
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Counters while the run goes on: each shard's as of its last report
    /// (at most a second of capture time old), merged.
    pub fn counters_so_far(&self) -> Counters {
        let shards = match self.exchange.progress.lock() {
            Ok(p) => p.clone(),
            Err(p) => p.into_inner().clone(),
        };
        self.merged_counters(&shards)
    }

    /// What every shard counts alike, once, plus what each counted alone,
    /// and the reader's own packet count (whole even when a shard stopped
    /// early).
    fn merged_counters(&self, shards: &[(Counters, Counters)]) -> Counters {
        let mut c = shards.first().map(|(shared, _)| shared.clone()).unwrap_or_default();
        for (_, owned) in shards {
            c.add(owned);
        }
        if !self.reading {
            c.packets = self.packets;
            c.bytes = self.bytes;
        }
        for &(kind, n) in &self.reader_anomalies {
            c.count_anomalies(kind, n);
        }
        c
    }

    /// Counts `n` anomalies the reader found (the packets' times: no shard
    /// sees them), and tells the trackers, dated `ts_ns`.
    pub(crate) fn reader_anomalies(&mut self, kind: &'static str, n: u64, ts_ns: i64) {
        match self.reader_anomalies.iter_mut().find(|a| a.0 == kind) {
            Some(a) => a.1 += n,
            None => self.reader_anomalies.push((kind, n)),
        }
        if let Some(hub) = &self.trackers {
            let a = calliper_model::event::Anomaly { ts_ns, kind, count: n };
            crate::events::deliver_to(hub, &crate::Event::Anomaly(&a));
        }
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.n
    }
}
