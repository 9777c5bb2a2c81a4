//! An interval's top talkers: the sources that found a slot in a fixed
//! table of 64 groups of 4, with their packets and bytes. A source's group
//! is fixed by its hash; each slot has a 16-bit tag (0: free), so a packet
//! compares its tag with a group's four in one word and reads a slot only
//! on a match. Sources that find their group full are counted, not kept.

use calliper_model::event::Talker;
use std::net::{IpAddr, Ipv6Addr};

const WAYS: usize = 4;
const GROUPS: usize = 64;
const SLOTS: usize = WAYS * GROUPS;
/// The lowest bit of each 16-bit lane of a group's tag word.
const LANES_LOW: u64 = 0x0001_0001_0001_0001;
/// The highest bit of each lane.
const LANES_HIGH: u64 = 0x8000_8000_8000_8000;
/// Sources reported per interval.
pub(crate) const TOP_TALKERS: usize = 10;

struct Table {
    /// Per group, its four slots' tags (lane k: slot k).
    tags: [u64; GROUPS],
    /// Source (IPv6 bits, IPv4 mapped), packets, bytes; valid where tagged.
    slots: [(u128, u64, u64); SLOTS],
}

/// One interval's sources; the 8 KiB table is made at the first packet and
/// kept (emptied) across intervals.
pub(crate) struct Talkers {
    table: Option<Box<Table>>,
    /// Packets of sources without a slot.
    pub(crate) untracked: u64,
    /// Counts the intervals: a [`Remembered`] slot of another is stale.
    generation: u32,
}

impl Default for Talkers {
    fn default() -> Self {
        // Never 0, the generation of a slot not yet remembered.
        Talkers { table: None, untracked: 0, generation: 1 }
    }
}

/// Where a stream's source was counted in an interval, so its next packets
/// go straight there: the same slot (slots are not freed within an
/// interval), or none when its group was full.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Remembered {
    generation: u32,
    slot: u16,
}

/// [`Remembered::slot`] of a source counted as untracked.
const UNTRACKED: u16 = u16::MAX;

/// The lanes of `x` that are zero, as their high bits. The lowest flagged
/// lane is exact; a lane above a zero one may be flagged wrongly (a borrow),
/// so a match is confirmed on the slot's key.
#[inline(always)]
fn zero_lanes(x: u64) -> u64 {
    x.wrapping_sub(LANES_LOW) & !x & LANES_HIGH
}

impl Talkers {
    /// [`Talkers::add`] for a packet of a stream, which remembers its
    /// source's slot for the interval: no hash, no tag compare.
    #[inline(always)]
    pub(crate) fn add_remembered(&mut self, r: &mut Remembered, src: IpAddr, len: u64) {
        if let (true, Some(t)) = (r.generation == self.generation, self.table.as_mut()) {
            match t.slots.get_mut(r.slot as usize) {
                Some(s) => {
                    s.1 += 1;
                    s.2 += len;
                }
                None => self.untracked += 1,
            }
            return;
        }
        let slot = self.add(src, len);
        *r = Remembered { generation: self.generation, slot: slot.map_or(UNTRACKED, |s| s as u16) };
    }

