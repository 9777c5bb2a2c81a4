//! SCTP DATA chunks to user messages (SIP over SCTP, RFC 4168).
//!
//! Each DATA chunk carries a whole user message (flags B and E both set) or a
//! piece of one: B starts it, E ends it, and the pieces have consecutive TSNs.
//! Pieces are joined per association direction; a piece that does not follow
//! the one before (loss in the capture, reordering) abandons the message and
//! is counted. Partial messages are capped in number, in size each and in
//! total, and given up after [`PARTIAL_TIMEOUT_NS`] without a piece; the
//! oldest go first (an activity list, no scan).

use crate::lru::{Idx, KeyedSlab, Links};
use crate::Flow;
use std::net::IpAddr;

const CHUNK_DATA: u8 = 0;
const FLAG_END: u8 = 0x01;
const FLAG_BEGIN: u8 = 0x02;
/// Partial messages held at once.
const MAX_PARTIAL: usize = 4096;
/// Largest user message joined.
const MAX_MESSAGE: usize = 1 << 20;
/// Bytes held in all partial messages together.
pub const MAX_HELD: usize = 16 << 20;
/// A partial message with no new piece for this long is given up (ns).
pub const PARTIAL_TIMEOUT_NS: i64 = 30_000_000_000;

counters! {
    /// What the SCTP layer did and gave up on.
    pub struct SctpCounters {
        /// SCTP packets seen.
        pub packets: u64,
        /// DATA chunks seen.
        pub data_chunks: u64,
        /// User messages delivered (whole or joined).
        pub messages: u64,
        /// Pieces dropped: out of sequence, over the caps, malformed chunks.
        pub dropped_pieces: u64,
        /// Partial messages given up: idle past the timeout, or evicted (oldest
        /// first) to keep within the count and byte caps.
        pub partial_expired: u64,
    }
}

#[derive(Debug)]
struct Partial {
    links: Links,
    key: Flow,
    next_tsn: u32,
    data: Vec<u8>,
}

crate::lru::entry!(Partial, key: Flow);

/// Worst-case heap of the SCTP layer (docs/hostile-input.md): message bytes
/// (capacity up to twice the length) and per partial message its slot and
/// index entry.
pub(crate) fn memory_bound() -> usize {
    use crate::bound::{slab, table};
    2 * MAX_HELD + slab::<Partial>(MAX_PARTIAL) + table::<(Flow, Idx)>(MAX_PARTIAL)
}

/// Joins SCTP DATA chunks into user messages.
#[derive(Debug)]
pub struct Sctp {
    /// Partial messages on one activity list, oldest first.
    partial: KeyedSlab<Partial>,
    /// Bytes in all partial messages.
    held: usize,
    /// Counters.
    pub counters: SctpCounters,
}

impl Default for Sctp {
    fn default() -> Self {
        Sctp {
            partial: KeyedSlab::with_capacity(MAX_PARTIAL),
            held: 0,
            counters: SctpCounters::default(),
        }
    }
}

