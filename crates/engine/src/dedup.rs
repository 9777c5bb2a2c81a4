//! Removal of exact duplicate packets.
//!
//! A capture on Linux `any`, or a SPAN port mirroring both directions,
//! delivers each packet twice within microseconds. Counting both copies would
//! report every stream as 100 % duplicated and every call's SIP twice. The
//! filter remembers a hash of each packet's addresses, ports and payload for
//! a short window in a fixed, direct-mapped table (no allocation, O(1)); a
//! packet equal to one seen within the window is dropped and counted. TTL and
//! checksums are not hashed, so a routed packet seen on both sides of the
//! router is one packet. The IPv4 identification is hashed: a sender that
//! sends the same payload again (RFC 4733 repeats its end-of-event packet
//! three times, sequence number and all) gives each copy a new ID, so those
//! stay. IPv6 has no ID outside fragments, so there identical payloads from
//! the same sender within the window are treated as copies.

use calliper_wire::{Frame, Transport};
use std::hash::{BuildHasher, Hash, Hasher};

const SLOTS: usize = 1 << 14;

/// The duplicate filter.
#[derive(Debug)]
pub struct Dedup {
    slots: Box<[(u64, i64)]>,
    window_ns: i64,
    hasher: hashbrown::DefaultHashBuilder,
    /// Packets dropped as duplicates.
    pub removed: u64,
}

impl Dedup {
    /// A filter treating equal packets within `window_ns` as copies.
    pub fn new(window_ns: i64) -> Self {
        Dedup {
            slots: vec![(0, i64::MIN); SLOTS].into_boxed_slice(),
            window_ns,
            hasher: Default::default(),
            removed: 0,
        }
    }

    /// True when this frame is a copy of one seen within the window. Empty
    /// TCP segments are never copies: pure ACKs differ only in fields not
    /// hashed, and nothing here reads them.
    pub fn is_duplicate(&mut self, now: i64, f: &Frame<'_>) -> bool {
        if let Transport::Tcp { payload: [], .. } = f.transport {
            return false;
        }
        let mut h = self.hasher.build_hasher();
        f.src.hash(&mut h);
        f.ip_id.hash(&mut h);
        f.dst.hash(&mut h);
        match f.transport {
            Transport::Udp {
                sport,
                dport,
                payload,
            } => (17u8, sport, dport, payload).hash(&mut h),
            Transport::Tcp {
                sport,
                dport,
                seq,
                flags,
                payload,
            } => (6u8, sport, dport, seq, flags, payload).hash(&mut h),
            Transport::Fragment { frag, payload } => (
                44u8,
                frag.id,
                frag.offset,
                frag.more,
                frag.protocol,
                payload,
            )
                .hash(&mut h),
            Transport::Other { protocol, payload } => (protocol, payload).hash(&mut h),
        }
        let hash = h.finish() | 1;
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
