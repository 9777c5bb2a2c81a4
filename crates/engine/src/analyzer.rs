//! The choice between one engine and shards: the same records either way.
//! Packets' times are judged first ([`TimeGuard`]), alike for both.

use crate::parallel::Parallel;
use crate::time_guard::TimeGuard;
use crate::workers::{guard, WorkerFailed};
use crate::{Config, Counters, Engine, RawPacket, Record, TrackerHub};
use calliper_capture::files::Inputs;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Packets read and handed to the analysis at a time: one prefetch group.
pub const READ_BATCH: usize = crate::LOOKAHEAD;

/// Packets analysed between two takings of what the analysis and its
/// trackers finished (`analyze`, `probe` and the tests' in-process probe
/// alike). It shapes the output, not only its timing: a KPI interval that
/// gains a late call after its row was taken gets a second row.
pub const EMIT_EVERY: u64 = 4096;

/// Calls still open at the end of the input finished (and taken) a group
/// at a time ([`Analyzer::finish_in_groups`]), not held all at once.
pub const FINISH_GROUP: usize = 1024;

/// One engine, or shards on several threads: the same records either way.
pub struct Analyzer {
    run: Run,
    time: TimeGuard,
}

enum Run {
    /// One engine on the caller's thread.
    Single(Box<Engine>),
    /// Shards on their own threads.
    Sharded(Box<Parallel>),
}

impl Analyzer {
    /// An analyser with `threads` threads whose events go to `hub`.
    pub fn new(cfg: Config, threads: usize, hub: TrackerHub) -> Analyzer {
        let run = if threads > 1 {
            Run::Sharded(Box::new(Parallel::new(cfg, threads, Some(hub))))
        } else {
            let mut e = Engine::new(cfg);
            e.set_trackers(hub, true, true);
            Run::Single(Box::new(e))
        };
        Analyzer { run, time: TimeGuard::default() }
    }

    /// An analyser for capture files: with several threads and regular
    /// files, each shard reads the files itself ([`Parallel::reading`]), so
    /// no packet is handed between threads; otherwise as [`Analyzer::new`].
    /// Read them with [`Analyzer::read_files`].
    pub fn for_files(cfg: Config, threads: usize, hub: TrackerHub, inputs: &Inputs) -> Analyzer {
        match inputs.reopenable() {
            Some(paths) if threads > 1 => Analyzer {
                run: Run::Sharded(Box::new(Parallel::reading(cfg, threads, Some(hub), paths))),
                time: TimeGuard::default(),
            },
            _ => Analyzer::new(cfg, threads, hub),
        }
    }

    /// Reads capture files through the analysis, calling `step` with the
    /// bytes read so far about every [`EMIT_EVERY`] packets (or, with shards
    /// reading the files themselves, every 50 ms), for the caller to take
    /// what is finished and show progress. Messages about the inputs go to
    /// `say`. Returns whether every input read cleanly; a failure of the
    /// analysis names the input it was reading.
    pub fn read_files<E>(
        &mut self,
        inputs: &mut Inputs,
        say: &mut dyn FnMut(&str),
        step: &mut dyn FnMut(&mut Analyzer, u64) -> Result<(), E>,
    ) -> Result<Result<bool, (String, WorkerFailed)>, E> {
        while let Some(p) = self.reading_shards() {
            let going = p.wait(std::time::Duration::from_millis(50));
            let (said, position, clean) = p.reading_report();
            said.iter().for_each(|m| say(m));
            step(self, position)?;
            if !going {
                return Ok(Ok(clean));
            }
        }
        let mut n = 0u64;
        while let Some(b) = inputs.next_batch(READ_BATCH, say) {
            let read = b.len() as u64;
            if let Err(f) = self.captured(b.iter()) {
                return Ok(Err((inputs.name().to_string(), f)));
            }
            if (n + read) / EMIT_EVERY != n / EMIT_EVERY {
                step(self, inputs.position())?;
            }
            n += read;
        }
        Ok(Ok(inputs.clean()))
    }

    /// The shards, when they read the files themselves.
    fn reading_shards(&mut self) -> Option<&mut Parallel> {
        match &mut self.run {
            Run::Sharded(p) if p.is_reading() => Some(p),
            _ => None,
        }
    }

    /// Analyses packets, each at the time [`TimeGuard`] believes; an error
    /// means the analysis itself failed (a bug) and cannot go on, though
    /// what it finished can still be drained.
    pub fn packets(&mut self, batch: &mut [RawPacket<'_>]) -> Result<(), WorkerFailed> {
        let judged = self.time.admit_packets(batch);
        match &mut self.run {
            Run::Single(e) => {
                e.count_time_anomalies(judged);
                guard(0, None, || e.packets(batch))
            }
            Run::Sharded(s) => {
                // Dated as one engine dates them: by the batch's first packet.
                let at = batch.first().map_or(0, |p| p.ts_ns);
                for (kind, n) in judged.counts().into_iter().filter(|c| c.1 > 0) {
                    s.reader_anomalies(kind, n, at);
                }
                batch.iter().try_for_each(|p| s.packet(p.ts_ns, p.link_type, p.data))
            }
        }
    }

    /// Analyses packets as a capture reader gives them, [`READ_BATCH`] at a
    /// time: the one way files and live rings feed the analysis.
    pub fn captured<'a>(
        &mut self,
        packets: impl IntoIterator<Item = calliper_capture::Packet<'a>>,
    ) -> Result<(), WorkerFailed> {
        let mut raw = [RawPacket::default(); READ_BATCH];
        let mut n = 0;
        for p in packets {
            raw[n] = p.into();
            n += 1;
            if n == READ_BATCH {
                self.packets(&mut raw)?;
                n = 0;
            }
        }
        if n > 0 {
            self.packets(&mut raw[..n])?;
        }
        Ok(())
    }

    /// Lets capture time pass without packets, so idle calls expire.
    pub fn tick(&mut self, now_ns: i64) -> Result<(), WorkerFailed> {
        self.time.tick(now_ns);
        match &mut self.run {
            Run::Single(e) => guard(0, None, || e.tick(now_ns)),
            Run::Sharded(p) => p.tick(now_ns),
        }
    }

    /// The capture's total of dropped packets so far.
    pub fn set_capture_dropped(&mut self, total: u64) {
        match &mut self.run {
            Run::Single(e) => e.set_capture_dropped(total),
            Run::Sharded(p) => p.set_capture_dropped(total),
        }
    }

    /// Takes the records finished so far.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Record> {
        match &mut self.run {
            Run::Single(e) => e.drain(),
            Run::Sharded(p) => p.drain(),
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
        match &mut self.run {
            Run::Single(e) => {
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
            Run::Sharded(p) => p.finish(),
        }
    }

    /// Counters (complete after [`Analyzer::finish`]).
    pub fn counters(&mut self) -> &Counters {
        match &mut self.run {
            Run::Single(e) => e.counters(),
            Run::Sharded(p) => p.counters(),
        }
    }

    /// Counters while the run goes on (shards': up to a second of capture
    /// time old).
    pub fn counters_so_far(&mut self) -> Counters {
        match &mut self.run {
            Run::Single(e) => e.counters().clone(),
            Run::Sharded(p) => p.counters_so_far(),
        }
    }

    /// Calls open now (one engine only; shards do not say).
    pub fn active_calls(&self) -> Option<usize> {
        match &self.run {
            Run::Single(e) => Some(e.active_calls()),
            Run::Sharded(_) => None,
        }
    }
}
