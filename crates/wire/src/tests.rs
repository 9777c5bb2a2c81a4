//! Decoder tests.
use super::*;

/// Builds an IPv4/UDP packet with the given payload (ID 1).
pub(crate) fn ipv4_udp(
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    emit::Ipv4 { id: 1, ..emit::Ipv4::new(src.into(), dst.into(), ipproto::UDP) }
        .emit(&emit::udp(sport, dport, payload))
}

fn eth(ethertype: u16, inner: &[u8]) -> Vec<u8> {
    emit::ethernet(&[], ethertype, inner)
}

#[test]
fn ethernet_ipv4_udp_with_padding() {
    let mut f = eth(ETH_IPV4, &ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 5060, 5062, b"hi"));
    f.extend([0u8; 16]); // Ethernet minimum-size padding must not leak into the payload.
    let fr = decode(1, &f).unwrap();
    assert_eq!(fr.src, "10.0.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(fr.transport, Transport::Udp { sport: 5060, dport: 5062, payload: b"hi" });
}

#[test]
fn vlan_and_qinq() {
    let ip = ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, b"x");
    let mut inner = vec![0x00, 0x64];
    inner.extend(ETH_IPV4.to_be_bytes());
    inner.extend(&ip);
    let mut outer = vec![0x20, 0xC8]; // priority 1, VLAN 200
    outer.extend(ETH_VLAN.to_be_bytes());
    outer.extend(&inner);
    let f = eth(ETH_QINQ, &outer);
    let fr = decode(1, &f).unwrap();
    assert_eq!(fr.vlan, Some(200));
    assert!(matches!(fr.transport, Transport::Udp { payload: b"x", .. }));
}

#[test]
fn sll_sll2_null_raw() {
    let ip = ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, b"x");
    let mut sll = vec![0u8; 14];
    sll.extend(ETH_IPV4.to_be_bytes());
    sll.extend(&ip);
    assert!(decode(113, &sll).is_ok());
    let mut sll2 = ETH_IPV4.to_be_bytes().to_vec();
    sll2.extend([0u8; 18]);
    sll2.extend(&ip);
    assert!(decode(276, &sll2).is_ok());
    let mut null = 2u32.to_le_bytes().to_vec();
    null.extend(&ip);
    assert!(decode(0, &null).is_ok());
    assert!(decode(101, &ip).is_ok());
    assert_eq!(decode(147, &ip), Err(DecodeError::UnknownLinkType(147)));
}

/// A PPP link (LINKTYPE_PPP): IP with or without the address and control
/// bytes, header-compressed packets (cRTP) and LCP named for what they are.
#[test]
fn ppp_link_frames() {
    let ip = ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, b"x");
    for head in [&[0xFF, 0x03, 0x00, 0x21][..], &[0x00, 0x21], &[0x21]] {
        let f = [head, &ip].concat();
        let fr = decode(linktype::PPP, &f).unwrap();
        assert!(matches!(fr.transport, Transport::Udp { payload: b"x", .. }));
    }
    for (protocol, kind) in [
        (ppp_protocol::FULL_HEADER, "ppp_header_compressed"),
        (ppp_protocol::COMPRESSED_RTP_8, "ppp_header_compressed"),
        (ppp_protocol::COMPRESSED_RTP_16, "ppp_header_compressed"),
        (ppp_protocol::COMPRESSED, "ppp_compressed"),
        (0xC021, "ppp_control"),
    ] {
        let f = [&[0xFF, 0x03][..], &protocol.to_be_bytes(), &[0; 8]].concat();
        assert_eq!(decode(linktype::PPP, &f), Err(DecodeError::NotIp(kind)));
    }
    assert_eq!(decode(linktype::PPP, &[0xFF, 0x03]), Err(DecodeError::Truncated("ppp")));
}

#[test]
fn ipv6_with_extension_headers_and_fragment() {
    let mut v6 = vec![0x60, 0, 0, 0, 0, 0, 0, 64];
    v6.extend([0xfe, 0x80].iter().chain([0u8; 13].iter()).chain([1u8].iter()));
    v6.extend([0xfe, 0x80].iter().chain([0u8; 13].iter()).chain([2u8].iter()));
    // hop-by-hop (8 bytes) -> fragment (offset 0, more) -> UDP
    let mut ext = vec![44, 0, 0, 0, 0, 0, 0, 0];
    ext.extend([17, 0, 0x00, 0x01, 0, 0, 0, 42]);
    ext.extend([0u8; 16]);
    let plen = ext.len() as u16;
    v6[4..6].copy_from_slice(&plen.to_be_bytes());
    v6[6] = 0;
    v6.extend(&ext);
    let fr = decode(101, &v6).unwrap();
    match fr.transport {
        Transport::Fragment { frag, payload } => {
            assert_eq!(frag, Fragment { id: 42, offset: 0, more: true, protocol: 17 });
            assert_eq!(payload.len(), 16);
        }
        t => panic!("{t:?}"),
    }
}

