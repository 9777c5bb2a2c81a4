//! `calliper export audio` against tshark: the WAV's channels hold, sample
//! for sample, the A-law payloads tshark reads from the capture, decoded
//! and placed by RTP timestamp, the caller on the left, the callee on the
//! right, each from its first packet's arrival.

use crate::common;
use std::path::Path;
use std::process::Command;

use common::calliper;

/// (first arrival ns, RTP timestamp, payload) of one stream, from tshark.
fn packets(capture: &Path, filter: &str) -> Vec<(i64, u32, Vec<u8>)> {
    let out = Command::new("tshark")
        .args(["-r", capture.to_str().unwrap(), "-d", "udp.port==20000-30010,rtp", "-Y", filter])
        .args([
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
            "-e",
            "rtp.timestamp",
            "-e",
            "rtp.payload",
        ])
        .output()
        .expect("tshark is needed (scripts/test.sh installs it)");
    common::succeeded(&out);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let (s, ns) = f[0].split_once('.').unwrap();
            let ns = s.parse::<i64>().unwrap() * 1_000_000_000
                + format!("{ns:0<9}")[..9].parse::<i64>().unwrap();
            // Hex, with or without colons between bytes (tshark versions differ).
            let hex = f[2].replace(':', "");
            let payload = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (ns, f[1].parse().unwrap(), payload)
        })
        .collect()
}

/// The stretches a lossless stream decodes to: where each starts (8 kHz
/// samples after the stream's first arrival) and its samples, by RTP
/// timestamp within it. A timestamp going back (the sender restarting
/// after a hold) starts a new stretch where its packet arrived.
fn expected(packets: &[(i64, u32, Vec<u8>)]) -> Vec<(usize, Vec<i16>)> {
    let mut stretches: Vec<(usize, u32, Vec<i16>)> = Vec::new();
    let mut previous = None;
    for (arrival, ts, payload) in packets {
        if previous.is_none_or(|p| ts < p) {
            let at = ((arrival - packets[0].0) * 8000 / 1_000_000_000) as usize;
            stretches.push((at, *ts, Vec::new()));
        }
        previous = Some(ts);
        let (_, first, out) = stretches.last_mut().unwrap();
        out.resize(ts.wrapping_sub(*first) as usize, 0);
        calliper_audio::g711::decode(calliper_audio::g711::Law::A, payload, out);
    }
    stretches.into_iter().map(|(at, _, out)| (at, out)).collect()
}

