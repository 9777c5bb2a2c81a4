//! Quality inputs against an oracle: the RTCP round trip against
//! Wireshark's, on every capture with sender reports and reports on them.

use calliper_testkit::captures::{captures, repo_root};
use calliper_testkit::oracle::tshark_fields;
use calliper_testkit::probe::analyze;
use calliper_testkit::probe::of_type;
use std::collections::HashMap;

/// Wireshark's round trips (`rtcp.roundtrip-delay`, computed from the
/// capture's own times like Calliper's) by (reporter address, SSRC reported
/// on), from packets with one report block (the value is the first block's).
fn tshark_round_trips(file: &std::path::Path) -> HashMap<(String, u32), Vec<f64>> {
    let out = tshark_fields(
        file,
        &[
            "-o",
            "rtcp.show_roundtrip_calculation:TRUE",
            "-o",
            "rtcp.roundtrip_min_threshhold:0",
            "-d",
            "udp.port==0-65535,rtp",
            "-E",
            "separator=/t",
        ],
        "rtcp.roundtrip-delay",
        &["ip.src", "rtcp.rc", "rtcp.ssrc.identifier", "rtcp.roundtrip-delay"],
    );
    let mut by_key: HashMap<(String, u32), Vec<f64>> = HashMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [src, rc, ssrc, rtt] = f[..] else {
            panic!("{}: unexpected tshark line {line:?}", file.display())
        };
        // One report block in the whole compound packet.
        let blocks: u32 = rc.split(',').filter_map(|n| n.parse::<u32>().ok()).sum();
        if blocks != 1 {
            continue;
        }
        // The innermost address (tunnels list outer ones first).
        let src = src.rsplit(',').next().unwrap().to_string();
        let ssrc = ssrc.split(',').next().unwrap().trim_start_matches("0x");
        let ssrc = u32::from_str_radix(ssrc, 16).unwrap();
        let rtt: f64 = rtt.split(',').next().unwrap().parse().unwrap();
        by_key.entry((src, ssrc)).or_default().push(rtt);
    }
    by_key
}

/// Wireshark truncates DLSR to whole ms and rounds the result to whole
/// ms: each of its values is within 1.5 ms of the exact one.
const WIRESHARK_RESOLUTION_MS: f64 = 1.5;

#[test]
fn rtcp_round_trip_matches_tshark() {
    let mut compared = 0;
    for file in captures() {
        let theirs = tshark_round_trips(&file);
        let lines = analyze(&file).lines();
        let streams = of_type(&lines, "call").flat_map(|c| c["streams"].as_array().unwrap().iter());
        for s in streams {
            let key = (s["dst"].as_str().unwrap().to_string(), s["ssrc"].as_u64().unwrap() as u32);
            let ours = s["rtt_ms"].as_f64();
            let wireshark = theirs.get(&key);
            match (ours, wireshark) {
                (Some(ours), Some(values)) => {
                    let mean = values.iter().sum::<f64>() / values.len() as f64;
                    assert!(
                        (ours - mean).abs() <= WIRESHARK_RESOLUTION_MS,
                        "{}: {key:?} round trip {ours} ms, Wireshark {values:?}",
                        file.display()
                    );
                    compared += 1;
                }
                (Some(ours), None) => {
                    panic!("{}: {key:?} round trip {ours} ms, Wireshark none", file.display())
                }
                // Reports applied to the stream, and Wireshark measured
                // round trips of a millisecond or more: so must we.
                (None, Some(values))
                    if s["rtcp_reports"].as_u64() > Some(0) && values.iter().all(|&v| v >= 1.0) =>
                {
                    panic!("{}: {key:?} no round trip, Wireshark {values:?}", file.display())
                }
                _ => {}
            }
        }
    }
    assert!(
        compared >= 1,
        "no stream with a round trip to compare: testdata's heplify capture has one"
    );
}

