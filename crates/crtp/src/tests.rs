//! Round trips: whatever the compressor sends, the decompressor gives back
//! the same bytes or reports the packet lost, never different bytes.

use crate::header::{put16, set_ip_checksum};
use crate::{protocol, Compressor, Config, Decompressor, Error, Kind};
use proptest::prelude::*;

/// An IPv4/UDP/RTP datagram.
#[derive(Clone, Debug)]
struct Rtp {
    flow: u8,
    id: u16,
    ttl: u8,
    checksum: u16,
    marker: bool,
    payload_type: u8,
    seq: u16,
    timestamp: u32,
    csrcs: Vec<u32>,
    payload: Vec<u8>,
    /// Version 1 in the RTP byte: UDP that is not RTP (a non-TCP context).
    not_rtp: bool,
}

impl Rtp {
    fn bytes(&self) -> Vec<u8> {
        let rtp_len = 12 + 4 * self.csrcs.len() + self.payload.len();
        let total = 20 + 8 + rtp_len;
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, self.ttl, 17, 0, 0];
        p.extend_from_slice(&[10, 0, 0, self.flow, 10, 0, 1, 1]);
        put16(&mut p, 2, total as u16);
        put16(&mut p, 4, self.id);
        set_ip_checksum(&mut p, 20);
        p.extend_from_slice(&(4000 + self.flow as u16 * 2).to_be_bytes());
        p.extend_from_slice(&5000u16.to_be_bytes());
        p.extend_from_slice(&((8 + rtp_len) as u16).to_be_bytes());
        p.extend_from_slice(&self.checksum.to_be_bytes());
        p.push(if self.not_rtp { 0x40 } else { 0x80 } | self.csrcs.len() as u8);
        p.push((self.marker as u8) << 7 | self.payload_type);
        p.extend_from_slice(&self.seq.to_be_bytes());
        p.extend_from_slice(&self.timestamp.to_be_bytes());
        p.extend_from_slice(&(0x1000 + self.flow as u32).to_be_bytes());
        for c in &self.csrcs {
            p.extend_from_slice(&c.to_be_bytes());
        }
        p.extend_from_slice(&self.payload);
        if self.checksum != 0 {
            // A flow with checksums carries right ones (the decompressor checks them).
            p[26..28].copy_from_slice(&[0, 0]);
            let checksum = udp_checksum(&p[12..20], &p[20..]);
            p[26..28].copy_from_slice(&checksum.to_be_bytes());
        }
        p
    }
}

/// The UDP checksum of `udp` (its checksum field zero) between `addresses`
/// (source then destination, IPv4 or IPv6), worked out here rather than
/// with the crate's own code, which it checks.
fn udp_checksum(addresses: &[u8], udp: &[u8]) -> u16 {
    let mut sum = 17u32 + udp.len() as u32;
    for c in addresses.chunks(2).chain(udp.chunks(2)) {
        sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xFFFF,
        c => c,
    }
}

/// A compressor and a decompressor of the same `config`: the two ends of a link.
fn ends(config: Config) -> (Compressor, Decompressor) {
    (Compressor::new(config).unwrap(), Decompressor::new(config).unwrap())
}

/// A G.729 stream: 20-byte payloads, 20 ms apart.
fn voice(flow: u8, n: usize) -> Vec<Rtp> {
    (0..n)
        .map(|i| Rtp {
            flow,
            id: 100 + i as u16,
            ttl: 64,
            checksum: 0,
            marker: i == 0,
            payload_type: 18,
            seq: 1000u16.wrapping_add(i as u16),
            timestamp: 160 * i as u32,
            csrcs: vec![],
            payload: vec![i as u8; 20],
            not_rtp: false,
        })
        .collect()
}

#[test]
fn a_steady_g729_stream_takes_two_header_bytes() {
    let config = Config::default();
    let (mut c, mut d) = ends(config);
    let (mut link, mut back) = (Vec::new(), Vec::new());
    let packets = voice(1, 1000);
    let mut previous = Kind::FullHeader;
    for (n, p) in packets.iter().enumerate() {
        let bytes = p.bytes();
        let kind = c.compress(&bytes, n as u64 * 20_000_000, &mut link);
        // After a full header the timestamp delta is sent once (2 bytes).
        if kind == Kind::CompressedRtp && previous != Kind::FullHeader {
            assert_eq!(link.len(), 2 + 20, "packet {n}");
        }
        previous = kind;
        d.decompress(kind.protocol(&config), &link, 0, &mut back).unwrap();
        assert_eq!(back, bytes, "packet {n}");
    }
    // A full header at the start and every 5 s (F_MAX_TIME: 250 packets).
    assert_eq!(c.stats.full_headers, 4);
    let per_packet = c.stats.header_bytes_out as f64 / packets.len() as f64;
    assert!(per_packet <= 2.2, "{per_packet} header bytes per packet");
}

