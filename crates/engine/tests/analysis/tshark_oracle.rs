//! Stream-by-stream comparison with `tshark -q -z rtp,streams` on every
//! capture under `../shared/pcaps` (or only the repo's `testdata/` when
//! `CALLIPER_SKIP=shared-pcaps`), in both directions: every stream tshark
//! finds must be reported with equal figures, and every stream Calliper
//! reports must be one tshark finds. tshark is the oracle; it must be
//! installed (the README's test command installs it) and exit cleanly — a
//! missing or failing tshark fails the test, it does not skip.
//!
//! Calliper's side runs in process (`calliper_testkit::probe`); the
//! command-line tool's own output is checked against it in
//! `crates/cli/tests/offline/captures.rs`.

use calliper_testkit::captures::{at_least, capture_dirs, captures, write_pcap};
use calliper_testkit::oracle::{
    tshark_fields, tshark_streams, KNOWN_DIFFERENCES, RTP_STREAM_FIELDS,
};
use calliper_testkit::probe::analyze;
use calliper_testkit::probe::of_type;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// A stream record's (source, port, destination, port, SSRC), as tshark keys its streams.
fn stream_key(s: &Value) -> (String, u16, String, u16, u32) {
    (
        s["src"].as_str().unwrap().to_string(),
        s["src_port"].as_u64().unwrap() as u16,
        s["dst"].as_str().unwrap().to_string(),
        s["dst_port"].as_u64().unwrap() as u16,
        s["ssrc"].as_u64().unwrap() as u32,
    )
}

fn all_streams(lines: &[Value]) -> HashMap<(String, u16, String, u16, u32), Value> {
    let mut m = HashMap::new();
    for l in lines {
        let streams: Vec<&Value> = match l["type"].as_str() {
            Some("call") => l["streams"].as_array().unwrap().iter().collect(),
            Some("stream") => vec![l],
            _ => vec![],
        };
        for s in streams {
            m.insert(stream_key(s), s.clone());
        }
    }
    m
}

/// What a comparison with tshark found over the captures: how many things
/// compared equal, and each difference, so that one failure lists them all.
#[derive(Default)]
pub struct Tally {
    pub compared: usize,
    pub failures: Vec<String>,
}

