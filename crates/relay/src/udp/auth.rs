//! Keyed authentication of a link: every datagram to a neighbour carries a
//! trailer, a 64-bit counter and a 16-byte keyed BLAKE3 tag over the
//! counter and the datagram, with a key both ends read from a file
//! (`key_file` on the neighbour). The receiver takes a datagram only if the
//! tag is right and the counter new (a 64-wide window behind the highest
//! seen), so a forged or replayed DATA, NACK, HELLO, LSU or CRTP_STATE is
//! dropped and counted whatever address it claims.
//!
//! The counter starts at the wall clock's nanoseconds, so a restarted node
//! continues above what it sent before (a clock stepped back across a
//! restart leaves its datagrams refused until the clock passes the old
//! counter: counted as `replayed`).

use std::io;
use std::path::Path;

/// Bytes a trailer adds to each datagram.
pub const TRAILER: usize = 8 + TAG;
const TAG: usize = 16;
/// Counters this far behind the highest seen are still taken (once each).
const WINDOW: u64 = 64;
/// What the key file's bytes are turned into a key for (BLAKE3 derive_key).
const CONTEXT: &str = "calliper relay link key v1";

/// Why a datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Too short for a trailer, or the tag is wrong.
    Forged,
    /// A counter already taken, or older than the window.
    Replayed,
}

/// One link's key and counters.
pub struct LinkAuth {
    key: [u8; 32],
    /// The next counter to send.
    next: u64,
    /// The highest counter taken, and which of the `WINDOW` below it were.
    highest: u64,
    seen: u64,
}

/// Reads a link key: a regular file (not a link) of 16 to 1 024 bytes,
/// both ends the same.
pub fn load_key(path: &Path) -> io::Result<[u8; 32]> {
    let meta = std::fs::symlink_metadata(path)?;
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: {why}", path.display()),
        )
    };
    if !meta.is_file() {
        return Err(bad("a link key must be a regular file, not a link"));
    }
    let bytes = std::fs::read(path)?;
    if !(16..=1024).contains(&bytes.len()) {
        return Err(bad(
            "a link key file holds 16 to 1024 bytes (e.g. head -c 32 /dev/urandom)",
        ));
    }
    Ok(blake3::derive_key(CONTEXT, &bytes))
}

impl LinkAuth {
    /// A link keyed with `key`, sending counters from `start`.
    pub fn new(key: [u8; 32], start: u64) -> LinkAuth {
        LinkAuth {
            key,
            next: start,
            highest: 0,
            seen: 0,
        }
    }

    fn tag(&self, counter: [u8; 8], datagram: &[u8]) -> [u8; TAG] {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(&counter).update(datagram);
        let mut tag = [0u8; TAG];
        tag.copy_from_slice(&h.finalize().as_bytes()[..TAG]);
        tag
    }

    /// The trailer to send after `datagram`.
    pub fn seal(&mut self, datagram: &[u8]) -> [u8; TRAILER] {
        let counter = self.next.to_be_bytes();
        self.next = self.next.wrapping_add(1);
        let mut t = [0u8; TRAILER];
        t[..8].copy_from_slice(&counter);
        t[8..].copy_from_slice(&self.tag(counter, datagram));
        t
    }

    /// The datagram without its trailer, if it is authentic and new.
    pub fn open<'a>(&mut self, sealed: &'a [u8]) -> Result<&'a [u8], Refused> {
        let Some(split) = sealed.len().checked_sub(TRAILER) else {
            return Err(Refused::Forged);
        };
        let (datagram, trailer) = sealed.split_at(split);
        let counter: [u8; 8] = trailer[..8].try_into().map_err(|_| Refused::Forged)?;
        let want = self.tag(counter, datagram);
        // Constant time: where the tags differ tells an attacker nothing.
        let diff = want
            .iter()
            .zip(&trailer[8..])
            .fold(0u8, |d, (a, b)| d | (a ^ b));
        if diff != 0 {
            return Err(Refused::Forged);
        }
        self.take(u64::from_be_bytes(counter))?;
        Ok(datagram)
    }

    /// Marks `counter` taken, unless it was or is too old.
    fn take(&mut self, counter: u64) -> Result<(), Refused> {
        if counter > self.highest {
            let shift = counter - self.highest;
            self.seen = if shift >= WINDOW {
                0
            } else {
                self.seen << shift
            };
            // Bit 0 stands for `highest` itself.
            self.seen |= 1;
            self.highest = counter;
            return Ok(());
        }
        let behind = self.highest - counter;
        if behind >= WINDOW || self.seen & (1 << behind) != 0 {
            return Err(Refused::Replayed);
        }
        self.seen |= 1 << behind;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_datagrams_open_once_and_tampering_is_forgery() {
        let key = blake3::derive_key(CONTEXT, b"0123456789abcdef");
        let (mut a, mut b) = (LinkAuth::new(key, 1000), LinkAuth::new(key, 0));
        let sealed: Vec<Vec<u8>> = (0..3)
            .map(|i| {
                let d = vec![i as u8; 40];
                [d.clone(), a.seal(&d).to_vec()].concat()
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
        assert_eq!(
            b.open(&counter),
            Err(Refused::Forged),
            "the counter is covered"
        );
        assert_eq!(b.open(&sealed[2][..10]), Err(Refused::Forged));
        // Another key is forgery.
        let mut other = LinkAuth::new(blake3::derive_key(CONTEXT, b"another key here"), 5000);
        let d = [9u8; 40];
        assert_eq!(
            b.open(&[&d[..], &other.seal(&d)].concat()),
            Err(Refused::Forged)
        );
    }

    #[test]
    fn counters_older_than_the_window_are_replays() {
        let key = [7u8; 32];
        let (mut a, mut b) = (LinkAuth::new(key, 10), LinkAuth::new(key, 0));
        let first = [&b"x"[..], &a.seal(b"x")].concat();
        for _ in 0..WINDOW {
            let s = a.seal(b"y");
            assert!(b.open(&[&b"y"[..], &s].concat()).is_ok());
        }
        assert_eq!(b.open(&first), Err(Refused::Replayed));
        // A restarted sender (a later clock) is taken at once.
        let mut restarted = LinkAuth::new(key, 1_000_000);
        let s = restarted.seal(b"z");
        assert!(b.open(&[&b"z"[..], &s].concat()).is_ok());
    }
}
