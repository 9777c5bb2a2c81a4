//! Caps shared by the shards of a run, so a sharded run refuses at the same
//! table sizes as one engine: streams in all, unconfirmed RTP candidates in
//! all, and streams per call. Shards meet only at batch ends, so these are
//! atomics: which entry takes the last place can depend on thread timing,
//! how many places there are cannot (docs/hostile-input.md).

use crate::lru::Idx;
use crate::MAX_STREAMS_PER_CALL;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// The caps of one sharded run.
#[derive(Debug)]
pub struct SharedCaps {
    live_streams: AtomicUsize,
    /// Each shard's unconfirmed candidates, as it last counted them.
    candidates: Box<[AtomicUsize]>,
    /// Per call slot (slot indices are equal in every shard):
    /// `serial << 16 | streams admitted`, the serial telling a reused slot's
    /// new call from the old.
    call_streams: Box<[AtomicU64]>,
}

impl SharedCaps {
    /// Caps for `shards` shards of engines holding at most `max_calls` calls.
    pub fn new(shards: usize, max_calls: usize) -> SharedCaps {
        SharedCaps {
            live_streams: AtomicUsize::new(0),
            candidates: (0..shards).map(|_| AtomicUsize::new(0)).collect(),
            call_streams: (0..max_calls).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Takes a place for a new stream, if fewer than `cap` are held.
    pub(crate) fn take_stream(&self, cap: usize) -> bool {
        if self.live_streams.fetch_add(1, Relaxed) >= cap {
            self.live_streams.fetch_sub(1, Relaxed);
            return false;
        }
        true
    }

    /// Gives a stream's place back.
    pub(crate) fn give_back_stream(&self) {
        self.live_streams.fetch_sub(1, Relaxed);
    }

    /// Records that `shard` holds `own` candidates; true when all shards
    /// together hold `cap` or more.
    pub(crate) fn candidates_full(&self, shard: usize, own: usize, cap: usize) -> bool {
        if let Some(c) = self.candidates.get(shard) {
            c.store(own, Relaxed);
        }
        self.candidates.iter().map(|c| c.load(Relaxed)).sum::<usize>() >= cap
    }

    /// Takes a place for one more stream in the call in `slot` (number
    /// `serial`), if it has fewer than [`MAX_STREAMS_PER_CALL`] in all shards.
    pub(crate) fn admit_call_stream(&self, slot: Idx, serial: u64) -> bool {
        let Some(cell) = self.call_streams.get(slot as usize) else {
            return true;
        };
        let mut v = cell.load(Relaxed);
        loop {
            let (held_serial, count) = (v >> 16, v & 0xFFFF);
            let count = match held_serial.cmp(&serial) {
                // A shard ahead of this one has reused the slot: this call
                // has ended everywhere else, nothing left to cap.
                std::cmp::Ordering::Greater => return true,
                std::cmp::Ordering::Less => 0,
                std::cmp::Ordering::Equal => count,
            };
            if count as usize >= MAX_STREAMS_PER_CALL {
                return false;
            }
            match cell.compare_exchange_weak(v, serial << 16 | (count + 1), Relaxed, Relaxed) {
                Ok(_) => return true,
                Err(now) => v = now,
            }
        }
    }

    /// Gives back a place [`Self::admit_call_stream`] took.
    pub(crate) fn release_call_stream(&self, slot: Idx, serial: u64) {
        if let Some(cell) = self.call_streams.get(slot as usize) {
            let _ = cell.fetch_update(Relaxed, Relaxed, |v| {
                (v >> 16 == serial && v & 0xFFFF > 0).then_some(v - 1)
            });
        }
    }

    /// Heap of these caps for `shards` shards and `max_calls` calls.
    pub(crate) fn memory_bound(shards: usize, max_calls: usize) -> usize {
        shards * std::mem::size_of::<AtomicUsize>() + max_calls * std::mem::size_of::<AtomicU64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_streams_are_capped_across_shards_and_slots_reused() {
        let caps = SharedCaps::new(2, 4);
        let admitted = (0..300).filter(|_| caps.admit_call_stream(1, 7)).count();
        assert_eq!(admitted, MAX_STREAMS_PER_CALL);
        // The slot's next call starts from nothing; the old call is no longer capped.
        assert!(caps.admit_call_stream(1, 8));
        assert!(caps.admit_call_stream(1, 7));
        caps.release_call_stream(1, 8);
        assert_eq!(caps.call_streams[1].load(Relaxed), 8 << 16);
        assert!(!caps.candidates_full(0, 5, 9) && caps.candidates_full(1, 4, 9));
        assert!(caps.take_stream(1) && !caps.take_stream(1));
        caps.give_back_stream();
        assert!(caps.take_stream(1));
    }
}
