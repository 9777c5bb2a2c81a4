//! IPv4 and IPv6 defragmentation.
//!
//! Pieces are keyed by (source, destination, identification, protocol) and
//! copied into one buffer per datagram at their offsets. Overlaps keep the
//! bytes that arrived first (the BSD/Linux policy for exact overlaps; a piece
//! that disagrees with what is held is counted, never trusted). A datagram
//! that does not complete within the timeout, or that must make room under
//! the caps, is dropped and counted. Pending datagrams sit on one list in
//! arrival order, so the timeout and eviction only ever look at its head.
//!
//! Buffers of finished datagrams come back through [`Defragmenter::recycle`]
//! and are reused, so steady state allocates nothing.

use crate::lru::{Idx, KeyedSlab, Links};
use calliper_wire::Fragment;
use std::net::IpAddr;

/// The largest datagram IP can carry (without IPv6 jumbograms).
pub const MAX_DATAGRAM: usize = 65_535;
/// Pieces held per datagram; more is an attack, not a network.
pub const MAX_PIECES: usize = 64;
const LIST: u8 = 0;
const POOL: usize = 64;

/// Caps of the defragmenter.
#[derive(Debug, Clone)]
pub struct DefragConfig {
    /// A datagram not complete after this long is dropped (ns).
    pub timeout_ns: i64,
    /// Most datagrams pending at once.
    pub max_datagrams: usize,
    /// Most bytes held across all pending datagrams.
    pub max_bytes: usize,
}

impl Default for DefragConfig {
    fn default() -> Self {
        DefragConfig { timeout_ns: 30_000_000_000, max_datagrams: 8192, max_bytes: 64 << 20 }
    }
}

counters! {
    /// What the defragmenter did and gave up on.
    pub struct DefragCounters {
        /// Fragments offered.
        pub fragments: u64,
        /// Datagrams completed.
        pub reassembled: u64,
        /// Datagrams dropped incomplete at their timeout.
        pub timed_out: u64,
        /// Datagrams dropped incomplete to stay under the caps.
        pub evicted: u64,
        /// Pieces overlapping held bytes with different content (first kept).
        pub overlap_conflicts: u64,
        /// Pieces reaching beyond 65 535 bytes, or disagreeing about the end.
        pub malformed: u64,
        /// Datagrams dropped for having more than [`MAX_PIECES`] pieces.
        pub too_many_pieces: u64,
    }
}

type Key = (IpAddr, IpAddr, u32, u8);

#[derive(Debug)]
struct Pending {
    links: Links,
    key: Key,
    data: Vec<u8>,
    /// Received byte ranges, sorted and merged.
    ranges: Vec<(u32, u32)>,
    /// Length of the whole payload, once the last piece is seen.
    total: Option<u32>,
}

crate::lru::entry!(Pending, key: Key);

/// A reassembled datagram: its protocol and payload (give it back with
/// [`Defragmenter::recycle`]).
#[derive(Debug)]
pub struct Datagram {
    /// Protocol of the payload (UDP, TCP, ...).
    pub protocol: u8,
    /// The whole payload.
    pub payload: Vec<u8>,
}

/// Worst-case heap of a defragmenter with these caps (docs/hostile-input.md):
/// payload bytes (a buffer's capacity may be twice its length), the recycled
/// buffers (each at most one datagram, 64 KiB, with the same slack), and per
/// pending datagram its slot, byte ranges and index entry.
pub(crate) fn memory_bound(cfg: &DefragConfig) -> usize {
    use crate::bound::{slab, table};
    use std::mem::size_of;
    2 * cfg.max_bytes
        + POOL * 2 * 65_536
        + slab::<Pending>(cfg.max_datagrams)
        + table::<(Key, Idx)>(cfg.max_datagrams)
        + cfg.max_datagrams * 2 * MAX_PIECES * size_of::<(u32, u32)>()
}

