//! One shard of a sharded run ([`crate::parallel`]): its engine, its part
//! in the batch-end exchange, and the two ways packets reach it — chunks
//! the caller's thread copied ([`pushed`]), or capture files the shard
//! reads itself ([`reading`]), so that no packet crosses between cores.

use crate::lru::Idx;
use crate::parallel::{Chunk, Exchange, Msg, Results, PROGRESS_NS};
use crate::shared::SharedCaps;
use crate::time_guard::TimeGuard;
use crate::workers::WorkerFailed;
use crate::{Batcher, Config, Counters, Engine, RawPacket, Router, Routing, LOOKAHEAD, READ_BATCH};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

/// A shard's engine and what it keeps between batch ends.
pub(crate) struct Shard<'a> {
    index: usize,
    e: Engine,
    exchange: &'a Exchange,
    results: Sender<Results>,
    /// The other shards' touches of the batch that ends.
    others: Vec<(i64, Idx)>,
    /// Capture time of the last report of counters.
    reported_ns: i64,
}

impl<'a> Shard<'a> {
    pub(crate) fn new(
        (index, n): (usize, usize),
        cfg: Config,
        caps: Arc<SharedCaps>,
        exchange: &'a Exchange,
        results: Sender<Results>,
    ) -> Shard<'a> {
        let mut e = Engine::new(cfg);
        e.set_shard(index as u64, n as u64, caps);
        if let Some(hub) = &exchange.trackers {
            e.set_trackers(hub.clone(), index == 0, false);
        }
        Shard { index, e, exchange, results, others: Vec::new(), reported_ns: i64::MIN }
    }

    /// Sends what the engine finished, and its clock (sent even when
    /// nothing is finished: the clock tells the merger how far it is).
    fn send(&mut self) {
        let records = self.e.drain().collect();
        let _ = self.results.send((self.index, records, self.e.now));
    }

    /// Ends a batch at `now` with every other shard: each publishes its
    /// media touches, applies everyone's, and expires; rows go once every
    /// shard's expiry has reported its streams.
    fn end_batch(&mut self, now: i64, dropped: u64) -> Result<(), WorkerFailed> {
        let (i, x) = (self.index, self.exchange);
        self.e.set_capture_dropped(dropped);
        if let Ok(mut slots) = x.slots.lock() {
            slots[i].clear();
            slots[i].extend_from_slice(self.e.batch_touches());
        }
        x.gate.wait()?;
        self.others.clear();
        if let Ok(slots) = x.slots.lock() {
            for (_, s) in slots.iter().enumerate().filter(|(j, _)| *j != i) {
                self.others.extend_from_slice(s);
            }
        }
        x.gate.wait()?;
        self.e.advance_to(now);
        self.e.end_batch(&self.others);
        x.gate.wait()?;
        self.e.release_rows();
        self.send();
        if now.saturating_sub(self.reported_ns) >= PROGRESS_NS {
            self.reported_ns = now;
            let (shared, owned) = self.e.shard_counters();
            if let Ok(mut p) = x.progress.lock() {
                p[i] = (shared.clone(), owned.clone());
            }
        }
        Ok(())
    }

    /// Ends the input: open calls are finished; the last rows go once every
    /// shard has reported its streams' ends.
    fn finish(mut self, dropped: u64) -> Result<(Counters, Counters), WorkerFailed> {
        self.e.set_capture_dropped(dropped);
        self.e.finish_open();
        let all_finished = self.exchange.gate.wait();
        self.e.finish_rows();
        self.send();
        all_finished?;
        let (shared, owned) = self.e.shard_counters();
        Ok((shared.clone(), owned.clone()))
    }
}

/// A shard fed chunks by the caller's thread (live rings, HEP, pipes).
pub(crate) fn pushed(
    mut s: Shard<'_>,
    rx: Receiver<Msg>,
) -> Result<(Counters, Counters), WorkerFailed> {
    let mut dropped = 0;
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Packets(c) => {
                feed_chunk(&mut s.e, s.index, &c);
                drop(c);
                s.send();
            }
            Msg::EndBatch(now, total) => s.end_batch(now, total)?,
            Msg::Finish(total) => {
                dropped = total;
                break;
            }
        }
    }
    s.finish(dropped)
}

