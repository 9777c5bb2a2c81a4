//! The relay's datagrams. Every datagram starts with the same 8 bytes —
//! magic, kind, flags and the per-link sequence number — so the receiver can
//! measure link loss from all traffic, not only data.
//!
//! ```text
//! 0      2      3      4               8
//! | 0xCA11 | kind | flags | link_seq (u32) | body...
//! DATA   body: origin u16, dest u16, vport u16, ttl u8, reserved u8, data_seq u32, msg_seq u32, sent_us u64, payload
//! NACK   body: count u16, count × data_seq u32
//! HELLO  body: hello_seq u32, echo_us u64, rx_loss u16 (1/10000), reply u8
//! LSU    body: origin u16, seq u32, count u16, count × (neighbour u16, cost_us u32)
//! LSACK  body: origin u16, seq u32
//! CRTP_STATE body: a cRTP CONTEXT_STATE packet (RFC 2508 §3.3.5)
//! ```
//! On a link that compresses RTP headers, a DATA flagged [`FLAG_CRTP`]
//! carries as payload one byte of cRTP packet kind ([`crtp_kind`]) and the
//! cRTP packet.
//! The link sequence number counts every datagram on a link (loss is measured
//! on all traffic); the data sequence number counts only data on the link, so
//! the receiver NACKs exactly the data it misses. A retransmission gets a new
//! link sequence number and keeps its data sequence number.
//! All integers are big-endian. Decoding checks every length; anything short
//! or unknown is an error, never a panic.

/// Bytes of the common header.
pub const HEADER: usize = 8;
/// Bytes of the DATA header after the common header.
pub const DATA_HEADER: usize = 24;
/// Largest NACK list in one datagram.
pub const MAX_NACKS: usize = 256;
/// Largest link-state update.
pub const MAX_LSU_LINKS: usize = 256;
const MAGIC: [u8; 2] = [0xCA, 0x11];

/// Flag: this DATA is a retransmission.
pub const FLAG_RETRANSMIT: u8 = 1;
/// Flag: this DATA's payload is a cRTP packet (kind byte first).
pub const FLAG_CRTP: u8 = 2;

/// The cRTP packet kinds as the byte before a compressed payload.
pub mod crtp_kind {
    use calliper_crtp::Kind;

    /// The byte for `kind`.
    pub fn to_byte(kind: Kind) -> u8 {
        match kind {
            Kind::Ip => 0,
            Kind::FullHeader => 1,
            Kind::CompressedRtp => 2,
            Kind::CompressedUdp => 3,
            Kind::CompressedNonTcp => 4,
        }
    }

    /// The kind a byte names, if any.
    pub fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            0 => Kind::Ip,
            1 => Kind::FullHeader,
            2 => Kind::CompressedRtp,
            3 => Kind::CompressedUdp,
            4 => Kind::CompressedNonTcp,
            _ => return None,
        })
    }
}

/// Overlay node identifier.
pub type NodeId = u16;

/// A decoded datagram.
#[derive(Debug, Clone, PartialEq)]
pub enum Message<'a> {
    /// Application data travelling from `origin` to `dest`.
    Data(Data<'a>),
    /// The sender is missing these data sequence numbers.
    Nack(Vec<u32>),
    /// Liveness, RTT and the sender's view of loss on the link towards it.
    Hello {
        /// Hello counter.
        seq: u32,
        /// Sender's clock in a hello; the echoed clock in a reply (µs).
        echo_us: u64,
        /// Loss the sender measures on packets it receives over this link (1/10000).
        rx_loss: u16,
        /// True for the answer to a hello.
        reply: bool,
    },
    /// A node's links and their costs.
    Lsu(Lsu),
    /// The cRTP decompressor's CONTEXT_STATE: contexts to refresh.
    CrtpState(&'a [u8]),
    /// Acknowledges an LSU.
    LsAck {
        /// Whose update.
        origin: NodeId,
        /// Which version.
        seq: u32,
    },
    /// Sent when data on the link has paused: the data sequence number the
    /// next data will take, so the receiver finds the last packets before
    /// the pause missing (no later data would show the gap) while they can
    /// still be asked for.
    Tail {
        /// The next data sequence number.
        next_data_seq: u32,
    },
}

/// A data packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Data<'a> {
    /// Node where the packet entered the overlay.
    pub origin: NodeId,
    /// Node where it leaves.
    pub dest: NodeId,
    /// Virtual port of the receiving application.
    pub vport: u16,
    /// Hops left; a packet caught in a loop while routes converge dies at 0.
    pub ttl: u8,
    /// Per-link counter of data (what NACKs name).
    pub data_seq: u32,
    /// Origin's message counter (end-to-end duplicate removal).
    pub msg_seq: u32,
    /// Origin's clock when sent (µs), for delay accounting.
    pub sent_us: u64,
    /// Application bytes.
    pub payload: &'a [u8],
}

