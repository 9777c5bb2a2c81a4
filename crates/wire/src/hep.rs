//! HEP version 3 (the Homer Encapsulation Protocol, sipcapture/HEP): how
//! Kamailio's `siptrace`, OpenSIPS, FreeSWITCH, rtpengine, heplify and
//! captagent hand a captured message, with its addresses, ports and time,
//! to a collector.
//!
//! A message is the magic `HEP3`, its total length (16 bits, the 6-byte
//! header included), then chunks: vendor (16 bits, 0 for the generic
//! chunks), type (16 bits), length (16 bits, its 6-byte header included)
//! and the value. [`Hep::parse`] reads the generic chunks it knows, skips
//! the others (and every vendor's own), and refuses a message whose
//! lengths do not add up; [`Hep::emit`] writes one. Every integer is big
//! endian. The loop over chunks advances at least 6 bytes a chunk.

use crate::{be16, be32};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The port HEP collectors listen on by convention (Homer, heplify-server).
pub const PORT: u16 = 9060;

/// How HEP travels between an agent and a collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HepTransport {
    /// One message per datagram.
    Udp,
    /// Messages back to back on one connection, each framed by the length
    /// its header states ([`stated_len`]).
    Tcp,
}

impl HepTransport {
    /// `udp` or `tcp`, as the command line writes it.
    pub fn name(self) -> &'static str {
        match self {
            HepTransport::Udp => "udp",
            HepTransport::Tcp => "tcp",
        }
    }
}
/// The first four bytes of every HEP3 message.
pub const MAGIC: &[u8; 4] = b"HEP3";

/// The generic chunk types (vendor 0) this module reads or writes, with
/// their values (docs/hep.md has the table).
mod chunk {
    pub(super) const FAMILY: u16 = 0x0001; // IP protocol family, 1 byte: 2 IPv4, 10 IPv6.
    pub(super) const IP_PROTOCOL: u16 = 0x0002; // IP protocol, 1 byte (17 UDP, 6 TCP, 132 SCTP).
    pub(super) const IPV4_SRC: u16 = 0x0003; // IPv4 source address, 4 bytes.
    pub(super) const IPV4_DST: u16 = 0x0004; // IPv4 destination address, 4 bytes.
    pub(super) const IPV6_SRC: u16 = 0x0005; // IPv6 source address, 16 bytes.
    pub(super) const IPV6_DST: u16 = 0x0006; // IPv6 destination address, 16 bytes.
    pub(super) const SRC_PORT: u16 = 0x0007; // Source port, 2 bytes.
    pub(super) const DST_PORT: u16 = 0x0008; // Destination port, 2 bytes.
    pub(super) const TIME_S: u16 = 0x0009; // Capture time, Unix seconds, 4 bytes.
    pub(super) const TIME_US: u16 = 0x000A; // Capture time, microseconds within the second, 4 bytes.
    pub(super) const KIND: u16 = 0x000B; // What the payload is ([`super::kind`]), 1 byte.
    pub(super) const CAPTURE_ID: u16 = 0x000C; // The capture agent's id, 4 bytes.
    pub(super) const AUTH_KEY: u16 = 0x000E; // The authentication key, text.
    pub(super) const PAYLOAD: u16 = 0x000F; // The captured payload.
    pub(super) const PAYLOAD_GZIP: u16 = 0x0010; // The captured payload, compressed (gzip).
    pub(super) const CORRELATION_ID: u16 = 0x0011; // The correlation id (for SIP and its reports, the Call-ID), text.
    pub(super) const VLAN: u16 = 0x0012; // VLAN id, 2 bytes.
    pub(super) const MOS: u16 = 0x0020; // MOS × 100, 2 bytes.
}

/// What a HEP message carries (chunk 0x000b).
pub mod kind {
    /// A SIP message as captured.
    pub const SIP: u8 = 1;
    /// An RTCP report, as JSON (rtpengine's form).
    pub const RTCP_JSON: u8 = 5;
    /// A stream's quality report, as JSON.
    pub const QUALITY_JSON: u8 = 34;
}

