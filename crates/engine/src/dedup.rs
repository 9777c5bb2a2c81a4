//! Removal of exact duplicate packets.
//!
//! A capture on Linux `any`, or a SPAN port mirroring both directions,
//! delivers each packet twice within microseconds. Counting both copies would
//! report every stream as 100 % duplicated and every call's SIP twice. The
//! filter remembers a hash of each packet's addresses, ports and payload
//! bytes (the first and last 16 of RTP, the first 64 of TCP and fragments,
//! all of other UDP, with the length; [`Scope`]; an RTP packet with a stream
//! key is hashed on its key's hash instead of its addresses and ports,
//! [`Dedup::hash_rtp`]) for a short window in a fixed table of 7-way sets, two cache lines each (no
//! allocation, O(1)); a packet equal to one seen within the window is
//! dropped and counted. A new packet takes its set's entry written longest
//! ago (the oldest, as packets come in time order); only
//! when all seven are still within the window does the filter forget a packet
//! it should remember, and that is counted (`dedup_overflow`): without
//! overflow the result does not depend on which packets share a set, so it
//! is the same in every run and in every shard. (A direct-mapped table forgot
//! silently, and fuzzing showed two engines with different seeds disagreeing.) TTL and
//! checksums are not hashed, so a routed packet seen on both sides of the
//! router is one packet. The IPv4 identification is hashed: a sender that
//! sends the same payload again (RFC 4733 repeats its end-of-event packet
//! three times, sequence number and all) gives each copy a new ID, so those
//! stay. IPv6 has no ID outside fragments, so there identical payloads from
//! the same sender within the window are treated as copies.

use crate::fasthash::{self, ip_word};
use calliper_wire::rtp::looks_like_rtcp;
use calliper_wire::{Frame, Transport};

/// 229 376 entries: at 4.6 M packets/s a 5 ms window fills a tenth of
/// them, and 0.0009 % of packets overflow their set (Poisson). Four ways
/// in 65 536 sets overflowed 0.05 %: often enough that two runs of a
/// 660 000-packet capture, with different seeds, counted different
/// overflows (CI saw it).
const SETS: usize = 1 << 15;
const WAYS: usize = 7;

/// Hashes and times of seven packets and the way to write next: two cache
/// lines.
#[derive(Debug, Clone, Copy)]
#[repr(align(128))]
struct Set {
    hashes: [u64; WAYS],
    times: [i64; WAYS],
    /// The way to write next.
    next: u64,
}

/// Bytes hashed at each end of an RTP payload.
const RTP_END: usize = 16;

/// Which bytes of a payload are hashed. RTP's first 12 (sequence number,
/// timestamp, SSRC) tell its packets apart, and its last 16 make a forged
/// copy (the header predicted, the payload guessed) as hard as before:
/// 32 bytes at most, two multiplies (64 from the start cost 30
/// instructions more a packet). TCP and fragments, whose sequence numbers
/// are in the words, hash their first 64: all of a 1 500-byte payload
/// would cost more than the rest. Other UDP — SIP and RTCP above all,
/// whose different messages can share their first bytes and length, with
/// IP ID 0 or none — is hashed whole: it is rare.
#[derive(Clone, Copy)]
enum Scope {
    Ends,
    First64,
    Whole,
}

/// The duplicate filter.
#[derive(Debug)]
pub struct Dedup {
    sets: Box<[Set]>,
    window_ns: i64,
    seed: u64,
    /// Packets dropped as duplicates.
    pub removed: u64,
    /// Packets remembered by forgetting one still within the window (a copy
    /// of the forgotten one would be missed).
    pub overflow: u64,
}

/// Heap of a duplicate filter: its fixed table.
pub(crate) fn memory_bound() -> usize {
    SETS * std::mem::size_of::<Set>()
}

impl Dedup {
    /// A filter treating equal packets within `window_ns` as copies.
    pub fn new(window_ns: i64) -> Self {
        Dedup {
            sets: vec![Set { hashes: [0; WAYS], times: [i64::MIN; WAYS], next: 0 }; SETS]
                .into_boxed_slice(),
            window_ns,
            // A per-process seed, so nobody can aim packets at one set.
            seed: fasthash::seed(),
            removed: 0,
            overflow: 0,
        }
    }