/// A link-state update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lsu {
    /// Whose links.
    pub origin: NodeId,
    /// Version; newer replaces older.
    pub seq: u32,
    /// (neighbour, cost in µs) of each live link.
    pub links: Vec<(NodeId, u32)>,
}

/// A datagram with its header fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Datagram<'a> {
    /// Flags (see [`FLAG_RETRANSMIT`]).
    pub flags: u8,
    /// Per-link sequence number.
    pub link_seq: u32,
    /// The message.
    pub msg: Message<'a>,
}

/// Why bytes are not a relay datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Wrong magic: not ours.
    NotRelay,
    /// Shorter than its fields, or a count past the end.
    Truncated,
    /// Unknown kind.
    UnknownKind,
}

const DATA: u8 = 1;
const NACK: u8 = 2;
const HELLO: u8 = 3;
const LSU: u8 = 4;
const LSACK: u8 = 5;
const CRTP_STATE: u8 = 6;
const TAIL: u8 = 7;

fn u16_at(b: &[u8], i: usize) -> Result<u16, DecodeError> {
    b.get(i..i + 2).map(|s| u16::from_be_bytes([s[0], s[1]])).ok_or(DecodeError::Truncated)
}
fn u32_at(b: &[u8], i: usize) -> Result<u32, DecodeError> {
    b.get(i..i + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(DecodeError::Truncated)
}
fn u64_at(b: &[u8], i: usize) -> Result<u64, DecodeError> {
    Ok(((u32_at(b, i)? as u64) << 32) | u32_at(b, i + 4)? as u64)
}

/// Decodes one datagram.
pub fn decode(b: &[u8]) -> Result<Datagram<'_>, DecodeError> {
    if b.len() < HEADER {
        return Err(DecodeError::Truncated);
    }
    if b[..2] != MAGIC {
        return Err(DecodeError::NotRelay);
    }
    let (kind, flags, link_seq) = (b[2], b[3], u32_at(b, 4)?);
    let body = &b[HEADER..];
    let msg = match kind {
        DATA => {
            if body.len() < DATA_HEADER {
                return Err(DecodeError::Truncated);
            }
            Message::Data(Data {
                origin: u16_at(body, 0)?,
                dest: u16_at(body, 2)?,
                vport: u16_at(body, 4)?,
                ttl: body[6],
                data_seq: u32_at(body, 8)?,
                msg_seq: u32_at(body, 12)?,
                sent_us: u64_at(body, 16)?,
                payload: &body[DATA_HEADER..],
            })
        }
        NACK => {
            let n = u16_at(body, 0)? as usize;
            if n > MAX_NACKS {
                return Err(DecodeError::Truncated);
            }
            let seqs = (0..n).map(|i| u32_at(body, 2 + 4 * i)).collect::<Result<_, _>>()?;
            Message::Nack(seqs)
        }
        HELLO => Message::Hello {
            seq: u32_at(body, 0)?,
            echo_us: u64_at(body, 4)?,
            rx_loss: u16_at(body, 12)?,
            reply: *body.get(14).ok_or(DecodeError::Truncated)? != 0,
        },
        LSU => {
            let n = u16_at(body, 6)? as usize;
            if n > MAX_LSU_LINKS {
                return Err(DecodeError::Truncated);
            }
            let links = (0..n)
                .map(|i| Ok((u16_at(body, 8 + 6 * i)?, u32_at(body, 10 + 6 * i)?)))
                .collect::<Result<_, _>>()?;
            Message::Lsu(Lsu { origin: u16_at(body, 0)?, seq: u32_at(body, 2)?, links })
        }
        LSACK => Message::LsAck { origin: u16_at(body, 0)?, seq: u32_at(body, 2)? },
        CRTP_STATE => Message::CrtpState(body),
        TAIL => Message::Tail { next_data_seq: u32_at(body, 0)? },
        _ => return Err(DecodeError::UnknownKind),
    };
    Ok(Datagram { flags, link_seq, msg })
}

