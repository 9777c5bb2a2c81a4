//! The per-packet hashes (duplicate filter, stream key): a folded 64×64→128
//! multiply per 16 bytes (the `wyhash` construction), with independent
//! chunks mixed in parallel rather than chained, since a chain of
//! multiplies is what the general-purpose hashers spent their time on here.
//! Seeded per process, so nobody can aim packets at one slot: every operand
//! of every multiply carries the seed, since a product is zero when either
//! operand is, and an operand an attacker can zero without the seed would
//! make all keys that differ only in the other operand collide.

use std::net::IpAddr;

const K0: u64 = 0xA076_1D64_78BD_642F;
const K1: u64 = 0xE703_7ED1_A0B4_28DB;
const K2: u64 = 0x8EBC_6AF0_9C88_C6E3;
const K3: u64 = 0x5899_65CC_7537_4CC3;

/// A second seed word for the other operand of each multiply.
#[inline(always)]
fn other(seed: u64) -> u64 {
    seed.rotate_left(29) ^ K0
}

/// Multiplies and folds the 128-bit product: every input bit reaches the output.
#[inline(always)]
pub fn mum(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// A seed drawn once per process: every engine (and shard) of a run hashes
/// alike, so their tables agree, while another run's seed is unknown.
pub fn seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        use std::hash::BuildHasher;
        hashbrown::DefaultHashBuilder::default().hash_one(0x5EED_u64)
    })
}

/// An address as one word; IPv6 is folded through a seeded multiply, so
/// which addresses fold alike cannot be known without the seed.
#[inline(always)]
pub fn ip_word(a: IpAddr, seed: u64) -> u64 {
    match a {
        IpAddr::V4(v) => u32::from(v) as u64,
        IpAddr::V6(v) => {
            let x = u128::from(v);
            mum(x as u64 ^ seed ^ K2, (x >> 64) as u64 ^ other(seed) ^ K3) | 1 << 63
        }
    }
}

/// Hash of four words and `bytes` (callers pass a short slice on the packet
/// path: each 16 bytes cost a multiply).
///
/// The terms are XORed, so two equal terms cancel: each operand of each
/// term carries its own rotation (or, for chunks, odd multiple) of the
/// seed, so that no two terms can be made equal, in either order of their
/// operands, without knowing the seed. With public per-position constants
/// a crafted chunk cancelled another and left a third chunk unhashed.
#[inline(always)]
pub fn hash(seed: u64, words: [u64; 4], bytes: &[u8]) -> u64 {
    let s2 = other(seed);
    let h = mum(words[0] ^ seed ^ K0, words[1] ^ s2 ^ K1)
        ^ mum(words[2] ^ seed.rotate_left(17) ^ K2, words[3] ^ s2.rotate_left(23) ^ K3);
    with_bytes(seed, h, bytes)
}

/// [`hash`] of two words: one multiply fewer, for an RTP packet's
/// duplicate-filter hash built on its stream key's (`Dedup::hash_rtp`).
#[inline(always)]
pub fn hash2(seed: u64, words: [u64; 2], bytes: &[u8]) -> u64 {
    let h = mum(words[0] ^ seed ^ K0, words[1] ^ other(seed) ^ K1);
    with_bytes(seed, h, bytes)
}

/// The words' terms `h` with `bytes` and their length mixed in.
#[inline(always)]
fn with_bytes(seed: u64, mut h: u64, bytes: &[u8]) -> u64 {
    let s2 = other(seed);
    let (step, chunk_hi) = (s2.wrapping_shl(1), seed.rotate_left(41) ^ K2);
    // The key of chunk n (from 1) is the odd multiple (2n + 1) of `s2`.
    let mut key = s2;
    let mut rest = bytes;
    while let Some((chunk, after)) = rest.split_first_chunk::<16>() {
        let w = u128::from_le_bytes(*chunk);
        key = key.wrapping_add(step);
        h ^= mum(w as u64 ^ key ^ K1, (w >> 64) as u64 ^ chunk_hi);
        rest = after;
    }
    if !rest.is_empty() {
        let (lo, hi) = tail(rest);
        h ^= mum(lo ^ seed.rotate_left(7) ^ K3 ^ rest.len() as u64, hi ^ s2.rotate_left(53) ^ K0);
    }
    mum(h ^ s2 ^ K0, (bytes.len() as u64) ^ K1 ^ seed)
}