/// SRTP by its SDP: the heplify capture with its offer's `a=rtpmap:8
/// PCMA/8000` turned into an `a=crypto` line of the same length (PCMA
/// stays PT 8's static codec). The streams to that address are flagged,
/// still scored (their headers are clear), and their RTCP, which SRTCP
/// would encrypt, is no longer read; the capture as it is reads it.
#[test]
fn srtp_streams_are_flagged_and_their_rtcp_not_read() {
    let original = repo_root().join("testdata/heplify__rtp_rtcp_sip_ipv4_udp.pcap");
    let bytes = std::fs::read(&original).unwrap();
    let (from, to) = (b"a=rtpmap:8 PCMA/8000", b"a=crypto:1 AES_CM_12");
    assert_eq!(from.len(), to.len());
    let at = bytes.windows(from.len()).position(|w| w == from).expect("the offer's rtpmap line");
    let mut srtp = bytes.clone();
    srtp[at..at + to.len()].copy_from_slice(to);
    let path = calliper_testkit::captures::scratch_root().join("srtp.pcap");
    std::fs::write(&path, &srtp).unwrap();
    // The stream to the offered address 200.57.7.196:40376.
    let offered = |file: &std::path::Path| {
        analyze(file)
            .lines()
            .into_iter()
            .filter(|l| l["type"] == "call")
            .flat_map(|c| c["streams"].as_array().unwrap().clone())
            .find(|s| s["dst"] == "200.57.7.196" && s["dst_port"] == 40376)
            .expect("the stream to the offered address")
    };
    let clear = offered(&original);
    let encrypted = offered(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(clear["encrypted"], false);
    assert!(clear["rtcp_reports"].as_u64() > Some(0), "{clear}");
    assert!(clear["rtt_ms"].is_f64(), "{clear}");
    assert_eq!(encrypted["encrypted"], true);
    assert_eq!(encrypted["rtcp_reports"], 0, "{encrypted}");
    assert!(encrypted["rtt_ms"].is_null(), "{encrypted}");
    assert_eq!(encrypted["codec"], "PCMA");
    assert!(encrypted["mos"].is_f64(), "{encrypted}");
    assert_eq!(encrypted["packets"], clear["packets"]);
}

/// A stream's worst interval MOS is the lowest of its scored intervals
/// (at least 50 expected packets), its final, partial interval included:
/// the record had been made before the final interval was cut (review).
#[test]
fn worst_interval_mos_includes_the_final_interval() {
    let repo = repo_root().join("testdata");
    let mut checked = 0;
    for f in ["sipp_hold_dtmf.pcap", "heplify__rtp_rtcp_sip_ipv4_udp.pcap"] {
        let out = analyze(&repo.join(f));
        let lines = out.lines();
        let mut lowest: HashMap<(u64, u64), f64> = HashMap::new();
        for i in of_type(&out.events, "interval") {
            if i["expected"].as_u64().unwrap_or(0) >= 50 {
                if let Some(m) = i["mos"].as_f64() {
                    let k = (i["ssrc"].as_u64().unwrap(), i["src_port"].as_u64().unwrap());
                    let e = lowest.entry(k).or_insert(f64::INFINITY);
                    *e = e.min(m);
                }
            }
        }
        for c in of_type(&lines, "call") {
            for s in c["streams"].as_array().unwrap() {
                let k = (s["ssrc"].as_u64().unwrap(), s["src_port"].as_u64().unwrap());
                let want = lowest.get(&k).copied();
                let got = s["worst_interval_mos"].as_f64();
                match (got, want) {
                    (Some(g), Some(w)) => assert!((g - w).abs() < 1e-4, "{f} {k:?}: {g} vs {w}"),
                    (None, None) => {}
                    _ => panic!("{f} {k:?}: record {got:?}, intervals {want:?}"),
                }
                checked += want.is_some() as usize;
            }
        }
    }
    assert!(checked >= 2, "{checked} streams with scored intervals");
}
