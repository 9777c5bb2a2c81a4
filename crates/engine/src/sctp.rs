//! SCTP DATA chunks to user messages (SIP over SCTP, RFC 4168).
//!
//! Each DATA chunk carries a whole user message (flags B and E both set) or a
//! piece of one: B starts it, E ends it, and the pieces have consecutive TSNs.
//! Pieces are joined per association direction; a piece that does not follow
//! the one before (loss in the capture, reordering) abandons the message and
//! is counted. Partial messages are capped in number and in size.

use hashbrown::HashMap;
use std::net::IpAddr;

const CHUNK_DATA: u8 = 0;
const FLAG_END: u8 = 0x01;
const FLAG_BEGIN: u8 = 0x02;
/// Partial messages held at once.
const MAX_PARTIAL: usize = 4096;
/// Largest user message joined.
const MAX_MESSAGE: usize = 1 << 20;

/// What the SCTP layer did and gave up on.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SctpCounters {
    /// SCTP packets seen.
    pub packets: u64,
    /// DATA chunks seen.
    pub data_chunks: u64,
    /// User messages delivered (whole or joined).
    pub messages: u64,
    /// Pieces dropped: out of sequence, over the caps, malformed chunks.
    pub dropped_pieces: u64,
}

type Key = (IpAddr, u16, IpAddr, u16);

#[derive(Debug, Default)]
struct Partial {
    next_tsn: u32,
    data: Vec<u8>,
}

/// Joins SCTP DATA chunks into user messages.
#[derive(Debug, Default)]
pub struct Sctp {
    partial: HashMap<Key, Partial>,
    /// Counters.
    pub counters: SctpCounters,
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
    /// Reads one SCTP packet and calls `deliver` with each complete user
    /// message in it.
    pub fn packet(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        p: &[u8],
        mut deliver: impl FnMut(Ports, &[u8]),
    ) -> Option<Ports> {
        self.counters.packets += 1;
        if p.len() < 12 {
            self.counters.dropped_pieces += 1;
            return None;
        }
        let ports = Ports {
            sport: u16::from_be_bytes([p[0], p[1]]),
            dport: u16::from_be_bytes([p[2], p[3]]),
        };
        let key = (src, ports.sport, dst, ports.dport);
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
                self.data(key, flags, &rest[..len], |m| deliver(ports, m));
            }
            // Chunks are padded to four bytes.
            rest = &rest[len.next_multiple_of(4).min(rest.len())..];
        }
        Some(ports)
    }

    fn data(&mut self, key: Key, flags: u8, chunk: &[u8], mut deliver: impl FnMut(&[u8])) {
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
        if begin {
            if self.partial.len() >= MAX_PARTIAL && !self.partial.contains_key(&key) {
                self.counters.dropped_pieces += 1;
                return;
            }
            let p = self.partial.entry(key).or_default();
            if !p.data.is_empty() {
                self.counters.dropped_pieces += 1;
            }
            p.data.clear();
            p.data.extend_from_slice(payload);
            p.next_tsn = tsn.wrapping_add(1);
            return;
        }
        let Some(p) = self.partial.get_mut(&key) else {
            self.counters.dropped_pieces += 1;
            return;
        };
        if p.next_tsn != tsn || p.data.len() + payload.len() > MAX_MESSAGE {
            self.counters.dropped_pieces += 1;
            self.partial.remove(&key);
            return;
        }
        p.data.extend_from_slice(payload);
        p.next_tsn = tsn.wrapping_add(1);
        if end {
            if let Some(p) = self.partial.remove(&key) {
                self.counters.messages += 1;
                deliver(&p.data);
            }
        }
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
            s.packet(a, a, &p, |_, m| got.push(m.to_vec()));
        }
        assert_eq!(got, vec![b"whole".to_vec(), b"joined".to_vec()]);
        // A missing middle piece abandons the message.
        let p3 = packet(&[chunk(2, 10, b"a"), chunk(1, 12, b"c")]);
        s.packet(a, a, &p3, |_, m| got.push(m.to_vec()));
        assert_eq!(got.len(), 2);
        assert_eq!(s.counters.dropped_pieces, 1);
        // Bad chunk lengths stop the walk without a panic.
        s.packet(
            a,
            a,
            &[0; 12]
                .iter()
                .chain(&[0, 3, 0xFF, 0xFF])
                .copied()
                .collect::<Vec<u8>>(),
            |_, _| {},
        );
        assert_eq!(s.counters.dropped_pieces, 2);
    }
}