#[test]
fn export_audio_gives_each_side_its_decoded_payloads() {
    let capture = common::sample_capture();
    let dir = common::scratch_dir("export");
    let (db, wav) = (dir.join("calls.db"), dir.join("call.wav"));
    common::analyze_into_db(&capture, &db, &[]);
    let out = common::export_audio(
        "1-836@127.0.1.1",
        db.to_str().unwrap(),
        capture.to_str().unwrap(),
        wav.to_str().unwrap(),
    );
    common::succeeded(&out);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&wav).unwrap().permissions().mode() & 0o777, 0o600);

    let bytes = std::fs::read(&wav).unwrap();
    assert_eq!(&bytes[..4], b"RIFF");
    assert_eq!(u16::from_le_bytes([bytes[22], bytes[23]]), 2);
    let samples: Vec<i16> =
        bytes[44..].chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]])).collect();
    let (left, right): (Vec<i16>, Vec<i16>) = samples.chunks_exact(2).map(|c| (c[0], c[1])).unzip();

    let base = "udp && rtp.ssrc == 0xdee0ee8f && rtp.p_type == 8";
    let caller =
        packets(&capture, &format!("{base} && ip.src == 127.0.1.1 && udp.srcport == 30000"));
    let callee =
        packets(&capture, &format!("{base} && ip.src == 127.0.2.1 && udp.srcport == 20000"));
    assert!(caller.len() > 400 && callee.len() > 400);
    let start = caller[0].0.min(callee[0].0);
    for (name, channel, stream) in [("caller", &left, &caller), ("callee", &right, &callee)] {
        let offset = ((stream[0].0 - start) * 8000 / 1_000_000_000) as usize;
        let stretches = expected(stream);
        // This capture's calls are put on hold and resumed: two stretches.
        assert_eq!(stretches.len(), 2, "{name}");
        for (at, want) in &stretches {
            let got = &channel[offset + at..offset + at + want.len()];
            assert!(
                got == want.as_slice(),
                "{name}: the channel differs from tshark's payloads at {at}"
            );
        }
        assert!(channel[..offset].iter().all(|&s| s == 0), "{name}: before its first packet");
    }

    // The DTMF events, sent on an SSRC of their own, are listed with their
    // arrival in the WAV: tshark's events (one per timestamp) from the caller.
    let said = String::from_utf8_lossy(&out.stderr);
    let line = said
        .lines()
        .find_map(|l| l.strip_prefix("DTMF from the caller: "))
        .unwrap_or_else(|| panic!("no DTMF listed: {said}"));
    let got: Vec<(String, f64)> = line
        .split(", ")
        .map(|m| {
            let (key, at) = m.split_once(" at ").unwrap();
            // "18.02 s", perhaps with " (after the voice ended)".
            (key.to_string(), at.split(" s").next().unwrap().parse().unwrap())
        })
        .collect();
    let mut want: Vec<(String, f64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (t, ts, payload) in packets(&capture, "rtpevent && ip.src == 127.0.1.1") {
        if seen.insert(ts) {
            let key = match payload[0] {
                10 => "*".to_string(),
                11 => "#".to_string(),
                d => d.to_string(),
            };
            want.push((key, (t - start) as f64 / 1e9));
        }
    }
    assert_eq!(want.len(), 4, "tshark's events");
    assert_eq!(got.len(), want.len(), "{line}");
    for ((k, at), (wk, wat)) in got.iter().zip(&want) {
        assert_eq!(k, wk, "{line}");
        assert!((at - wat).abs() <= 0.006, "{k}: at {at} s, tshark {wat:.3} s");
    }

    let out = common::export_audio(
        "no-such-call",
        db.to_str().unwrap(),
        capture.to_str().unwrap(),
        dir.join("x.wav").to_str().unwrap(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no call no-such-call"));
    // The database is not overwritten by the WAV (found by an attacker
    // review), and a record id names its record.
    let before = std::fs::read(&db).unwrap();
    let db_path = db.to_str().unwrap();
    let out = common::export_audio("1", db_path, capture.to_str().unwrap(), db_path);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("are the same file"));
    assert_eq!(std::fs::read(&db).unwrap(), before);
    std::fs::remove_dir_all(&dir).ok();
}

/// Another call on the same addresses, ports and SSRCs (the same SIPp
/// scenario 16 minutes earlier) is not this call's audio: a capture
/// holding only it is refused, and one holding both gives the same WAV as
/// the call's own capture.
#[test]
fn export_audio_takes_only_packets_within_the_calls_time() {
    let capture = common::sample_capture();
    let dir = common::scratch_dir("export-time");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let (db, earlier, both) = (path("calls.db"), path("earlier.pcap"), path("both.pcap"));
    common::wireshark_tool("editcap", &["-t", "-1000", capture.to_str().unwrap(), &earlier]);
    common::wireshark_tool("mergecap", &["-w", &both, &earlier, capture.to_str().unwrap()]);
    let out = calliper(&["analyze", "--progress", "never", "--db", &db, capture.to_str().unwrap()]);
    common::succeeded(&out);
    let export = |pcap: &str, wav: &str| common::export_audio("1-836@127.0.1.1", &db, pcap, wav);

    let out = export(&earlier, &path("wrong.wav"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("outside the call's time"), "{stderr}");
    assert!(!dir.join("wrong.wav").exists(), "no WAV for a refused export");

    let out = export(capture.to_str().unwrap(), &path("own.wav"));
    common::succeeded(&out);
    let out = export(&both, &path("both.wav"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("outside its time (another call's"), "{stderr}");
    assert_eq!(
        std::fs::read(dir.join("both.wav")).unwrap(),
        std::fs::read(dir.join("own.wav")).unwrap(),
        "the earlier call's packets changed the WAV"
    );
    std::fs::remove_dir_all(&dir).ok();
}