/// IPv4/IPv6 fragment reassembly with caps.
#[derive(Debug)]
pub struct Defragmenter {
    cfg: DefragConfig,
    pending: KeyedSlab<Pending>,
    bytes: usize,
    pool: Vec<Vec<u8>>,
    /// Counters.
    pub counters: DefragCounters,
}

impl Defragmenter {
    /// A defragmenter with these caps.
    pub fn new(cfg: DefragConfig) -> Self {
        Defragmenter {
            pending: KeyedSlab::with_capacity(cfg.max_datagrams),
            bytes: 0,
            pool: Vec::new(),
            counters: DefragCounters::default(),
            cfg,
        }
    }

    /// Datagrams pending.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether a datagram of (source, destination, id, protocol) is pending.
    pub fn holds(&self, key: &Key) -> bool {
        self.pending.holds(key)
    }

    /// Bytes held by pending datagrams.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds one piece; returns the datagram when this piece completes it.
    pub fn add(
        &mut self,
        now: i64,
        src: IpAddr,
        dst: IpAddr,
        frag: Fragment,
        piece: &[u8],
    ) -> Option<Datagram> {
        self.counters.fragments += 1;
        self.expire(now);
        let key = (src, dst, frag.id, frag.protocol);
        let start = frag.offset as usize;
        let end = start + piece.len();
        if end > MAX_DATAGRAM {
            self.counters.malformed += 1;
            self.drop_key(&key);
            return None;
        }
        let idx = match self.pending.find(&key) {
            Some(i) => i,
            None => self.open(now, key, end)?,
        };
        let p = self.pending.get_mut(idx)?;
        let end32 = end as u32;
        let bad_end = match p.total {
            Some(t) => end32 > t || (!frag.more && end32 != t),
            None => !frag.more && p.ranges.last().is_some_and(|r| r.1 > end32),
        };
        if bad_end {
            self.counters.malformed += 1;
            return None;
        }
        if p.ranges.len() >= MAX_PIECES {
            self.counters.too_many_pieces += 1;
            self.remove(idx);
            return None;
        }
        if !frag.more {
            p.total = Some(end32);
        }
        let grow = end.saturating_sub(p.data.len());
        // Later pieces grow a datagram too: keep the byte cap on every piece
        // (found by the fuzzer), evicting others first, this one last.
        while self.bytes + grow > self.cfg.max_bytes {
            let victim = match self.pending.oldest(LIST) {
                Some((o, _)) if o != idx => o,
                _ => idx,
            };
            self.counters.evicted += 1;
            self.remove(victim);
            if victim == idx {
                return None;
            }
        }
        let p = self.pending.get_mut(idx)?;
        if grow > 0 {
            self.bytes += grow;
            p.data.resize(end, 0);
        }
        if copy_uncovered(p, start as u32, piece) {
            self.counters.overlap_conflicts += 1;
        }
        let complete = p.total.is_some_and(|t| p.ranges.len() == 1 && p.ranges[0] == (0, t))
            || p.total == Some(0);
        if !complete {
            return None;
        }
        let p = self.remove(idx)?;
        self.counters.reassembled += 1;
        let mut payload = p.data;
        payload.truncate(p.total.unwrap_or(0) as usize);
        Some(Datagram { protocol: frag.protocol, payload })
    }

    /// Gives a datagram's buffer back for reuse.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < POOL {
            buf.clear();
            self.pool.push(buf);
        }
    }

    /// Drops datagrams older than the timeout.
    pub fn expire(&mut self, now: i64) {
        while let Some(idx) = self.pending.idle_past(LIST, now, self.cfg.timeout_ns) {
            self.counters.timed_out += 1;
            self.remove(idx);
        }
    }

    fn open(&mut self, now: i64, key: Key, end: usize) -> Option<Idx> {
        while self.pending.is_full() || self.bytes + end > self.cfg.max_bytes {
            let (oldest, _) = self.pending.oldest(LIST)?;
            self.counters.evicted += 1;
            self.remove(oldest);
        }
        let data = self.pool.pop().unwrap_or_default();
        let idx = self
            .pending
            .insert(Pending { links: Links::default(), key, data, ranges: Vec::new(), total: None })
            .ok()?;
        self.pending.touch(idx, LIST, now);
        Some(idx)
    }

    fn drop_key(&mut self, key: &Key) {
        if let Some(idx) = self.pending.find(key) {
            self.remove(idx);
        }
    }

    fn remove(&mut self, idx: Idx) -> Option<Pending> {
        let p = self.pending.remove(idx)?;
        self.bytes -= p.data.len();
        Some(p)
    }
}

