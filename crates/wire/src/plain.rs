//! The common frame, decoded on a short path: UDP in unfragmented IPv4, on
//! Ethernet (at most one 802.1Q tag) or raw IP. Nearly every RTP packet is
//! one, and a sharded run's reader tells which worker owns a packet from
//! it without the general decoder's layer loop.
//!
//! [`decode_plain`] either returns exactly the frame [`crate::decode`]
//! would, or `None`, and then the general decoder says what the frame is.
//! `tests.rs` and the `decode` fuzz target check that promise.

use crate::{be16, ipv4, linktype, Frame, Transport, ETH_IPV4, ETH_VLAN};
use std::net::IpAddr;

/// The frame [`crate::decode`] would return, when it is plain UDP over
/// IPv4; `None` for anything else (which is not an error).
#[inline]
pub fn decode_plain(link_type: u16, data: &[u8]) -> Option<Frame<'_>> {
    let (vlan, ip) = match link_type {
        linktype::ETHERNET => {
            let et = be16(data.get(..14)?, 12);
            match et {
                ETH_IPV4 => (None, &data[14..]),
                ETH_VLAN => {
                    let tag = data.get(14..18)?;
                    if be16(tag, 2) != ETH_IPV4 {
                        return None;
                    }
                    (Some(be16(tag, 0) & 0x0FFF), &data[18..])
                }
                _ => return None,
            }
        }
        linktype::RAW | linktype::IPV4 => (None, data),
        _ => return None,
    };
    let h = ipv4::Header::new_checked(ip).ok()?;
    if h.is_fragment() || h.protocol() != crate::ipproto::UDP {
        return None;
    }
    let end = h.payload_end(ip.len())?;
    let (sport, dport, payload) = crate::udp_parts(&ip[h.header_len()..end])?;
    // Tunnels in UDP: the general decoder opens them.
    if crate::vxlan_inner(dport, payload).is_some() || dport == crate::tunnel::GTPU_PORT {
        return None;
    }
    Some(Frame {
        src: IpAddr::V4(h.src()),
        dst: IpAddr::V4(h.dst()),
        vlan,
        tunnels: 0,
        depth: 0,
        ip_id: Some(h.ident()),
        transport: Transport::Udp { sport, dport, payload },
    })
}

/// UDP over IPv4 on Ethernet, read at fixed offsets: what a worker needs
/// to tell whose media a frame is before spending more on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Udp4<'a> {
    /// Source address, as a number.
    pub src: u32,
    /// Destination address, as a number.
    pub dst: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// The commonest frame only — Ethernet without a VLAN tag, IPv4 without