/// Why bytes are not a HEP3 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HepError {
    /// No `HEP3` magic.
    NotHep,
    /// Shorter than its header or than the length it states.
    Truncated,
    /// A chunk whose length is below its header's, past the message's
    /// end, or wrong for its type.
    BadChunk(u16),
    /// A chunk every message needs is missing (named).
    Missing(&'static str),
}

impl HepError {
    /// A stable short name for counters.
    pub fn name(&self) -> &'static str {
        match self {
            HepError::NotHep => "hep_not_hep",
            HepError::Truncated => "hep_truncated",
            HepError::BadChunk(_) => "hep_bad_chunk",
            HepError::Missing(_) => "hep_missing_chunk",
        }
    }
}

/// A HEP3 message: what it says of the captured packet, and the payload
/// (borrowed from the input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hep<'a> {
    /// The captured packet's source address.
    pub src: IpAddr,
    /// Its destination address.
    pub dst: IpAddr,
    /// Its source port.
    pub sport: u16,
    /// Its destination port.
    pub dport: u16,
    /// Its IP protocol (17 UDP, 6 TCP, 132 SCTP).
    pub ip_protocol: u8,
    /// When it was captured, ns since the Unix epoch.
    pub ts_ns: i64,
    /// What the payload is ([`kind`]).
    pub kind: u8,
    /// The capture agent's id.
    pub capture_id: u32,
    /// The authentication key, if sent.
    pub auth_key: Option<&'a [u8]>,
    /// The correlation id, if sent.
    pub correlation_id: Option<&'a [u8]>,
    /// The VLAN, if sent.
    pub vlan: Option<u16>,
    /// MOS × 100, if sent.
    pub mos: Option<u16>,
    /// The payload.
    pub payload: &'a [u8],
    /// The payload is gzip-compressed (chunk [`chunk::PAYLOAD_GZIP`]).
    pub compressed: bool,
}

/// A message too long for HEP's 16-bit length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong;

/// Chunks as they are read, before the required ones are checked.
#[derive(Default)]
struct Fields<'a> {
    src4: Option<Ipv4Addr>,
    dst4: Option<Ipv4Addr>,
    src6: Option<Ipv6Addr>,
    dst6: Option<Ipv6Addr>,
    sport: Option<u16>,
    dport: Option<u16>,
    ip_protocol: Option<u8>,
    seconds: Option<u32>,
    micros: u32,
    kind: Option<u8>,
    capture_id: u32,
    auth_key: Option<&'a [u8]>,
    correlation_id: Option<&'a [u8]>,
    vlan: Option<u16>,
    mos: Option<u16>,
    payload: Option<(&'a [u8], bool)>,
}

