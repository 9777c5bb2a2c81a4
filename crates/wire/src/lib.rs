//! Zero-copy decoding of captured frames down to the transport payload.
//!
//! [`decode`] walks link layer → (VLAN/QinQ, MPLS) → IPv4/IPv6 (extension
//! headers) → tunnels (IP-in-IP, GRE and ERSPAN, VXLAN, GTP-U) → UDP/TCP and returns a
//! [`Frame`] whose payload borrows the input. Nothing allocates. Every length
//! is checked before it is used, so no input can make decoding panic; bad input
//! yields a [`DecodeError`] that names the layer, for the caller to count.
//!
//! The innermost IP header wins: a tunnelled packet is reported with the inner
//! addresses, which is what SIP and RTP correlation need.

pub mod emit;
pub mod hep;
pub mod ipv4;
mod outer;
mod plain;
pub mod rtcp;
pub mod rtp;
mod transport_layer;
mod tunnel;

pub use outer::outer_ip;
pub use plain::{decode_plain, skim_udp4, Udp4};
use transport_layer::{frame, transport, udp_parts, vxlan_inner};
pub use tunnel::ppp_protocol;
use tunnel::{gre, ppp, pppoe_session};

use std::net::{IpAddr, Ipv6Addr};

/// Link-layer header types (the pcap LINKTYPE_ values we decode).
pub mod linktype {
    /// BSD loopback: 4-byte address family in host byte order.
    pub const NULL: u16 = 0;
    /// Ethernet II.
    pub const ETHERNET: u16 = 1;
    /// PPP (RFC 1661): as a PPP link carries it, or `calliper crtp compress` writes.
    pub const PPP: u16 = 9;
    /// Raw IP (v4 or v6, told apart by the version nibble).
    pub const RAW: u16 = 101;
    /// OpenBSD loopback: 4-byte address family in network byte order.
    pub const LOOP: u16 = 108;
    /// Linux cooked capture v1.
    pub const LINUX_SLL: u16 = 113;
    /// Raw IPv4.
    pub const IPV4: u16 = 228;
    /// Raw IPv6.
    pub const IPV6: u16 = 229;
    /// Linux cooked capture v2.
    pub const LINUX_SLL2: u16 = 276;
}

/// IP protocol numbers we act on.
pub mod ipproto {
    /// IPv4 encapsulated (IP-in-IP).
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 encapsulated.
    pub const IPV6: u8 = 41;
    /// GRE.
    pub const GRE: u8 = 47;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86DD;
const ETH_VLAN: u16 = 0x8100;
const ETH_QINQ: u16 = 0x88A8;
const ETH_QINQ_OLD1: u16 = 0x9100;
const ETH_QINQ_OLD2: u16 = 0x9200;
const ETH_PPPOE_DISCOVERY: u16 = 0x8863;
const ETH_PPPOE_SESSION: u16 = 0x8864;
const ETH_PPP: u16 = 0x880B;
const ETH_MPLS: u16 = 0x8847;
const ETH_MPLS_MC: u16 = 0x8848;
const VXLAN_PORT: u16 = 4789;

/// How deep tunnels may nest before we give up (hostile input guard).
const MAX_ENCAP_DEPTH: u8 = 8;

/// Why a frame could not be decoded to a transport payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeError {
    /// The capture's link type is not one we decode.
    UnknownLinkType(u16),
    /// A header is cut short; the layer is named.
    Truncated(&'static str),
    /// A layer carries something other than IP, named by what it is
    /// (`arp`, `llc`, `ppp_control`, ...): counted by that name, so a user
    /// sees what the capture holds besides IP. Not an anomaly, except
    /// `ppp_compressed` and `ppp_header_compressed`: compressed or
    /// encrypted PPP, and cRTP, may hide calls.
    NotIp(&'static str),
    /// An IP header is impossible (bad version, header length, total length).
    BadIpHeader,
    /// Tunnels nest deeper than we follow.
    TooDeep,
}

impl DecodeError {
    /// A stable short name for counters and reports.
    pub fn name(&self) -> &'static str {
        match self {
            DecodeError::UnknownLinkType(_) => "unknown_link_type",
            DecodeError::Truncated("ethernet") => "truncated_ethernet",
            DecodeError::Truncated("vlan") => "truncated_vlan",
            DecodeError::Truncated("ipv4") => "truncated_ipv4",
            DecodeError::Truncated("ipv6") => "truncated_ipv6",
            DecodeError::Truncated("udp") => "truncated_udp",
            DecodeError::Truncated("tcp") => "truncated_tcp",
            DecodeError::Truncated(_) => "truncated_header",
            DecodeError::NotIp(_) => "not_ip",
            DecodeError::BadIpHeader => "bad_ip_header",
            DecodeError::TooDeep => "encapsulation_too_deep",
        }
    }
}

/// An IP fragment: the payload is a piece of a larger datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// Identification (IPv4 16-bit, IPv6 32-bit).
    pub id: u32,
    /// Offset of this piece in bytes.
    pub offset: u32,
    /// More fragments follow.
    pub more: bool,
    /// Protocol of the reassembled datagram.
    pub protocol: u8,
}

