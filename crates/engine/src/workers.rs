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

/// A worker stopped on a panic: which one and the panic's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerFailed {
    /// Index of the worker (0 for a single engine).
    pub worker: usize,
    /// The panic's message.
    pub message: String,
}

impl std::fmt::Display for WorkerFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "analysis worker {} failed: {} (a bug in calliper: please report it with the input)",
            self.worker, self.message
        )
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
        let failed = WorkerFailed { worker, message: panic_message(&panic) };
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
        let mut s = self.lock();
        if let Some(f) = &s.failed {
            return Err(f.clone());
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
    fn gate_opens_repeatedly_without_failure() {
        let gate = Arc::new(Gate::new(2));
        let g = gate.clone();
        let t = std::thread::spawn(move || (0..100).all(|_| g.wait().is_ok()));
        assert!((0..100).all(|_| gate.wait().is_ok()));
        assert!(t.join().unwrap());
    }
}
