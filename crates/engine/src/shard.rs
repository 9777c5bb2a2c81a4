//! One shard of a sharded run ([`crate::parallel`]): its engine, its part
//! in the batch-end exchange, and the two ways packets reach it — chunks
//! the caller's thread copied ([`pushed`]), or capture files the shard
//! reads itself ([`reading`]), so that no packet crosses between cores.

use crate::lru::Idx;
use crate::parallel::{Chunk, Exchange, Msg, Results, PROGRESS_NS};
use crate::shared::SharedCaps;
use crate::time_guard::TimeGuard;
use crate::workers::{Meeting, WorkerFailed};
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
        // Tagged with the batch end and the packets so far: shards that read
        // the files themselves and saw different packets fail here instead
        // of waiting forever or adding up different counts.
        x.gate.meet(Meeting::BatchEnd(now, self.e.counters.packets), i)?;
        self.others.clear();
        if let Ok(slots) = x.slots.lock() {
            for (_, s) in slots.iter().enumerate().filter(|(j, _)| *j != i) {
                self.others.extend_from_slice(s);
            }
        }
        x.gate.wait()?;
        self.e.advance_to(now);
        self.e.end_batch(&self.others);
        if self.e.signalling_events() {
            x.release_due.store(self.e.rows_due(), Ordering::Relaxed);
        }
        x.gate.wait()?;
        // One thread releases a row before it reads another packet. A shard
        // let go first could deliver a stream report of the next batch
        // before the release, which time stepping back makes count in the
        // row (made before the release's time): so, when a row goes, every
        // shard waits for it (about once an interval).
        let due = x.release_due.load(Ordering::Relaxed);
        self.e.release_rows();
        if due {
            x.gate.wait()?;
        }
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
        let packets = self.e.counters.packets;
        let all_finished = self.exchange.gate.meet(Meeting::Finish(packets), self.index);
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
const POSITION_EVERY: u32 = 64;

/// A shard that reads the capture files itself: every shard reads every
/// packet from its own buffer, judges its time and finds batch ends as one
/// engine would, and routes it ([`Router`]) — so media another shard owns
/// costs it a read, a skim of its headers and a hash, and nothing crosses
/// between cores but the batch-end exchange and the records. The first
/// shard reports the reading (position, messages, damage) for the run; a
/// file a shard cannot open stops the run, with the reason.
pub(crate) fn reading(
    mut s: Shard<'_>,
    n: usize,
    cfg: &Config,
    paths: &[(PathBuf, u64)],
) -> Result<(Counters, Counters), WorkerFailed> {
    let x = s.exchange;
    let first = s.index == 0;
    let mut say = |m: &str| {
        if let (true, Ok(mut said)) = (first, x.messages.lock()) {
            said.push(m.to_string());
        }
    };
    let mut inputs = calliper_capture::files::Inputs::reopen(paths);
    let (mut time, mut batcher) = (TimeGuard::default(), Batcher::default());
    let router = Router::new(cfg, n);
    let mut readings = 0u32;
    while let Some(b) = inputs.next_batch(READ_BATCH, &mut say) {
        let mut raw = [RawPacket::default(); READ_BATCH];
        for (r, p) in raw.iter_mut().zip(b.iter()) {
            let routing = router.routing(s.index, p.link_type, p.data);
            *r = RawPacket { routing, ..p.into() };
        }
        let raw = &mut raw[..b.len()];
        // Judged and dated as one engine judges them: a reading at a time.
        s.e.count_time_anomalies(time.admit_packets(raw));
        // Packets another shard owns stay in place, marked: they move the
        // clock in capture order, as in one engine.
        let mut start = 0;
        if !batcher.take_all(raw) {
            for j in 0..raw.len() {
                if batcher.boundary(raw[j].ts_ns) {
                    s.e.packets(&raw[start..j]);
                    start = j;
                    s.end_batch(raw[j].ts_ns, 0)?;
                }
            }
        }
        s.e.packets(&raw[start..]);
        readings += 1;
        if first && readings.is_multiple_of(POSITION_EVERY) {
            x.position.store(inputs.position(), Ordering::Relaxed);
        }
    }
    if let Some(why) = inputs.open_failure() {
        // Another shard may have opened it: the run cannot go on alike.
        let failed = WorkerFailed { worker: s.index, message: why.to_string(), bug: false };
        x.gate.break_with(failed.clone());
        return Err(failed);
    }
    if first && !inputs.clean() {
        x.clean.store(false, Ordering::Relaxed);
    }
    s.finish(0)
}
