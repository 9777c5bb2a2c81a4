//! Keyed authentication of a link: every datagram to a neighbour carries a
//! trailer, a 64-bit counter and a 16-byte keyed BLAKE3 tag over the
//! counter and the datagram, with a key both ends read from a file
//! (`key_file` on the neighbour). The receiver takes a datagram only if the
//! tag is right and the counter new (a 1 024-wide window behind the
//! highest seen), so a forged or replayed DATA, NACK, HELLO, LSU or CRTP_STATE is
//! dropped and counted whatever address it claims.
//!
//! Each direction has its own key, derived from the file's bytes and the
//! two node ids, so a datagram reflected back to its sender is forgery.
//!
//! The counter follows the wall clock's nanoseconds (never below it, one
//! above the last), and a receiver starts by taking nothing older than a
//! minute before its own clock: a restarted node, sender or receiver,
//! neither refuses the other's new datagrams nor takes datagrams recorded
//! more than a minute ago. The two clocks must agree within that minute
//! (NTP); a sender whose clock runs further behind is refused as `replayed`.

use std::io;
use std::path::Path;

/// Bytes a trailer adds to each datagram.
pub const TRAILER: usize = 8 + TAG;
const TAG: usize = 16;
/// Counters this far behind the highest seen are still taken (once each):
/// deep enough for a link that reorders by a few ms at 100 000 packets/s.
const WINDOW: u64 = 1024;
/// How far before its own clock a receiver takes counters at first.
const CLOCK_MARGIN_NS: u64 = 60_000_000_000;
/// What the key file's bytes are turned into a key for (BLAKE3 derive_key).
const CONTEXT: &str = "calliper relay link key v1";
/// And each direction's key from that.
const DIRECTION_CONTEXT: &str = "calliper relay link direction v1";

/// Why a datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Too short for a trailer, or the tag is wrong.
    Forged,
    /// A counter already taken, or older than the window.
    Replayed,
}

/// One link's keys and counters.
pub struct LinkAuth {
    send_key: [u8; 32],
    recv_key: [u8; 32],
    /// The last counter sent.
    last_sent: u64,
    /// The highest counter taken, and which of the `WINDOW` below it were
    /// (bit i of word i / 64 for `highest - i`).
    highest: u64,
    seen: [u64; (WINDOW / 64) as usize],
}

/// Reads a link key: a regular file (not a link) of 16 to 1 024 bytes,
/// both ends the same.
pub fn load_key(path: &Path) -> io::Result<[u8; 32]> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let meta = std::fs::symlink_metadata(path).map_err(named)?;
    let bad = |why: &str| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {why}", path.display()))
    };
    if !meta.is_file() {
        return Err(bad("a link key must be a regular file (not a directory or a symbolic link)"));
    }
    let bytes = std::fs::read(path).map_err(named)?;
    if !(16..=1024).contains(&bytes.len()) {
        return Err(bad("a link key file holds 16 to 1024 bytes (e.g. head -c 32 /dev/urandom)"));
    }
    Ok(blake3::derive_key(CONTEXT, &bytes))
}

impl LinkAuth {
    /// The link from node `local` to node `peer` keyed with the file's
    /// `key`, its counters from the wall clock `now_ns`.
    pub fn new(key: [u8; 32], local: u16, peer: u16, now_ns: u64) -> LinkAuth {
        let direction = |from: u16, to: u16| {
            let mut material = key.to_vec();
            material.extend_from_slice(&from.to_be_bytes());
            material.extend_from_slice(&to.to_be_bytes());
            blake3::derive_key(DIRECTION_CONTEXT, &material)
        };
        LinkAuth {
            send_key: direction(local, peer),
            recv_key: direction(peer, local),
            last_sent: 0,
            highest: now_ns.saturating_sub(CLOCK_MARGIN_NS),
            seen: [0; (WINDOW / 64) as usize],
        }
    }

    fn tag(key: &[u8; 32], counter: [u8; 8], datagram: &[u8]) -> [u8; TAG] {
        let mut h = blake3::Hasher::new_keyed(key);
        h.update(&counter).update(datagram);
        let mut tag = [0u8; TAG];
        tag.copy_from_slice(&h.finalize().as_bytes()[..TAG]);
        tag
    }

    /// The trailer to send after `datagram`, at wall-clock `now_ns`.
    pub fn seal(&mut self, now_ns: u64, datagram: &[u8]) -> [u8; TRAILER] {
        self.last_sent = now_ns.max(self.last_sent + 1);
        let counter = self.last_sent.to_be_bytes();
        let mut t = [0u8; TRAILER];
        t[..8].copy_from_slice(&counter);
        t[8..].copy_from_slice(&Self::tag(&self.send_key, counter, datagram));
        t
    }

