//! Test vectors from shared/reference.md §1–2 and property tests.

use super::*;
use proptest::prelude::*;

pub(crate) fn pkt(arrival_ms: f64, seq: u16, ts: u32) -> Packet {
    Packet {
        arrival_ns: (arrival_ms * 1e6) as i64,
        seq,
        timestamp: ts,
        payload_type: 8,
        marker: false,
        bytes: 172,
    }
}

/// 50 packets 20 ms apart, numbered from 100, timestamps from `ts0` in
/// 160-tick steps: the steady start many tests build on.
pub(crate) fn steady_50(ts0: u32, clock: ClockRate) -> StreamStats {
    let mut s = StreamStats::new(&pkt(0.0, 100, ts0), clock);
    for i in 1..50u16 {
        s.update(&pkt(f64::from(i) * 20.0, 100 + i, ts0 + u32::from(i) * 160), clock);
    }
    s
}

#[test]
fn wrap_vector_extends_sequence() {
    // 65534, 65535, 0, 1 -> extended max 65537 at seq 1, nothing lost.
    let mut s = SeqTracker::default();
    for q in [65534u16, 65535, 0, 1] {
        s.update(q);
    }
    assert_eq!(s.extended_max(), 65537);
    assert_eq!((s.expected(), s.lost()), (4, 0));
}

#[test]
fn fraction_lost_vector() {
    assert_eq!(fraction_lost(100, 95), 12);
    assert_eq!(fraction_lost(100, 101), 0);
    assert_eq!(fraction_lost(0, 0), 0);
}

#[test]
fn integer_jitter_vector() {
    // Timestamps 0,160,...; arrivals 1000,1160,1330,1480,1700 (ts units).
    let ts = [0i64, 160, 320, 480, 640];
    let arr = [1000i64, 1160, 1330, 1480, 1700];
    let mut state = 0u32;
    let mut states = vec![];
    for i in 1..5 {
        let d = (arr[i] - arr[i - 1]) - (ts[i] - ts[i - 1]);
        state = rfc3550_jitter_step(state, d);
        states.push(state);
    }
    assert_eq!(states, vec![0, 10, 19, 78]);
    assert_eq!(states.iter().map(|s| s >> 4).collect::<Vec<_>>(), vec![0, 0, 1, 4]);
}

#[test]
fn float_jitter_vector() {
    // Same vector through the Wireshark view with an 8 kHz clock: 1 ts unit = 0.125 ms.
    let ts = [0u32, 160, 320, 480, 640];
    let arr = [1000.0, 1160.0, 1330.0, 1480.0, 1700.0];
    let mut s = StreamStats::new(&pkt(arr[0] * 0.125, 0, ts[0]), ClockRate::Hz(8000));
    let mut j = vec![];
    for i in 1..5 {
        s.update(&pkt(arr[i] * 0.125, i as u16, ts[i]), ClockRate::Hz(8000));
        j.push(s.ws.jitter / 0.125);
    }
    let want = [0.0, 0.625, 1.2109, 4.8853];
    for (g, w) in j.iter().zip(want) {
        assert!((g - w).abs() < 1e-3, "{j:?}");
    }
    assert!((s.ws.max_jitter / 0.125 - 4.8853).abs() < 1e-3);
    assert!((s.ws.max_delta - 220.0 * 0.125).abs() < 1e-9);
}

#[test]
fn duplicates_do_not_make_loss_negative() {
    let mut s = StreamStats::new(&pkt(0.0, 10, 0), ClockRate::Hz(8000));
    for (i, q) in [11u16, 11, 12, 12, 13].iter().enumerate() {
        s.update(&pkt(20.0 * (i + 1) as f64, *q, 160 * (*q as u32 - 10)), ClockRate::Hz(8000));
    }
    assert_eq!((s.packets, s.seq.expected(), s.seq.lost(), s.seq.duplicates), (6, 4, 0, 2));
    // Wireshark counts received - expected, which goes negative.
    assert_eq!(s.ws.lost(), -2);
}

