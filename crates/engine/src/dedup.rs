//! Removal of exact duplicate packets.
//!
//! A capture on Linux `any`, or a SPAN port mirroring both directions,
//! delivers each packet twice within microseconds. Counting both copies would
//! report every stream as 100 % duplicated and every call's SIP twice. The
//! filter remembers a hash of each packet's addresses, ports and first 64
//! payload bytes (with the length) for
//! a short window in a fixed, direct-mapped table (no allocation, O(1)); a
//! packet equal to one seen within the window is dropped and counted. TTL and
//! checksums are not hashed, so a routed packet seen on both sides of the
//! router is one packet. The IPv4 identification is hashed: a sender that
//! sends the same payload again (RFC 4733 repeats its end-of-event packet
//! three times, sequence number and all) gives each copy a new ID, so those
//! stay. IPv6 has no ID outside fragments, so there identical payloads from
//! the same sender within the window are treated as copies.

use calliper_wire::{Frame, Transport};
use std::hash::BuildHasher;
use std::net::IpAddr;

/// Multiply-rotate mixing over words, seeded per process.
struct Mix(u64);

impl Mix {
    fn add(&mut self, w: u64) {
        self.0 = (self.0 ^ w)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
    fn finish(&self) -> u64 {
        let x = self.0 ^ (self.0 >> 32);
        x.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ (x >> 29)
    }
}

fn ip_word(a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => u32::from(v) as u64,
        IpAddr::V6(v) => {
            let x = u128::from(v);
            (x as u64) ^ ((x >> 64) as u64).rotate_left(17)
        }
    }
}

const SLOTS: usize = 1 << 14;

/// The duplicate filter.
#[derive(Debug)]
pub struct Dedup {
    slots: Box<[(u64, i64)]>,
    window_ns: i64,
    seed: u64,
    /// Packets dropped as duplicates.
    pub removed: u64,
}

impl Dedup {
    /// A filter treating equal packets within `window_ns` as copies.
    pub fn new(window_ns: i64) -> Self {
        Dedup {
            slots: vec![(0, i64::MIN); SLOTS].into_boxed_slice(),
            window_ns,
            // A per-process seed, so nobody can aim packets at one slot.
            seed: hashbrown::DefaultHashBuilder::default().hash_one(0x5EED_u64) | 1,
            removed: 0,
        }
    }

    /// True when this frame is a copy of one seen within the window. Empty
    /// TCP segments are never copies: pure ACKs differ only in fields not
    /// hashed, and nothing here reads them.
    pub fn is_duplicate(&mut self, now: i64, f: &Frame<'_>) -> bool {
        self.hash(f).is_some_and(|h| self.check(now, h))
    }

    /// Starts loading the slot of a frame's hash (from [`Dedup::hash`]).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        crate::prefetch::prefetch(&self.slots[hash as usize & (SLOTS - 1)]);
    }

    /// The frame's hash, or None for frames never treated as copies.
    pub fn hash(&self, f: &Frame<'_>) -> Option<u64> {
        let (kind, a, b, payload) = match f.transport {
            Transport::Tcp { payload: [], .. } => return None,
            Transport::Udp {
                sport,
                dport,
                payload,
            } => (17u64, sport as u64, dport as u64, payload),
            Transport::Tcp {
                sport,
                dport,
                seq,
                flags,
                payload,
            } => (
                6 | (flags as u64) << 8,
                sport as u64,
                ((dport as u64) << 32) | seq as u64,
                payload,
            ),
            Transport::Fragment { frag, payload } => (
                44 | (frag.protocol as u64) << 8 | (frag.more as u64) << 16,
                frag.id as u64,
                frag.offset as u64,
                payload,
            ),
            Transport::Other { protocol, payload } => (protocol as u64, 0, 0, payload),
        };
        let mut h = Mix(self.seed);
        h.add(kind | (f.ip_id.map_or(1 << 20, |i| i as u64) << 24) | (payload.len() as u64) << 44);
        h.add(a << 32 | b);
        h.add(ip_word(f.src));
        h.add(ip_word(f.dst));
        // The first 64 bytes tell packets apart (RTP and TCP headers are in
        // them); hashing all of a 1 500-byte payload would cost more than the rest.
        let head = &payload[..payload.len().min(64)];
        let mut words = head.chunks_exact(8);
        for w in &mut words {
            h.add(u64::from_le_bytes([
                w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
            ]));
        }
        let mut tail = [0u8; 8];
        tail[..words.remainder().len()].copy_from_slice(words.remainder());
        h.add(u64::from_le_bytes(tail));
        Some(h.finish() | 1)
    }

    /// True when a frame with this hash was seen within the window; else
    /// remembers it.
    pub fn check(&mut self, now: i64, hash: u64) -> bool {
        let slot = &mut self.slots[hash as usize & (SLOTS - 1)];
        let dup = slot.0 == hash && now.wrapping_sub(slot.1) <= self.window_ns && now >= slot.1;
        if dup {
            self.removed += 1;
        } else {
            *slot = (hash, now);
        }
        dup
    }
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
            ip_id: Some(1),
            transport: Transport::Udp {
                sport: 4000,
                dport: 5000,
                payload,
            },
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
}
