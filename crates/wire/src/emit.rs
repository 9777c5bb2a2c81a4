//! Building frames: the emit side of the decoder, so the traffic generator,
//! the tests, the benches and the fuzz targets write each header layout from
//! one definition (and the decoder's tests check them against each other).
//!
//! Lengths saturate at 0xFFFF: a fuzz target may ask for more payload than
//! a header can describe, and the decoder must then see the lie.

use std::net::{Ipv4Addr, Ipv6Addr};

/// EtherTypes the builders use.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// IPv6.
    pub const IPV6: u16 = 0x86DD;
    /// An IEEE 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
}

/// A 16-bit length field for `n` bytes (saturating).
fn len16(n: usize) -> [u8; 2] {
    (n.min(0xFFFF) as u16).to_be_bytes()
}

/// A UDP header and payload (checksum 0: none, as IPv4 allows).
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::with_capacity(8 + payload.len());
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&len16(8 + payload.len()));
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// A TCP header (data offset 5, window 65535, checksum 0) and payload.
pub fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(20 + payload.len());
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xFF, 0xFF, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

/// An IPv4 header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4 {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// The protocol of the payload ([`crate::ipproto`]).
    pub protocol: u8,
    /// Identification.
    pub id: u16,
    /// Flags and fragment offset, as the header's 16-bit field.
    pub frag: u16,
    /// Time to live.
    pub ttl: u8,
}

impl Ipv4 {
    /// A header from `src` to `dst` carrying `protocol`: ID 0, no flags, TTL 64.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8) -> Ipv4 {
        Ipv4 { src, dst, protocol, id: 0, frag: 0, ttl: 64 }
    }

    /// The packet: this header (with its checksum) and `payload`.
    pub fn emit(&self, payload: &[u8]) -> Vec<u8> {
        let mut h = Vec::with_capacity(20 + payload.len());
        h.extend_from_slice(&[0x45, 0]);
        h.extend_from_slice(&len16(20 + payload.len()));
        h.extend_from_slice(&self.id.to_be_bytes());
        h.extend_from_slice(&self.frag.to_be_bytes());
        h.extend_from_slice(&[self.ttl, self.protocol, 0, 0]);
        h.extend_from_slice(&self.src.octets());
        h.extend_from_slice(&self.dst.octets());
        let sum = ipv4_checksum(&h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        h.extend_from_slice(payload);
        h
    }
}