/// The transport layer of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport<'a> {
    /// UDP datagram.
    Udp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Payload (bounded by the UDP length and the captured bytes).
        payload: &'a [u8],
    },
    /// TCP segment.
    Tcp {
        /// Source port.
        sport: u16,
        /// Destination port.
        dport: u16,
        /// Sequence number.
        seq: u32,
        /// Flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10).
        flags: u8,
        /// Segment payload.
        payload: &'a [u8],
    },
    /// A piece of a fragmented datagram; reassemble before going further.
    Fragment {
        /// Fragment header fields.
        frag: Fragment,
        /// This piece's bytes.
        payload: &'a [u8],
    },
    /// Any other IP protocol.
    Other {
        /// IP protocol number.
        protocol: u8,
        /// IP payload.
        payload: &'a [u8],
    },
}

/// A decoded frame: innermost IP addresses and the transport layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Source address of the innermost IP header.
    pub src: IpAddr,
    /// Destination address of the innermost IP header.
    pub dst: IpAddr,
    /// Outermost VLAN ID, if tagged.
    pub vlan: Option<u16>,
    /// Number of tunnel layers unwrapped (GRE, IP-in-IP, VXLAN).
    pub tunnels: u8,
    /// Levels of nesting entered to reach this frame: tunnels plus IP
    /// reassemblies (at most `MAX_ENCAP_DEPTH`).
    pub depth: u8,
    /// Identification of the innermost IPv4 header (IPv6 has none outside
    /// fragments). Tells a sender's identical re-send from a capture's copy.
    pub ip_id: Option<u16>,
    /// Transport layer.
    pub transport: Transport<'a>,
}

impl<'a> Frame<'a> {
    /// The ports and payload of a UDP frame.
    #[inline]
    pub fn udp(&self) -> Option<(u16, u16, &'a [u8])> {
        match self.transport {
            Transport::Udp { sport, dport, payload } => Some((sport, dport, payload)),
            _ => None,
        }
    }
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

struct Ctx {
    vlan: Option<u16>,
    tunnels: u8,
    depth: u8,
    ip_id: Option<u16>,
}

/// Decodes a frame of the given link type.
#[inline]
pub fn decode(link_type: u16, data: &[u8]) -> Result<Frame<'_>, DecodeError> {
    let first = match link_type {
        linktype::ETHERNET => Layer::Ethernet(data),
        linktype::RAW | linktype::IPV4 | linktype::IPV6 => Layer::Ip(data),
        linktype::NULL | linktype::LOOP => {
            if data.len() < 4 {
                return Err(DecodeError::Truncated("loopback"));
            }
            // The family is in host order (NULL) or network order (LOOP); the
            // payload's version nibble is authoritative either way.
            Layer::Ip(&data[4..])
        }
        linktype::LINUX_SLL => {
            if data.len() < 16 {
                return Err(DecodeError::Truncated("sll"));
            }
            Layer::EtherType(be16(data, 14), &data[16..])
        }
        linktype::LINUX_SLL2 => {
            if data.len() < 20 {
                return Err(DecodeError::Truncated("sll2"));
            }
            Layer::EtherType(be16(data, 0), &data[20..])
        }
        linktype::PPP => match ppp(data)? {
            Next::Layer(l) => l,
            Next::Done(f) => return Ok(f),
        },
        other => return Err(DecodeError::UnknownLinkType(other)),
    };
    let mut ctx = Ctx { vlan: None, tunnels: 0, depth: 0, ip_id: None };
    run(&mut ctx, first)
}

