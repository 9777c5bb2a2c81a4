//! One direction of a transport flow: the TCP and SCTP reassembly key,
//! the recording hold's key for them, and what every datagram handler is
//! given, written once instead of as a tuple in each.

use std::net::IpAddr;

/// Who sent to whom: addresses and ports, in the packet's direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// The sender's address.
    pub src: IpAddr,
    /// The sender's port.
    pub sport: u16,
    /// The receiver's address.
    pub dst: IpAddr,
    /// The receiver's port.
    pub dport: u16,
}

impl Flow {
    /// Which of `n` shards analyses the media between the two ends: the
    /// pair is ordered and ports paired (even/odd), so both directions of
    /// a stream land on the same shard (RTCP is read by every shard).
    #[inline]
    pub fn shard(&self, n: u64) -> u64 {
        let word = |a: IpAddr, port: u16| {
            let bits = match a {
                IpAddr::V4(v) => u32::from(v) as u128,
                IpAddr::V6(v) => u128::from(v),
            };
            (bits as u64 ^ (bits >> 64) as u64, port & !1)
        };
        let (x, y) = (word(self.src, self.sport), word(self.dst, self.dport));
        let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
        let mut h = lo.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (lo.1 as u64);
        h = (h ^ hi.0).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ (hi.1 as u64) << 17;
        h = (h ^ (h >> 31)).wrapping_mul(0x94D0_49BB_1331_11EB);
        // Multiply-shift maps the hash onto 0..n without a division (~40 cycles).
        (((h ^ (h >> 29)) as u128 * n.max(1) as u128) >> 64) as u64
    }
}

/// The flow of a frame's transport ports.
#[inline]
pub(crate) fn flow(f: &calliper_wire::Frame<'_>, sport: u16, dport: u16) -> Flow {
    Flow { src: f.src, sport, dst: f.dst, dport }
}