    /// True when this frame is a copy of one seen within the window. Empty
    /// TCP segments are never copies: pure ACKs differ only in fields not
    /// hashed, and nothing here reads them. For the tests: the packet loop
    /// hashes RTP with a stream key by [`Dedup::hash_rtp`], and a filter
    /// must hash every copy the same way.
    #[cfg(test)]
    pub fn is_duplicate(&mut self, now: i64, f: &Frame<'_>) -> bool {
        self.hash(f).is_some_and(|h| self.check(now, h))
    }

    /// Starts loading the set of a frame's hash (from [`Dedup::hash`] or
    /// [`Dedup::hash_rtp`]).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        crate::prefetch::prefetch_all(&self.sets[hash as usize & (SETS - 1)]);
    }

    /// The frame's hash, or None for frames never treated as copies. The
    /// packet loop takes [`Dedup::hash_rtp`] instead for RTP that has a
    /// stream key (so for every RTP packet it analyses), always.
    #[inline(always)]
    pub fn hash(&self, f: &Frame<'_>) -> Option<u64> {
        let (kind, a, b, payload, scope) = match f.transport {
            Transport::Tcp { payload: [], .. } => return None,
            Transport::Udp { sport, dport, payload } => {
                // RTCP (what the engine reads as RTCP) is not RTP here: its
                // reports lie past any short prefix.
                let rtp_like =
                    payload.first().is_some_and(|b| b >> 6 == 2) && !looks_like_rtcp(payload);
                let scope = if rtp_like { Scope::Ends } else { Scope::Whole };
                (17u64, sport as u64, dport as u64, payload, scope)
            }
            Transport::Tcp { sport, dport, seq, flags, payload } => (
                6 | (flags as u64) << 8,
                sport as u64,
                ((dport as u64) << 32) | seq as u64,
                payload,
                Scope::First64,
            ),
            Transport::Fragment { frag, payload } => (
                44 | (frag.protocol as u64) << 8 | (frag.more as u64) << 16,
                frag.id as u64,
                frag.offset as u64,
                payload,
                Scope::First64,
            ),
            Transport::Other { protocol, payload } => {
                (protocol as u64, 0, 0, payload, Scope::First64)
            }
        };
        let words = [
            kind_word(kind, f.ip_id, payload),
            a << 32 | b,
            ip_word(f.src, self.seed),
            ip_word(f.dst, self.seed),
        ];
        let mut ends = [0u8; 2 * RTP_END];
        let hashed: &[u8] = match scope {
            Scope::Ends => rtp_ends(payload, &mut ends),
            Scope::Whole => payload,
            Scope::First64 => &payload[..payload.len().min(64)],
        };
        Some(fasthash::hash(self.seed, words, hashed))
    }

    /// [`Dedup::hash`] of an RTP datagram (`payload`, sent with IPv4 ID
    /// `ip_id`) whose stream key hashed to `key_hash`: the key stands for the addresses, ports
    /// and SSRC, so one multiply of words is left. Every RTP packet with a
    /// stream key is hashed so (one engine and every shard alike), so a copy
    /// meets its original's hash.
    #[inline(always)]
    pub fn hash_rtp(&self, ip_id: Option<u16>, payload: &[u8], key_hash: u64) -> u64 {
        let mut ends = [0u8; 2 * RTP_END];
        let hashed = rtp_ends(payload, &mut ends);
        fasthash::hash2(self.seed, [kind_word(17, ip_id, payload), key_hash], hashed)
    }

    /// True when a frame with this hash was seen within the window; else
    /// remembers it. Always inlined: its one caller is the packet loop, and
    /// the call alone cost 6 instructions a packet when it was not.
    #[inline(always)]
    pub fn check(&mut self, now: i64, hash: u64) -> bool {
        let window = self.window_ns;
        // Empty entries hold i64::MIN: the subtraction overflows, never within.
        let within = |t: i64| now.checked_sub(t).is_some_and(|d| (0..=window).contains(&d));
        let set = &mut self.sets[hash as usize & (SETS - 1)];
        if (set.hashes.iter().zip(&set.times)).any(|(&h, &t)| h == hash && within(t)) {
            self.removed += 1;
            return true;
        }
        // Packets come in time order (nearly): the way written longest ago
        // holds the oldest.
        // `next` is always below WAYS; `min` (not `%`, a multiply-shift
        // sequence for 7) only spares the bounds checks.
        let oldest = (set.next as usize).min(WAYS - 1);
        set.next = if oldest + 1 < WAYS { oldest as u64 + 1 } else { 0 };
        self.overflow += within(set.times[oldest]) as u64;
        set.hashes[oldest] = hash;
        set.times[oldest] = now;
        false
    }
}