impl<'a> Fields<'a> {
    /// Takes one generic chunk's value; a fixed-size value of another size
    /// is an error.
    fn take(&mut self, kind: u16, v: &'a [u8]) -> Result<(), HepError> {
        let size = |n: usize| {
            if v.len() == n {
                Ok(v)
            } else {
                Err(HepError::BadChunk(kind))
            }
        };
        match kind {
            chunk::IP_PROTOCOL => self.ip_protocol = Some(size(1)?[0]),
            chunk::IPV4_SRC => self.src4 = Some(<[u8; 4]>::try_from(size(4)?).unwrap().into()),
            chunk::IPV4_DST => self.dst4 = Some(<[u8; 4]>::try_from(size(4)?).unwrap().into()),
            chunk::IPV6_SRC => self.src6 = Some(<[u8; 16]>::try_from(size(16)?).unwrap().into()),
            chunk::IPV6_DST => self.dst6 = Some(<[u8; 16]>::try_from(size(16)?).unwrap().into()),
            chunk::SRC_PORT => self.sport = Some(be16(size(2)?, 0)),
            chunk::DST_PORT => self.dport = Some(be16(size(2)?, 0)),
            chunk::TIME_S => self.seconds = Some(be32(size(4)?, 0)),
            chunk::TIME_US => {
                self.micros = be32(size(4)?, 0);
                if self.micros >= 1_000_000 {
                    return Err(HepError::BadChunk(kind));
                }
            }
            chunk::KIND => self.kind = Some(size(1)?[0]),
            chunk::CAPTURE_ID => self.capture_id = be32(size(4)?, 0),
            chunk::AUTH_KEY => self.auth_key = Some(v),
            chunk::CORRELATION_ID => self.correlation_id = Some(v),
            chunk::VLAN => self.vlan = Some(be16(size(2)?, 0)),
            chunk::MOS => self.mos = Some(be16(size(2)?, 0)),
            chunk::PAYLOAD => self.payload = Some((v, false)),
            chunk::PAYLOAD_GZIP => self.payload = Some((v, true)),
            // The family is told by the addresses themselves.
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<Hep<'a>, HepError> {
        let (src, dst) = match (self.src4, self.dst4, self.src6, self.dst6) {
            (Some(s), Some(d), _, _) => (IpAddr::V4(s), IpAddr::V4(d)),
            (_, _, Some(s), Some(d)) => (IpAddr::V6(s), IpAddr::V6(d)),
            _ => return Err(HepError::Missing("addresses")),
        };
        let (Some(sport), Some(dport)) = (self.sport, self.dport) else {
            return Err(HepError::Missing("ports"));
        };
        let seconds = self.seconds.ok_or(HepError::Missing("time"))?;
        let (payload, compressed) = self.payload.ok_or(HepError::Missing("payload"))?;
        Ok(Hep {
            src,
            dst,
            sport,
            dport,
            ip_protocol: self.ip_protocol.unwrap_or(17),
            // At most 2^32 s and 2^32 µs: well inside i64 ns.
            ts_ns: i64::from(seconds) * 1_000_000_000 + i64::from(self.micros) * 1_000,
            kind: self.kind.ok_or(HepError::Missing("kind"))?,
            capture_id: self.capture_id,
            auth_key: self.auth_key,
            correlation_id: self.correlation_id,
            vlan: self.vlan,
            mos: self.mos,
            payload,
            compressed,
        })
    }
}

impl<'a> Hep<'a> {
    /// A message of `kind` about a UDP packet from `src` to `dst`
    /// (address, port): capture agent 0, no key, correlation id, VLAN or
    /// MOS, the payload as it is. Other fields by struct update.
    pub fn udp(
        kind: u8,
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        ts_ns: i64,
        payload: &'a [u8],
    ) -> Hep<'a> {
        Hep {
            src: src.0,
            dst: dst.0,
            sport: src.1,
            dport: dst.1,
            ip_protocol: crate::ipproto::UDP,
            ts_ns,
            kind,
            capture_id: 0,
            auth_key: None,
            correlation_id: None,
            vlan: None,
            mos: None,
            payload,
            compressed: false,
        }
    }