#[test]
fn reordering_is_counted_not_lost() {
    let mut s = SeqTracker::default();
    for q in [1u16, 2, 4, 3, 5, 7, 6] {
        s.update(q);
    }
    assert_eq!((s.expected(), s.lost(), s.out_of_order, s.duplicates), (7, 0, 2, 0));
}

#[test]
fn sequence_reset_opens_a_new_segment() {
    // 100 packets from 5000, then the source restarts at 1 (SIPp replay on resume).
    let mut s = SeqTracker::default();
    for q in 5000u16..5100 {
        s.update(q);
    }
    for q in 1u16..=50 {
        s.update(q);
    }
    assert_eq!(s.resets, 1);
    assert_eq!(s.strays, 0);
    assert_eq!((s.expected(), s.lost()), (150, 0));
}

#[test]
fn single_stray_is_not_a_reset() {
    let mut s = SeqTracker::default();
    for q in [1u16, 2, 3, 30000, 4, 5] {
        s.update(q);
    }
    assert_eq!((s.resets, s.strays, s.expected(), s.lost()), (0, 1, 5, 0));
}

#[test]
fn emodel_vectors() {
    let close = |a: f64, b: f64, tol: f64| assert!((a - b).abs() < tol, "{a} vs {b}");
    for (r, m) in [
        (93.2, 4.4093),
        (90.0, 4.3390),
        (80.0, 4.0240),
        (70.0, 3.5970),
        (60.0, 3.1000),
        (50.0, 2.5750),
    ] {
        close(emodel::mos(r), m, 1e-4);
    }
    let model = |c: &str| emodel::codec_model(c).unwrap();
    close(emodel::r_factor(&model("PCMA"), 1.0, 1.0, 150.0), 85.96, 0.01);
    close(emodel::r_factor(&model("PCMU"), 2.0, 2.0, 0.0), 85.92, 0.01);
    close(emodel::r_factor(&model("G729"), 2.0, 1.0, 150.0), 70.60, 0.01);
    // G.723.1 at 5 % loss and 250 ms: the worked vector of shared/reference.md.
    close(emodel::r_factor(&model("G723"), 5.0, 1.0, 250.0), 45.25, 0.01);
    close(emodel::effective_ie(0.0, 4.3, 2.0, 1.0) + 0.0, 93.2 - 63.04, 0.01);
}

proptest! {
    /// Whatever is lost, reordered (within the misorder limit) or duplicated,
    /// expected = first..=last and lost = expected - unique packets delivered.
    #[test]
    fn loss_matches_ground_truth(
        start in any::<u16>(),
        n in 1usize..3000,
        drop_mask in proptest::collection::vec(any::<u8>(), 3000),
        dup_mask in proptest::collection::vec(any::<u8>(), 3000),
        swaps in proptest::collection::vec(0usize..3000, 0..50),
    ) {
        // Sequence numbers start..start+n (wrapping); keep first and last so the range is known.
        let mut sent: Vec<u16> = (0..n).map(|i| start.wrapping_add(i as u16)).collect();
        let mut delivered: Vec<u16> = sent
            .iter()
            .enumerate()
            .filter(|(i, _)| *i == 0 || *i == n - 1 || drop_mask[*i] % 10 != 0)
            .map(|(_, s)| *s)
            .collect();
        let unique = delivered.len() as u64;
        // Adjacent swaps (reordering by one) that keep the first and last in place.
        for &i in &swaps {
            if i > 0 && i + 2 < delivered.len() {
                delivered.swap(i, i + 1);
            }
        }
        let mut with_dups = Vec::new();
        for (i, s) in delivered.iter().enumerate() {
            with_dups.push(*s);
            if i > 0 && i + 1 < delivered.len() && dup_mask[i] % 17 == 0 {
                with_dups.push(*s);
            }
        }
        let mut t = SeqTracker::default();
        for s in &with_dups {
            t.update(*s);
        }
        sent.truncate(n);
        prop_assert_eq!(t.expected(), n as u64);
        prop_assert_eq!(t.lost(), n as u64 - unique);
        prop_assert_eq!(t.duplicates, (with_dups.len() - delivered.len()) as u32);
    }

    /// Constant spacing in both arrival and timestamp means zero jitter.
    #[test]
    fn steady_stream_has_no_jitter(start in any::<u16>(), ts0 in any::<u32>(), n in 2u32..500) {
        let mut s = StreamStats::new(&pkt(0.0, start, ts0), ClockRate::Hz(8000));
        for i in 1..n {
            s.update(&pkt(20.0 * i as f64, start.wrapping_add(i as u16), ts0.wrapping_add(160 * i)), ClockRate::Hz(8000));
        }
        prop_assert!(s.ws.max_jitter < 1e-9);
        prop_assert_eq!(s.ws.lost(), 0);
        prop_assert_eq!(s.seq.lost(), 0);
    }
}