/// The transport `kind`, the IPv4 ID and the payload's length in one word.
/// Without an IP ID, bit 16 of its field (bit 40): the length starts at
/// bit 44.
#[inline(always)]
fn kind_word(kind: u64, ip_id: Option<u16>, payload: &[u8]) -> u64 {
    kind | (ip_id.map_or(1 << 16, |i| i as u64) << 24) | (payload.len() as u64) << 44
}

/// What of an RTP payload is hashed: its first and last [`RTP_END`]
/// bytes, or all of it when that is no longer.
#[inline(always)]
fn rtp_ends<'a>(payload: &'a [u8], ends: &'a mut [u8; 2 * RTP_END]) -> &'a [u8] {
    if payload.len() <= ends.len() {
        return payload;
    }
    ends[..RTP_END].copy_from_slice(&payload[..RTP_END]);
    ends[RTP_END..].copy_from_slice(&payload[payload.len() - RTP_END..]);
    ends
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn udp(payload: &[u8]) -> Frame<'_> {
        Frame {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            vlan: None,
            tunnels: 0,
            depth: 0,
            ip_id: Some(1),
            transport: Transport::Udp { sport: 4000, dport: 5000, payload },
        }
    }

    #[test]
    fn copies_within_the_window_are_removed() {
        let mut d = Dedup::new(1000);
        assert!(!d.is_duplicate(0, &udp(b"one")));
        assert!(d.is_duplicate(10, &udp(b"one")));
        assert!(!d.is_duplicate(20, &udp(b"two")));
        // Outside the window the same bytes are a new packet.
        assert!(!d.is_duplicate(5000, &udp(b"one")));
        assert_eq!(d.removed, 1);
    }

    #[test]
    fn rtp_is_told_apart_by_both_ends_and_rtcp_and_other_udp_by_every_byte() {
        let mut d = Dedup::new(1000);
        // IPv6-like: no IP ID to tell packets apart.
        let dup = |d: &mut Dedup, p: &[u8]| d.is_duplicate(10, &Frame { ip_id: None, ..udp(p) });
        let rtp = |seq: u16, ts: u32| {
            let mut p = [0u8; 172];
            p[0] = 0x80;
            p[2..4].copy_from_slice(&seq.to_be_bytes());
            p[4..8].copy_from_slice(&ts.to_be_bytes());
            p
        };
        assert!(!dup(&mut d, &rtp(1, 160)));
        assert!(!dup(&mut d, &rtp(2, 160)), "another sequence number");
        assert!(!dup(&mut d, &rtp(2, 320)), "another timestamp");
        assert!(dup(&mut d, &rtp(2, 320)), "a copy");
        let mut forged = rtp(2, 320);
        forged[171] = 1;
        assert!(!dup(&mut d, &forged), "the same header, another payload end");
        // RTCP: a report differing only in its jitter (bytes 28..32), which
        // neither 16-byte end of a 52-byte payload holds.
        let mut rr = [0u8; 52];
        rr[..4].copy_from_slice(&[0x81, 201, 0, 12]);
        assert!(!dup(&mut d, &rr));
        rr[31] = 9;
        assert!(!dup(&mut d, &rr), "RTCP: every byte counts");
        // Without an IP ID the length still counts, odd or even.
        assert!(!dup(&mut d, &[0x80; 100]));
        assert!(!dup(&mut d, &[0x80; 101]));
        let mut other = [b'x'; 300];
        assert!(!dup(&mut d, &other));
        other[299] = b'y';
        assert!(!dup(&mut d, &other), "not RTP: its last byte counts");
    }

    /// The packet loop's hash of RTP with a stream key: a copy (the same
    /// key, IP ID and bytes) meets it; any field of the packet or the key
    /// that differs makes another packet.
    #[test]
    fn rtp_hashed_on_its_key_tells_packets_apart_and_meets_copies() {
        let mut d = Dedup::new(1000);
        let rtp = |seq: u16, last: u8, len: usize| {
            let mut p = vec![0u8; len];
            p[0] = 0x80;
            p[2..4].copy_from_slice(&seq.to_be_bytes());
            p[len - 1] = last;
            p
        };
        let mut dup = |ip_id: u16, key: u64, p: &[u8]| {
            let h = d.hash_rtp(Some(ip_id), p, fasthash::hash(7, [key, 0, 0, 0], &[]));
            d.check(10, h)
        };
        assert!(!dup(1, 1, &rtp(1, 0, 172)));
        assert!(dup(1, 1, &rtp(1, 0, 172)), "a copy");
        for (what, ip_id, key, packet) in [
            ("another sequence number", 1, 1, rtp(2, 0, 172)),
            ("another payload end", 1, 1, rtp(1, 9, 172)),
            ("another IP ID", 2, 1, rtp(1, 0, 172)),
            ("another length", 1, 1, rtp(1, 0, 173)),
            ("another stream", 1, 2, rtp(1, 0, 172)),
            ("short, hashed whole", 1, 1, rtp(1, 0, 20)),
        ] {
            assert!(!dup(ip_id, key, &packet), "{what}");
            assert!(dup(ip_id, key, &packet), "{what}: its copy");
        }
    }

    #[test]
    fn a_set_remembers_seven_and_counts_what_it_forgets() {
        let mut d = Dedup::new(1000);
        // WAYS + 1 hashes of one set (same low bits).
        let h = |k: u64| (k << 20) | 5;
        for k in 0..WAYS as u64 {
            assert!(!d.check(10 + k as i64, h(k)));
        }
        assert_eq!(d.overflow, 0);
        // All are still remembered: a direct-mapped slot kept only the last.
        for k in 0..WAYS as u64 {
            assert!(d.check(20, h(k)));
        }
        // One more within the window evicts the oldest, counted.
        assert!(!d.check(30, h(WAYS as u64)));
        assert_eq!(d.overflow, 1);
        assert!(!d.check(31, h(0)), "the oldest was forgotten");
        // Entries past the window are replaced without counting.
        assert!(!d.check(5000, h(99)));
        assert_eq!(
            d.overflow, 2,
            "re-adding h(0) forgot h(1) (counted), h(99) replaced an expired entry"
        );
    }

    #[test]
    fn packets_spread_over_every_set() {
        // RTP-like packets of 1 000 streams: every set is used, none crowded.
        // (Forcing the hash's low bit once left half the sets empty.)
        let d = Dedup::new(1000);
        let mut counts = vec![0u32; SETS];
        for stream in 0..1000u32 {
            for seq in 0..(SETS as u32 * 10 / 1000) {
                let mut rtp = [0u8; 32];
                rtp[0] = 0x80;
                rtp[2..4].copy_from_slice(&(seq as u16).to_be_bytes());
                rtp[4..8].copy_from_slice(&(seq * 160).to_be_bytes());
                rtp[8..12].copy_from_slice(&stream.to_be_bytes());
                let h = d.hash(&udp(&rtp)).unwrap();
                counts[h as usize & (SETS - 1)] += 1;
            }
        }
        let empty = counts.iter().filter(|&&c| c == 0).count();
        let most = counts.iter().max().copied().unwrap_or(0);
        // Poisson with mean 10: about one empty set expected, a maximum near 25.
        assert!(empty < 50, "{empty} empty sets");
        assert!(most < 40, "a set of {most}");
    }
}
