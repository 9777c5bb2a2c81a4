//! The stream index: which stream slot a packet's key belongs to.
//!
//! Looking up the stream is the one lookup every RTP packet makes, and at tens
//! of thousands of streams it misses the cache. A general hash map keeps the
//! key in the table (40 bytes per stream here), so a lookup touches the
//! table's control bytes, then its bucket, then the stream, and nothing can
//! tell the CPU where the bucket is before the lookup runs. This table keeps
//! only 8 bytes per stream — 32 bits of the key's hash and the stream's slot —
//! so it is a quarter of the size, its slot for a hash is known at once
//! ([`StreamIndex::prefetch`]), and the stream's slot is known from it
//! ([`StreamIndex::peek`]) before the packet is handled: the engine prefetches
//! both for the next packets of a batch while it handles the current one.
//! Keys are compared in the stream itself, which the packet needs anyway.
//!
//! Open addressing with linear probing and backward-shift deletion (no
//! tombstones, so lookups never slow down with churn). The home slot comes
//! from the stored hash bits, so growing needs no keys; the table doubles
//! at half full.

use crate::lru::Idx;
use crate::prefetch::prefetch;

const EMPTY: u64 = 0;
const MIN_SLOTS: usize = 64;

/// Hash bits → stream slot, for keys hashed by the caller.
#[derive(Debug)]
pub struct StreamIndex {
    /// `tag << 32 | idx`, tag never 0, so an empty slot is 0.
    slots: Vec<u64>,
    len: usize,
}

impl Default for StreamIndex {
    fn default() -> Self {
        StreamIndex { slots: vec![EMPTY; MIN_SLOTS], len: 0 }
    }
}

/// The 32 bits of a hash the index keeps (never 0).
fn tag(hash: u64) -> u32 {
    (hash >> 32) as u32 | 1
}

impl StreamIndex {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn home(&self, tag: u32) -> usize {
        // The low bit is forced to 1 in tags: use the bits above it.
        (tag >> 1) as usize & self.mask()
    }

    /// Starts loading the slot `hash` will probe first.
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        prefetch(&self.slots[self.home(tag(hash))]);
    }

    /// The first entry whose stored hash bits match: usually the stream,
    /// unconfirmed (for prefetching it).
    #[inline]
    pub fn peek(&self, hash: u64) -> Option<Idx> {
        self.find(hash, |_| true)
    }

    /// The entry for `hash` whose stream `is_key` confirms.
    #[inline]
    pub fn find(&self, hash: u64, mut is_key: impl FnMut(Idx) -> bool) -> Option<Idx> {
        let t = tag(hash);
        let mask = self.mask();
        let mut i = self.home(t);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if (s >> 32) as u32 == t && is_key(s as Idx) {
                return Some(s as Idx);
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds an entry (the caller knows the key is not present).
    pub fn insert(&mut self, hash: u64, idx: Idx) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        self.place((tag(hash) as u64) << 32 | idx as u64);
        self.len += 1;
    }

    fn place(&mut self, entry: u64) {
        let mask = self.mask();
        let mut i = self.home((entry >> 32) as u32);
        while self.slots[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = entry;
    }

    fn grow(&mut self) {
        let bigger = vec![EMPTY; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, bigger);
        for e in old.into_iter().filter(|&e| e != EMPTY) {
            self.place(e);
        }
    }

    /// Removes the entry for `hash` pointing at `idx`; false if absent.
    pub fn remove(&mut self, hash: u64, idx: Idx) -> bool {
        let want = (tag(hash) as u64) << 32 | idx as u64;
        let mask = self.mask();
        let mut i = self.home(tag(hash));
        loop {
            match self.slots[i] {
                EMPTY => return false,
                s if s == want => break,
                _ => i = (i + 1) & mask,
            }
        }
        // Backward shift: move later entries of the run into the hole when
        // their home does not lie cyclically in (hole, their position].
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while self.slots[j] != EMPTY {
            let home = self.home((self.slots[j] >> 32) as u32);
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        true
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a reference map, with hashes from a small space so runs
        /// collide, wrap around the table and share tags.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec((0u8..3, 0u64..48, any::<bool>()), 1..600)) {
            let mut index = StreamIndex::default();
            let mut model: std::collections::HashMap<u64, Idx> = Default::default();
            let mut next: Idx = 0;
            for (op, key, low_bits_only) in ops {
                // Hashes differing only in high bits collide on the home slot.
                let hash = if low_bits_only { key << 33 } else { key.wrapping_mul(0x9E37_79B9_7F4A_7C15) };
                match op {
                    0 if !model.contains_key(&hash) => {
                        index.insert(hash, next);
                        model.insert(hash, next);
                        next += 1;
                    }
                    1 => {
                        let want = model.remove(&hash);
                        let got = want.map(|i| index.remove(hash, i));
                        prop_assert_eq!(got.unwrap_or(false), want.is_some());
                    }
                    _ => {}
                }
                prop_assert_eq!(index.len(), model.len());
                for (&h, &i) in &model {
                    prop_assert_eq!(index.find(h, |j| j == i), Some(i));
                }
                prop_assert_eq!(index.find(hash, |j| model.get(&hash) == Some(&j)), model.get(&hash).copied());
            }
        }
    }

    #[test]
    fn grows_and_keeps_everything() {
        let mut index = StreamIndex::default();
        let h = |i: u64| i.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        for i in 0..10_000u64 {
            index.insert(h(i), i as Idx);
        }
        assert!(index.heap_bytes() <= 32_768 * 8);
        for i in 0..10_000u64 {
            assert_eq!(index.find(h(i), |j| j == i as Idx), Some(i as Idx));
            assert!(index.peek(h(i)).is_some());
        }
        for i in (0..10_000u64).step_by(2) {
            assert!(index.remove(h(i), i as Idx));
        }
        for i in 0..10_000u64 {
            assert_eq!(index.find(h(i), |j| j == i as Idx).is_some(), i % 2 == 1);
        }
        assert_eq!(index.len(), 5_000);
    }
}
