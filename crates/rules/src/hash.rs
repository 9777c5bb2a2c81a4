//! The table's hashes: folded 64×64→128 multiplies (the `wyhash` step),
//! seeded per table, since the packets are an attacker's: every operand of
//! every multiply carries a seed word.

/// Folded 64×64→128 multiply (the `wyhash` step).
#[inline(always)]
fn mum(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Hash seeds, drawn per table.
#[derive(Clone, Copy)]
pub(crate) struct Seeds([u64; 4]);

impl Seeds {
    pub(crate) fn new() -> Seeds {
        use std::hash::BuildHasher;
        let h = hashbrown::DefaultHashBuilder::default();
        Seeds([0u64, 1, 2, 3].map(|i| h.hash_one(i)))
    }

    /// A masked address (the tuple space), salted by its group: one multiply.
    #[inline(always)]
    pub(crate) fn one(&self, a: u128, salt: u64) -> u64 {
        let s = &self.0;
        mum(a as u64 ^ s[0], (a >> 64) as u64 ^ s[3] ^ salt)
    }

    /// One end of a flow.
    #[inline(always)]
    fn end(&self, ip: u128, port: u16) -> u64 {
        let s = &self.0;
        mum(ip as u64 ^ s[0], ((ip >> 64) as u64 ^ s[1]) ^ (port as u64).rotate_right(16))
    }

    /// An exact flow, the same both ways round (the ends' hashes are added).
    #[inline(always)]
    pub(crate) fn flow(&self, vlan: u16, protocol: u8, a: (u128, u16), b: (u128, u16)) -> u64 {
        let ends = self.end(a.0, a.1).wrapping_add(self.end(b.0, b.1));
        mum(ends ^ self.0[2], (protocol as u64 | (vlan as u64) << 8) ^ self.0[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys that differ in a few bits spread over a table's buckets.
    #[test]
    fn exact_flows_spread() {
        let s = Seeds::new();
        let n = 50_000u32;
        let mut buckets = vec![0u32; 1 << 16];
        let mut top = vec![0u32; 128];
        for i in 0..n {
            let a = (0xffff_0a00_0000u128 + i as u128, 5060);
            let b = (0xffff_0b00_0000u128 + i as u128, 5060);
            let h = s.flow(u16::MAX, 17, a, b);
            buckets[(h & 0xffff) as usize] += 1;
            top[(h >> 57) as usize] += 1;
        }
        let max = *buckets.iter().max().unwrap();
        let empty = buckets.iter().filter(|&&c| c == 0).count();
        eprintln!(
            "max per bucket {max}, empty {empty} of 65536, top7 max {}",
            top.iter().max().unwrap()
        );
        // Uniform: about 30 500 empty, a largest bucket of about 8.
        assert!(max < 12 && empty < 32_000, "{max} {empty}");
    }
}
