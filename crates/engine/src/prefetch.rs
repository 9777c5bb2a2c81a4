//! A cache prefetch hint: the engine's only unsafe code.
//!
//! At tens of thousands of streams, each RTP packet's stream lookup misses
//! the cache; starting those loads for the next packets of a batch while the
//! current one is handled hides most of the wait.
#![allow(unsafe_code)]

/// Asks the CPU to start loading the cache line holding `r`.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults, reads no value into
    // the program and writes nothing; `r` is a valid reference anyway. SSE is
    // part of the x86_64 baseline, so the instruction always exists.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((r as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
