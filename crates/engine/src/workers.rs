//! Analysis threads that fail loudly: a panic in one ends the run with an
//! error instead of a hang or a silent gap.
//!
//! A worker runs under [`guard`], which turns a panic into a
//! [`WorkerFailed`] and breaks the run's [`Gate`]: every worker waiting
//! there (or arriving later) is released with the failure instead of waiting
//! for a peer that will never come, and the thread feeding the workers sees
//! the failure on its next send or batch end. The offline sharded analysis
//! ([`crate::parallel`]) and a single engine on the caller's thread use the
//! same two pieces, and so will the live probe.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard};

/// A worker stopped: which one and why (a panic's message, or workers
/// that read their own input finding it changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerFailed {
    /// Index of the worker (0 for a single engine).
    pub worker: usize,
    /// The panic's message, or what went wrong.
    pub message: String,
    /// A panic (a bug), not the input changing under the workers.
    pub bug: bool,
}

impl std::fmt::Display for WorkerFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "analysis worker {} failed: {}", self.worker, self.message)?;
        if self.bug {
            f.write_str(" (a bug in calliper: please report it with the input)")?;
        }
        Ok(())
    }
}

impl std::error::Error for WorkerFailed {}

/// Runs `f` for worker `worker`; a panic becomes [`WorkerFailed`] and, if a
/// gate is given, breaks it so no other worker waits for this one.
pub fn guard<T>(
    worker: usize,
    gate: Option<&Gate>,
    f: impl FnOnce() -> T,
) -> Result<T, WorkerFailed> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let failed = WorkerFailed { worker, message: panic_message(&panic), bug: true };
        if let Some(g) = gate {
            g.break_with(failed.clone());
        }
        failed
    })
}

fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic without a message".to_string()
    }
}

/// What a worker arrives at a [`Gate`] for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Meeting {
    /// Any rendezvous ([`Gate::wait`]).
    #[default]
    Any,
    /// The end of the batch ending at this capture time, after this many
    /// packets.
    BatchEnd(i64, u64),
    /// The end of the input, after this many packets.
    Finish(u64),
}

/// A barrier for `n` workers that a failure breaks.
#[derive(Debug)]
pub struct Gate {
    n: usize,
    state: Mutex<GateState>,
    turn: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    waiting: usize,
    generation: u64,
    failed: Option<WorkerFailed>,
    /// What the first worker at this rendezvous said it arrived for.
    tag: Meeting,
}

impl Gate {
    /// A gate that opens when `n` workers wait at it.
    pub fn new(n: usize) -> Gate {
        Gate { n: n.max(1), state: Mutex::new(GateState::default()), turn: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        // A poisoned lock only means a worker panicked while holding it; the
        // state (counts and the failure) is still meaningful.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until all `n` workers have arrived, or returns the failure that
    /// broke the gate.
    pub fn wait(&self) -> Result<(), WorkerFailed> {
        self.meet(Meeting::Any, usize::MAX)
    }

    /// As [`Gate::wait`], for workers that must arrive at the same point
    /// (worker `worker` says which): a rendezvous whose workers come for
    /// different meetings breaks the gate instead of pairing two different
    /// points (workers that read their input themselves and saw different
    /// input would otherwise wait forever).
    pub fn meet(&self, tag: Meeting, worker: usize) -> Result<(), WorkerFailed> {
        let mut s = self.lock();
        if let Some(f) = &s.failed {
            return Err(f.clone());
        }
        if s.waiting == 0 {
            s.tag = tag;
        } else if s.tag != tag {
            let f = WorkerFailed {
                worker,
                message: "the shards read different packets: a capture file changed while it was \
                          read (read it again, or with --threads 1)"
                    .to_string(),
                bug: false,
            };
            s.failed = Some(f.clone());
            self.turn.notify_all();
            return Err(f);
        }
        s.waiting += 1;
        if s.waiting == self.n {
            s.waiting = 0;
            s.generation += 1;
            self.turn.notify_all();
            return Ok(());
        }
        let generation = s.generation;
        while s.generation == generation && s.failed.is_none() {
            s = self.turn.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        match (&s.failed, s.generation == generation) {
            (Some(f), true) => Err(f.clone()),
            _ => Ok(()),
        }
    }

    /// Breaks the gate: every waiter, now and later, gets `failed`.
    pub fn break_with(&self, failed: WorkerFailed) {
        let mut s = self.lock();
        s.failed.get_or_insert(failed);
        self.turn.notify_all();
    }

    /// The failure that broke the gate, if any.
    pub fn failed(&self) -> Option<WorkerFailed> {
        self.lock().failed.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_panicking_worker_releases_the_others() {
        let gate = Arc::new(Gate::new(3));
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let g = gate.clone();
                std::thread::spawn(move || {
                    guard(i, Some(&g), || {
                        g.wait().map_err(|f| f.worker)?;
                        if i == 2 {
                            panic!("worker two breaks");
                        }
                        // The others wait at the second rendezvous forever
                        // unless the failure releases them.
                        g.wait().map_err(|f| f.worker)
                    })
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(results[0], Ok(Err(2)));
        assert_eq!(results[1], Ok(Err(2)));
        let failed = results[2].clone().unwrap_err();
        assert_eq!(failed.worker, 2);
        assert_eq!(failed.message, "worker two breaks");
        assert_eq!(gate.failed(), Some(failed));
    }

    #[test]
    fn workers_at_different_points_break_the_gate_instead_of_waiting() {
        let gate = Arc::new(Gate::new(2));
        let g = gate.clone();
        // One worker reaches a batch end the other never does: it ends.
        let t = std::thread::spawn(move || g.meet(Meeting::BatchEnd(7, 64), 1));
        let finished = gate.meet(Meeting::Finish(64), 0);
        let other = t.join().unwrap();
        let failed = finished.err().or(other.err()).expect("the gate must break");
        assert!(!failed.bug);
        assert!(failed.message.contains("changed while it was read"), "{failed}");
        assert_eq!(gate.meet(Meeting::BatchEnd(7, 64), 0), Err(failed));
    }

    #[test]
    fn gate_opens_repeatedly_without_failure() {
        let gate = Arc::new(Gate::new(2));
        let g = gate.clone();
        let t = std::thread::spawn(move || (0..100).all(|_| g.wait().is_ok()));
        assert!((0..100).all(|_| gate.wait().is_ok()));
        assert!(t.join().unwrap());
    }
}