/// options, not a fragment, UDP not to a tunnel port — read at fixed
/// offsets: the same addresses, ports and payload [`decode_plain`] gives,
/// or `None` (then `decode_plain` says what the frame is). About a third
/// of `decode_plain`'s instructions: no link-type match, no `IpAddr`.
#[inline(always)]
pub fn skim_udp4(link_type: u16, d: &[u8]) -> Option<Udp4<'_>> {
    if link_type != linktype::ETHERNET || d.len() < 42 {
        return None;
    }
    // IPv4 ethertype, version 4 with a 20-byte header, UDP, and neither
    // more fragments nor an offset (the flags' top bit, DF, may be set).
    if be16(d, 12) != ETH_IPV4 || d[14] != 0x45 || d[23] != crate::ipproto::UDP {
        return None;
    }
    if be16(d, 20) & 0x3FFF != 0 {
        return None;
    }
    let captured = d.len() - 14;
    // As `ipv4::Header::payload_end`: a total of 0 (offloaded) is the capture.
    let end = match usize::from(be16(d, 16)) {
        0 => captured,
        total if total < 20 => return None,
        total => total.min(captured),
    };
    let udp = d.get(34..14 + end)?;
    let (sport, dport, payload) = crate::udp_parts(udp)?;
    if dport == crate::VXLAN_PORT || dport == crate::tunnel::GTPU_PORT {
        return None;
    }
    let addr = |at: usize| u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
    Some(Udp4 { src: addr(26), dst: addr(30), sport, dport, payload })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, emit, ipproto, VXLAN_PORT};

    /// Frames of many kinds: the plain ones first (`PLAIN` of them).
    fn frames() -> Vec<(u16, Vec<u8>)> {
        let v4 = |proto: u8, frag: u16, payload: &[u8]| {
            emit::Ipv4 {
                id: 7,
                frag,
                ..emit::Ipv4::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), proto)
            }
            .emit(payload)
        };
        let udp = v4(ipproto::UDP, 0, &emit::udp(4000, 5000, b"\x80\x12rtp-ish payload"));
        let mut with_options = udp.clone();
        with_options[0] = 0x46;
        with_options.splice(20..20, [1, 1, 1, 1]);
        let mut tso = udp.clone();
        tso[2..4].copy_from_slice(&[0, 0]);
        let mut short_ulen = udp.clone();
        short_ulen[24..26].copy_from_slice(&[0, 3]);
        let mut under_ihl = udp.clone();
        under_ihl[2..4].copy_from_slice(&[0, 12]);
        let vxlan = v4(ipproto::UDP, 0, &emit::udp(1, VXLAN_PORT, &[0x08; 30]));
        let fragment = v4(ipproto::UDP, 0x2000, &emit::udp(1, 2, b"first"));
        let tcp = v4(ipproto::TCP, 0, &emit::tcp(1, 2, 3, 0x18, b"x"));
        let v6 = emit::ipv6(
            "::1".parse().unwrap(),
            "::2".parse().unwrap(),
            ipproto::UDP,
            &emit::udp(1, 2, b"x"),
        );
        let eth = |vlans: &[u16], ip: &[u8]| emit::ethernet(vlans, emit::ethertype_of(ip), ip);
        vec![
            (linktype::ETHERNET, eth(&[], &udp)),
            (linktype::ETHERNET, eth(&[300], &udp)),
            (linktype::RAW, udp.clone()),
            (linktype::IPV4, with_options.clone()),
            (linktype::ETHERNET, eth(&[], &tso)),
            (linktype::ETHERNET, eth(&[], &short_ulen)),
            // Not plain: the general decoder's.
            (linktype::ETHERNET, eth(&[100, 200], &udp)),
            (linktype::ETHERNET, eth(&[], &under_ihl)),
            (linktype::ETHERNET, eth(&[], &vxlan)),
            (linktype::ETHERNET, eth(&[], &fragment)),
            (linktype::ETHERNET, eth(&[], &tcp)),
            (linktype::ETHERNET, eth(&[], &v6)),
            (linktype::LINUX_SLL2, [vec![8, 0], vec![0; 18], udp].concat()),
        ]
    }
    const PLAIN: usize = 6;

    /// What the short path returns, the general decoder returns too; what
    /// the skim returns, the short path does.
    fn agrees(link: u16, data: &[u8]) -> bool {
        let skimmed = skim_udp4(link, data).is_none_or(|s| {
            decode_plain(link, data).is_some_and(|f| {
                let v4 = |a: std::net::IpAddr| match a {
                    IpAddr::V4(v) => Some(u32::from(v)),
                    IpAddr::V6(_) => None,
                };
                f.vlan.is_none()
                    && (v4(f.src), v4(f.dst)) == (Some(s.src), Some(s.dst))
                    && f.udp() == Some((s.sport, s.dport, s.payload))
            })
        });
        skimmed && decode_plain(link, data).is_none_or(|f| decode(link, data) == Ok(f))
    }

    #[test]
    fn the_short_path_returns_what_the_decoder_does_or_nothing() {
        for (i, (link, data)) in frames().into_iter().enumerate() {
            assert_eq!(decode_plain(link, &data).is_some(), i < PLAIN, "frame {i}");
            // The skim takes the plain frames on Ethernet without a tag or options.
            assert_eq!(skim_udp4(link, &data).is_some(), [0, 4, 5].contains(&i), "frame {i}");
            assert!(agrees(link, &data), "frame {i}");
            // Every cut and every single-byte change of the headers agree too.
            for cut in 0..data.len() {
                assert!(agrees(link, &data[..cut]), "frame {i} cut at {cut}");
            }
            for at in 0..data.len().min(60) {
                for value in [0u8, 1, 0x08, 0x11, 0x45, 0x81, 0xFF] {
                    let mut changed = data.clone();
                    changed[at] = value;
                    assert!(agrees(link, &changed), "frame {i}: byte {at} = {value}");
                }
            }
        }
    }
}
