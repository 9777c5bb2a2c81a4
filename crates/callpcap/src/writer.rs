//! The writer thread: batches of packets from the packet threads' sinks,
//! gathered per call in memory and appended to each call's file in large
//! writes (a file is opened, written and closed each time: thousands of
//! concurrent calls need no file handles of their own). A call's packets
//! are written when it has [`CALL_BUFFER`] of them, when it ends, when its
//! oldest has waited [`HOLD_NS`] of capture time, or when all calls hold
//! more than [`MAX_BUFFERED`] together (the largest first). After each
//! batch the directory's total is held to the budget by deleting the
//! oldest recordings, and whole days older than the age limit go.

use crate::files;
use crate::{Batch, Counts, RecorderConfig};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

/// A call's packets are written before more than this many bytes wait.
pub const CALL_BUFFER: usize = 64 << 10;
/// Most bytes waiting over all calls.
pub const MAX_BUFFERED: usize = 32 << 20;
/// Longest a packet waits to be written, in capture time (live, that is
/// how late a file may be after the packet).
pub const HOLD_NS: i64 = 2_000_000_000;
/// Calls remembered at most: beyond, those with nothing waiting are
/// forgotten (a later packet of one starts a file of its own).
const MAX_CALLS: usize = 100_000;
/// Names tried for a call's file when the plain one is taken.
const MAX_VARIANTS: u32 = 16;
/// A file's share of the budget: its length rounded up to whole blocks (so
/// a flood of tiny files counts what it takes on disk).
const BLOCK: u64 = 4096;

fn on_disk(len: u64) -> u64 {
    len.div_ceil(BLOCK) * BLOCK
}

/// What the thread knows of a recorded call.
struct Call {
    start_ns: i64,
    call_id: Box<str>,
    /// Its file, once this run created it (only such files are added to).
    path: Option<PathBuf>,
    /// Its file's length.
    len: u64,
    /// The link type of its packets (a pcap file has one).
    link_type: Option<u16>,
    /// Packet records waiting to be written, and the first one's time.
    waiting: Vec<u8>,
    since_ns: i64,
    /// Why the call is no longer recorded: its later packets are counted
    /// (as `lost` or `deleted_unwritten`), not written.
    stopped: Option<Stopped>,
}

/// Why a call's recording stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// Its file could not be written.
    WriteError,
    /// Its file was deleted for the budget or age.
    Deleted,
}

/// The directory's recordings, oldest first, with their sizes.
struct Stock {
    files: std::collections::BTreeMap<PathBuf, u64>,
    bytes: u64,
}

impl Stock {
    /// Every recording under `DIR/YYYY-MM-DD/`: day directories only, and
    /// in them only files named as Calliper names recordings
    /// (`callpcap_paths::is_recording_name`): nothing else is counted or ever
    /// deleted, an operator's own `.pcap` there included.
    fn scan(dir: &std::path::Path) -> Stock {
        let mut s = Stock { files: Default::default(), bytes: 0 };
        let Ok(days) = std::fs::read_dir(dir) else {
            return s;
        };
        for day in days.flatten() {
            let name = day.file_name().to_string_lossy().to_string();
            if !is_day(&name) || !day.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            for f in std::fs::read_dir(day.path()).into_iter().flatten().flatten() {
                let is_pcap = calliper_store::callpcap_paths::is_recording_name(
                    &f.file_name().to_string_lossy(),
                );
                // Neither followed nor counted: a link is none of ours.
                let plain = f.file_type().is_ok_and(|t| t.is_file());
                if let (true, true, Ok(m)) = (is_pcap, plain, f.metadata()) {
                    s.bytes += on_disk(m.len());
                    s.files.insert(f.path(), on_disk(m.len()));
                }
            }
        }
        s
    }
}

