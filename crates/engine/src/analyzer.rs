//! The choice between one engine and shards: the same records either way.

use crate::parallel::Parallel;
use crate::workers::{guard, WorkerFailed};
use crate::{Config, Counters, Engine, RawPacket, Record, TrackerHub};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// One engine, or shards on several threads: the same records either way.
pub enum Analyzer {
    /// One engine on the caller's thread.
    Single(Box<Engine>),
    /// Shards on their own threads.
    Sharded(Box<Parallel>),
}

impl Analyzer {
    /// An analyser with `threads` threads whose events go to `hub`.
    pub fn new(cfg: Config, threads: usize, hub: TrackerHub) -> Analyzer {
        if threads > 1 {
            Analyzer::Sharded(Box::new(Parallel::new(cfg, threads, Some(hub))))
        } else {
            let mut e = Engine::new(cfg);
            e.set_trackers(hub, true, true);
            Analyzer::Single(Box::new(e))
        }
    }

    /// Analyses packets; an error means the analysis itself failed (a bug)
    /// and cannot go on, though what it finished can still be drained.
    pub fn packets(&mut self, batch: &[RawPacket<'_>]) -> Result<(), WorkerFailed> {
        match self {
            Analyzer::Single(e) => guard(0, None, || e.packets(batch)),
            Analyzer::Sharded(s) => batch
                .iter()
                .try_for_each(|p| s.packet(p.ts_ns, p.link_type, p.data)),
        }
    }

    /// Lets capture time pass without packets, so idle calls expire.
    pub fn tick(&mut self, now_ns: i64) -> Result<(), WorkerFailed> {
        match self {
            Analyzer::Single(e) => guard(0, None, || e.tick(now_ns)),
            Analyzer::Sharded(p) => p.tick(now_ns),
        }
    }

    /// The capture's total of dropped packets so far.
    pub fn set_capture_dropped(&mut self, total: u64) {
        match self {
            Analyzer::Single(e) => e.set_capture_dropped(total),
            Analyzer::Sharded(p) => p.set_capture_dropped(total),
        }
    }

    /// Takes the records finished so far.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Record> {
        match self {
            Analyzer::Single(e) => e.drain(),
            Analyzer::Sharded(p) => p.drain(),
        }
    }

    /// Ends the input: open calls are written as they stand.
    pub fn finish(&mut self) -> Result<(), WorkerFailed> {
        self.finish_in_groups(usize::MAX, |_| {})
    }

    /// As [`Analyzer::finish`], handing `written` the records of each
    /// `group` open calls as they are finished, so they need not all be
    /// held at once (one engine; shards finish theirs together). What is
    /// left comes from [`Analyzer::drain`].
    pub fn finish_in_groups(
        &mut self,
        group: usize,
        mut written: impl FnMut(std::vec::Drain<'_, Record>),
    ) -> Result<(), WorkerFailed> {
        match self {
            Analyzer::Single(e) => {
                // A panic of the caller's writing (a tracker, a sink) is
                // not the engine's failure: it goes on as the caller's.
                let mut writer_panic = None;
                let finished = guard(0, None, || {
                    e.finish_open_in_groups(group, |e| {
                        if writer_panic.is_none() {
                            let write = AssertUnwindSafe(|| written(e.drain()));
                            writer_panic = catch_unwind(write).err();
                        }
                    });
                    e.finish_rows();
                });
                if let Some(p) = writer_panic {
                    resume_unwind(p);
                }
                finished
            }
            Analyzer::Sharded(p) => p.finish(),
        }
    }

    /// Counters (complete after [`Analyzer::finish`]).
    pub fn counters(&mut self) -> &Counters {
        match self {
            Analyzer::Single(e) => e.counters(),
            Analyzer::Sharded(p) => p.counters(),
        }
    }

    /// Counters while the run goes on (shards': up to a second of capture
    /// time old).
    pub fn counters_so_far(&mut self) -> Counters {
        match self {
            Analyzer::Single(e) => e.counters().clone(),
            Analyzer::Sharded(p) => p.counters_so_far(),
        }
    }

    /// Calls open now (one engine only; shards do not say).
    pub fn active_calls(&self) -> Option<usize> {
        match self {
            Analyzer::Single(e) => Some(e.active_calls()),
            Analyzer::Sharded(_) => None,
        }
    }
}