/// An RTP packet (RFC 3550 §5.1): version 2, no padding, extension or
/// CSRC; `pt` carries the marker bit in its top bit, as on the wire.
pub fn rtp(pt: u8, seq: u16, ts: u32, ssrc: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(12 + payload.len());
    p.extend_from_slice(&[0x80, pt]);
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// A GTPv1-U G-PDU (3GPP TS 29.281 §5) carrying `user_packet`: with a
/// sequence number when given, and extension headers as (type, contents)
/// (contents 2, 6, 10, … bytes long: each header is a whole number of
/// 4-byte units with its length and next-type bytes).
pub fn gtpu(
    teid: u32,
    sequence: Option<u16>,
    extensions: &[(u8, &[u8])],
    user_packet: &[u8],
) -> Vec<u8> {
    let mut flags = 0x30; // version 1, protocol type GTP
    if sequence.is_some() {
        flags |= 0x02;
    }
    if !extensions.is_empty() {
        flags |= 0x04;
    }
    let mut rest = Vec::new();
    if flags & 0x07 != 0 {
        rest.extend_from_slice(&sequence.unwrap_or(0).to_be_bytes());
        rest.push(0); // N-PDU number
        rest.push(extensions.first().map_or(0, |e| e.0));
    }
    for (i, (_, contents)) in extensions.iter().enumerate() {
        assert!((contents.len() + 2) % 4 == 0, "extension header size");
        rest.push(((contents.len() + 2) / 4) as u8);
        rest.extend_from_slice(contents);
        rest.push(extensions.get(i + 1).map_or(0, |e| e.0));
    }
    rest.extend_from_slice(user_packet);
    let mut p = vec![flags, 0xFF];
    p.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    p.extend_from_slice(&teid.to_be_bytes());
    p.extend_from_slice(&rest);
    p
}

/// The Internet checksum (RFC 1071) of `data` folded onto `sum`: 0 when
/// a header with its checksum field included is correct. `sum` carries a
/// pseudo-header's part, or another piece's complemented result. The one
/// definition: the builders here and the cRTP crate use it.
pub fn checksum(data: &[u8], sum: u32) -> u16 {
    let mut sum = sum;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// The Internet checksum of an IPv4 header whose checksum field is zero.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    checksum(header, 0)
}

/// An IPv6 header (hop limit 64, no extension headers) and payload.
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::with_capacity(40 + payload.len());
    h.extend_from_slice(&[0x60, 0, 0, 0]);
    h.extend_from_slice(&len16(payload.len()));
    h.extend_from_slice(&[next_header, 64]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(payload);
    h
}

/// An Ethernet frame (from 02:00:00:00:00:01 to 02:00:00:00:00:02) with
/// the given 802.1Q VLAN tags, outermost first.
pub fn ethernet(vlans: &[u16], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + 4 * vlans.len() + payload.len());
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    for v in vlans {
        f.extend_from_slice(&ethertype::VLAN.to_be_bytes());
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The EtherType of an IP packet, by its version nibble.
pub fn ethertype_of(ip: &[u8]) -> u16 {
    if ip.first().is_some_and(|b| b >> 4 == 6) {
        ethertype::IPV6
    } else {
        ethertype::IPV4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, ipproto, Transport};

    #[test]
    fn an_rtp_packet_built_parses_back() {
        let p = rtp(0x80 | 18, 7, 160, 0xDEAD_BEEF, &[0x55; 20]);
        let h = crate::rtp::RtpHeader::parse(&p).unwrap();
        assert_eq!(
            (h.marker, h.payload_type, h.seq, h.timestamp, h.ssrc),
            (true, 18, 7, 160, 0xDEAD_BEEF)
        );
        assert_eq!((h.header_len, h.payload_len, h.padding), (12, 20, 0));
    }

    /// RFC 1071 §3's worked example, at an even and an odd length.
    #[test]
    fn the_checksum_gives_the_published_sums() {
        let rfc1071 = [0x00, 0x01, 0xF2, 0x03, 0xF4, 0xF5, 0xF6, 0xF7];
        assert_eq!(checksum(&rfc1071, 0), !0xDDF2);
        // Odd: the last byte is padded with zero: 0001 + F203 + F4F5 + F600
        // = 2DCF9, folded DCFB.
        assert_eq!(checksum(&rfc1071[..7], 0), !0xDCFB);
    }

    #[test]
    fn what_is_built_decodes_to_what_was_asked() {
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let ip = Ipv4 { id: 7, ..Ipv4::new(a, b, ipproto::UDP) }.emit(&udp(5060, 5062, b"hi"));
        assert_eq!(ipv4_checksum(&ip[..20]), 0, "a header with its sum sums to zero");
        let frame = ethernet(&[10, 20], ethertype_of(&ip), &ip);
        let f = decode(1, &frame).unwrap();
        assert_eq!((f.src, f.dst, f.ip_id), (a.into(), b.into(), Some(7)));
        assert_eq!(f.transport, Transport::Udp { sport: 5060, dport: 5062, payload: b"hi" });
        let (a6, b6) = (Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED);
        let ip = ipv6(a6, b6, ipproto::TCP, &tcp(1, 2, 3, 0x18, b"x"));
        let frame = ethernet(&[], ethertype_of(&ip), &ip);
        let f = decode(1, &frame).unwrap();
        assert_eq!((f.src, f.dst), (a6.into(), b6.into()));
        assert!(matches!(f.transport, Transport::Tcp { seq: 3, payload: b"x", .. }));
    }

    /// The checksum of RFC 1071's example header (as Wikipedia works it).
    #[test]
    fn the_checksum_of_a_known_header() {
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_checksum(&h), 0xb861);
    }
}