/// `YYYY-MM-DD`.
fn is_day(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter().enumerate().all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// The writer's state.
struct Writer {
    cfg: RecorderConfig,
    counts: Arc<Counts>,
    calls: HashMap<u64, Call>,
    /// Calls that started waiting, in that order (by capture time).
    waiting_since: VecDeque<(i64, u64)>,
    buffered: usize,
    stock: Stock,
    /// The call writing each file this run created.
    owners: HashMap<PathBuf, u64>,
    /// When this run started (wall clock): its own files are never aged out.
    started: std::time::SystemTime,
}

pub(crate) fn run(cfg: RecorderConfig, rx: Receiver<Batch>, counts: Arc<Counts>) {
    let mut w = Writer {
        stock: Stock::scan(&cfg.dir),
        cfg,
        counts,
        calls: HashMap::new(),
        waiting_since: VecDeque::new(),
        buffered: 0,
        owners: HashMap::new(),
        started: std::time::SystemTime::now(),
    };
    let mut oldest_day_kept = String::new();
    while let Ok(batch) = rx.recv() {
        for item in &batch.items {
            w.packet(&batch, item);
        }
        for serial in &batch.ended {
            w.write_out(*serial);
            w.forget(*serial);
        }
        // Packets that waited long enough, then the largest while too much waits.
        while let Some(&(since, serial)) = w.waiting_since.front() {
            if since > batch.now_ns.saturating_sub(HOLD_NS) {
                break;
            }
            w.waiting_since.pop_front();
            if w.calls.get(&serial).is_some_and(|c| c.since_ns == since) {
                w.write_out(serial);
            }
        }
        if w.buffered > MAX_BUFFERED {
            let mut sizes: Vec<(usize, u64)> =
                w.calls.iter().map(|(s, c)| (c.waiting.len(), *s)).collect();
            sizes.sort_unstable_by(|a, b| b.cmp(a));
            for (_, serial) in sizes {
                if w.buffered <= MAX_BUFFERED / 2 {
                    break;
                }
                w.write_out(serial);
            }
        }
        if w.calls.len() > MAX_CALLS {
            let idle: Vec<u64> =
                w.calls.iter().filter(|(_, c)| c.waiting.is_empty()).map(|(s, _)| *s).collect();
            for s in idle {
                w.forget(s);
            }
        }
        let today = batch.now_day.clone();
        if w.cfg.max_age_days.is_some() && batch.now_ns > 0 && today != oldest_day_kept {
            oldest_day_kept = today;
            w.expire_days(batch.now_ns);
        }
        if w.stock.bytes > w.cfg.max_bytes {
            w.hold_budget();
        }
    }
    let serials: Vec<u64> = w.calls.keys().copied().collect();
    for s in serials {
        w.write_out(s);
    }
    if w.stock.bytes > w.cfg.max_bytes {
        w.hold_budget();
    }
}

impl Writer {
    fn packet(&mut self, batch: &Batch, item: &crate::Item) {
        let call = self.calls.entry(item.serial).or_insert_with(|| Call {
            start_ns: item.start_ns,
            call_id: batch.text(item.call_id).into(),
            path: None,
            len: 0,
            link_type: None,
            waiting: Vec::new(),
            since_ns: 0,
            stopped: None,
        });
        if let Some(why) = call.stopped {
            let counter = match why {
                Stopped::WriteError => &self.counts.lost,
                Stopped::Deleted => &self.counts.deleted_unwritten,
            };
            counter.fetch_add(1, Relaxed);
            return;
        }
        if call.link_type.is_some_and(|l| l != item.link_type) {
            // A pcap file has one link type: the call's first packet's.
            self.counts.other_link_type.fetch_add(1, Relaxed);
            return;
        }
        call.link_type = Some(item.link_type);
        let frame = batch.bytes(item.frame);
        if !call.waiting.is_empty() && call.waiting.len() + 16 + frame.len() > CALL_BUFFER {
            // Written before it would outgrow its buffer (which then never doubles).
            self.write_out(item.serial);
        }
        let Some(call) = self.calls.get_mut(&item.serial) else {
            return;
        };
        if call.waiting.is_empty() {
            call.since_ns = item.ts_ns;
            self.waiting_since.push_back((item.ts_ns, item.serial));
        }
        let before = call.waiting.len();
        files::record(&mut call.waiting, item.ts_ns, frame, item.orig_len);
        self.buffered += call.waiting.len() - before;
        self.counts.packets.fetch_add(1, Relaxed);
    }

    /// Forgets a call (its file stays).
    fn forget(&mut self, serial: u64) {
        if let Some(c) = self.calls.remove(&serial) {
            self.buffered -= c.waiting.len();
            if let Some(p) = c.path {
                self.owners.remove(&p);
            }
        }
    }

    /// Appends what waits for `serial` to its file, creating the file (with
    /// its header) the first time under a name nothing holds yet.
    fn write_out(&mut self, serial: u64) {
        let Some(call) = self.calls.get_mut(&serial) else {
            return;
        };
        if call.waiting.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut call.waiting);
        self.buffered -= waiting.len();
        let opened = match &call.path {
            Some(p) => files::append(p).map(|f| (f, p.clone(), false)),
            None => {
                let link = call.link_type.unwrap_or(1);
                let mut made = Err(std::io::Error::other("every name for it is taken"));
                for variant in 0..MAX_VARIANTS {
                    let p = self.cfg.dir.join(files::relative_path(
                        call.start_ns,
                        serial,
                        &call.call_id,
                        variant,
                    ));
                    match files::create(&p, link) {
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                        r => {
                            made = r.map(|f| (f, p, true));
                            break;
                        }
                    }
                }
                made
            }
        };
        let result = opened.and_then(|(mut f, path, new)| {
            if new {
                call.path = Some(path.clone());
                call.len = 24;
                self.owners.insert(path.clone(), serial);
                self.counts.files.fetch_add(1, Relaxed);
                self.counts.bytes.fetch_add(24, Relaxed);
                self.stock.files.insert(path.clone(), on_disk(24));
                self.stock.bytes += on_disk(24);
            }
            match f.write_all(&waiting) {
                Ok(()) => Ok(path),
                Err(e) => {
                    // Cut back to the last whole record: no half packet on disk.
                    let _ = f.set_len(call.len);
                    Err(e)
                }
            }
        });
        match result {
            Ok(path) => {
                let before = on_disk(call.len);
                call.len += waiting.len() as u64;
                self.counts.bytes.fetch_add(waiting.len() as u64, Relaxed);
                let after = on_disk(call.len);
                self.stock.bytes = self.stock.bytes + after - before;
                self.stock.files.insert(path, after);
            }
            Err(e) => {
                // The file (if made) was cut back to what the stock counts.
                let path = call.path.clone().unwrap_or_else(|| self.cfg.dir.clone());
                call.stopped = Some(Stopped::WriteError);
                let n = count_records(&waiting);
                self.counts.packets.fetch_sub(n, Relaxed);
                self.counts.lost.fetch_add(n, Relaxed);
                failed(&self.counts, &path, &e);
            }
        }
    }

    /// Deletes the oldest recordings until the directory holds 90 % of the
    /// budget (so deletion does not run at every batch).
    fn hold_budget(&mut self) {
        let target = self.cfg.max_bytes / 10 * 9;
        while self.stock.bytes > target {
            let Some((path, size)) = self.stock.files.pop_first() else {
                break;
            };
            self.delete(&path, size);
        }
    }

    /// Deletes the recordings of days older than the age limit.
    fn expire_days(&mut self, now_ns: i64) {
        let Some(days) = self.cfg.max_age_days else {
            return;
        };
        // A packet dated ahead of the wall clock does not age everything.
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(i64::MAX, |d| d.as_nanos() as i64);
        let now_ns = now_ns.min(wall.saturating_add(86_400_000_000_000));
        let first_kept =
            files::day_dir(now_ns.saturating_sub(i64::from(days) * 86_400_000_000_000));
        let started = self.started;
        let old: Vec<(PathBuf, u64)> = self
            .stock
            .files
            .iter()
            .filter(|(p, _)| {
                let day = p.parent().and_then(|d| d.file_name());
                day.is_some_and(|d| *d.to_string_lossy() < *first_kept.as_str())
            })
            // This run's own files are not aged out (an old capture analysed today).
            .filter(|(p, _)| {
                std::fs::symlink_metadata(p).and_then(|m| m.modified()).is_ok_and(|m| m < started)
            })
            .map(|(p, s)| (p.clone(), *s))
            .collect();
        for (path, size) in old {
            self.stock.files.remove(&path);
            self.delete(&path, size);
        }
    }

    fn delete(&mut self, path: &Path, size: u64) {
        // A call still being written stops being recorded: its file is gone.
        if let Some(serial) = self.owners.remove(path) {
            if let Some(c) = self.calls.get_mut(&serial) {
                c.stopped = Some(Stopped::Deleted);
                self.buffered -= c.waiting.len();
                let n = count_records(&c.waiting);
                self.counts.packets.fetch_sub(n, Relaxed);
                self.counts.deleted_unwritten.fetch_add(n, Relaxed);
                c.waiting = Vec::new();
            }
        }
        self.stock.bytes = self.stock.bytes.saturating_sub(size);
        let len = std::fs::symlink_metadata(path).map_or(0, |m| m.len());
        if std::fs::remove_file(path).is_ok() {
            self.counts.deleted_files.fetch_add(1, Relaxed);
            self.counts.deleted_bytes.fetch_add(len, Relaxed);
            if let Some(day) = path.parent() {
                // Empty day directories go too (fails harmlessly when not empty).
                let _ = std::fs::remove_dir(day);
            }
        }
    }
}

/// Packet records in a run of them.
fn count_records(mut b: &[u8]) -> u64 {
    let mut n = 0;
    while b.len() >= 16 {
        let caplen = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
        b = &b[(16 + caplen).min(b.len())..];
        n += 1;
    }
    n
}

fn failed(counts: &Counts, path: &Path, e: &std::io::Error) {
    // Said once: a full disk would otherwise say it for every call.
    if counts.write_errors.fetch_add(1, Relaxed) == 0 {
        eprintln!(
            "calliper: recording: cannot write {}: {e} (capture goes on; later failures are counted in the summary's recording.write_errors)",
            path.display()
        );
    }
}
