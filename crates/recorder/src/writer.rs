//! The writer thread: batches of packets from the packet threads' sinks,
//! appended to each call's file. Files stay open for the calls being
//! written (at most [`MAX_OPEN`]; the least recently written is closed to
//! make room and reopened for appending later). After each batch the
//! directory's total is held to the budget by deleting the oldest
//! recordings, and whole days older than the age limit go.

use crate::files;
use crate::{Batch, Counts, RecordConfig};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

/// Most call files open at once.
pub const MAX_OPEN: usize = 256;

/// A call's file.
struct Open {
    file: std::io::BufWriter<std::fs::File>,
    /// Batch number of its last write (the least recent is closed first).
    used: u64,
}

/// Calls remembered at most: beyond, those without an open file are
/// forgotten (their file's name and link type are found again).
const MAX_CALLS: usize = 1 << 20;

/// What the thread knows of a recorded call.
struct Call {
    path: PathBuf,
    link_type: Option<u16>,
    /// A write failed: the call's later packets are counted, not written.
    broken: bool,
}

/// The directory's recordings, oldest first, with their sizes.
struct Stock {
    files: std::collections::BTreeMap<PathBuf, u64>,
    bytes: u64,
}

impl Stock {
    /// Every `.pcap` under `DIR/YYYY-MM-DD/` (day directories only: nothing
    /// else is counted or ever deleted).
    fn scan(dir: &std::path::Path) -> Stock {
        let mut s = Stock {
            files: Default::default(),
            bytes: 0,
        };
        let Ok(days) = std::fs::read_dir(dir) else {
            return s;
        };
        for day in days.flatten() {
            let name = day.file_name().to_string_lossy().to_string();
            if !is_day(&name) || !day.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            for f in std::fs::read_dir(day.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let is_pcap = f.file_name().to_string_lossy().ends_with(".pcap");
                if let (true, Ok(m)) = (is_pcap, f.metadata()) {
                    if m.is_file() {
                        s.bytes += m.len();
                        s.files.insert(f.path(), m.len());
                    }
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
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

pub(crate) fn run(cfg: RecordConfig, rx: Receiver<Batch>, counts: Arc<Counts>) {
    let mut calls: HashMap<u64, Call> = HashMap::new();
    let mut open: HashMap<u64, Open> = HashMap::new();
    let mut stock = Stock::scan(&cfg.dir);
    let mut buf = Vec::with_capacity(1 << 20);
    let mut batch_no = 0u64;
    let mut oldest_day_kept = String::new();
    while let Ok(batch) = rx.recv() {
        batch_no += 1;
        for item in &batch.items {
            let call_id = batch.text(item.call_id);
            let frame = batch.bytes(item.frame);
            let call = calls.entry(item.serial).or_insert_with(|| Call {
                path: cfg
                    .dir
                    .join(files::relative_path(item.start_ns, item.serial, call_id)),
                link_type: None,
                broken: false,
            });
            if call.broken {
                counts.lost.fetch_add(1, Relaxed);
                continue;
            }
            if !open.contains_key(&item.serial) {
                if open.len() >= MAX_OPEN {
                    close_least_recent(&mut open);
                }
                match files::open(&call.path, item.link_type) {
                    Ok((f, new, link)) => {
                        call.link_type = Some(link);
                        if new {
                            counts.files.fetch_add(1, Relaxed);
                            counts.bytes.fetch_add(24, Relaxed);
                            stock.files.insert(call.path.clone(), 24);
                            stock.bytes += 24;
                        }
                        open.insert(
                            item.serial,
                            Open {
                                file: std::io::BufWriter::with_capacity(16 << 10, f),
                                used: batch_no,
                            },
                        );
                    }
                    Err(e) => {
                        failed(&counts, &call.path, &e);
                        call.broken = true;
                        counts.lost.fetch_add(1, Relaxed);
                        continue;
                    }
                }
            }
            if call.link_type != Some(item.link_type) {
                // A pcap file has one link type: the call's first packet's.
                counts.other_link_type.fetch_add(1, Relaxed);
                continue;
            }
            let Some(o) = open.get_mut(&item.serial) else {
                continue;
            };
            o.used = batch_no;
            buf.clear();
            files::record(&mut buf, item.ts_ns, frame, item.orig_len);
            match o.file.write_all(&buf) {
                Ok(()) => {
                    counts.packets.fetch_add(1, Relaxed);
                    counts.bytes.fetch_add(buf.len() as u64, Relaxed);
                    stock.bytes += buf.len() as u64;
                    *stock.files.entry(call.path.clone()).or_default() += buf.len() as u64;
                }
                Err(e) => {
                    failed(&counts, &call.path, &e);
                    call.broken = true;
                    counts.lost.fetch_add(1, Relaxed);
                    open.remove(&item.serial);
                }
            }
        }
        for serial in &batch.ended {
            if let Some(mut o) = open.remove(serial) {
                let _ = o.file.flush();
            }
            calls.remove(serial);
        }
        if calls.len() > MAX_CALLS {
            calls.retain(|s, c| open.contains_key(s) || c.broken);
        }
        let today = batch.now_day.clone();
        if cfg.max_age_days.is_some() && batch.now_ns > 0 && today != oldest_day_kept {
            oldest_day_kept = today;
            expire_days(
                &cfg,
                &mut stock,
                &mut open,
                &mut calls,
                &counts,
                batch.now_ns,
            );
        }
        if stock.bytes > cfg.max_bytes {
            hold_budget(&cfg, &mut stock, &mut open, &mut calls, &counts);
        }
        if batch.flush {
            for o in open.values_mut() {
                let _ = o.file.flush();
            }
        }
    }
    for (_, mut o) in open {
        let _ = o.file.flush();
    }
}

fn failed(counts: &Counts, path: &std::path::Path, e: &std::io::Error) {
    // Said once: a full disk would otherwise say it for every call.
    if counts.write_errors.fetch_add(1, Relaxed) == 0 {
        eprintln!(
            "calliper: recording: cannot write {}: {e} (capture goes on; later failures are counted as record_write_errors)",
            path.display()
        );
    }
}

fn close_least_recent(open: &mut HashMap<u64, Open>) {
    if let Some((&serial, _)) = open.iter().min_by_key(|(_, o)| o.used) {
        if let Some(mut o) = open.remove(&serial) {
            let _ = o.file.flush();
        }
    }
}

/// Deletes the oldest recordings until the directory holds 90 % of the
/// budget (so deletion does not run at every batch).
fn hold_budget(
    cfg: &RecordConfig,
    stock: &mut Stock,
    open: &mut HashMap<u64, Open>,
    calls: &mut HashMap<u64, Call>,
    counts: &Counts,
) {
    let target = cfg.max_bytes / 10 * 9;
    while stock.bytes > target {
        let Some((path, size)) = stock.files.pop_first() else {
            break;
        };
        delete(&path, size, stock, open, calls, counts);
    }
}

/// Deletes the day directories' recordings older than the age limit.
fn expire_days(
    cfg: &RecordConfig,
    stock: &mut Stock,
    open: &mut HashMap<u64, Open>,
    calls: &mut HashMap<u64, Call>,
    counts: &Counts,
    now_ns: i64,
) {
    let Some(days) = cfg.max_age_days else {
        return;
    };
    let first_kept = files::day_dir(now_ns.saturating_sub(i64::from(days) * 86_400_000_000_000));
    let old: Vec<(PathBuf, u64)> = stock
        .files
        .iter()
        .filter(|(p, _)| {
            let day = p
                .parent()
                .and_then(|d| d.file_name())
                .map(|d| d.to_string_lossy().to_string());
            day.is_some_and(|d| d < first_kept)
        })
        .map(|(p, s)| (p.clone(), *s))
        .collect();
    for (path, size) in old {
        stock.files.remove(&path);
        delete(&path, size, stock, open, calls, counts);
    }
}

fn delete(
    path: &std::path::Path,
    size: u64,
    stock: &mut Stock,
    open: &mut HashMap<u64, Open>,
    calls: &mut HashMap<u64, Call>,
    counts: &Counts,
) {
    // A call still being written stops being recorded: its file is gone.
    let writing: Vec<u64> = calls
        .iter()
        .filter(|(_, c)| c.path == path)
        .map(|(s, _)| *s)
        .collect();
    for s in writing {
        open.remove(&s);
        if let Some(c) = calls.get_mut(&s) {
            c.broken = true;
        }
    }
    stock.bytes = stock.bytes.saturating_sub(size);
    if std::fs::remove_file(path).is_ok() {
        counts.deleted_files.fetch_add(1, Relaxed);
        counts.deleted_bytes.fetch_add(size, Relaxed);
        if let Some(day) = path.parent() {
            // Empty day directories go too (fails harmlessly when not empty).
            let _ = std::fs::remove_dir(day);
        }
    }
}
