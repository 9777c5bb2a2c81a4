//! A global allocator that counts allocations and live bytes, for the tests
//! that measure the engine's heap use. Only they are in this binary, one at
//! a time, on one thread, so no other test's allocations mix in.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

pub struct Tracking;

/// Allocations and reallocations so far.
pub static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed.
pub static LIVE: AtomicI64 = AtomicI64::new(0);
/// The most bytes live at once so far.
pub static PEAK: AtomicI64 = AtomicI64::new(0);

fn grew(by: i64) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: forwards to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        grew(l.size() as i64);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // Counted as the new block before the old is freed: realloc may copy.
        grew(n as i64);
        let q = unsafe { System.realloc(p, l, n) };
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        q
    }
}

#[global_allocator]
static GLOBAL: Tracking = Tracking;