    /// Reads one message from the start of `data` (bytes past its stated
    /// length are not part of it).
    pub fn parse(data: &'a [u8]) -> Result<Hep<'a>, HepError> {
        if data.len() < 4 || &data[..4] != MAGIC {
            return Err(HepError::NotHep);
        }
        let total = stated_len(data).ok_or(HepError::Truncated)?;
        let msg = data.get(..total).ok_or(HepError::Truncated)?;
        let mut fields = Fields::default();
        let mut off = 6;
        while off < msg.len() {
            let head = msg.get(off..off + 6).ok_or(HepError::Truncated)?;
            let (vendor, kind, len) = (be16(head, 0), be16(head, 2), be16(head, 4) as usize);
            if len < 6 || off + len > msg.len() {
                return Err(HepError::BadChunk(kind));
            }
            if vendor == 0 {
                fields.take(kind, &msg[off + 6..off + len])?;
            }
            off += len;
        }
        fields.finish()
    }

    /// The message's bytes: the chunks above that are set, the payload
    /// last. Fails when they exceed 65 535 bytes.
    pub fn emit(&self) -> Result<Vec<u8>, TooLong> {
        let mut out = Vec::with_capacity(96 + self.payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[0, 0]);
        let mut put = |kind: u16, value: &[u8]| {
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&kind.to_be_bytes());
            out.extend_from_slice(&((6 + value.len()).min(0xFFFF) as u16).to_be_bytes());
            out.extend_from_slice(value);
        };
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                put(chunk::FAMILY, &[2]);
                put(chunk::IP_PROTOCOL, &[self.ip_protocol]);
                put(chunk::IPV4_SRC, &s.octets());
                put(chunk::IPV4_DST, &d.octets());
            }
            (s, d) => {
                put(chunk::FAMILY, &[10]);
                put(chunk::IP_PROTOCOL, &[self.ip_protocol]);
                put(chunk::IPV6_SRC, &v6(s).octets());
                put(chunk::IPV6_DST, &v6(d).octets());
            }
        }
        put(chunk::SRC_PORT, &self.sport.to_be_bytes());
        put(chunk::DST_PORT, &self.dport.to_be_bytes());
        let (s, ns) = (self.ts_ns.div_euclid(1_000_000_000), self.ts_ns.rem_euclid(1_000_000_000));
        put(chunk::TIME_S, &(s.clamp(0, u32::MAX as i64) as u32).to_be_bytes());
        put(chunk::TIME_US, &((ns / 1_000) as u32).to_be_bytes());
        put(chunk::KIND, &[self.kind]);
        put(chunk::CAPTURE_ID, &self.capture_id.to_be_bytes());
        if let Some(k) = self.auth_key {
            put(chunk::AUTH_KEY, k);
        }
        if let Some(c) = self.correlation_id {
            put(chunk::CORRELATION_ID, c);
        }
        if let Some(v) = self.vlan {
            put(chunk::VLAN, &v.to_be_bytes());
        }
        if let Some(m) = self.mos {
            put(chunk::MOS, &m.to_be_bytes());
        }
        let payload_kind = if self.compressed { chunk::PAYLOAD_GZIP } else { chunk::PAYLOAD };
        put(payload_kind, self.payload);
        let total = u16::try_from(out.len()).map_err(|_| TooLong)?;
        out[4..6].copy_from_slice(&total.to_be_bytes());
        Ok(out)
    }
}

/// The length a message at the start of `data` states, if its header is
/// whole and the length can hold it (for splitting a TCP stream too).
pub fn stated_len(data: &[u8]) -> Option<usize> {
    let n = data.get(4..6).map(|b| be16(b, 0) as usize)?;
    (n >= 6).then_some(n)
}

