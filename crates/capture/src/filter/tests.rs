//! The interpreter on hand-built programs, and libpcap's output on packets
//! whose answer is known.

use super::*;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// An Ethernet/IPv4/UDP packet from port `sport` to `dport`.
fn udp(sport: u16, dport: u16) -> Vec<u8> {
    use calliper_wire::{emit, ipproto};
    let ip = emit::Ipv4 {
        id: 1,
        ..emit::Ipv4::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), ipproto::UDP)
    }
    .emit(&emit::udp(sport, dport, &[]));
    emit::ethernet(&[], emit::ethertype::IPV4, &ip)
}

#[test]
fn loads_past_the_packet_division_by_zero_and_bad_codes_reject() {
    let past = Program { insns: vec![ins(0x20, 0, 0, 100), ins(0x06, 0, 0, 1)] };
    assert!(!past.accepts(&[0; 10], 10));
    let div0 = Program { insns: vec![ins(0x00, 0, 0, 5), ins(0x34, 0, 0, 0), ins(0x06, 0, 0, 1)] };
    assert!(!div0.accepts(&[], 0));
    let bad = Program { insns: vec![ins(0xff, 0, 0, 0), ins(0x06, 0, 0, 1)] };
    assert!(!bad.accepts(&[], 0));
    // A jump beyond the end, and no return at all.
    let off_end = Program { insns: vec![ins(0x05, 0, 0, 1000)] };
    assert!(!off_end.accepts(&[], 0));
    assert!(!Program { insns: vec![] }.accepts(&[1, 2, 3], 3));
    // Scratch memory beyond its 16 words.
    let mem = Program { insns: vec![ins(0x02, 0, 0, 16), ins(0x06, 0, 0, 1)] };
    assert!(!mem.accepts(&[], 0));
    // An indexed load whose offset overflows (X + k past 2^32) rejects, as
    // in libpcap, rather than wrapping to the packet's first bytes.
    let wrap = Program {
        insns: vec![ins(0x01, 0, 0, 0xFFFF_FFFF), ins(0x50, 0, 0, 2), ins(0x06, 0, 0, 1)],
    };
    assert!(!wrap.accepts(&[0x66; 8], 8));
    let in_range =
        Program { insns: vec![ins(0x01, 0, 0, 1), ins(0x50, 0, 0, 2), ins(0x06, 0, 0, 1)] };
    assert!(in_range.accepts(&[0x66; 8], 8));
}

#[test]
fn arithmetic_jumps_and_the_ip_header_length_load() {
    // X = 4 × (byte 0 & 15); A = byte X; A += 1; accept when A == 8.
    let p = Program {
        insns: vec![
            ins(0xb1, 0, 0, 0),
            ins(0x50, 0, 0, 0),
            ins(0x04, 0, 0, 1),
            ins(0x15, 0, 1, 8),
            ins(0x06, 0, 0, 1),
            ins(0x06, 0, 0, 0),
        ],
    };
    let mut data = [0u8; 24];
    data[0] = 0x45;
    data[20] = 7;
    assert!(p.accepts(&data, 24));
    data[20] = 8;
    assert!(!p.accepts(&data, 24));
}

#[test]
fn libpcap_expressions_on_known_packets() {
    let mut f = Filter::new("udp port 5060").expect("libpcap compiles a plain expression");
    assert!(f.accepts(linktype::ETHERNET, &udp(5060, 40000), 42).unwrap());
    assert!(f.accepts(linktype::ETHERNET, &udp(40000, 5060), 42).unwrap());
    assert!(!f.accepts(linktype::ETHERNET, &udp(40000, 40002), 42).unwrap());
    assert_eq!(f.rejected, 1);
    // Raw IP is compiled on first use: the same packet without Ethernet.
    let raw = &udp(5060, 1)[14..];
    assert!(f.accepts(linktype::RAW, raw, 28).unwrap());
    let mut g = Filter::new("greater 100").unwrap();
    assert!(!g.accepts(linktype::ETHERNET, &udp(1, 2), 42).unwrap());
    assert!(g.accepts(linktype::ETHERNET, &udp(1, 2), 142).unwrap());
}

#[test]
fn bad_expressions_say_why() {
    for bad in ["udp port", "portt 5", "host 999.1.1.1", "a\0b"] {
        let e = Filter::new(bad).unwrap_err();
        assert!(e.0.contains("bad filter") || e.0.contains("NUL"), "{bad}: {e}");
    }
}
