//! Tunnels and point-to-point links inside a frame: GRE (with ERSPAN and
//! PPTP's enhanced GRE), GTP-U, PPP and PPPoE sessions. Each returns the next
//! layer for [`crate::run`]'s loop, so nesting never nests calls.

use crate::{be16, DecodeError, Layer, Next, Step, ETH_PPP};

const ETH_ERSPAN2: u16 = 0x88BE;
const ETH_ERSPAN3: u16 = 0x22EB;
const ETH_TEB: u16 = 0x6558;

/// PPP protocol numbers (RFC 1661, IANA): what a PPP frame carries. The
/// header compression ones (RFC 2509, RFC 3544) are `calliper_crtp`'s too.
pub mod ppp_protocol {
    /// A plain IPv4 datagram.
    pub const IPV4: u16 = 0x0021;
    /// A plain IPv6 datagram.
    pub const IPV6: u16 = 0x0057;
    /// Compressed datagrams (CCP, RFC 1962; MPPC/MPPE in PPTP): what they
    /// carry cannot be read.
    pub const COMPRESSED: u16 = 0x00FD;
    /// The same on one link of a multilink bundle.
    pub const COMPRESSED_LINK: u16 = 0x00FB;
    /// FULL_HEADER: the datagram, context id and sequence in its length fields.
    pub const FULL_HEADER: u16 = 0x0061;
    /// COMPRESSED_UDP with an 8-bit context id.
    pub const COMPRESSED_UDP_8: u16 = 0x0067;
    /// COMPRESSED_UDP with a 16-bit context id.
    pub const COMPRESSED_UDP_16: u16 = 0x2067;
    /// COMPRESSED_RTP with an 8-bit context id.
    pub const COMPRESSED_RTP_8: u16 = 0x0069;
    /// COMPRESSED_RTP with a 16-bit context id.
    pub const COMPRESSED_RTP_16: u16 = 0x2069;
    /// COMPRESSED_NON_TCP (RFC 2507 §6 c, d; either id width): a flow
    /// without RTP compression, its IP and UDP headers elided.
    pub const COMPRESSED_NON_TCP: u16 = 0x0065;
    /// CONTEXT_STATE, from the decompressor back to the compressor.
    pub const CONTEXT_STATE: u16 = 0x2065;
}

/// A PPP frame (RFC 1661) as carried by PPTP, PPPoE or a PPP link: the
/// address and control bytes (0xFF 0x03) may be present or compressed
/// away, and the protocol may be one byte (field compression: odd first
/// byte) or two.
pub(crate) fn ppp(data: &[u8]) -> Step<'_> {
    let d = match data {
        [0xFF, 0x03, rest @ ..] => rest,
        _ => data,
    };
    let (protocol, rest) = match d {
        [] => return Err(DecodeError::Truncated("ppp")),
        [p, rest @ ..] if p & 1 == 1 => (u16::from(*p), rest),
        [_] => return Err(DecodeError::Truncated("ppp")),
        [hi, lo, rest @ ..] => (u16::from_be_bytes([*hi, *lo]), rest),
    };
    use ppp_protocol::*;
    match protocol {
        IPV4 => Ok(Next::Layer(Layer::Ipv4(rest))),
        IPV6 => Ok(Next::Layer(Layer::Ipv6(rest))),
        COMPRESSED | COMPRESSED_LINK => Err(DecodeError::NotIp("ppp_compressed")),
        FULL_HEADER | COMPRESSED_UDP_8 | COMPRESSED_UDP_16 | COMPRESSED_RTP_8
        | COMPRESSED_RTP_16 | COMPRESSED_NON_TCP | CONTEXT_STATE => {
            Err(DecodeError::NotIp("ppp_header_compressed"))
        }
        _ => Err(DecodeError::NotIp("ppp_control")),
    }
}

/// A PPPoE session frame (RFC 2516): version/type, code, session id and
/// length, then PPP without address and control bytes.
pub(crate) fn pppoe_session(data: &[u8]) -> Step<'_> {
    if data.len() < 6 {
        return Err(DecodeError::Truncated("pppoe"));
    }
    let len = be16(data, 4) as usize;
    let body = &data[6..];
    ppp(&body[..len.min(body.len())])
}

