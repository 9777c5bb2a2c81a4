//! RFC 3545's robust operation: repeated updates and bridged gaps.

use super::*;

/// Compresses `packets` and decompresses those `lost` spares; the kinds
/// sent, and the decompressor.
fn over_lossy_link(
    config: Config,
    packets: &[Rtp],
    lost: impl Fn(usize) -> bool,
) -> (Vec<Kind>, Decompressor) {
    let (mut c, mut d) = ends(config);
    let (mut link, mut back, mut feedback) = (Vec::new(), Vec::new(), Vec::new());
    let mut kinds = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let bytes = p.bytes();
        let now = i as u64 * 20_000_000;
        let kind = c.compress(&bytes, now, &mut link);
        kinds.push(kind);
        if lost(i) {
            continue;
        }
        if d.decompress(kind.protocol(&config), &link, now, &mut back).is_ok() {
            assert_eq!(back, bytes, "packet {i}");
        }
        if d.context_state(&mut feedback) {
            c.context_state(&feedback);
        }
    }
    (kinds, d)
}

/// Talkspurts: 50 packets, then 2 s of silence (the timestamp jumps).
fn talkspurts(n: usize, checksum: u16) -> Vec<Rtp> {
    let mut packets = voice(0, n);
    for (i, p) in packets.iter_mut().enumerate() {
        p.timestamp += (i / 50) as u32 * 16_000;
        p.marker = i % 50 == 0;
        p.checksum = checksum;
    }
    packets
}

#[test]
fn repeated_updates_follow_rfc_3545s_example() {
    // RFC 3545 §2.3.1, second example, N = 2: three FULL_HEADERs, the
    // timestamp delta in three COMPRESSED_UDP, then COMPRESSED_RTP; a new
    // talkspurt's timestamp in three COMPRESSED_UDP, deltas kept.
    let config = Config { repeats: 2, ..Config::default() };
    let (kinds, d) = over_lossy_link(config, &talkspurts(60, 0), |_| false);
    use Kind::{CompressedRtp as CR, CompressedUdp as CU, FullHeader as FH};
    let mut want = vec![FH, FH, FH, CU, CU, CU];
    want.extend([CR; 44]);
    want.extend([CU, CU, CU]);
    want.extend([CR; 7]);
    assert_eq!(kinds, want);
    assert_eq!(d.stats.restored, 60);
    // The talkspurt's packets carry the timestamp, and the IPv4 ID with it
    // (which the RFC's example leaves out: no checksum covers the ID):
    // context id, two flag bytes, two ID bytes, four timestamp bytes.
    let mut c = Compressor::new(config).unwrap();
    let mut link = Vec::new();
    let packets = talkspurts(51, 0);
    for p in &packets {
        c.compress(&p.bytes(), 0, &mut link);
    }
    assert_eq!(link.len(), 1 + 2 + 2 + 4 + 20);
    assert_eq!(link[1] & 0xF0, 0xC0, "F and I: no dT or dI");
    assert_eq!(link[2], 0x80 | 0x20, "M and T");
}

#[test]
fn repeated_updates_bridge_gaps_of_up_to_n_packets() {
    // Losses of up to N = 2 in a row, never the first three packets,
    // with talkspurts and an IPv4 ID that jumps: nothing lost beyond
    // what the link lost, whether the flow has a UDP checksum or only
    // RFC 3545's header checksum.
    let lossy = |i: usize| i > 3 && i % 7 < 2;
    for (checksum, header_checksum) in [(0x1234, false), (0, true)] {
        let config = Config { repeats: 2, header_checksum, ..Config::default() };
        let mut packets = talkspurts(400, checksum);
        for (i, p) in packets.iter_mut().enumerate() {
            p.id = p.id.wrapping_add((i / 30) as u16 * 1000);
        }
        let lost = (0..400).filter(|&i| lossy(i)).count() as u64;
        let (_, d) = over_lossy_link(config, &packets, lossy);
        assert_eq!(d.stats.context_damaged, 0, "{checksum}: {:?}", d.stats);
        assert_eq!(d.stats.restored, 400 - lost);
        assert!(d.stats.gaps_bridged > 50, "{:?}", d.stats);
        // Plain RFC 2508 on the same link loses the context at every gap,
        // and a packet with it though the refresh is asked for at once.
        let plain = Config { repeats: 0, ..config };
        let (_, d) = over_lossy_link(plain, &packets, lossy);
        assert!(d.stats.sequence_gaps > 50, "{:?}", d.stats);
        assert!(d.stats.context_damaged >= d.stats.sequence_gaps);
    }
}

#[test]
fn a_gap_longer_than_n_or_unverifiable_invalidates_the_context() {
    let packets = talkspurts(40, 0);
    // Three lost in a row with N = 2: the context is invalidated.
    let config = Config { repeats: 2, header_checksum: true, ..Config::default() };
    let (_, d) = over_lossy_link(config, &packets, |i| (20..23).contains(&i));
    assert_eq!(d.stats.gaps_bridged, 0);
    assert_eq!(d.stats.sequence_gaps, 1);
    assert!(d.stats.context_damaged > 0);
    // No checksum to vouch for the result: not bridged either.
    let config = Config { repeats: 2, ..Config::default() };
    let (_, d) = over_lossy_link(config, &packets, |i| i == 20);
    assert_eq!((d.stats.gaps_bridged, d.stats.sequence_gaps), (0, 1));
    // Lost FULL_HEADERs (two of the three) do not lower N.
    let config = Config { repeats: 2, header_checksum: true, ..Config::default() };
    let (_, d) = over_lossy_link(config, &packets, |i| i < 2 || i == 20 || i == 21);
    assert_eq!((d.stats.gaps_bridged, d.stats.sequence_gaps), (1, 0));
    assert_eq!(d.stats.restored, 40 - 4);
}

#[test]
fn repeats_are_bounded_by_the_link_sequence() {
    let config = Config { repeats: 8, ..Config::default() };
    assert!(Compressor::new(config).is_err());
}

#[test]
fn a_steady_stream_under_repeats_takes_two_and_a_half_header_bytes() {
    // N = 2: three FULL_HEADERs and three COMPRESSED_UDP (timestamp and
    // its delta) every 5 s, two bytes otherwise; four with the header
    // checksum the robust link needs for flows without a UDP checksum.
    for (header_checksum, most) in [(false, 2.6), (true, 4.6)] {
        let config = Config { repeats: 2, header_checksum, ..Config::default() };
        let mut c = Compressor::new(config).unwrap();
        let mut link = Vec::new();
        for (n, p) in voice(1, 1000).iter().enumerate() {
            c.compress(&p.bytes(), n as u64 * 20_000_000, &mut link);
        }
        assert_eq!(c.stats.full_headers, 12);
        let per_packet = c.stats.header_bytes_out as f64 / 1000.0;
        assert!(per_packet <= most, "{per_packet} header bytes per packet");
    }
}
