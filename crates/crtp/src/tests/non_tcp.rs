//! Non-TCP contexts: UDP that is not RTP over IPv4, and IPv6.

use super::*;

/// An IPv6/UDP datagram (UDP checksum right) of flow `flow`.
fn v6(flow: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
    p[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, flow]);
    p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff]);
    p.extend_from_slice(&(6000 + flow as u16).to_be_bytes());
    p.extend_from_slice(&7000u16.to_be_bytes());
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    let checksum = udp_checksum(&p[8..40], &p[40..]);
    p[46..48].copy_from_slice(&checksum.to_be_bytes());
    p
}

/// An RTP packet's bytes for IPv6 packet `i`.
fn rtp_payload(i: u16) -> Vec<u8> {
    let mut r = vec![0x80, 18];
    r.extend_from_slice(&i.to_be_bytes());
    r.extend_from_slice(&(160 * i as u32).to_be_bytes());
    r.extend_from_slice(&0x1234u32.to_be_bytes());
    r.extend_from_slice(&[i as u8; 20]);
    r
}

/// RTCP over IPv4 (not RTP: packet type 200).
fn rtcp(i: u16) -> Vec<u8> {
    let mut p = voice(2, 1)[0].clone();
    p.id = i;
    p.seq = i;
    let mut b = p.bytes();
    b[29] = 200;
    set_ip_checksum(&mut b, 20);
    b
}

#[test]
fn ipv6_and_non_rtp_flows_cross_as_compressed_non_tcp() {
    let config = Config::default();
    let (mut c, mut d) = ends(config);
    let (mut link, mut back) = (Vec::new(), Vec::new());
    let mut kinds = Vec::new();
    for i in 0..40u16 {
        for p in [v6(1, &rtp_payload(i)), rtcp(i)] {
            let kind = c.compress(&p, i as u64 * 20_000_000, &mut link);
            kinds.push(kind);
            d.decompress(kind.protocol(&config), &link, 0, &mut back).unwrap();
            assert_eq!(back, p, "packet {i} ({kind:?})");
            if kind == Kind::CompressedNonTcp {
                // Context id, generation, sequence; IPv4 ID or IPv6 UDP checksum.
                assert_eq!(link.len(), 5 + p.len() - if p[0] == 0x60 { 48 } else { 28 });
            }
        }
    }
    // RFC 2507's slow start: full headers at packets 0, 2, 5, 10, 19, 36.
    let full: Vec<usize> = kinds
        .iter()
        .step_by(2)
        .enumerate()
        .filter(|(_, k)| **k == Kind::FullHeader)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(full, [0, 2, 5, 10, 19, 36]);
    assert_eq!(c.stats.compressed_non_tcp, 80 - 12);
}

#[test]
fn a_lost_full_header_that_changed_the_context_drops_packets_until_the_next() {
    let config = Config::default();
    let (mut c, mut d) = ends(config);
    let (mut link, mut back, mut feedback) = (Vec::new(), Vec::new(), Vec::new());
    let mut restored = 0;
    for i in 0..30u16 {
        let mut p = rtcp(i);
        if i >= 10 {
            // The TTL changes: a new generation, whose full header is lost.
            p[8] = 32;
            set_ip_checksum(&mut p, 20);
        }
        let kind = c.compress(&p, 0, &mut link);
        if i == 10 {
            assert_eq!(kind, Kind::FullHeader);
            continue;
        }
        match d.decompress(kind.protocol(&config), &link, 0, &mut back) {
            Ok(_) => {
                assert_eq!(back, p, "packet {i}");
                restored += 1;
            }
            Err(Error::ContextDamaged) => assert!(i > 10),
            Err(e) => panic!("{i}: {e:?}"),
        }
        if d.context_state(&mut feedback) {
            c.context_state(&feedback);
        }
    }
    // One packet dropped for its generation; CONTEXT_STATE brought the
    // next full header at once.
    assert_eq!(d.stats.context_damaged, 1);
    assert_eq!(restored, 28);
}

#[test]
fn losses_of_compressed_non_tcp_packets_damage_nothing() {
    let config = Config::default();
    let (mut c, mut d) = ends(config);
    let (mut link, mut back) = (Vec::new(), Vec::new());
    for i in 0..300u16 {
        let p = v6(3, &rtp_payload(i));
        let kind = c.compress(&p, 0, &mut link);
        if kind == Kind::CompressedNonTcp && i % 3 != 0 {
            continue;
        }
        d.decompress(kind.protocol(&config), &link, 0, &mut back).unwrap();
        assert_eq!(back, p);
    }
    assert_eq!(d.stats.context_damaged, 0);
}
