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

    /// What the short path returns, the general decoder returns too.
    fn agrees(link: u16, data: &[u8]) -> bool {
        decode_plain(link, data).is_none_or(|f| decode(link, data) == Ok(f))
    }

    #[test]
    fn the_short_path_returns_what_the_decoder_does_or_nothing() {
        for (i, (link, data)) in frames().into_iter().enumerate() {
            assert_eq!(decode_plain(link, &data).is_some(), i < PLAIN, "frame {i}");
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