#[test]
fn the_full_header_carries_context_and_sequence_in_the_lengths() {
    for (contexts, first, second) in [(256, 0x4000u16, 0u16), (1000, 0xC000, 0)] {
        let config = Config { contexts, ..Config::default() };
        let mut c = Compressor::new(config).unwrap();
        let bytes = voice(1, 1)[0].bytes();
        let mut link = Vec::new();
        assert_eq!(c.compress(&bytes, 0, &mut link), Kind::FullHeader);
        // Context 0, link sequence 0, generation 0 (RFC 2508 §3.3.1).
        assert_eq!(u16::from_be_bytes([link[2], link[3]]), first);
        assert_eq!(u16::from_be_bytes([link[24], link[25]]), second);
        assert_eq!(link[..2], bytes[..2]);
        assert_eq!(link[4..24], bytes[4..24]);
        assert_eq!(link[26..], bytes[26..]);
    }
}

#[test]
fn a_lost_packet_invalidates_the_context_until_refreshed() {
    let config = Config::default();
    let (mut c, mut d) = ends(config);
    let (mut link, mut back, mut feedback) = (Vec::new(), Vec::new(), Vec::new());
    let packets = voice(1, 10);
    for (n, p) in packets.iter().enumerate() {
        let bytes = p.bytes();
        let kind = c.compress(&bytes, 0, &mut link);
        if n == 3 {
            continue; // lost on the link
        }
        let result = d.decompress(kind.protocol(&config), &link, 0, &mut back);
        match n {
            4 => {
                assert_eq!(result, Err(Error::ContextDamaged));
                assert!(d.context_state(&mut feedback));
                // Type 1 (8-bit ids), one context: 0, invalid, last sequence 2.
                assert_eq!(feedback, [1, 1, 0, 0x80 | 2, 0]);
                c.context_state(&feedback);
            }
            _ => assert_eq!(back, bytes, "packet {n} ({kind:?})"),
        }
    }
    assert_eq!(c.stats.full_headers, 2);
    assert_eq!(d.stats.context_damaged, 1);
}

#[test]
fn what_cannot_come_back_byte_for_byte_crosses_unchanged() {
    let mut c = Compressor::new(Config::default()).unwrap();
    let mut link = Vec::new();
    let mut bad_checksum = voice(1, 1)[0].bytes();
    bad_checksum[10] ^= 1;
    let mut fragment = voice(1, 1)[0].bytes();
    fragment[6] = 0x20;
    set_ip_checksum(&mut fragment, 20);
    let mut bad_udp_checksum = voice(1, 1)[0].bytes();
    bad_udp_checksum[26] = 0x12;
    for p in [bad_checksum, fragment, bad_udp_checksum, vec![0x60; 48], vec![0x45; 3]] {
        assert_eq!(c.compress(&p, 0, &mut link), Kind::Ip);
        assert_eq!(link, p);
    }
}

#[test]
fn garbage_on_the_link_is_malformed_not_a_panic() {
    let config = Config::default();
    let mut d = Decompressor::new(config).unwrap();
    let mut back = Vec::new();
    for protocol in [
        protocol::FULL_HEADER,
        protocol::COMPRESSED_RTP_8,
        protocol::COMPRESSED_RTP_16,
        protocol::COMPRESSED_UDP_8,
        0x1234,
    ] {
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            let _ = d.decompress(protocol, &junk, 0, &mut back);
        }
    }
    assert!(d.stats.malformed > 0);
}