/// Two words from 1 to 15 bytes, every byte in one of them, read with
/// overlapping loads (after wyhash) rather than copied into a buffer; the
/// caller mixes in the length, so overlaps of different lengths differ.
#[inline(always)]
fn tail(b: &[u8]) -> (u64, u64) {
    let n = b.len();
    let word = |at: usize| b[at..at + 8].try_into().map_or(0, u64::from_le_bytes);
    let half = |at: usize| b[at..at + 4].try_into().map_or(0, u32::from_le_bytes) as u64;
    match n {
        8.. => (word(0), word(n - 8)),
        4.. => (half(0), half(n - 4)),
        _ => ((b[0] as u64) << 16 | (b[n / 2] as u64) << 8 | b[n - 1] as u64, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_changes_the_hash() {
        let s = seed();
        let base = hash(s, [1, 2, 3, 4], &[7; 40]);
        for i in 0..4 {
            let mut w = [1, 2, 3, 4];
            w[i] ^= 1 << 40;
            assert_ne!(hash(s, w, &[7; 40]), base, "word {i}");
        }
        // Every byte of every length, whole chunks and tails of 1 to 15.
        for len in 1..=48 {
            let base = hash(s, [1, 2, 3, 4], &[7; 48][..len]);
            for i in 0..len {
                let mut b = [7u8; 48];
                b[i] ^= 1;
                assert_ne!(hash(s, [1, 2, 3, 4], &b[..len]), base, "byte {i} of {len}");
            }
        }
        // Two words: each of them, and the bytes after them.
        let base = hash2(s, [1, 2], &[7; 20]);
        for i in 0..2 {
            let mut w = [1, 2];
            w[i] ^= 1 << 40;
            assert_ne!(hash2(s, w, &[7; 20]), base, "word {i} of two");
        }
        for i in 0..20 {
            let mut b = [7u8; 20];
            b[i] ^= 1;
            assert_ne!(hash2(s, [1, 2], &b), base, "byte {i} after two words");
        }
        assert_ne!(
            hash2(s, [1, 2], &[]),
            hash(s, [1, 2, 0, 0], &[]),
            "two words are their own hash"
        );
        // Equal chunks in different places differ; a zero tail is not the same as no tail.
        assert_ne!(hash(s, [0; 4], &[0; 32]), hash(s, [0; 4], &[0; 16]));
        assert_ne!(hash(s, [0; 4], &[0; 17]), hash(s, [0; 4], &[0; 16]));
        let mut swapped = [0u8; 32];
        swapped[..16].copy_from_slice(&[1; 16]);
        let mut other = [0u8; 32];
        other[16..].copy_from_slice(&[1; 16]);
        assert_ne!(hash(s, [0; 4], &swapped), hash(s, [0; 4], &other));
    }

    /// The attack that stalled the stream index: IPv6 sources whose high
    /// half cancelled the multiply's constant all folded to one word.
    /// Operands that cancel a constant still differ by the seed.
    #[test]
    fn no_operand_zeroes_a_multiply_without_the_seed() {
        let s = seed();
        let prefix = (K3 as u128) << 64;
        let words: std::collections::HashSet<u64> =
            (0..10_000u128).map(|i| ip_word(IpAddr::V6((prefix | i).into()), s)).collect();
        assert_eq!(words.len(), 10_000);
        // The same for payload chunks and words cancelling a constant.
        let mut chunk = [0u8; 16];
        chunk[..8].copy_from_slice(&K1.to_le_bytes());
        let hashes: std::collections::HashSet<u64> = (0..1000u64)
            .map(|i| {
                chunk[8..].copy_from_slice(&i.to_le_bytes());
                hash(s, [0, K1, 0, 0], &chunk)
            })
            .collect();
        assert_eq!(hashes.len(), 1000);
        let words: std::collections::HashSet<u64> =
            (0..1000u64).map(|i| hash(s, [i, K1, K2, i], &[])).collect();
        assert_eq!(words.len(), 1000);
    }

    /// Two terms that public constants alone made equal cancelled: two
    /// chunks whose low words differed by the position constants (leaving
    /// any third chunk unhashed), or the tail against the first two words
    /// (leaving ports and lengths unhashed). Each pair, varied in step,
    /// must now change the hash.
    #[test]
    fn no_two_terms_cancel_without_the_seed() {
        let s = seed();
        let chunk = |lo: u64, hi: u64| [lo.to_le_bytes(), hi.to_le_bytes()].concat();
        let cancelling_chunks = |lo: u64, hi: u64| {
            let partner = lo ^ K1.wrapping_mul(1) ^ K1.wrapping_mul(3);
            [chunk(lo, hi), vec![0; 16], chunk(partner, hi)].concat()
        };
        let hashes: std::collections::HashSet<u64> = (0..64u64)
            .map(|i| hash(s, [1, 2, 3, 4], &cancelling_chunks(i * 0x9E37, i ^ 0xABCD)))
            .collect();
        assert_eq!(hashes.len(), 64, "chunks cancel");
        // The tail against the words: an 8-byte tail is read as lo = hi = t;
        // with t = w0 = w1 ^ K1 ^ K3 ^ 8 its term was the words' swapped.
        let tail_cancelling = |w1: u64| {
            let w0 = w1 ^ K1 ^ K3 ^ 8;
            hash(s, [w0, w1, 3, 4], &w0.to_le_bytes())
        };
        let hashes: std::collections::HashSet<u64> =
            (0..64u64).map(|i| tail_cancelling(7 * i)).collect();
        assert_eq!(hashes.len(), 64, "the tail cancels the words");
        let tail_cancelling_two = |w1: u64| {
            let w0 = w1 ^ K1 ^ K3 ^ 8;
            hash2(s, [w0, w1], &w0.to_le_bytes())
        };
        let hashes: std::collections::HashSet<u64> =
            (0..64u64).map(|i| tail_cancelling_two(7 * i)).collect();
        assert_eq!(hashes.len(), 64, "the tail cancels the two words");
        // The words against each other: w3 = w0 ^ K0 ^ K3, w2 = w1 ^ K1 ^ K2.
        let hashes: std::collections::HashSet<u64> =
            (0..64u64).map(|i| hash(s, [i, 5 * i, (5 * i) ^ K1 ^ K2, i ^ K0 ^ K3], &[])).collect();
        assert_eq!(hashes.len(), 64, "the words cancel each other");
    }

    #[test]
    fn low_and_high_bits_spread() {
        // Sequential keys fill the index's home slots (high bits) and the
        // filter's slots (low bits) evenly.
        let s = seed();
        let mut low = [0u32; 256];
        let mut high = [0u32; 256];
        for i in 0..256 * 64u64 {
            let h = hash(s, [i, 0, 0, 0], &[]);
            low[(h & 255) as usize] += 1;
            high[(h >> 56) as usize] += 1;
        }
        for b in low.iter().chain(&high) {
            assert!((24..=112).contains(b), "bucket of {b}, expected about 64");
        }
    }
}
