//! The outermost IP datagram of a frame, whole: for tools that carry
//! datagrams on (`calliper crtp`) rather than decode them.

use crate::{be16, linktype, ETH_IPV4, ETH_IPV6, ETH_QINQ, ETH_QINQ_OLD1, ETH_QINQ_OLD2, ETH_VLAN};

/// The outermost IP datagram of a frame of `link_type`, cut to the length
/// its header gives (Ethernet pads short frames): Ethernet with up to two
/// VLAN tags, Linux cooked captures, loopback, raw IP and a PPP link's plain
/// IP. None for other framing (MPLS, PPPoE, ...), other link types or PPP
/// protocols (header-compressed ones included), and datagrams cut short.
pub fn outer_ip(link_type: u16, data: &[u8]) -> Option<&[u8]> {
    let ip = match link_type {
        linktype::RAW | linktype::IPV4 | linktype::IPV6 => data,
        linktype::NULL | linktype::LOOP => data.get(4..)?,
        // The protocol and the datagram's version must agree.
        linktype::PPP => match crate::tunnel::ppp(data).ok()? {
            crate::Next::Layer(crate::Layer::Ipv4(ip)) if version(ip) == Some(4) => ip,
            crate::Next::Layer(crate::Layer::Ipv6(ip)) if version(ip) == Some(6) => ip,
            _ => return None,
        },
        linktype::ETHERNET | linktype::LINUX_SLL | linktype::LINUX_SLL2 => {
            let (type_at, mut rest) = match link_type {
                linktype::ETHERNET => (12, data.get(14..)?),
                linktype::LINUX_SLL => (14, data.get(16..)?),
                _ => (0, data.get(20..)?),
            };
            let mut ethertype = be16(data, type_at);
            for _ in 0..2 {
                if matches!(ethertype, ETH_VLAN | ETH_QINQ | ETH_QINQ_OLD1 | ETH_QINQ_OLD2) {
                    ethertype = be16(rest.get(..4)?, 2);
                    rest = &rest[4..];
                }
            }
            if !matches!(ethertype, ETH_IPV4 | ETH_IPV6) {
                return None;
            }
            rest
        }
        _ => return None,
    };
    let len = match version(ip)? {
        4 => {
            // The total length must hold the header it declares.
            let header = usize::from(ip[0] & 0x0F) * 4;
            let len = be16(ip.get(..4)?, 2) as usize;
            if header < 20 || len < header {
                return None;
            }
            len
        }
        6 => 40 + be16(ip.get(..6)?, 4) as usize,
        _ => return None,
    };
    (len <= ip.len()).then(|| &ip[..len])
}

fn version(ip: &[u8]) -> Option<u8> {
    Some(ip.first()? >> 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::{udp, Ipv4};
    use crate::tunnel::ppp_protocol;
    use std::net::Ipv4Addr;

    /// A PPP link's plain IP is its datagram, with or without address and
    /// control bytes; header-compressed and control frames are not.
    #[test]
    fn a_ppp_links_plain_ip_is_its_datagram() {
        let ip = Ipv4::new(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 17)
            .emit(&udp(5060, 5060, b"x"));
        let with = |head: &[u8]| [head, &ip[..], &[0, 0][..]].concat();
        let ipv4 = ppp_protocol::IPV4.to_be_bytes();
        assert_eq!(outer_ip(linktype::PPP, &with(&[0xFF, 0x03, ipv4[0], ipv4[1]])), Some(&ip[..]));
        assert_eq!(outer_ip(linktype::PPP, &with(&[0x21])), Some(&ip[..]));
        let rtp = ppp_protocol::COMPRESSED_RTP_8.to_be_bytes();
        assert_eq!(outer_ip(linktype::PPP, &with(&[0xFF, 0x03, rtp[0], rtp[1]])), None);
        assert_eq!(outer_ip(linktype::PPP, &with(&[0xC0, 0x21])), None);
        assert_eq!(outer_ip(linktype::PPP, &[0xFF, 0x03, 0x00]), None);
        // IPv4 under the IPv6 protocol number is not taken.
        let ipv6 = ppp_protocol::IPV6.to_be_bytes();
        assert_eq!(outer_ip(linktype::PPP, &with(&[ipv6[0], ipv6[1]])), None);
    }

    /// A total length shorter than the header it declares is no datagram
    /// (found by review: IHL 15 with total length 20 was passed on).
    #[test]
    fn an_ipv4_header_longer_than_its_datagram_is_refused() {
        let mut ip = Ipv4::new(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 17)
            .emit(&udp(5060, 5060, &[0; 60]));
        assert!(outer_ip(linktype::RAW, &ip).is_some());
        ip[0] = 0x4F;
        ip[2..4].copy_from_slice(&20u16.to_be_bytes());
        assert_eq!(outer_ip(linktype::RAW, &ip), None);
        ip[0] = 0x44;
        assert_eq!(outer_ip(linktype::RAW, &ip), None);
    }
}