/// Gives shard `i` every packet of a chunk, in groups of [`LOOKAHEAD`], in
/// capture order; those routed to other shards only move its clock.
fn feed_chunk(e: &mut Engine, i: usize, c: &Chunk) {
    let mut raw = [RawPacket::default(); LOOKAHEAD];
    let mut n = 0;
    for p in &c.index {
        let routing = p.media.map_or(Routing::Unknown, |m| m.for_shard(i));
        raw[n] = RawPacket {
            ts_ns: p.ts_ns,
            link_type: p.link_type,
            data: &c.data[p.start as usize..(p.start + p.len) as usize],
            routing,
        };
        n += 1;
        if n == LOOKAHEAD {
            e.packets(&raw);
            n = 0;
        }
    }
    if n > 0 {
        e.packets(&raw[..n]);
    }
}

/// Readings between two reports of the first shard's position (finished
/// records go at batch ends, where the calls expire).
const POSITION_EVERY: u32 = 16;

/// The most packets a shard reads at a time: [`READ_BATCH`] for each shard
/// (up to four), so that after skipping the others' media it still hands
/// the engine about a prefetch group at a time. Smaller groups start the
/// lookahead cold more often.
const MOST_READ: usize = READ_BATCH * 4;

/// A shard that reads the capture files itself: every shard reads every
/// packet from its own buffer, judges its time and finds batch ends as one
/// engine would, and routes it ([`Router`]) — so media another shard owns
/// costs it a read, a short decode and a hash, and nothing crosses between
/// cores but the batch-end exchange and the records. The first shard
/// reports the reading (position, messages, damage) for the run.
pub(crate) fn reading(
    mut s: Shard<'_>,
    n: usize,
    cfg: &Config,
    paths: &[PathBuf],
) -> Result<(Counters, Counters), WorkerFailed> {
    let x = s.exchange;
    let first = s.index == 0;
    let mut say = |m: &str| {
        if let (true, Ok(mut said)) = (first, x.messages.lock()) {
            said.push(m.to_string());
        }
    };
    let mut inputs = match calliper_capture::files::Inputs::open(paths) {
        Ok(i) => i,
        Err(e) => {
            // Opened once already by the caller: it changed since.
            say(&format!("calliper: {e}"));
            x.clean.store(false, Ordering::Relaxed);
            return s.finish(0);
        }
    };
    let mut way = Reading {
        time: TimeGuard::default(),
        batcher: Batcher::default(),
        router: Router::new(cfg, n),
    };
    let per_read = READ_BATCH * n.min(MOST_READ / READ_BATCH);
    let mut readings = 0u32;
    while let Some(b) = inputs.next_batch(per_read, &mut say) {
        let mut raw = [RawPacket::default(); MOST_READ];
        for (r, p) in raw.iter_mut().zip(b.iter()) {
            *r = p.into();
        }
        way.analyse(&mut s, &mut raw[..b.len()])?;
        readings += 1;
        if first && readings.is_multiple_of(POSITION_EVERY) {
            x.position.store(inputs.position(), Ordering::Relaxed);
        }
    }
    if first && !inputs.clean() {
        x.clean.store(false, Ordering::Relaxed);
    }
    s.finish(0)
}

/// What a reading shard keeps between readings: the same time guard,
/// batch ends and routing as one engine's reader.
struct Reading {
    time: TimeGuard,
    batcher: Batcher,
    router: Router,
}

impl Reading {
    /// Judges a reading's times, ends batches where one engine would, and
    /// hands the engine every packet but the media other shards own (which
    /// only moves its clock and is counted, as every shard counts packets).
    fn analyse(
        &mut self,
        s: &mut Shard<'_>,
        raw: &mut [RawPacket<'_>],
    ) -> Result<(), WorkerFailed> {
        // Judged as one engine judges them: READ_BATCH at a time (a longer
        // reading splits where those readings would have ended).
        for part in raw.chunks_mut(READ_BATCH) {
            if s.e.count_time_anomalies(self.time.admit_packets(part)) {
                // Dated by the reading's first packet, as one engine dates them.
                s.e.packet_anomaly_events(part[0].ts_ns);
            }
        }
        let mut kept = 0;
        for j in 0..raw.len() {
            let p = raw[j];
            if self.batcher.boundary(p.ts_ns) {
                s.e.packets(&raw[..kept]);
                kept = 0;
                s.end_batch(p.ts_ns, 0)?;
            }
            let routing = self.router.routing(s.index, p.link_type, p.data);
            if routing == Routing::Skipped {
                s.e.now = s.e.now.max(p.ts_ns);
                s.e.counters.packets += 1;
                s.e.counters.bytes += p.data.len() as u64;
                continue;
            }
            raw[kept] = RawPacket { routing, ..p };
            kept += 1;
        }
        s.e.packets(&raw[..kept]);
        Ok(())
    }
}