    /// The datagram without its trailer, if it is authentic and new.
    pub fn open<'a>(&mut self, sealed: &'a [u8]) -> Result<&'a [u8], Refused> {
        let Some(split) = sealed.len().checked_sub(TRAILER) else {
            return Err(Refused::Forged);
        };
        let (datagram, trailer) = sealed.split_at(split);
        let counter: [u8; 8] = trailer[..8].try_into().map_err(|_| Refused::Forged)?;
        let want = Self::tag(&self.recv_key, counter, datagram);
        // Constant time: where the tags differ tells an attacker nothing.
        let diff = want.iter().zip(&trailer[8..]).fold(0u8, |d, (a, b)| d | (a ^ b));
        if diff != 0 {
            return Err(Refused::Forged);
        }
        self.take(u64::from_be_bytes(counter))?;
        Ok(datagram)
    }

    /// Marks `counter` taken, unless it was or is too old.
    fn take(&mut self, counter: u64) -> Result<(), Refused> {
        if counter > self.highest {
            self.shift(counter - self.highest);
            self.highest = counter;
            self.seen[0] |= 1;
            return Ok(());
        }
        let behind = self.highest - counter;
        if behind >= WINDOW {
            return Err(Refused::Replayed);
        }
        let (word, bit) = ((behind / 64) as usize, behind % 64);
        if self.seen[word] & (1 << bit) != 0 {
            return Err(Refused::Replayed);
        }
        self.seen[word] |= 1 << bit;
        Ok(())
    }

    /// Moves the window up by `by` counters (bit i stands for `highest - i`).
    fn shift(&mut self, by: u64) {
        if by >= WINDOW {
            self.seen = [0; (WINDOW / 64) as usize];
            return;
        }
        let (words, bits) = ((by / 64) as usize, by % 64);
        let n = self.seen.len();
        for i in (0..n).rev() {
            let from = i.checked_sub(words);
            let hi = from.map_or(0, |f| self.seen[f] << bits);
            let lo = match (from.and_then(|f| f.checked_sub(1)), bits) {
                (Some(g), b) if b > 0 => self.seen[g] >> (64 - b),
                _ => 0,
            };
            self.seen[i] = hi | lo;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000_000_000;

    fn pair(key: [u8; 32]) -> (LinkAuth, LinkAuth) {
        (LinkAuth::new(key, 1, 2, NOW), LinkAuth::new(key, 2, 1, NOW))
    }

    #[test]
    fn sealed_datagrams_open_once_and_tampering_is_forgery() {
        let key = blake3::derive_key(CONTEXT, b"0123456789abcdef");
        let (mut a, mut b) = pair(key);
        let sealed: Vec<Vec<u8>> = (0..3)
            .map(|i| {
                let d = vec![i as u8; 40];
                [d.clone(), a.seal(NOW + i, &d).to_vec()].concat()
            })
            .collect();
        // Out of order within the window is fine; twice is not.
        assert_eq!(b.open(&sealed[1]), Ok(&[1u8; 40][..]));
        assert_eq!(b.open(&sealed[0]), Ok(&[0u8; 40][..]));
        assert_eq!(b.open(&sealed[0]), Err(Refused::Replayed));
        assert_eq!(b.open(&sealed[2]), Ok(&[2u8; 40][..]));
        let mut bad = sealed[2].clone();
        bad[5] ^= 1;
        assert_eq!(b.open(&bad), Err(Refused::Forged));
        let mut counter = sealed[2].clone();
        counter[41] ^= 1;
        assert_eq!(b.open(&counter), Err(Refused::Forged), "the counter is covered");
        assert_eq!(b.open(&sealed[2][..10]), Err(Refused::Forged));
        // Another key is forgery; so is a's own datagram sent back to a.
        let (mut other, _) = pair(blake3::derive_key(CONTEXT, b"another key here"));
        let d = [9u8; 40];
        assert_eq!(b.open(&[&d[..], &other.seal(NOW, &d)].concat()), Err(Refused::Forged));
        let mine = [&d[..], &a.seal(NOW + 10, &d)].concat();
        assert_eq!(a.open(&mine), Err(Refused::Forged), "reflected to its sender");
    }

    #[test]
    fn the_window_is_1024_deep_and_old_traffic_is_refused_after_a_restart() {
        let key = [7u8; 32];
        let (mut a, mut b) = pair(key);
        let first = [&b"x"[..], &a.seal(NOW, b"x")].concat();
        let mut later = Vec::new();
        for i in 1..=WINDOW + 5 {
            let s = a.seal(NOW + i, b"y");
            later.push([&b"y"[..], &s].concat());
        }
        // Delivered in reverse: all within 1 024 of the highest are taken.
        let taken = later.iter().rev().filter(|d| b.open(d).is_ok()).count();
        assert_eq!(taken as u64, WINDOW);
        assert_eq!(b.open(&first), Err(Refused::Replayed));
        // A restarted receiver takes nothing recorded over a minute ago.
        let mut restarted = LinkAuth::new(key, 2, 1, NOW + 61_000_000_000);
        assert_eq!(restarted.open(&first), Err(Refused::Replayed));
        // A restarted sender (its clock moved on) is taken at once.
        let mut sender = LinkAuth::new(key, 1, 2, NOW + 5_000_000_000);
        let s = sender.seal(NOW + 5_000_000_000, b"z");
        assert!(b.open(&[&b"z"[..], &s].concat()).is_ok());
    }
}