impl Tally {
    /// Fails with every difference, or if fewer than `least` `what` were
    /// compared; how many were.
    pub fn finish(self, what: &str, least: usize) -> usize {
        let Tally { compared, failures } = self;
        assert!(
            failures.is_empty(),
            "{} of the {what} differ from tshark:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert!(compared >= least, "only {compared} {what} compared");
        compared
    }
}

fn close(a: f64, b: f64, abs: f64, rel: f64) -> bool {
    (a - b).abs() <= abs || (a - b).abs() <= rel * b.abs()
}

#[test]
fn every_tshark_stream_matches() {
    let mut tally = Tally::default();
    let mut known_seen = 0;
    for file in captures() {
        let mut ts = tshark_streams(&file, false);
        if ts.is_empty() {
            ts = tshark_streams(&file, true);
        }
        if ts.is_empty() {
            continue;
        }
        let ours = all_streams(&analyze(&file).lines());
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        // The other direction: every stream Calliper reports must be one
        // tshark finds too (by SDP or, for streams without signalling, by
        // its own RTP heuristic).
        let known: std::collections::HashSet<_> =
            ts.iter().chain(&tshark_streams(&file, true)).map(|t| t.key.clone()).collect();
        for key in ours.keys().filter(|k| !known.contains(*k)) {
            tally.failures.push(format!("{name}: stream {key:?} reported but not by tshark"));
        }
        for t in &ts {
            if let Some((_, _, why)) =
                KNOWN_DIFFERENCES.iter().find(|(f, ssrc, _)| *f == name && *ssrc == t.key.4)
            {
                eprintln!("{name}: {:?}: known difference: {why}", t.key);
                known_seen += 1;
                continue;
            }
            let Some(s) = ours.get(&t.key) else {
                tally.failures.push(format!("{name}: stream {:?} not reported", t.key));
                continue;
            };
            tally.compared += 1;
            let get = |k: &str| s[k].as_f64().unwrap();
            let mut bad = vec![];
            if s["packets"].as_u64() != Some(t.packets) {
                bad.push(format!("packets {} vs {}", s["packets"], t.packets));
            }
            if s["wireshark_lost"].as_i64() != Some(t.lost) {
                bad.push(format!("wireshark_lost {} vs {}", s["wireshark_lost"], t.lost));
            }
            // Our `lost` equals Wireshark's where Wireshark's arithmetic is sound:
            // no duplicates and no sequence restarts (docs/rtp-analysis.md).
            // (A telephone event's repeated end packets are duplicates to Wireshark.)
            let clean = s["duplicates"].as_u64() == Some(0)
                && s["seq_resets"].as_u64() == Some(0)
                && s["event_end_repeats"].as_u64() == Some(0);
            if clean && s["lost"].as_i64() != Some(t.lost) {
                bad.push(format!("lost {} vs {}", s["lost"], t.lost));
            }
            if !close(get("mean_jitter_ms"), t.mean_jitter, 0.05, 0.01) {
                bad.push(format!("mean jitter {} vs {}", get("mean_jitter_ms"), t.mean_jitter));
            }
            if !close(get("max_jitter_ms"), t.max_jitter, 0.05, 0.01) {
                bad.push(format!("max jitter {} vs {}", get("max_jitter_ms"), t.max_jitter));
            }
            if !close(get("max_delta_ms"), t.max_delta, 0.01, 0.0) {
                bad.push(format!("max delta {} vs {}", get("max_delta_ms"), t.max_delta));
            }
            if !bad.is_empty() {
                tally.failures.push(format!("{name}: {:?}: {}", t.key, bad.join("; ")));
            }
        }
    }
    let compared = tally.finish("streams", at_least(60, 15));
    if capture_dirs()[0].ends_with("public") {
        assert_eq!(
            known_seen,
            KNOWN_DIFFERENCES.len(),
            "a known difference no longer appears in tshark's output"
        );
    }
    eprintln!("{compared} streams match tshark");
}

/// Where SIPp's replay restarts sequence numbers after a resume, Wireshark's
/// lost goes negative (-236); ours sees one restart and no loss.
#[test]
fn sequence_restart_is_not_negative_loss() {
    let dir = capture_dirs()
        .into_iter()
        .find(|d| d.join("sipp_hold_dtmf.pcap").exists())
        .expect("sipp_hold_dtmf.pcap");
    let lines = analyze(&dir.join("sipp_hold_dtmf.pcap")).lines();
    let streams = all_streams(&lines);
    let pcma: Vec<&Value> = streams.values().filter(|s| s["codec"] == "PCMA").collect();
    assert_eq!(pcma.len(), 6);
    for s in pcma {
        assert_eq!(s["packets"], 472);
        assert_eq!(s["seq_resets"], 1);
        assert_eq!(s["lost"], 0);
        assert_eq!(s["expected"], 472);
        assert_eq!(s["wireshark_lost"], -236);
    }
}

/// Per stream key: the RFC 4733 events tshark decodes, as (name, longest
/// duration in samples) in order of first appearance.
type Events = HashMap<(String, u16, String, u16, u32), Vec<(String, u64)>>;

fn tshark_dtmf(file: &Path) -> Events {
    let out = tshark_fields(
        file,
        &[],
        "rtpevent",
        &[&RTP_STREAM_FIELDS[..], &["rtp.timestamp", "rtpevent.event_id", "rtpevent.duration"]]
            .concat(),
    );
    let mut events: Events = HashMap::new();
    let mut last_ts: HashMap<(String, u16, String, u16, u32), u64> = HashMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 10 {
            continue;
        }
        let src = if f[0].is_empty() { f[1] } else { f[0] };
        let dst = if f[3].is_empty() { f[4] } else { f[3] };
        let ssrc = u32::from_str_radix(f[6].trim_start_matches("0x"), 16).unwrap();
        let key =
            (src.to_string(), f[2].parse().unwrap(), dst.to_string(), f[5].parse().unwrap(), ssrc);
        let ts: u64 = f[7].parse().unwrap();
        let id: u8 = f[8].parse().unwrap();
        let duration: u64 = f[9].parse().unwrap();
        // tshark's event id, named as RFC 4733 §3.2 and RFC 4734 §2.3 do.
        let digit = match id {
            0..=9 => ((b'0' + id) as char).to_string(),
            10 => "*".into(),
            11 => "#".into(),
            12..=15 => ((b'A' + id - 12) as char).to_string(),
            16 => "flash".into(),
            32 => "ANS".into(),
            36 => "CNG".into(),
            _ => "other".into(),
        };
        let list = events.entry(key.clone()).or_default();
        if last_ts.insert(key, ts) == Some(ts) {
            let last = list.last_mut().unwrap();
            last.1 = last.1.max(duration);
        } else {
            list.push((digit, duration));
        }
    }
    events
}

/// DTMF digits and durations of every stream inside a call match tshark's
/// RFC 4733 decoding (streams without signalling have no event payload type
/// to go by, so they are not compared).
#[test]
fn dtmf_events_match_tshark() {
    let mut tally = Tally::default();
    for file in captures() {
        // tshark reads this capture's payload types from MEGACO (H.248) SDP
        // as well as SIP (see KNOWN_DIFFERENCES), so it decodes other packets
        // as events; not comparable.
        if file.ends_with("heplify__FAX-Call-t38-CA-TDM-SIP-FB-1.pcap") {
            continue;
        }
        let want = tshark_dtmf(&file);
        if want.is_empty() {
            continue;
        }
        let mut seen = std::collections::HashSet::new();
        for call in of_type(&analyze(&file).lines(), "call") {
            for s in call["streams"].as_array().unwrap() {
                let key = stream_key(s);
                let got: Vec<(String, u64)> = s["dtmf"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| {
                        let name = e["name"].as_str().unwrap().to_string();
                        (name, (e["duration_ms"].as_f64().unwrap() * 8.0).round() as u64)
                    })
                    .collect();
                let expected = want.get(&key).cloned().unwrap_or_default();
                seen.insert(key.clone());
                if got != expected {
                    tally.failures.push(format!(
                        "{}: {key:?}: tshark {expected:?}, calliper {got:?}",
                        file.display()
                    ));
                }
                tally.compared += expected.len();
            }
        }
        // The other direction: events tshark decodes on a stream Calliper
        // does not report in any call are missing.
        for (key, events) in want.iter().filter(|(k, _)| !seen.contains(*k)) {
            tally.failures.push(format!(
                "{}: {key:?}: tshark {events:?}, calliper has no such stream in a call",
                file.display()
            ));
        }
    }
    tally.finish("DTMF events", 4);
}

