//! Callpcaps: per-call capture files (what `--record` writes), written
//! while calls run. Each packet thread's [`Sink`] copies the frames of recorded calls into a batch and hands full
//! batches to one writer thread ([`writer`]), which appends them to each
//! call's pcap file under `DIR/YYYY-MM-DD/` ([`files`]). Memory is bounded
//! (a batch holds at most [`BATCH_BYTES`], at most [`QUEUE`] batches wait;
//! beyond that packets are dropped and counted, never waited for), the
//! directory is held to a byte budget and an age by deleting the oldest
//! recordings (counted), and a disk error stops that call's recording, not
//! the capture.

pub mod files;
mod writer;

use calliper_engine::{CallTag, PacketSink};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

/// Bytes of frames one batch holds before it is handed over.
pub const BATCH_BYTES: usize = 1 << 20;
/// Batches waiting for the writer at most (so at most about 16 MiB held).
pub const QUEUE: usize = 16;

/// Where and how much to record.
#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// The recordings' directory (created 0700 if missing).
    pub dir: PathBuf,
    /// Most bytes the directory's recordings may take: the oldest go first.
    pub max_bytes: u64,
    /// Recordings of days older than this many days go (None: kept).
    pub max_age_days: Option<u32>,
    /// Drop (and count) what the writer cannot take at once, rather than
    /// wait for it: live capture must not wait for the disk; a file may.
    pub lossy: bool,
}

/// What recording did, counted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Call files created.
    pub files: AtomicU64,
    /// Packets written.
    pub packets: AtomicU64,
    /// Bytes written (with pcap headers).
    pub bytes: AtomicU64,
    /// Packets dropped because the writer could not keep up.
    pub dropped: AtomicU64,
    /// Packets not written because their call's file could not be written.
    pub lost: AtomicU64,
    /// Write and open failures (a full disk, permissions).
    pub write_errors: AtomicU64,
    /// Packets of another link type than their call's first (a pcap file
    /// has one).
    pub other_link_type: AtomicU64,
    /// Packets of a SIP message or datagram carried in several packets
    /// (TCP, SCTP, WebSocket, IP fragments) of which the engine gave some up
    /// while holding them (its caps on held frames): the file alone does
    /// not hold the whole message.
    pub partial: AtomicU64,
    /// Packets of a call whose file was deleted (budget or age) while it
    /// was still being recorded: not written.
    pub deleted_unwritten: AtomicU64,
    /// Recordings deleted to keep to the budget or the age.
    pub deleted_files: AtomicU64,
    /// Their bytes.
    pub deleted_bytes: AtomicU64,
}

/// A span of a batch's bytes.
#[derive(Debug, Clone, Copy)]
struct Span(u32, u32);

/// One packet in a batch.
#[derive(Debug)]
pub(crate) struct Item {
    serial: u64,
    start_ns: i64,
    ts_ns: i64,
    link_type: u16,
    orig_len: u32,
    call_id: Span,
    frame: Span,
}

/// Packets and ended calls, handed over together.
#[derive(Debug, Default)]
struct Batch {
    data: Vec<u8>,
    items: Vec<Item>,
    ended: Vec<u64>,
    /// Make everything written durable (the end of a batch of the engine).
    flush: bool,
    /// The latest packet's time and its day, for the age limit.
    now_ns: i64,
    now_day: String,
}

impl Batch {
    fn bytes(&self, s: Span) -> &[u8] {
        &self.data[s.0 as usize..(s.0 + s.1) as usize]
    }
    fn text(&self, s: Span) -> &str {
        std::str::from_utf8(self.bytes(s)).unwrap_or("")
    }
    fn push(&mut self, b: &[u8]) -> Span {
        let at = self.data.len() as u32;
        self.data.extend_from_slice(b);
        Span(at, b.len() as u32)
    }
}

/// The recorder of a run: the writer thread and its counts.
pub struct Recorder {
    tx: Option<SyncSender<Batch>>,
    lossy: bool,
    counts: Arc<Counts>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    /// Starts the writer (the directory is created if missing).
    pub fn start(cfg: RecorderConfig) -> std::io::Result<Recorder> {
        files::private_dir(&cfg.dir)?;
        let lossy = cfg.lossy;
        let (tx, rx) = sync_channel(QUEUE);
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let thread = std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || writer::run(cfg, rx, c))?;
        Ok(Recorder { tx: Some(tx), lossy, counts, thread: Some(thread) })
    }

    /// Makes a sink per engine (shard) of a run. Every engine holding one
    /// must be gone before [`Recorder::finish`].
    pub fn factory(&self) -> calliper_engine::SinkFactory {
        let (tx, counts, lossy) = (self.tx.clone(), self.counts.clone(), self.lossy);
        calliper_engine::SinkFactory(Arc::new(move || {
            Box::new(Sink {
                tx: tx.clone(),
                counts: counts.clone(),
                batch: Batch::default(),
                last_ns: 0,
                lossy,
            })
        }))
    }

    /// The counts so far.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Waits for everything handed over to be written (every sink must
    /// have been dropped or flushed before).
    pub fn finish(mut self) -> Arc<Counts> {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.counts.clone()
    }
}

/// A packet thread's side: frames copied into a batch, handed over when
/// full or at the engine's batch end; dropped and counted when the writer
/// is behind (the capture never waits for the disk).
pub struct Sink {
    tx: Option<SyncSender<Batch>>,
    counts: Arc<Counts>,
    batch: Batch,
    /// The latest packet's time seen (the writer's clock for the age limit).
    last_ns: i64,
    /// See [`RecorderConfig::lossy`].
    lossy: bool,
}

impl Sink {
    fn hand_over(&mut self, flush: bool) {
        if self.batch.items.is_empty() && self.batch.ended.is_empty() && !flush {
            return;
        }
        let mut b = std::mem::take(&mut self.batch);
        b.flush = flush;
        b.now_ns = self.last_ns;
        b.now_day = files::day_dir(self.last_ns);
        let Some(tx) = &self.tx else { return };
        let sent = if self.lossy {
            tx.try_send(b)
        } else {
            tx.send(b).map_err(|e| TrySendError::Disconnected(e.0))
        };
        match sent {
            Ok(()) => {}
            Err(TrySendError::Full(b)) | Err(TrySendError::Disconnected(b)) => {
                self.counts.dropped.fetch_add(b.items.len() as u64, Relaxed);
                // Ended calls still matter: they are sent with the next batch.
                self.batch.ended = b.ended;
            }
        }
    }
}

impl PacketSink for Sink {
    fn packet(&mut self, call: CallTag<'_>, ts_ns: i64, link_type: u16, frame: &[u8], whole: bool) {
        if !whole {
            self.counts.partial.fetch_add(1, Relaxed);
        }
        let frame = &frame[..frame.len().min(files::SNAPLEN as usize)];
        let call_id = self.batch.push(call.call_id.as_bytes());
        let frame_span = self.batch.push(frame);
        self.last_ns = self.last_ns.max(ts_ns);
        self.batch.items.push(Item {
            serial: call.serial,
            start_ns: call.start_ns,
            ts_ns,
            link_type,
            orig_len: frame.len() as u32,
            call_id,
            frame: frame_span,
        });
        if self.batch.data.len() >= BATCH_BYTES {
            self.hand_over(false);
        }
    }

    fn call_ended(&mut self, serial: u64) {
        self.batch.ended.push(serial);
    }

    fn flush(&mut self) {
        self.hand_over(true);
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.flush();
    }
}