/// A layer still to decode. Within one level of encapsulation the decoders
/// call each other (link, then IP, then transport: a fixed chain); entering
/// a tunnel instead names the inner layer, and [`run`] loops. Nesting in
/// the packet therefore never nests calls, so no input can grow the stack,
/// and the common untunnelled packet takes the direct chain.
enum Layer<'a> {
    Ethernet(&'a [u8]),
    EtherType(u16, &'a [u8]),
    /// IP of either version, told by the version nibble.
    Ip(&'a [u8]),
    Ipv4(&'a [u8]),
    Ipv6(&'a [u8]),
    /// The payload of an IP header: source, destination, protocol, bytes.
    Transport(IpAddr, IpAddr, u8, &'a [u8]),
}

/// What one decoding step found.
enum Next<'a> {
    Layer(Layer<'a>),
    Done(Frame<'a>),
}

type Step<'a> = Result<Next<'a>, DecodeError>;

/// Decodes layer after layer until a transport payload (or an error).
#[inline(always)]
fn run<'a>(ctx: &mut Ctx, mut layer: Layer<'a>) -> Result<Frame<'a>, DecodeError> {
    loop {
        let next = match layer {
            Layer::Ethernet(d) => ethernet(ctx, d),
            Layer::EtherType(et, d) => ethertype(ctx, et, d),
            Layer::Ip(d) => ip_by_version(ctx, d),
            Layer::Ipv4(d) => ipv4(ctx, d),
            Layer::Ipv6(d) => ipv6(ctx, d),
            Layer::Transport(src, dst, proto, p) => transport(ctx, src, dst, proto, p),
        }?;
        match next {
            Next::Layer(l) => layer = l,
            Next::Done(f) => return Ok(f),
        }
    }
}

#[inline(always)]
fn ethernet<'a>(ctx: &mut Ctx, data: &'a [u8]) -> Step<'a> {
    if data.len() < 14 {
        return Err(DecodeError::Truncated("ethernet"));
    }
    ethertype(ctx, be16(data, 12), &data[14..])
}

#[inline(always)]
fn ethertype<'a>(ctx: &mut Ctx, mut et: u16, mut rest: &'a [u8]) -> Step<'a> {
    loop {
        match et {
            ETH_VLAN | ETH_QINQ | ETH_QINQ_OLD1 | ETH_QINQ_OLD2 => {
                if rest.len() < 4 {
                    return Err(DecodeError::Truncated("vlan"));
                }
                ctx.vlan.get_or_insert(be16(rest, 0) & 0x0FFF);
                et = be16(rest, 2);
                rest = &rest[4..];
            }
            ETH_MPLS | ETH_MPLS_MC => {
                // Pop labels until bottom of stack, then guess IP by version nibble.
                loop {
                    if rest.len() < 4 {
                        return Err(DecodeError::Truncated("mpls"));
                    }
                    let bos = rest[2] & 1 != 0;
                    rest = &rest[4..];
                    if bos {
                        break;
                    }
                }
                return ip_by_version(ctx, rest);
            }
            ETH_IPV4 => return ipv4(ctx, rest),
            ETH_IPV6 => return ipv6(ctx, rest),
            ETH_PPPOE_SESSION => return pppoe_session(rest),
            ETH_PPP => return ppp(rest),
            other => return Err(DecodeError::NotIp(ethertype_name(other))),
        }
    }
}

/// What a frame that is not IP carries, by its EtherType.
fn ethertype_name(et: u16) -> &'static str {
    match et {
        0..=0x05FF => "llc", // an 802.3 length: LLC/SNAP (STP, CDP, ...)
        0x0806 | 0x8035 => "arp",
        0x88CC => "lldp",
        0x888E => "eapol",
        0x88E5 => "macsec",
        0x8137 | 0x8138 => "ipx",
        ETH_PPPOE_DISCOVERY => "pppoe_discovery",
        _ => "other_ethertype",
    }
}

#[inline(always)]
fn ip_by_version<'a>(ctx: &mut Ctx, data: &'a [u8]) -> Step<'a> {
    match data.first().map(|b| b >> 4) {
        Some(4) => ipv4(ctx, data),
        Some(6) => ipv6(ctx, data),
        Some(_) => Err(DecodeError::NotIp("ip_version")),
        None => Err(DecodeError::Truncated("ip")),
    }
}