/// RTCP report blocks: for every stream in a call that its receiver reported
/// on, the largest jitter and the last cumulative loss match what tshark
/// decodes from the same report blocks (8 kHz codecs, where the unit is known).
#[test]
fn rtcp_reports_match_tshark() {
    let mut tally = Tally::default();
    for file in captures() {
        let out = tshark_fields(
            &file,
            &[],
            "rtcp.ssrc.identifier",
            &["rtcp.ssrc.identifier", "rtcp.ssrc.jitter"],
        );
        // Per reported SSRC: largest jitter in any block.
        let mut max_jitter: HashMap<u32, u64> = HashMap::new();
        for line in out.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() < 2 {
                continue;
            }
            // Report blocks come first; SDES chunk SSRCs (no jitter) follow.
            let ids: Vec<&str> = f[0].split(',').collect();
            let jit: Vec<u64> = f[1].split(',').filter_map(|j| j.parse().ok()).collect();
            for (id, &j) in ids.iter().zip(jit.iter()) {
                let id = u32::from_str_radix(id.trim_start_matches("0x"), 16).unwrap();
                let e = max_jitter.entry(id).or_default();
                *e = (*e).max(j);
            }
        }
        if max_jitter.is_empty() {
            continue;
        }
        for call in of_type(&analyze(&file).lines(), "call") {
            for s in call["streams"].as_array().unwrap() {
                let codec = s["codec"].as_str().unwrap().to_ascii_uppercase();
                if s["rtcp_reports"].as_u64().unwrap() == 0 || !(codec == "PCMA" || codec == "PCMU")
                {
                    continue;
                }
                let ssrc = s["ssrc"].as_u64().unwrap() as u32;
                let ours = (s["rtcp_max_jitter_ms"].as_f64().unwrap() * 8.0).round() as u64;
                match max_jitter.get(&ssrc) {
                    Some(&want) if want == ours => tally.compared += 1,
                    other => tally.failures.push(format!(
                        "{}: ssrc {ssrc:#x}: tshark {other:?}, calliper {ours}",
                        file.display()
                    )),
                }
            }
        }
    }
    tally.finish("streams", 2);
}

/// The RTP heuristic (a stream without signalling) keeps the packets it
/// confirmed the stream with, whatever their payload type: the media of a
/// SIPp call without its SIP, one stream's second packet and another's first
/// turned into comfort noise (PT 13) under the same SSRC. tshark's heuristic counts every packet
/// of the stream; so must we.
#[test]
fn heuristic_streams_keep_every_packet_tshark_counts() {
    let dir = calliper_testkit::captures::scratch_root().join("heur");
    std::fs::create_dir_all(&dir).unwrap();
    let data = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap"),
    )
    .unwrap();
    let mut reader = calliper_capture::CaptureReader::new(&data[..]).unwrap();
    let mut frames = vec![];
    let mut link_type = 0;
    let mut seen = std::collections::HashMap::new();
    while let Some(p) = reader.next_packet().unwrap() {
        link_type = u32::from(p.link_type);
        let Ok(f) = calliper_wire::decode(p.link_type, p.data) else {
            continue;
        };
        let Some((sport, dport, payload)) = f.udp() else {
            continue;
        };
        if sport == 5060 || dport == 5060 {
            continue; // no signalling: the streams are found by the heuristic
        }
        let mut frame = p.data.to_vec();
        let n = seen.entry((sport, dport)).or_insert(0);
        *n += 1;
        let turn = matches!(((sport, dport), *n), ((20000, 30000), 2) | ((30000, 20000), 1));
        if turn && payload.len() > 12 && payload[1] & 0x7F == 8 {
            let at = payload.as_ptr() as usize - p.data.as_ptr() as usize;
            frame[at + 1] = (frame[at + 1] & 0x80) | 13;
        }
        frames.push((p.ts_ns, frame));
    }
    let path = dir.join("heuristic-cn.pcap");
    write_pcap(&path, link_type, &frames);
    let theirs = tshark_streams(&path, true);
    let ours = all_streams(&analyze(&path).lines());
    std::fs::remove_dir_all(&dir).ok();
    assert!(theirs.len() >= 9, "tshark found {} streams", theirs.len());
    for t in &theirs {
        let s = ours
            .get(&t.key)
            .unwrap_or_else(|| panic!("{:?}: tshark has it, calliper does not", t.key));
        assert_eq!(s["packets"].as_u64(), Some(t.packets), "{:?}", t.key);
    }
    assert_eq!(ours.len(), theirs.len(), "streams only calliper has");
}
