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

/// Like [`prefetch`], for every cache line of `*r`. The lines the object
/// covers whatever its alignment are a constant count (unrolled, no loop
/// on the packet path); one more is needed when it starts late in a line.
#[inline(always)]
pub fn prefetch_all<T>(r: &T) {
    let size = std::mem::size_of::<T>().max(1);
    let start = (r as *const T).cast::<u8>();
    let skew = start as usize % 64;
    let first = start.wrapping_sub(skew);
    let always = (size - 1) / 64 + 1;
    for k in 0..always {
        line(first.wrapping_add(64 * k));
    }
    if 64 * always < skew + size {
        line(first.wrapping_add(64 * always));
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