#[test]
fn delta_in_ms_is_correctly_rounded() {
    // 34 834 µs between packets must read 34.834 ms, as Wireshark prints it
    // (multiplying by 1e-6 gives 34.833999999999996).
    let mut s = StreamStats::new(&pkt(0.0, 1, 0), ClockRate::Hz(8000));
    let mut p = pkt(0.0, 2, 160);
    p.arrival_ns = 34_834_000;
    s.update(&p, ClockRate::Hz(8000));
    assert_eq!(s.ws.max_delta, 34.834);
}

/// The codec table holds G.113 Appendix I's published values (Ie from Table
/// I.1; Bpl where published), and refuses codecs it has none for.
#[test]
fn codec_table_holds_g113_values() {
    use emodel::{codec_model, Scale, Unscored};
    let nb = |c: &str| {
        let m = codec_model(c).unwrap();
        assert_eq!(m.scale, Scale::Narrowband, "{c}");
        (m.ie, m.bpl)
    };
    assert_eq!(nb("PCMU"), (0.0, 25.1)); // G.711 with Appendix I PLC
    assert_eq!(nb("PCMA"), (0.0, 25.1));
    assert_eq!(nb("G729"), (11.0, 19.0)); // G.729A + VAD
    assert_eq!(nb("G723"), (15.0, 16.1)); // G.723.1 6.3 kbit/s + VAD
    assert_eq!(nb("GSM-EFR"), (5.0, 10.0));
    for (c, ie) in [("G726-40", 2.0), ("G726-32", 7.0), ("G726-24", 25.0), ("G726-16", 50.0)] {
        assert_eq!(nb(c).0, ie, "{c}");
    }
    assert_eq!(nb("G728").0, 7.0);
    assert_eq!(nb("GSM").0, 20.0);
    let wb = codec_model("AMR-WB").unwrap();
    assert_eq!((wb.ie, wb.bpl, wb.scale), (13.0, 4.3, Scale::Wideband));
    assert_eq!(codec_model("G722").unwrap().scale, Scale::Wideband);
    for c in ["opus", "iLBC", "speex", "dynamic-96", "EVS"] {
        assert_eq!(codec_model(c), Err(Unscored::NoCodecValue), "{c}");
    }
    for c in ["telephone-event", "CN", "H264", "T38"] {
        assert_eq!(codec_model(c), Err(Unscored::NotVoice), "{c}");
    }
}

/// G.107.1: wideband R starts at 129 and maps to MOS through R / 1.29.
/// AMR-WB 12.65 without loss, with only its 5 ms look-ahead as delay:
/// Id = 0.024·5 = 0.12, R = 129 − 0.12 − 13 = 115.88, R/1.29 = 89.83,
/// MOS = 1 + 0.035·89.83 + 89.83·29.83·10.17·7e-6 = 4.335.
#[test]
fn wideband_scores_on_their_own_scale() {
    let no_delay = emodel::DelayInputs { rtt_ms: None, buffer_ms: 0.0, packet_ms: Some(0.0) };
    let s = emodel::estimate("AMR-WB", 0.0, 1.0, &no_delay).unwrap();
    assert_eq!(s.scale, emodel::Scale::Wideband);
    assert!((s.r - 115.88).abs() < 1e-9, "{s:?}");
    assert!((s.mos - 4.335).abs() < 0.001, "{s:?}");
    // The same loss costs a wideband codec more R than G.711 with PLC.
    let g711 = emodel::estimate("PCMA", 2.0, 1.0, &no_delay).unwrap();
    assert!(g711.r <= 100.0 && s.r > 100.0);
}

