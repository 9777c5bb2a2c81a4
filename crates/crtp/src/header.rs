//! What the compressor can take: an unfragmented IPv4/UDP/RTP datagram whose
//! lengths and checksums are consistent, so that the decompressor,
//! which rebuilds lengths from the link and the checksum from the header,
//! gives back the same bytes. Anything else crosses the link as plain IP.

/// Longest header a context keeps: IPv4 with options (60), UDP (8), RTP
/// with a full CSRC list (12 + 60). RFC 2507's MAX_HEADER default is 168.
pub const MAX_HEADER: usize = 140;

/// Where the headers of an accepted datagram are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    /// IPv4 header length in bytes.
    pub ihl: usize,
    /// Length of IPv4 + UDP + RTP headers with the CSRC list.
    pub len: usize,
}

impl View {
    /// Offset of the RTP header.
    pub fn rtp(&self) -> usize {
        self.ihl + 8
    }
}

/// The flow a context belongs to (RFC 2508 §3.3): addresses, ports, SSRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    addresses: u64,
    ports: u32,
    ssrc: u32,
}

/// The datagram's headers, if the compressor can take it.
pub fn view(p: &[u8]) -> Option<View> {
    let ihl = whole_ipv4_udp(p)?;
    if p.len() < ihl + 8 + 12 {
        return None;
    }
    // A wrong UDP checksum (a capture on a host that offloads them, say)
    // would fail the decompressor's check: such a datagram stays plain IP.
    if get16(p, ihl + 6) != 0 && !udp_checksum_ok(p, ihl) {
        return None;
    }
    let rtp = &p[ihl + 8..];
    // RTP version 2; RTCP (packet types 200-204) is left alone.
    if rtp[0] >> 6 != 2 || (200..=204).contains(&rtp[1]) {
        return None;
    }
    let len = ihl + 8 + 12 + 4 * (rtp[0] & 0x0F) as usize;
    (len <= p.len() && len <= MAX_HEADER).then_some(View { ihl, len })
}

/// The IPv4 header's length, if `p` is one whole, unfragmented IPv4/UDP
/// datagram whose lengths and IPv4 checksum would come back byte for byte
/// (read through `wire`'s checked view).
fn whole_ipv4_udp(p: &[u8]) -> Option<usize> {
    let h = calliper_wire::ipv4::Header::new_checked(p).ok()?;
    let ihl = h.header_len();
    let whole = usize::from(h.total_len()) == p.len() && p.len() >= ihl + 8;
    if !whole || h.is_fragment() || h.protocol() != 17 {
        return None;
    }
    if h.expected_checksum() != h.checksum() || get16(p, ihl + 4) as usize != p.len() - ihl {
        return None;
    }
    Some(ihl)
}

/// The flow key of a datagram `view` accepted.
pub fn key(p: &[u8], v: View) -> Key {
    let r = v.rtp();
    Key {
        addresses: u64::from_be_bytes(p[12..20].try_into().unwrap()),
        ports: u32::from_be_bytes(p[v.ihl..v.ihl + 4].try_into().unwrap()),
        ssrc: u32::from_be_bytes(p[r + 8..r + 12].try_into().unwrap()),
    }
}

pub use calliper_wire::emit::checksum;

/// Writes `value` big-endian at `at`.
pub fn put16(p: &mut [u8], at: usize, value: u16) {
    p[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// Reads a big-endian u16 at `at`.
pub fn get16(p: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([p[at], p[at + 1]])
}

/// Reads a big-endian u32 at `at`.
pub fn get32(p: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(p[at..at + 4].try_into().unwrap())
}

/// The checksum an IPv4 header should carry, as the decompressor computes
/// it (`wire`'s, checksum field left out).
pub use calliper_wire::ipv4::expected_checksum as ip_checksum;

/// Sets the IPv4 header checksum of `p` (header length `ihl`).
pub fn set_ip_checksum(p: &mut [u8], ihl: usize) {
    let sum = ip_checksum(&p[..ihl]);
    put16(p, 10, sum);
}

/// Whether the UDP checksum of the datagram `p` (IPv4 or IPv6, IP header
/// `ihl` long) is right: the sum over the pseudo-header, header and data.
pub fn udp_checksum_ok(p: &[u8], ihl: usize) -> bool {
    checksum(&p[ihl..], pseudo_header(p, ihl)) == 0
}

/// The sum of UDP's pseudo-header: addresses, protocol, UDP length.
fn pseudo_header(p: &[u8], ihl: usize) -> u32 {
    let addresses = if p[0] >> 4 == 6 { &p[8..40] } else { &p[12..20] };
    !checksum(addresses, 0) as u32 + 17 + (p.len() - ihl) as u32
}

/// The datagram's IP and UDP headers, if it can take a non-TCP context
/// (RFC 2507, sent as COMPRESSED_NON_TCP): an unfragmented IPv4/UDP
/// datagram, or IPv6 with UDP straight after the fixed header, whose
/// lengths and checksums would come back byte for byte. `len` is the IP
/// and UDP headers' length.
pub fn non_tcp_view(p: &[u8]) -> Option<View> {
    let ihl = match p.first()? >> 4 {
        4 => whole_ipv4_udp(p)?,
        6 => {
            if p.len() < 48 || p[6] != 17 || get16(p, 4) as usize != p.len() - 40 {
                return None;
            }
            // IPv6 requires the UDP checksum.
            if get16(p, 46) == 0 {
                return None;
            }
            40
        }
        _ => return None,
    };
    if get16(p, ihl + 4) as usize != p.len() - ihl {
        return None;
    }
    if get16(p, ihl + 6) != 0 && !udp_checksum_ok(p, ihl) {
        return None;
    }
    Some(View { ihl, len: ihl + 8 })
}

/// RFC 3545's header checksum (HDRCKSUM) of `p`, whose UDP checksum field
/// is zero: the UDP checksum's sum over the pseudo-header, the UDP header
/// and the RTP header with its CSRC list only, not the payload.
pub fn header_checksum(p: &[u8], v: View) -> u16 {
    match checksum(&p[v.ihl..v.len], pseudo_header(p, v.ihl)) {
        0 => 0xFFFF,
        sum => sum,
    }
}
