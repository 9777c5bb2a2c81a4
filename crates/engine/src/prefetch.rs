//! A cache prefetch hint: the engine's only unsafe code.
//!
//! At tens of thousands of streams, each RTP packet's stream lookup misses
//! the cache; starting those loads for the next packets of a batch while the
//! current one is handled hides most of the wait.
#![allow(unsafe_code)]

/// Asks the CPU to start loading the cache line holding `r`.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    line((r as *const T).cast::<u8>());
}

/// Like [`prefetch`], for every cache line of `*r`.
#[inline(always)]
pub fn prefetch_all<T>(r: &T) {
    let start = (r as *const T).cast::<u8>();
    // From the line holding the first byte to the one holding the last.
    let skew = start as usize % 64;
    let first = start.wrapping_sub(skew);
    for offset in (0..skew + std::mem::size_of::<T>()).step_by(64) {
        line(first.wrapping_add(offset));
    }
}

#[inline(always)]
fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults (whatever the
    // address), reads no value into the program and writes nothing. SSE is
    // part of the x86_64 baseline, so the instruction always exists.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