/// The Authentication Header counts its length in 4-byte units, the
/// other extension headers in 8-byte units: each must land on the UDP
/// header after it.
#[test]
fn ipv6_authentication_header_is_measured_in_words() {
    let udp = [0x13, 0xc4, 0x13, 0xc4, 0, 12, 0, 0, b's', b'i', b'p', b'!'];
    // AH with 12 bytes of ICV: (1 + 2) * 4 + 12 = 24 bytes, length field 4.
    let mut ah = vec![17, 4, 0, 0];
    ah.extend([0u8; 20]);
    // Destination options of 16 bytes (length field 1) before it.
    let mut ext = vec![51, 1];
    ext.extend([0u8; 14]);
    ext.extend(&ah);
    ext.extend(udp);
    let mut v6 = vec![0x60, 0, 0, 0, 0, 0, 60, 64];
    v6[4..6].copy_from_slice(&(ext.len() as u16).to_be_bytes());
    v6.extend([0u8; 15].iter().chain([1u8].iter()));
    v6.extend([0u8; 15].iter().chain([2u8].iter()));
    v6.extend(&ext);
    match decode(101, &v6).unwrap().transport {
        Transport::Udp { sport, dport, payload } => {
            assert_eq!((sport, dport, payload), (5060, 5060, &b"sip!"[..]));
        }
        t => panic!("{t:?}"),
    }
    // One byte short of the AH's length: truncated, not misread.
    let cut = v6.len() - udp.len() - 1;
    let mut short = v6[..cut].to_vec();
    short[4..6].copy_from_slice(&((cut - 40) as u16).to_be_bytes());
    assert_eq!(decode(101, &short).err(), Some(DecodeError::Truncated("ipv6 extension")));
}

#[test]
fn ipip_and_gre_tunnels_report_inner_addresses() {
    let inner = ipv4_udp([192, 168, 0, 1], [192, 168, 0, 2], 5060, 5060, b"sip");
    let mut outer = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 4, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2];
    let total = (20 + inner.len()) as u16;
    outer[2..4].copy_from_slice(&total.to_be_bytes());
    outer.extend(&inner);
    let fr = decode(101, &outer).unwrap();
    assert_eq!(fr.src, "192.168.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(fr.tunnels, 1);
    // GRE carrying IPv4
    let mut gre = vec![0, 0, 0x08, 0x00];
    gre.extend(&inner);
    let mut outer = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 47, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2];
    let total = (20 + gre.len()) as u16;
    outer[2..4].copy_from_slice(&total.to_be_bytes());
    outer.extend(&gre);
    assert_eq!(decode(101, &outer).unwrap().dst, "192.168.0.2".parse::<IpAddr>().unwrap());
}

/// GTP-U (3GPP TS 29.281): G-PDUs to port 2152 with and without the
/// optional fields and extension headers open to the user's packet; the
/// tunnel's own messages stay UDP; cut or impossible headers are errors.
#[test]
fn gtpu_tunnels_report_the_user_packet() {
    let user = ipv4_udp([10, 45, 0, 7], [10, 46, 0, 9], 40000, 50000, b"\x80\x08rtp");
    let over = |gtp: &[u8]| eth(ETH_IPV4, &ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 2152, 2152, gtp));
    let pdu_session = (0x85, &[0x10, 0x09][..]); // PDU session container, QFI 9
    let longer = (0x40, &[1, 2, 3, 4, 5, 6][..]); // a 2-unit header of another type
    for gtp in [
        emit::gtpu(7, None, &[], &user),
        emit::gtpu(7, Some(300), &[], &user),
        emit::gtpu(7, Some(301), &[pdu_session], &user),
        emit::gtpu(7, None, &[longer, pdu_session], &user),
    ] {
        let frame = over(&gtp);
        let fr = decode(1, &frame).unwrap();
        assert_eq!(fr.src, "10.45.0.7".parse::<IpAddr>().unwrap(), "{gtp:02x?}");
        assert_eq!(fr.tunnels, 1);
        assert_eq!(fr.udp(), Some((40000, 50000, &b"\x80\x08rtp"[..])));
        // The short path leaves it to the general decoder.
        assert_eq!(crate::decode_plain(1, &frame), None);
        // Every cut of the tunnel header is an error, not a wrong frame.
        let header = gtp.len() - user.len();
        for n in 0..header {
            assert!(decode(1, &over(&gtp[..n])).is_err() || n < 2, "cut at {n}");
        }
    }
    // IPv6 inside.
    let v6 = emit::ipv6(
        "2001:db8::1".parse().unwrap(),
        "2001:db8::2".parse().unwrap(),
        ipproto::UDP,
        &emit::udp(1, 2, b"x"),
    );
    let frame = over(&emit::gtpu(1, None, &[], &v6));
    let fr = decode(1, &frame).unwrap();
    assert_eq!(fr.dst, "2001:db8::2".parse::<IpAddr>().unwrap());
    // Echo request (type 1): the tunnel's own signalling stays UDP.
    let echo = [0x32, 0x01, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0];
    let frame = over(&echo);
    let fr = decode(1, &frame).unwrap();
    assert_eq!((fr.tunnels, fr.udp().map(|u| u.1)), (0, Some(2152)));
    // An extension header of length 0 cannot end: an error, not a loop.
    let mut zero = emit::gtpu(7, None, &[pdu_session], &user);
    zero[12] = 0;
    assert_eq!(decode(1, &over(&zero)), Err(DecodeError::Truncated("gtpu")));
    // A user packet that is not IP is counted by name.
    let odd = emit::gtpu(7, None, &[], &[0x00; 20]);
    assert_eq!(decode(1, &over(&odd)), Err(DecodeError::NotIp("gtpu_non_ip")));
}

#[test]
fn recursive_tunnels_stop() {
    // IP-in-IP nested far deeper than we follow: an error, not a stack overflow.
    let mut p = ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, b"");
    for _ in 0..50 {
        let mut o = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 4, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2];
        let total = (20 + p.len()) as u16;
        o[2..4].copy_from_slice(&total.to_be_bytes());
        o.extend(&p);
        p = o;
    }
    assert_eq!(decode(101, &p), Err(DecodeError::TooDeep));
}

#[test]
fn every_prefix_of_a_frame_decodes_or_errs() {
    let f = eth(ETH_IPV4, &ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 5060, 5062, b"payload"));
    for n in 0..f.len() {
        let _ = decode(1, &f[..n]);
    }
}
