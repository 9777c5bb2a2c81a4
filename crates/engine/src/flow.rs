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
        let word = |a: IpAddr| match a {
            IpAddr::V4(v) => u32::from(v) as u64,
            IpAddr::V6(v) => {
                let bits = u128::from(v);
                bits as u64 ^ (bits >> 64) as u64
            }
        };
        shard_of((word(self.src), self.sport), (word(self.dst), self.dport), n)
    }
}

/// [`Flow::shard`] of an IPv4 flow given as numbers (what the skim reads).
#[inline(always)]
pub(crate) fn shard_v4(src: u32, sport: u16, dst: u32, dport: u16, n: u64) -> u64 {
    shard_of((src as u64, sport), (dst as u64, dport), n)
}

/// The shard of the ends `(address word, port)`, in either order: each
/// end is mixed alone and the two added, so no ordering is needed (a few
/// instructions: every worker computes this for every media packet).
#[inline(always)]
fn shard_of(a: (u64, u16), b: (u64, u16), n: u64) -> u64 {
    let mix = |(addr, port): (u64, u16)| {
        let k = (addr.rotate_left(16) ^ (port & !1) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        k ^ (k >> 29)
    };
    let h = mix(a).wrapping_add(mix(b)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    // Multiply-shift maps the hash onto 6n - 1 slots without a division
    // (~40 cycles); the first shard takes five, every other six. The
    // first shard also counts every packet's traffic and delivers
    // signalling, so it analyses less media (BENCHMARKS.md, sessions 36,
    // 38 and 39: with two shards, 5 of 11 evens their instructions).
    let slots = 6 * n.max(1) - 1;
    ((((h as u128 * slots as u128) >> 64) as u64) + 1) / 6
}

/// The flow of a frame's transport ports.
#[inline]
pub(crate) fn flow(f: &calliper_wire::Frame<'_>, sport: u16, dport: u16) -> Flow {
    Flow { src: f.src, sport, dst: f.dst, dport }
}