/// Copies the parts of `piece` not yet received into the buffer and records
/// its range. Returns true when a held byte disagreed with the piece.
fn copy_uncovered(p: &mut Pending, start: u32, piece: &[u8]) -> bool {
    let end = start + piece.len() as u32;
    let mut conflict = false;
    let mut cursor = start;
    for &(s, e) in &p.ranges {
        if e <= cursor || s >= end {
            continue;
        }
        if s > cursor {
            let (a, b) = (cursor as usize, s as usize);
            p.data[a..b].copy_from_slice(&piece[a - start as usize..b - start as usize]);
        }
        let (a, b) = (s.max(cursor) as usize, e.min(end) as usize);
        if p.data[a..b] != piece[a - start as usize..b - start as usize] {
            conflict = true;
        }
        cursor = cursor.max(e);
    }
    if cursor < end {
        let (a, b) = (cursor as usize, end as usize);
        p.data[a..b].copy_from_slice(&piece[a - start as usize..]);
    }
    if end > start {
        insert_range(&mut p.ranges, start, end);
    }
    conflict
}

/// Inserts [start, end) into sorted, merged ranges.
fn insert_range(ranges: &mut Vec<(u32, u32)>, start: u32, end: u32) {
    let at = ranges.partition_point(|r| r.1 < start);
    let mut s = start;
    let mut e = end;
    let mut j = at;
    while j < ranges.len() && ranges[j].0 <= e {
        s = s.min(ranges[j].0);
        e = e.max(ranges[j].1);
        j += 1;
    }
    ranges.splice(at..j, [(s, e)]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    fn frag(offset: u32, more: bool) -> Fragment {
        Fragment { id: 7, offset, more, protocol: 17 }
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    /// Splits `data` in pieces of `size` (a multiple of 8).
    fn pieces(data: &[u8], size: usize) -> Vec<(Fragment, &[u8])> {
        data.chunks(size)
            .enumerate()
            .map(|(i, c)| (frag((i * size) as u32, (i + 1) * size < data.len()), c))
            .collect()
    }

    #[test]
    fn in_order_and_reversed_pieces_reassemble() {
        let data = payload(3000);
        for reverse in [false, true] {
            let mut d = Defragmenter::new(DefragConfig::default());
            let mut ps = pieces(&data, 1480);
            if reverse {
                ps.reverse();
            }
            let n = ps.len();
            for (i, (f, c)) in ps.into_iter().enumerate() {
                let got = d.add(0, A, B, f, c);
                assert_eq!(got.is_some(), i == n - 1);
                if let Some(g) = got {
                    assert_eq!(g.payload, data);
                    assert_eq!(g.protocol, 17);
                }
            }
            assert!(d.is_empty());
            assert_eq!(d.bytes(), 0);
        }
    }

    #[test]
    fn overlaps_keep_first_bytes_and_count_conflicts() {
        let data = payload(64);
        let mut d = Defragmenter::new(DefragConfig::default());
        assert!(d.add(0, A, B, frag(0, true), &data[..40]).is_none());
        let mut evil = data[16..64].to_vec();
        evil[0] ^= 0xFF; // disagrees at byte 16, which is already held
        let g = d.add(0, A, B, frag(16, false), &evil).unwrap();
        assert_eq!(
            g.payload,
            data.iter()
                .enumerate()
                .map(|(i, &b)| if i < 40 { b } else { evil[i - 16] })
                .collect::<Vec<_>>()
        );
        assert_eq!(d.counters.overlap_conflicts, 1);
    }

    #[test]
    fn duplicate_pieces_are_harmless() {
        let data = payload(100);
        let mut d = Defragmenter::new(DefragConfig::default());
        assert!(d.add(0, A, B, frag(0, true), &data[..48]).is_none());
        assert!(d.add(0, A, B, frag(0, true), &data[..48]).is_none());
        let g = d.add(0, A, B, frag(48, false), &data[48..]).unwrap();
        assert_eq!(g.payload, data);
        assert_eq!(d.counters.overlap_conflicts, 0);
    }

    #[test]
    fn incomplete_datagrams_time_out() {
        let data = payload(100);
        let cfg = DefragConfig { timeout_ns: 1000, ..Default::default() };
        let mut d = Defragmenter::new(cfg);
        assert!(d.add(0, A, B, frag(0, true), &data[..48]).is_none());
        // The rest arrives too late: its piece starts a new datagram.
        assert!(d.add(2000, A, B, frag(48, false), &data[48..]).is_none());
        assert_eq!(d.counters.timed_out, 1);
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn caps_evict_oldest_and_count() {
        let cfg = DefragConfig { max_datagrams: 4, ..Default::default() };
        let mut d = Defragmenter::new(cfg);
        let data = payload(16);
        for id in 0..10 {
            let f = Fragment { id, ..frag(0, true) };
            d.add(id as i64, A, B, f, &data);
        }
        assert_eq!(d.len(), 4);
        assert_eq!(d.counters.evicted, 6);
        let cfg = DefragConfig { max_bytes: 1000, ..Default::default() };
        let mut d = Defragmenter::new(cfg);
        for id in 0..10 {
            let f = Fragment { id, ..frag(0, true) };
            d.add(0, A, B, f, &payload(400));
        }
        assert!(d.bytes() <= 1000);
        assert_eq!(d.counters.evicted, 8);
        // Pieces that grow a held datagram respect the cap too.
        let mut d = Defragmenter::new(DefragConfig { max_bytes: 1000, ..Default::default() });
        d.add(0, A, B, Fragment { id: 1, ..frag(0, true) }, &payload(400));
        d.add(0, A, B, Fragment { id: 2, ..frag(0, true) }, &payload(400));
        d.add(0, A, B, Fragment { id: 2, ..frag(400, true) }, &payload(400));
        assert!(d.bytes() <= 1000, "{}", d.bytes());
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn hostile_pieces_are_refused() {
        let mut d = Defragmenter::new(DefragConfig::default());
        assert!(d.add(0, A, B, frag(65_528, true), &payload(64)).is_none());
        assert_eq!(d.counters.malformed, 1);
        assert!(d.is_empty());
        for i in 0..100 {
            d.add(0, A, B, frag(i * 16, true), &payload(8));
        }
        assert_eq!(d.counters.too_many_pieces, 1);
    }

    proptest::proptest! {
        #[test]
        fn any_order_with_duplicates_reassembles(
            len in 1usize..4000,
            size in 1usize..64,
            order in proptest::collection::vec(0usize..1000, 0..200),
        ) {
            let data = payload(len);
            // At most MAX_PIECES pieces, so out-of-order arrival never hits the cap.
            let size = (size * 8).max(len.div_ceil(MAX_PIECES).div_ceil(8) * 8);
            let ps = pieces(&data, size);
            let mut sequence: Vec<usize> = order.iter().map(|o| o % ps.len()).collect();
            sequence.extend(0..ps.len());
            let mut d = Defragmenter::new(DefragConfig::default());
            let mut done = None;
            for i in sequence {
                if let Some(g) = d.add(0, A, B, ps[i].0, ps[i].1) {
                    done = Some(g);
                    break;
                }
            }
            proptest::prop_assert_eq!(done.map(|g| g.payload), Some(data));
        }
    }
}