/// One-way delay: half the round trip, the buffer, the packet time and the
/// look-ahead (G.729: 5 ms). 80 ms RTT, 60 ms buffer, 20 ms packets:
/// 40 + 60 + 20 + 5 = 125 ms; without RTCP or packet time: 60 + 20 + 5.
#[test]
fn delay_adds_its_inputs() {
    let g729 = emodel::codec_model("G729").unwrap();
    let d = emodel::DelayInputs { rtt_ms: Some(80.0), buffer_ms: 60.0, packet_ms: Some(20.0) };
    assert_eq!(emodel::one_way_delay_ms(&g729, &d), 125.0);
    let bare = emodel::DelayInputs { rtt_ms: None, packet_ms: None, ..d };
    assert_eq!(emodel::one_way_delay_ms(&g729, &bare), 85.0);
}

#[test]
fn codec_names_are_normalised() {
    for (sdp, name) in [
        ("pcma", "PCMA"),
        ("OPUS", "opus"),
        ("G729a", "G729"),
        ("Telephone-Event", "telephone-event"),
    ] {
        assert_eq!(Codec::resolve(96, Some((sdp, 8000))).name, name);
    }
    assert_eq!(Codec::resolve(96, Some(("X-Custom", 8000))).name, "X-Custom");
}

/// A codec whose payload format fixes its clock keeps it whatever the
/// `a=rtpmap` rate (RFC 3551 §4.5, RFC 7587 for Opus); others take the SDP's.
#[test]
fn fixed_clock_codecs_ignore_a_wrong_rtpmap_rate() {
    for (sdp, rate, want) in [
        ("PCMU", 16000, 8000),
        ("pcma", 48000, 8000),
        ("G722", 16000, 8000),
        ("G726-32", 32000, 8000),
        ("G729a", 16000, 8000),
        ("AMR-WB", 8000, 16000),
        ("opus", 16000, 48000),
        // Clocks that vary with the format stay as signalled.
        ("L16", 16000, 16000),
        ("speex", 32000, 32000),
        ("PCMU-WB", 16000, 16000),
    ] {
        assert_eq!(
            Codec::resolve(96, Some((sdp, rate))).clock,
            ClockRate::Hz(want),
            "{sdp}/{rate}"
        );
    }
}

/// BurstR from observed loss runs, against G.107's two-state model: loss
/// 2 %, P(lost | previous lost) 0.75 gives p 0.005102, q 0.25, BurstR 3.92
/// (shared/reference.md); independent loss of 2 % gives about 1.
#[test]
fn burst_ratio_follows_the_gilbert_model() {
    let run = |loss: f64, b: f64| {
        let p = loss * (1.0 - b) / (1.0 - loss);
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut uniform = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut t = SeqTracker::default();
        let mut last_lost = false;
        for i in 0..400_000u32 {
            let lost = uniform() < if last_lost { b } else { p };
            if !lost {
                t.update(i as u16);
            }
            last_lost = lost;
        }
        t.burst_ratio()
    };
    let bursty = run(0.02, 0.75);
    assert!((bursty - 3.92).abs() < 0.25, "bursty {bursty}");
    let random = run(0.02, 0.02);
    assert!((random - 1.0).abs() < 0.05, "random {random}");
}