/// An address as IPv6 (IPv4 mapped), for a message whose two ends differ
/// in family.
fn v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sip_over_hep() -> Hep<'static> {
        let (src, dst) =
            (("192.0.2.10".parse().unwrap(), 5060), ("198.51.100.7".parse().unwrap(), 5080));
        Hep {
            capture_id: 2001,
            auth_key: Some(b"secret"),
            correlation_id: Some(b"abc@host"),
            ..Hep::udp(
                kind::SIP,
                src,
                dst,
                1_700_000_000_123_456_000,
                b"OPTIONS sip:a@b SIP/2.0\r\n\r\n",
            )
        }
    }

    /// A message written by hand from the specification's layout: the
    /// magic, the total length, then (vendor, type, length, value) chunks.
    #[test]
    fn reads_a_message_laid_out_by_the_specification() {
        let payload = b"BYE sip:x SIP/2.0\r\n\r\n";
        let mut m = b"HEP3\0\0".to_vec();
        let mut chunk = |t: u16, v: &[u8]| {
            m.extend_from_slice(&[0, 0]);
            m.extend_from_slice(&t.to_be_bytes());
            m.extend_from_slice(&(6 + v.len() as u16).to_be_bytes());
            m.extend_from_slice(v);
        };
        chunk(0x0001, &[10]);
        chunk(0x0002, &[6]);
        chunk(0x0005, &"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        chunk(0x0006, &"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        chunk(0x0007, &5061u16.to_be_bytes());
        chunk(0x0008, &5062u16.to_be_bytes());
        chunk(0x0009, &1_600_000_000u32.to_be_bytes());
        chunk(0x000a, &250_000u32.to_be_bytes());
        chunk(0x000b, &[1]);
        chunk(0x000c, &7u32.to_be_bytes());
        chunk(0x0099, b"an unknown generic chunk");
        chunk(0x000f, payload);
        let total = m.len() as u16;
        m[4..6].copy_from_slice(&total.to_be_bytes());
        m.extend_from_slice(b"trailing bytes are not the message's");
        let h = Hep::parse(&m).unwrap();
        assert_eq!(h.src, "2001:db8::1".parse::<IpAddr>().unwrap());
        assert_eq!(h.dst, "2001:db8::2".parse::<IpAddr>().unwrap());
        assert_eq!((h.sport, h.dport, h.ip_protocol, h.kind), (5061, 5062, 6, 1));
        assert_eq!(h.ts_ns, 1_600_000_000_250_000_000);
        assert_eq!((h.capture_id, h.payload), (7, &payload[..]));
        assert!(!h.compressed);
    }

    #[test]
    fn what_is_emitted_parses_back_the_same() {
        let v4 = sip_over_hep();
        let bytes = v4.emit().unwrap();
        assert_eq!(&bytes[..4], MAGIC);
        assert_eq!(stated_len(&bytes), Some(bytes.len()));
        assert_eq!(Hep::parse(&bytes).unwrap(), v4);
        let v6 = Hep {
            src: "2001:db8::5".parse().unwrap(),
            dst: "2001:db8::6".parse().unwrap(),
            ip_protocol: 6,
            vlan: Some(100),
            mos: Some(412),
            auth_key: None,
            compressed: true,
            kind: kind::QUALITY_JSON,
            ..sip_over_hep()
        };
        assert_eq!(Hep::parse(&v6.emit().unwrap()).unwrap(), v6);
        let big = vec![b'x'; 70_000];
        assert_eq!(Hep { payload: &big, ..sip_over_hep() }.emit(), Err(TooLong));
    }

    /// Every cut and every impossible length is an error, never a panic or
    /// a message with wrong fields.
    #[test]
    fn cut_and_impossible_messages_are_errors() {
        let bytes = sip_over_hep().emit().unwrap();
        for n in 0..bytes.len() {
            assert!(Hep::parse(&bytes[..n]).is_err(), "cut at {n}");
        }
        assert_eq!(Hep::parse(b"HEP2\0\x06"), Err(HepError::NotHep));
        // A chunk length below its header's, or past the message's end.
        for bad in [0u16, 5, 0xFFFF] {
            let mut b = bytes.clone();
            b[10..12].copy_from_slice(&bad.to_be_bytes());
            assert_eq!(Hep::parse(&b), Err(HepError::BadChunk(chunk::FAMILY)), "{bad}");
        }
        // A fixed-size chunk of another size.
        let mut b = bytes.clone();
        let port = b.windows(4).position(|w| w == [0, 7, 0, 8]).unwrap();
        b[port + 3] = 9;
        assert!(Hep::parse(&b).is_err());
        // Microseconds past the second.
        let mut b = bytes.clone();
        let us = b.windows(6).position(|w| w == [0, 0, 0, 0x0A, 0, 10]).unwrap() + 6;
        b[us..us + 4].copy_from_slice(&1_000_000u32.to_be_bytes());
        assert_eq!(Hep::parse(&b), Err(HepError::BadChunk(chunk::TIME_US)));
        // A stated total below the header.
        let mut b = bytes.clone();
        b[4..6].copy_from_slice(&3u16.to_be_bytes());
        assert_eq!(Hep::parse(&b), Err(HepError::Truncated));
        // Without its payload chunk.
        let mut m = sip_over_hep().emit().unwrap();
        let at = m.windows(4).position(|w| w == [0, 0, 0, 0x0F]).unwrap();
        m.truncate(at);
        let total = m.len() as u16;
        m[4..6].copy_from_slice(&total.to_be_bytes());
        assert_eq!(Hep::parse(&m), Err(HepError::Missing("payload")));
    }
}