/// Encodes a datagram into `out` (cleared first).
pub fn encode(d: &Datagram<'_>, out: &mut Vec<u8>) {
    out.clear();
    let kind = match d.msg {
        Message::Data(_) => DATA,
        Message::Nack(_) => NACK,
        Message::Hello { .. } => HELLO,
        Message::Lsu(_) => LSU,
        Message::LsAck { .. } => LSACK,
        Message::CrtpState(_) => CRTP_STATE,
        Message::Tail { .. } => TAIL,
    };
    out.extend_from_slice(&MAGIC);
    out.push(kind);
    out.push(d.flags);
    out.extend_from_slice(&d.link_seq.to_be_bytes());
    match &d.msg {
        Message::Data(x) => {
            out.extend_from_slice(&x.origin.to_be_bytes());
            out.extend_from_slice(&x.dest.to_be_bytes());
            out.extend_from_slice(&x.vport.to_be_bytes());
            out.extend_from_slice(&[x.ttl, 0]);
            out.extend_from_slice(&x.data_seq.to_be_bytes());
            out.extend_from_slice(&x.msg_seq.to_be_bytes());
            out.extend_from_slice(&x.sent_us.to_be_bytes());
            out.extend_from_slice(x.payload);
        }
        Message::Nack(seqs) => {
            let n = seqs.len().min(MAX_NACKS);
            out.extend_from_slice(&(n as u16).to_be_bytes());
            for s in &seqs[..n] {
                out.extend_from_slice(&s.to_be_bytes());
            }
        }
        Message::Hello { seq, echo_us, rx_loss, reply } => {
            out.extend_from_slice(&seq.to_be_bytes());
            out.extend_from_slice(&echo_us.to_be_bytes());
            out.extend_from_slice(&rx_loss.to_be_bytes());
            out.push(*reply as u8);
        }
        Message::Lsu(l) => {
            out.extend_from_slice(&l.origin.to_be_bytes());
            out.extend_from_slice(&l.seq.to_be_bytes());
            let n = l.links.len().min(MAX_LSU_LINKS);
            out.extend_from_slice(&(n as u16).to_be_bytes());
            for (id, cost) in &l.links[..n] {
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&cost.to_be_bytes());
            }
        }
        Message::LsAck { origin, seq } => {
            out.extend_from_slice(&origin.to_be_bytes());
            out.extend_from_slice(&seq.to_be_bytes());
        }
        Message::CrtpState(b) => out.extend_from_slice(b),
        Message::Tail { next_data_seq } => out.extend_from_slice(&next_data_seq.to_be_bytes()),
    }
}

/// Rewrites the link sequence number and flags of an encoded datagram in place.
pub fn set_link_header(b: &mut [u8], link_seq: u32, flags: u8) {
    if b.len() >= HEADER {
        b[3] = flags;
        b[4..8].copy_from_slice(&link_seq.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let msgs = vec![
            Message::Data(Data {
                origin: 1,
                dest: 9,
                vport: 5004,
                ttl: 16,
                data_seq: 5,
                msg_seq: 77,
                sent_us: 123_456_789,
                payload: b"voice",
            }),
            Message::Nack(vec![1, 5, u32::MAX]),
            Message::Hello { seq: 3, echo_us: 99, rx_loss: 500, reply: true },
            Message::Lsu(Lsu { origin: 4, seq: 8, links: vec![(1, 10_000), (2, 14_230)] }),
            Message::LsAck { origin: 4, seq: 8 },
            Message::CrtpState(&[1, 1, 7, 0x83, 0]),
            Message::Tail { next_data_seq: 0xFFFF_FFFE },
        ];
        let mut buf = Vec::new();
        for msg in msgs {
            let d = Datagram { flags: FLAG_RETRANSMIT, link_seq: 42, msg };
            encode(&d, &mut buf);
            assert_eq!(decode(&buf).unwrap(), d);
            // Every truncation is an error, not a panic.
            for cut in 0..buf.len() {
                // Variable-length bodies decode shorter; nothing else does.
                match decode(&buf[..cut]) {
                    Ok(Datagram { msg: Message::Data(x), .. }) => assert!(x.payload.len() < 5),
                    Ok(Datagram { msg: Message::CrtpState(b), .. }) => assert!(b.len() < 5),
                    r => assert!(r.is_err(), "cut {cut}"),
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = decode(&b);
        }
    }
}