/// 60 s without packets, numbers and timestamps advancing together, is
/// loss (3 000 packets), not a restart; a source that renumbers and
/// reclocks after a short pause is a restart.
#[test]
fn outage_is_loss_and_restart_is_not() {
    let clock = ClockRate::Hz(8000);
    let stream = |resumed: (u16, u32), resumed_ms: f64| {
        let mut s = steady_50(16_000, clock);
        for i in 0..50u16 {
            let (seq, ts) = resumed;
            let p =
                pkt(resumed_ms + f64::from(i) * 20.0, seq.wrapping_add(i), ts + u32::from(i) * 160);
            s.update(&p, clock);
        }
        s
    };
    // The 50th packet would be seq 150 at 1 s; 3 000 are missing.
    let outage = stream((3150, 16_000 + 3100 * 160), 980.0 + 3001.0 * 20.0);
    assert_eq!((outage.seq.outages, outage.seq.resets), (1, 0));
    assert_eq!((outage.seq.expected(), outage.seq.lost()), (3100, 3000));
    let restart = stream((40_000, 7_777_777), 1000.0);
    assert_eq!((restart.seq.outages, restart.seq.resets), (0, 1));
    assert_eq!(restart.seq.lost(), 0);
    // Numbers jump as for an outage but the clock did not move: a restart.
    let renumbered = stream((3150, 16_000 + 50 * 160), 1000.0);
    assert_eq!((renumbered.seq.outages, renumbered.seq.resets), (0, 1));
}

/// Outages that wrap the numbering (65 536 and 98 304 packets: 22 and 33
/// minutes) are loss too; a restart 20 ms on, 2 000 numbers ahead or 100
/// behind with another clock, is not loss (nor duplicates).
#[test]
fn long_outages_and_near_restarts() {
    let clock = ClockRate::Hz(8000);
    let resumed = |missing: u32, seq_step: u16, ts: Option<u32>, after_ms: f64| {
        let mut s = steady_50(16_000, clock);
        let seq = 149u16.wrapping_add(seq_step);
        let ts = ts.unwrap_or(23_840u32.wrapping_add((missing + 1).wrapping_mul(160)));
        for i in 0..20u16 {
            let p = pkt(
                980.0 + after_ms + f64::from(i) * 20.0,
                seq.wrapping_add(i),
                ts.wrapping_add(u32::from(i) * 160),
            );
            s.update(&p, clock);
        }
        s
    };
    for missing in [65_535u32, 98_303] {
        let s = resumed(missing, (missing + 1) as u16, None, f64::from(missing + 1) * 20.0);
        assert_eq!(
            (s.seq.outages, s.seq.resets, s.seq.lost()),
            (1, 0, u64::from(missing)),
            "{missing}"
        );
    }
    let ahead = resumed(0, 2000, Some(7_777_777), 20.0);
    assert_eq!((ahead.seq.resets, ahead.seq.lost()), (1, 0));
    let behind = resumed(0, 65_436, Some(900_000), 20.0);
    assert_eq!((behind.seq.resets, behind.seq.duplicates, behind.seq.lost()), (1, 0, 0));
}

/// Loss the timestamp vouches for stays loss when the last packet before
/// it came late (a queue flushed after a stall), and an outage after a
/// comfort-noise packet is still an outage.
#[test]
fn loss_behind_a_late_packet_and_after_comfort_noise() {
    let clock = ClockRate::Hz(8000);
    let mut s = steady_50(16_000, clock);
    // Packet 149 arrived 2.9 s late; 150 packets are lost after it; the
    // rest arrive at once.
    s.update(&pkt(3_880.0, 150, 16_000 + 50 * 160), clock);
    s.update(&pkt(3_900.0, 301, 16_000 + 201 * 160), clock);
    assert_eq!((s.seq.resets, s.seq.lost()), (0, 150));
    let mut cn = steady_50(16_000, clock);
    let mut noise = pkt(1_000.0, 150, 16_000 + 50 * 160);
    noise.payload_type = 13;
    cn.update(&noise, clock);
    // 70 s (3 500 packets) later, voice again.
    cn.update(&pkt(71_000.0, 3_651, 16_000 + 3_551 * 160), clock);
    assert_eq!((cn.seq.outages, cn.seq.resets, cn.seq.lost()), (1, 0, 3_500));
}