/// A change the compressor may meet between packets.
#[derive(Clone, Debug)]
enum Change {
    None,
    Marker,
    Jump(u16),
    Timestamp(i32),
    Id(u16),
    PayloadType(u8),
    Csrcs(u8),
    Ttl(u8),
    Checksum(u16),
    Size(u8),
    NotRtp,
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        8 => Just(Change::None),
        1 => Just(Change::Marker),
        1 => any::<u16>().prop_map(Change::Jump),
        1 => (-20000i32..5_000_000).prop_map(Change::Timestamp),
        1 => any::<u16>().prop_map(Change::Id),
        1 => (0u8..128).prop_map(Change::PayloadType),
        1 => (0u8..16).prop_map(Change::Csrcs),
        1 => any::<u8>().prop_map(Change::Ttl),
        1 => any::<u16>().prop_map(Change::Checksum),
        1 => any::<u8>().prop_map(Change::Size),
        1 => Just(Change::NotRtp),
    ]
}

impl Rtp {
    /// The flow's next packet with `change`, the `n`th of the run.
    fn next(&mut self, change: &Change, n: usize) -> Vec<u8> {
        self.seq = self.seq.wrapping_add(1);
        self.timestamp = self.timestamp.wrapping_add(160);
        self.id = self.id.wrapping_add(1);
        self.marker = false;
        match *change {
            Change::None => {}
            Change::Marker => self.marker = true,
            Change::Jump(j) => self.seq = self.seq.wrapping_add(j),
            Change::Timestamp(t) => self.timestamp = self.timestamp.wrapping_add(t as u32),
            Change::Id(i) => self.id = self.id.wrapping_add(i),
            Change::PayloadType(t) => self.payload_type = t,
            Change::Csrcs(k) => self.csrcs = (0..k as u32).map(|x| x * 7 + n as u32).collect(),
            Change::Ttl(t) => self.ttl = t,
            Change::Checksum(s) => self.checksum = s,
            Change::Size(s) => self.payload = vec![s; s as usize],
            Change::NotRtp => self.not_rtp = !self.not_rtp,
        }
        self.bytes()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A link that reorders (which PPP does not, but a careless tunnel
    /// might): packets swapped with their neighbour still come back as
    /// the original bytes or are reported lost.
    #[test]
    fn reordering_gives_the_original_or_a_loss(
        steps in proptest::collection::vec((0u8..2, change(), any::<bool>()), 1..200),
        header_checksum in any::<bool>(),
        repeats in prop_oneof![Just(0u8), Just(2), Just(7)],
    ) {
        let config = Config { contexts: 256, max_period: 50, max_time_ns: 0, header_checksum, repeats };
        let (mut c, mut d) = ends(config);
        let mut flows = [voice(0, 1).remove(0), voice(1, 1).remove(0)];
        let mut on_link = Vec::new();
        let mut link = Vec::new();
        for (n, (flow, change, _)) in steps.iter().enumerate() {
            let bytes = flows[*flow as usize].next(change, n);
            let kind = c.compress(&bytes, n as u64 * 20_000_000, &mut link);
            on_link.push((kind.protocol(&config), link.clone(), bytes));
        }
        for (n, (_, _, swap)) in steps.iter().enumerate() {
            if *swap && n + 1 < on_link.len() && n % 3 == 0 {
                on_link.swap(n, n + 1);
            }
        }
        let mut back = Vec::new();
        for (n, (protocol, link, original)) in on_link.iter().enumerate() {
            match d.decompress(*protocol, link, n as u64 * 20_000_000, &mut back) {
                Ok(_) => prop_assert_eq!(&back, original, "packet {}", n),
                Err(Error::ContextDamaged) => {}
                Err(e) => prop_assert!(false, "packet {}: {:?}", n, e),
            }
        }
    }

    /// Any sequence of packets over two flows, with field changes and
    /// losses on the link and CONTEXT_STATE feedback, decompresses to the
    /// original bytes or is reported lost. Losses stop short of 16 packets
    /// of one flow in a row, which its 4-bit link sequence cannot see
    /// (RFC 2508 §3.3.5) unless the flow has a UDP checksum. Under RFC
    /// 3545's repeats, with checksums and runs of at most N losses, no
    /// packet is lost beyond those the link lost.
    #[test]
    fn round_trip(
        steps in proptest::collection::vec((0u8..2, change(), any::<bool>()), 1..300),
        loss_per_mille in prop_oneof![Just(0u32), 0u32..300],
        contexts in prop_oneof![Just(1u32), Just(256), Just(300)],
        header_checksum in any::<bool>(),
        repeats in prop_oneof![Just(0u8), Just(1), Just(3)],
        short_runs in any::<bool>(),
    ) {
        let max_run = if short_runs && repeats > 0 { repeats as u32 } else { 15 };
        let no_damage = max_run == repeats as u32 && header_checksum && contexts >= 2;
        let config = Config { contexts, max_period: 50, max_time_ns: 0, header_checksum, repeats };
        let (mut c, mut d) = ends(config);
        let mut flows = [voice(0, 1).remove(0), voice(1, 1).remove(0)];
        let (mut link, mut back, mut feedback) = (Vec::new(), Vec::new(), Vec::new());
        // Losses in a row per context (a flow's RTP and other packets take
        // different ones).
        let mut runs = std::collections::HashMap::new();
        for (n, (flow, change, coin)) in steps.into_iter().enumerate() {
            let p = &mut flows[flow as usize];
            let bytes = p.next(&change, n);
            let kind = c.compress(&bytes, n as u64, &mut link);
            let cid = Decompressor::context_of(kind.protocol(&config), &link).map(|c| c.0);
            let run = runs.entry(cid).or_insert(0u32);
            let lost = *run < max_run && ((n as u32).wrapping_mul(2_654_435_761) ^ coin as u32) % 1000 < loss_per_mille;
            if lost {
                *run += 1;
                continue;
            }
            *run = 0;
            match d.decompress(kind.protocol(&config), &link, n as u64 * 2_000_000_000, &mut back) {
                Ok(_) => prop_assert_eq!(&back, &bytes, "packet {} ({:?})", n, kind),
                // Without loss on the link, nothing is lost to damage.
                Err(Error::ContextDamaged) => prop_assert!(loss_per_mille > 0 && !no_damage, "packet {} lost to damage", n),
                Err(e) => prop_assert!(false, "packet {} ({:?}): {:?}", n, kind, e),
            }
            if d.context_state(&mut feedback) {
                c.context_state(&feedback);
            }
        }
    }
}

#[test]
fn a_new_flow_takes_the_least_recently_used_context() {
    let config = Config { contexts: 2, ..Config::default() };
    let mut c = Compressor::new(config).unwrap();
    let mut link = Vec::new();
    let (a, b, new) = (voice(1, 3), voice(2, 3), voice(3, 3));
    let mut send = |p: &Rtp| c.compress(&p.bytes(), 0, &mut link);
    assert_eq!(send(&a[0]), Kind::FullHeader);
    assert_eq!(send(&b[0]), Kind::FullHeader);
    assert_eq!(send(&a[1]), Kind::CompressedRtp);
    assert_eq!(send(&new[0]), Kind::FullHeader); // takes b's context
    assert_eq!(send(&a[2]), Kind::CompressedRtp);
    assert_eq!(send(&b[1]), Kind::FullHeader); // takes new's
    assert_eq!(send(&new[1]), Kind::FullHeader);
}

/// Sends `packets` through a link that loses packets 2 to 17 (16 in a row:
/// the link sequence comes round again), checking each link packet with
/// `check`. Every packet that comes out must be the one sent; returns the
/// decompressor, to show what it caught.
fn sixteen_lost(config: Config, packets: &[Rtp], check: impl Fn(usize, &[u8])) -> Decompressor {
    let (mut c, mut d) = ends(config);
    let (mut link, mut back) = (Vec::new(), Vec::new());
    for (n, p) in packets.iter().enumerate() {
        let bytes = p.bytes();
        let kind = c.compress(&bytes, 0, &mut link);
        check(n, &link);
        if (2..18).contains(&n) {
            continue;
        }
        match d.decompress(kind.protocol(&config), &link, 0, &mut back) {
            Ok(_) => assert_eq!(back, bytes, "packet {n}"),
            Err(Error::ContextDamaged) => {}
            Err(e) => panic!("packet {n}: {e:?}"),
        }
    }
    d
}

#[test]
fn a_checksum_catches_sixteen_losses_the_link_sequence_misses() {
    let mut packets = voice(1, 40);
    for (n, p) in packets.iter_mut().enumerate() {
        // The flow has UDP checksums, and a timestamp step that changes, so
        // a lost delta matters.
        p.checksum = 1;
        p.timestamp = (160 * n + if n > 2 { 80 } else { 0 }) as u32;
    }
    let d = sixteen_lost(Config::default(), &packets, |_, _| {});
    assert!(d.stats.context_damaged > 0);
    assert!(d.stats.checksum_failures > 0);
}

#[test]
fn either_context_id_width_is_read() {
    let narrow = Config::default();
    let wide = Config { contexts: 300, ..Config::default() };
    let mut c = Compressor::new(narrow).unwrap();
    let mut d = Decompressor::new(wide).unwrap();
    let (mut link, mut back) = (Vec::new(), Vec::new());
    for p in voice(1, 5) {
        let bytes = p.bytes();
        let kind = c.compress(&bytes, 0, &mut link);
        d.decompress(kind.protocol(&narrow), &link, 0, &mut back).unwrap();
        assert_eq!(back, bytes);
    }
}

#[test]
fn the_header_checksum_catches_what_the_link_sequence_misses() {
    let config = Config { header_checksum: true, ..Config::default() };
    // No UDP checksum.
    let d = sixteen_lost(config, &voice(1, 40), |n, link| {
        if n == 0 {
            // RFC 3545 §2.2: the C flag beside the sequence, the checksum in
            // the UDP checksum's place.
            assert_eq!(u16::from_be_bytes([link[24], link[25]]), 0x0010);
            assert_ne!(u16::from_be_bytes([link[26], link[27]]), 0);
        } else {
            // Two bytes of header checksum after the flags.
            let expected = 2 + 2 + 20 + if n == 1 { 2 } else { 0 };
            assert_eq!(link.len(), expected, "packet {n}");
        }
    });
    assert!(d.stats.context_damaged > 0);
    assert!(d.stats.checksum_failures > 0);
}

#[test]
fn the_refresh_list_holds_each_context_once_however_often_it_is_damaged() {
    let config = Config::default();
    let (mut c, mut d) = ends(config);
    let (mut link, mut back, mut feedback) = (Vec::new(), Vec::new(), Vec::new());
    // Damage, refresh, damage again, many times, nobody reading the feedback
    // until the end (as `calliper crtp decompress` never does).
    for (n, p) in voice(1, 400).iter().enumerate() {
        let kind = c.compress(&p.bytes(), 0, &mut link);
        if n % 20 == 5 {
            continue; // lost: the next packet shows a gap
        }
        if n % 20 == 10 {
            c.context_state(&[1, 1, 0, 0x80, 0]); // as if asked: a refresh follows
        }
        let _ = d.decompress(kind.protocol(&config), &link, n as u64 * 2_000_000_000, &mut back);
    }
    assert!(d.stats.sequence_gaps >= 19);
    assert!(d.listed() <= 1, "{} entries for one context", d.listed());
    // Refreshed by now: nothing to ask for.
    assert!(!d.context_state(&mut feedback));
    assert_eq!(d.listed(), 0);
}

#[test]
fn every_damaged_context_is_asked_for_in_turn_and_a_clock_step_back_does_not_stall_it() {
    let config = Config { contexts: 300, ..Config::default() };
    let mut d = Decompressor::new(config).unwrap();
    let (mut back, mut feedback) = (Vec::new(), Vec::new());
    // 300 contexts never set up: each compressed packet is damage.
    let damage = |d: &mut Decompressor, cid: u16, now: u64, back: &mut Vec<u8>| {
        let packet = [(cid >> 8) as u8, cid as u8, 0x01, 0x55];
        let result = d.decompress(protocol::COMPRESSED_RTP_16, &packet, now, back);
        assert_eq!(result, Err(Error::ContextDamaged));
    };
    for cid in 0..300 {
        damage(&mut d, cid, 10_000_000_000, &mut back);
    }
    let mut asked = std::collections::HashSet::new();
    for _ in 0..2 {
        assert!(d.context_state(&mut feedback));
        for e in feedback[2..].chunks(4) {
            asked.insert(u16::from_be_bytes([e[0], e[1]]));
        }
        // A second later the contexts just asked for send again, and are
        // listed again: they must not go ahead of those still waiting.
        for &cid in &asked {
            damage(&mut d, cid, 11_000_000_000, &mut back);
        }
    }
    assert_eq!(asked.len(), 300, "every context asked for within two rounds");
    // The clock steps back 5 s: a context is asked for again all the same.
    while d.context_state(&mut feedback) {}
    damage(&mut d, 42, 6_000_000_000, &mut back);
    assert!(d.context_state(&mut feedback));
    assert_eq!(&feedback[2..4], &42u16.to_be_bytes());
}

mod non_tcp;
mod repeats;