/// One SCTP packet's ports.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl Sctp {
    /// Reads one SCTP packet seen at `now` and calls `deliver` with each
    /// complete user message in it.
    pub fn packet(
        &mut self,
        now: i64,
        src: IpAddr,
        dst: IpAddr,
        p: &[u8],
        mut deliver: impl FnMut(Ports, &[u8]),
    ) -> Option<Ports> {
        self.counters.packets += 1;
        self.expire(now);
        if p.len() < 12 {
            self.counters.dropped_pieces += 1;
            return None;
        }
        let ports = Ports {
            sport: u16::from_be_bytes([p[0], p[1]]),
            dport: u16::from_be_bytes([p[2], p[3]]),
        };
        let key = Flow { src, sport: ports.sport, dst, dport: ports.dport };
        let mut rest = &p[12..];
        while rest.len() >= 4 {
            let kind = rest[0];
            let flags = rest[1];
            let len = u16::from_be_bytes([rest[2], rest[3]]) as usize;
            if len < 4 || len > rest.len() {
                self.counters.dropped_pieces += 1;
                break;
            }
            if kind == CHUNK_DATA {
                self.data(now, key, flags, &rest[..len], |m| deliver(ports, m));
            }
            // Chunks are padded to four bytes.
            rest = &rest[len.next_multiple_of(4).min(rest.len())..];
        }
        Some(ports)
    }

    fn data(
        &mut self,
        now: i64,
        key: Flow,
        flags: u8,
        chunk: &[u8],
        mut deliver: impl FnMut(&[u8]),
    ) {
        self.counters.data_chunks += 1;
        if chunk.len() < 16 {
            self.counters.dropped_pieces += 1;
            return;
        }
        let tsn = u32::from_be_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        let payload = &chunk[16..];
        let (begin, end) = (flags & FLAG_BEGIN != 0, flags & FLAG_END != 0);
        if begin && end {
            self.counters.messages += 1;
            deliver(payload);
            return;
        }
        let current = self.partial.find(&key);
        if begin {
            if let Some(i) = current {
                // A new message abandons the unfinished one.
                self.counters.dropped_pieces += 1;
                self.remove(i);
            }
            if payload.len() > MAX_MESSAGE || !self.make_room(payload.len()) {
                self.counters.dropped_pieces += 1;
                return;
            }
            let partial = Partial {
                links: Links::default(),
                key,
                next_tsn: tsn.wrapping_add(1),
                data: payload.to_vec(),
            };
            if let Ok(i) = self.partial.insert(partial) {
                self.held += payload.len();
                self.partial.touch(i, 0, now);
            }
            return;
        }
        let Some(i) = current else {
            self.counters.dropped_pieces += 1;
            return;
        };
        let fits = self.partial.get(i).is_some_and(|p| {
            p.next_tsn == tsn && p.data.len().saturating_add(payload.len()) <= MAX_MESSAGE
        });
        if !fits {
            self.counters.dropped_pieces += 1;
            self.remove(i);
            return;
        }
        // Making room may evict this very message (it is the oldest).
        self.partial.touch(i, 0, now);
        if !self.make_room(payload.len()) || self.partial.get(i).is_none() {
            self.counters.dropped_pieces += 1;
            return;
        }
        if let Some(p) = self.partial.get_mut(i) {
            p.data.extend_from_slice(payload);
            p.next_tsn = tsn.wrapping_add(1);
            self.held += payload.len();
        }
        if end {
            if let Some(p) = self.remove(i) {
                self.counters.messages += 1;
                deliver(&p.data);
            }
        }
    }

    /// Evicts the oldest partial messages until `more` bytes and one more
    /// message fit; false if they cannot.
    fn make_room(&mut self, more: usize) -> bool {
        if more > MAX_HELD {
            return false;
        }
        while self.held + more > MAX_HELD || self.partial.is_full() {
            let Some((oldest, _)) = self.partial.oldest(0) else {
                break;
            };
            self.counters.partial_expired += 1;
            self.remove(oldest);
        }
        true
    }

    /// Gives up partial messages idle past the timeout (heads of the list only).
    fn expire(&mut self, now: i64) {
        while let Some(i) = self.partial.idle_past(0, now, PARTIAL_TIMEOUT_NS) {
            self.counters.partial_expired += 1;
            self.remove(i);
        }
    }

    fn remove(&mut self, i: Idx) -> Option<Partial> {
        let p = self.partial.remove(i)?;
        self.held -= p.data.len();
        Some(p)
    }

    /// Whether the association direction has a message in pieces.
    pub fn holds(&self, key: &Flow) -> bool {
        self.partial.holds(key)
    }

    /// Bytes held in partial messages.
    pub fn held(&self) -> usize {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn chunk(flags: u8, tsn: u32, payload: &[u8]) -> Vec<u8> {
        let mut c = vec![0, flags];
        c.extend_from_slice(&((16 + payload.len()) as u16).to_be_bytes());
        c.extend_from_slice(&tsn.to_be_bytes());
        c.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
        c.extend_from_slice(payload);
        while c.len() % 4 != 0 {
            c.push(0);
        }
        c
    }

    fn packet(chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![0x13, 0xC4, 0x13, 0xC4, 0, 0, 0, 0, 0, 0, 0, 0];
        for c in chunks {
            p.extend_from_slice(c);
        }
        p
    }

    #[test]
    fn whole_and_joined_messages() {
        let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut s = Sctp::default();
        let mut got = vec![];
        let p1 = packet(&[chunk(3, 1, b"whole"), chunk(2, 2, b"jo")]);
        let p2 = packet(&[chunk(0, 3, b"in"), chunk(1, 4, b"ed")]);
        for p in [p1, p2] {
            s.packet(0, a, a, &p, |_, m| got.push(m.to_vec()));
        }
        assert_eq!(got, vec![b"whole".to_vec(), b"joined".to_vec()]);
        // A missing middle piece abandons the message.
        let p3 = packet(&[chunk(2, 10, b"a"), chunk(1, 12, b"c")]);
        s.packet(0, a, a, &p3, |_, m| got.push(m.to_vec()));
        assert_eq!(got.len(), 2);
        assert_eq!(s.counters.dropped_pieces, 1);
        // Bad chunk lengths stop the walk without a panic.
        s.packet(
            0,
            a,
            a,
            &[0; 12].iter().chain(&[0, 3, 0xFF, 0xFF]).copied().collect::<Vec<u8>>(),
            |_, _| {},
        );
        assert_eq!(s.counters.dropped_pieces, 2);
    }

    #[test]
    fn partial_messages_are_capped_in_bytes_and_expire() {
        let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut s = Sctp::default();
        let piece = vec![b'x'; 60_000];
        // Begin pieces on many associations (ports vary): far more than the byte cap.
        for port in 0..2_000u16 {
            let mut p = packet(&[chunk(2, 1, &piece)]);
            p[0..2].copy_from_slice(&port.to_be_bytes());
            s.packet(0, a, a, &p, |_, _| panic!("nothing completes"));
            assert!(s.held() <= MAX_HELD);
        }
        assert!(s.counters.partial_expired > 0);
        // Past the timeout, every partial message is given up.
        s.packet(PARTIAL_TIMEOUT_NS, a, a, &packet(&[]), |_, _| {});
        assert_eq!(s.held(), 0);
        assert_eq!(s.partial.len(), 0);
    }
}
