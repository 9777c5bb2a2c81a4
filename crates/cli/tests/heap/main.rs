//! The engine's heap: no allocation per packet in steady state, the state
//! per concurrent call, and the documented memory bound. Counted with a
//! global allocator ([`tracking`]), so these tests have a binary of their
//! own, and take turns ([`turn`]): the counters are process-wide.

#[path = "../common/mod.rs"]
mod common;
mod tracking;

mod alloc;
mod memory;
mod memory_bound;

/// One test of this binary at a time (a failed test does not stop the rest).
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}