#[inline(always)]
fn ipv4<'a>(ctx: &mut Ctx, data: &'a [u8]) -> Step<'a> {
    let h = ipv4::Header::new_checked(data).map_err(|e| match e {
        ipv4::Ipv4Error::Truncated => DecodeError::Truncated("ipv4"),
        ipv4::Ipv4Error::Malformed => DecodeError::BadIpHeader,
    })?;
    let end = h.payload_end(data.len()).ok_or(DecodeError::BadIpHeader)?;
    let (src, dst, proto) = (IpAddr::V4(h.src()), IpAddr::V4(h.dst()), h.protocol());
    ctx.ip_id = Some(h.ident());
    let payload = &data[h.header_len()..end];
    if h.is_fragment() {
        let frag = Fragment {
            id: u32::from(h.ident()),
            offset: h.fragment_offset(),
            more: h.more_fragments(),
            protocol: proto,
        };
        return Ok(frame(ctx, src, dst, Transport::Fragment { frag, payload }));
    }
    transport(ctx, src, dst, proto, payload)
}

#[inline(always)]
fn ipv6<'a>(ctx: &mut Ctx, data: &'a [u8]) -> Step<'a> {
    ctx.ip_id = None;
    if data.len() < 40 {
        return Err(DecodeError::Truncated("ipv6"));
    }
    if data[0] >> 4 != 6 {
        return Err(DecodeError::BadIpHeader);
    }
    let plen = be16(data, 4) as usize;
    // Jumbograms (plen 0) and snapped captures: take what was captured.
    let end = if plen == 0 { data.len() } else { (40 + plen).min(data.len()) };
    let mut a = [0u8; 16];
    a.copy_from_slice(&data[8..24]);
    let src = IpAddr::V6(Ipv6Addr::from(a));
    a.copy_from_slice(&data[24..40]);
    let dst = IpAddr::V6(Ipv6Addr::from(a));
    let mut next = data[6];
    let mut rest = &data[40..end];
    // Walk extension headers; the count is bounded by the bytes available.
    loop {
        match next {
            0 | 43 | 51 | 60 | 135 | 139 | 140 => {
                if rest.len() < 8 {
                    return Err(DecodeError::Truncated("ipv6 extension"));
                }
                // The length in 8-byte units after the first 8, except the
                // Authentication Header's: 4-byte units after the first 8.
                let len = match next {
                    51 => (rest[1] as usize + 2) * 4,
                    _ => (rest[1] as usize + 1) * 8,
                };
                if rest.len() < len {
                    return Err(DecodeError::Truncated("ipv6 extension"));
                }
                next = rest[0];
                rest = &rest[len..];
            }
            44 => {
                if rest.len() < 8 {
                    return Err(DecodeError::Truncated("ipv6 fragment"));
                }
                let field = be16(rest, 2);
                let offset = (field >> 3) as u32 * 8;
                let more = field & 1 != 0;
                let frag = Fragment { id: be32(rest, 4), offset, more, protocol: rest[0] };
                let payload = &rest[8..];
                if more || offset != 0 {
                    return Ok(frame(ctx, src, dst, Transport::Fragment { frag, payload }));
                }
                // Atomic fragment: carry on with the payload.
                next = rest[0];
                rest = payload;
            }
            _ => return transport(ctx, src, dst, next, rest),
        }
    }
}

/// Decodes a reassembled IP datagram's payload of protocol `proto`, found
/// inside `outer` (whose addresses it keeps). Reassembly counts as one more
/// level of nesting, so fragments inside reassembled datagrams cannot nest
/// deeper than tunnels can ([`DecodeError::TooDeep`]).
pub fn transport_of<'a>(
    outer: &Frame<'_>,
    proto: u8,
    payload: &'a [u8],
) -> Result<Frame<'a>, DecodeError> {
    let mut ctx =
        Ctx { vlan: outer.vlan, tunnels: outer.tunnels, depth: outer.depth, ip_id: outer.ip_id };
    enter(&mut ctx)?;
    run(&mut ctx, Layer::Transport(outer.src, outer.dst, proto, payload))
}

/// One more level of nesting (a reassembly or a tunnel).
fn enter(ctx: &mut Ctx) -> Result<(), DecodeError> {
    ctx.depth = ctx.depth.saturating_add(1);
    if ctx.depth > MAX_ENCAP_DEPTH {
        return Err(DecodeError::TooDeep);
    }
    Ok(())
}

fn enter_tunnel(ctx: &mut Ctx) -> Result<(), DecodeError> {
    ctx.tunnels = ctx.tunnels.saturating_add(1);
    enter(ctx)
}

#[cfg(test)]
mod tests;