/// GRE (RFC 2784/2890), including ERSPAN types I, II and III, and version
/// 1, PPTP's enhanced GRE (RFC 2637), which carries PPP.
#[inline(always)]
pub(crate) fn gre(p: &[u8]) -> Step<'_> {
    if p.len() < 4 {
        return Err(DecodeError::Truncated("gre"));
    }
    let flags = p[0];
    let version = p[1] & 0x07;
    if version == 1 {
        return enhanced_gre(p);
    }
    if version != 0 {
        return Err(DecodeError::NotIp("gre_version"));
    }
    let proto = be16(p, 2);
    let mut off = 4;
    if flags & 0x80 != 0 {
        off += 4; // checksum + reserved
    }
    if flags & 0x20 != 0 {
        off += 4; // key
    }
    let has_seq = flags & 0x10 != 0;
    if has_seq {
        off += 4;
    }
    if p.len() < off {
        return Err(DecodeError::Truncated("gre"));
    }
    let inner = &p[off..];
    match proto {
        // ERSPAN type I has no sequence number and no ERSPAN header.
        ETH_ERSPAN2 if !has_seq => Ok(Next::Layer(Layer::Ethernet(inner))),
        ETH_ERSPAN2 => {
            if inner.len() < 8 {
                return Err(DecodeError::Truncated("erspan"));
            }
            Ok(Next::Layer(Layer::Ethernet(&inner[8..])))
        }
        ETH_ERSPAN3 => {
            if inner.len() < 12 {
                return Err(DecodeError::Truncated("erspan"));
            }
            // Optional 8-byte platform-specific subheader when O bit is set.
            let o = inner[11] & 0x01 != 0;
            let hl = if o { 20 } else { 12 };
            if inner.len() < hl {
                return Err(DecodeError::Truncated("erspan"));
            }
            Ok(Next::Layer(Layer::Ethernet(&inner[hl..])))
        }
        ETH_TEB => Ok(Next::Layer(Layer::Ethernet(inner))),
        // PPP (0x880B) and IP go through the EtherType, as after Ethernet.
        other => Ok(Next::Layer(Layer::EtherType(other, inner))),
    }
}

/// Enhanced GRE (RFC 2637 §4.1): protocol 0x880B, payload length, call id,
/// then the sequence and acknowledgement numbers when flagged. A packet
/// with no payload only acknowledges.
fn enhanced_gre(p: &[u8]) -> Step<'_> {
    if p.len() < 8 {
        return Err(DecodeError::Truncated("gre"));
    }
    if be16(p, 2) != ETH_PPP {
        return Err(DecodeError::NotIp("gre_version"));
    }
    let payload_len = be16(p, 4) as usize;
    let mut off = 8;
    if p[0] & 0x10 != 0 {
        off += 4; // sequence number
    }
    if p[1] & 0x80 != 0 {
        off += 4; // acknowledgement number
    }
    let Some(payload) = p.get(off..) else {
        return Err(DecodeError::Truncated("gre"));
    };
    if payload_len == 0 {
        return Err(DecodeError::NotIp("pptp_ack"));
    }
    ppp(&payload[..payload_len.min(payload.len())])
}

/// GTP-U's registered port (3GPP TS 29.281 §4.4.2), where G-PDUs are sent.
pub(crate) const GTPU_PORT: u16 = 2152;
/// The message type of a G-PDU: a user packet in the tunnel.
const GTPU_G_PDU: u8 = 0xFF;

/// The user packet a GTPv1-U message to [`GTPU_PORT`] carries (3GPP TS
/// 29.281 §5), as VoLTE and 5G user planes send their media. `None` when
/// the datagram is not a version-1 G-PDU: echo, error indication and end
/// marker are the tunnel's own signalling, left as UDP.
///
/// The header: flags (version 1, protocol type 1, then E, S and PN),
/// message type, the length of what follows the first 8 bytes, and the
/// TEID. With any of E, S or PN set, 4 more bytes follow (sequence,
/// N-PDU number, the first extension header's type). With E set, each
/// extension header gives its length in 4-byte units and ends with the
/// next one's type (0: the user packet follows). The loop advances at
/// least 4 bytes a header, so it ends within the datagram.
#[inline]
pub(crate) fn gtpu(p: &[u8]) -> Option<Step<'_>> {
    let [flags, GTPU_G_PDU, ..] = *p else {
        return None;
    };
    (flags >> 5 == 1 && flags & 0x10 != 0).then(|| gtpu_pdu(flags, p))
}

fn gtpu_pdu(flags: u8, p: &[u8]) -> Step<'_> {
    let truncated = DecodeError::Truncated("gtpu");
    if p.len() < 8 {
        return Err(truncated);
    }
    let p = &p[..(8 + be16(p, 2) as usize).min(p.len())];
    let mut off = 8;
    if flags & 0x07 != 0 {
        let optional = p.get(8..12).ok_or(truncated)?;
        off = 12;
        let mut next = if flags & 0x04 != 0 { optional[3] } else { 0 };
        while next != 0 {
            let len = *p.get(off).ok_or(truncated)? as usize * 4;
            let header = p.get(off..off + len).filter(|h| !h.is_empty());
            next = header.ok_or(truncated)?[len - 1];
            off += len;
        }
    }
    let inner = &p[off..];
    match inner.first().map(|b| b >> 4) {
        Some(4 | 6) => Ok(Next::Layer(Layer::Ip(inner))),
        _ => Err(DecodeError::NotIp("gtpu_non_ip")),
    }
}