    /// Counts one packet of `len` bytes from `src`; its slot, if it has one.
    #[inline(always)]
    pub(crate) fn add(&mut self, src: IpAddr, len: u64) -> Option<usize> {
        let key = match src {
            IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
            IpAddr::V6(a) => u128::from(a),
        };
        let h = ((key as u64) ^ (key >> 64) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let group = (h >> 58) as usize;
        // Odd, so never the free tag.
        let tag = (h >> 16) as u16 as u64 | 1;
        let t = self.table.get_or_insert_with(|| {
            Box::new(Table { tags: [0; GROUPS], slots: [(0, 0, 0); SLOTS] })
        });
        let word = t.tags[group];
        let mut matches = zero_lanes(word ^ tag.wrapping_mul(LANES_LOW));
        while matches != 0 {
            let s = &mut t.slots[group * WAYS + matches.trailing_zeros() as usize / 16];
            if s.0 == key {
                s.1 += 1;
                s.2 += len;
                return Some(group * WAYS + matches.trailing_zeros() as usize / 16);
            }
            matches &= matches - 1;
        }
        // Slots fill from the lowest lane and are never freed within an
        // interval, so a source kept in this group was found above.
        let free = zero_lanes(word);
        if free == 0 {
            self.untracked += 1;
            return None;
        }
        let lane = free.trailing_zeros() as usize / 16;
        t.tags[group] |= tag << (16 * lane);
        t.slots[group * WAYS + lane] = (key, 1, len);
        Some(group * WAYS + lane)
    }

    /// Empties the table for the next interval (keeping its memory).
    pub(crate) fn clear(&mut self) {
        if let Some(t) = self.table.as_mut() {
            t.tags = [0; GROUPS];
        }
        self.untracked = 0;
        // Never 0. After 2^32 intervals (as many packets at least) a stream
        // silent all along could find a stale slot: in bounds, miscounted.
        self.generation = self.generation.checked_add(1).unwrap_or(1);
    }

    /// The top sources by bytes (then packets, then address), and how many
    /// of the array are filled.
    pub(crate) fn top(&self) -> ([Talker; TOP_TALKERS], usize) {
        let mut all: Vec<(IpAddr, u64, u64)> = Vec::new();
        if let Some(t) = &self.table {
            for (i, &(k, p, b)) in t.slots.iter().enumerate() {
                if t.tags[i / WAYS] >> (16 * (i % WAYS)) & 0xFFFF != 0 {
                    all.push((Ipv6Addr::from(k).to_canonical(), p, b));
                }
            }
        }
        all.sort_unstable_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
        let mut top =
            [Talker { address: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), packets: 0, bytes: 0 };
                TOP_TALKERS];
        let n = all.len().min(TOP_TALKERS);
        for (t, &(address, packets, bytes)) in top.iter_mut().zip(&all) {
            *t = Talker { address, packets, bytes };
        }
        (top, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every source is counted exactly once: in its slot, or as untracked
    /// once its group is full; a full table still finds the sources it has.
    #[test]
    fn sources_are_kept_until_their_group_is_full() {
        let mut t = Talkers::default();
        let sources: Vec<IpAddr> =
            (0..2000u32).map(|i| IpAddr::V4((0x0A00_0000 + i * 7).into())).collect();
        for round in 1..=3u64 {
            for (i, &s) in sources.iter().enumerate() {
                t.add(s, 100 + i as u64);
            }
            let table = t.table.as_ref().unwrap();
            let kept: Vec<&(u128, u64, u64)> = (0..SLOTS)
                .filter(|&i| table.tags[i / WAYS] >> (16 * (i % WAYS)) & 0xFFFF != 0)
                .map(|i| &table.slots[i])
                .collect();
            assert_eq!(kept.len(), SLOTS, "2 000 sources fill every slot");
            assert!(kept.iter().all(|s| s.1 == round));
            let kept_packets: u64 = kept.iter().map(|s| s.1).sum();
            assert_eq!(kept_packets + t.untracked, 2000 * round);
        }
        let (top, n) = t.top();
        assert_eq!(n, TOP_TALKERS);
        assert!(top.windows(2).all(|w| w[0].bytes >= w[1].bytes));
        t.clear();
        assert_eq!((t.top().1, t.untracked), (0, 0));
        // IPv6 and IPv4 sources with equal low bits stay apart.
        t.add("::ffff:10.0.0.1".parse().unwrap(), 1);
        t.add("2001:db8::a00:1".parse().unwrap(), 2);
        t.add(IpAddr::V4([10, 0, 0, 1].into()), 4);
        let (top, n) = t.top();
        assert_eq!(n, 2);
        assert_eq!(
            (top[0].address, top[0].packets, top[0].bytes),
            ("10.0.0.1".parse().unwrap(), 2, 5)
        );
    }

    /// A stream's remembered slot counts exactly what a fresh lookup would:
    /// many streams per source, more sources than slots (untracked ones
    /// remembered as such), and remembered slots going stale at each clear.
    #[test]
    fn remembered_slots_count_as_lookups_do() {
        let (mut plain, mut remembering) = (Talkers::default(), Talkers::default());
        let mut streams = vec![Remembered::default(); 3000];
        let source = |k: usize| IpAddr::V4((0x0A00_0000 + (k as u32 % 1500) * 13).into());
        let mut x = 7u64;
        for interval in 0..4 {
            for _ in 0..40_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let k = (x >> 33) as usize % streams.len();
                let len = 60 + (x >> 20) % 200;
                plain.add(source(k), len);
                remembering.add_remembered(&mut streams[k], source(k), len);
            }
            let (a, b) = (plain.table.as_ref().unwrap(), remembering.table.as_ref().unwrap());
            assert_eq!(a.tags, b.tags, "interval {interval}");
            for i in (0..SLOTS).filter(|&i| a.tags[i / WAYS] >> (16 * (i % WAYS)) & 0xFFFF != 0) {
                assert_eq!(a.slots[i], b.slots[i], "interval {interval}, slot {i}");
            }
            assert!(plain.untracked > 0, "more sources than slots");
            assert_eq!(plain.untracked, remembering.untracked);
            plain.clear();
            remembering.clear();
        }
    }

    #[test]
    fn zero_lanes_flags_the_lowest_zero_exactly() {
        for x in [0u64, 1, 0x0001_0000, 0x0000_0001_0000_0000, 0xFFFF_0001_0000_8000, u64::MAX] {
            let lanes: Vec<u16> = (0..4).map(|k| (x >> (16 * k)) as u16).collect();
            let lowest = lanes.iter().position(|&l| l == 0);
            let z = zero_lanes(x);
            assert_eq!((z != 0).then(|| z.trailing_zeros() as usize / 16), lowest, "{x:#x}");
        }
    }
}
