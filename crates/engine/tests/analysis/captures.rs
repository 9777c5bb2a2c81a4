//! Every public capture: analysed without a panic, with the calls and
//! streams it holds; and a capture whose packets all appear twice gives the
//! same records as the original.

use calliper_engine::Config;
use calliper_testkit::captures::{read_frames, repo_root};
use calliper_testkit::probe::of_type;
use calliper_testkit::probe::Probe;
use calliper_testkit::skip_requested;
use serde_json::Value;
use std::path::PathBuf;

fn shared() -> Option<PathBuf> {
    let p = repo_root().join("../shared/pcaps/public");
    p.is_dir().then_some(p)
}

/// (capture, calls, streams inside calls, streams without signalling).
/// Calls agree with tshark's SIP view (calls.rs checks each Call-ID) and the
/// streams with tshark's rtp,streams (tshark_oracle.rs checks each stream);
/// this table pins the totals, including those only reassembly reaches:
/// SCTP (heplify sip_sctp), TCP on port 6060 split across segments
/// (heplify tcp_fragmented), IPv6 fragments (sngrep ipv6frag), a 64 KiB body
/// over TCP (suricata body-large), ERSPAN (heplify erspan), IP-in-IP (sngrep).
const EXPECTED: &[(&str, usize, usize, usize)] = &[
    ("heplify__FAX-Call-t38-CA-TDM-SIP-FB-1.pcap", 2, 2, 0),
    ("heplify__erspan_sip_ipv4_udp.pcapng", 3, 0, 0),
    ("heplify__rtp_rtcp_sip_ipv4_udp.pcap", 2, 2, 3),
    ("heplify__sip_ipv4_tcp.pcap", 1, 2, 0),
    ("heplify__sip_ipv4_tcp_fragmented.pcap", 37, 0, 0),
    ("heplify__sip_ipv4_tcp_retrans.pcap", 0, 0, 0),
    ("heplify__sip_ipv6_udp.pcap", 1, 0, 0),
    ("heplify__sip_sctp.pcap", 1, 0, 0),
    ("heplify__sip_tcp_websocket.pcap", 2, 0, 0),
    ("ndpi__http_on_sip_port.pcap", 0, 0, 0),
    ("ndpi__mgcp.pcap", 0, 0, 0),
    ("ndpi__rtcp_multiple_pkts_in_the_same_datagram.pcap", 0, 0, 0),
    ("ndpi__rtp.pcapng", 0, 0, 5),
    ("ndpi__sip_hello.pcapng", 0, 0, 0),
    ("ndpi__stun_dtls_rtp.pcapng", 0, 0, 1),
    ("rtpproxy__bob_srtp.pcap", 0, 0, 1),
    ("rtpproxy__dtmf.pcap", 0, 0, 2),
    ("rtpproxy__rtcp.a.pcap", 0, 0, 1),
    ("sngrep__ipip.pcap", 1, 0, 0),
    ("sngrep__ipv6frag.pcap", 1, 0, 0),
    ("suricata__sip-body-frames_public-cloudshark-sip-s0.pcap", 2, 0, 0),
    ("suricata__sip-body-large_sip-body-large.pcap", 1, 0, 0),
    ("suricata__sip-compact-form_sip_compact_form.pcap", 1, 0, 0),
    // 4 INVITE Call-IDs: three calls challenged with 407 and retried 17-51 s later are one call each.
    ("suricata__sip-method_sip.pcap", 4, 1, 0),
    ("suricata__sip-sdp_sdp.pcap", 1, 0, 0),
    ("suricata__sip-tcp-method_sip-tcp.pcap", 0, 0, 0),
    ("zeek__invalid-content-length.pcap", 1, 0, 0),
    ("zeek__sip-junk-before-request.pcap", 0, 0, 0),
    ("zeek__sip-long-request-response-paths.pcap", 0, 0, 0),
];

fn counts(lines: &[Value]) -> (usize, usize, usize) {
    let calls: Vec<&Value> = of_type(lines, "call").collect();
    let in_calls = calls.iter().map(|c| c["streams"].as_array().map_or(0, |s| s.len())).sum();
    let orphans = of_type(lines, "stream").count();
    (calls.len(), in_calls, orphans)
}

#[test]
fn every_public_capture_gives_its_calls_and_streams() {
    let Some(dir) = shared() else {
        // The three captures copied into testdata/ are covered by the other tests.
        skip_requested("shared-pcaps", "../shared/pcaps/public not found");
        return;
    };
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pcap") || n.ends_with(".pcapng"))
        .collect();
    files.sort();
    let listed: Vec<&str> = EXPECTED.iter().map(|e| e.0).collect();
    assert_eq!(files, listed, "a capture was added or removed: update the table");
    let mut wrong = vec![];
    for &(name, calls, in_calls, orphans) in EXPECTED {
        let mut cfg = Config::default();
        if name == "heplify__sip_ipv6_udp.pcap" {
            cfg.call_idle_timeout_ns = 300_000_000 * 1_000_000_000;
            cfg.unanswered_timeout_ns = 300_000_000 * 1_000_000_000;
        }
        let mut p = Probe::new(cfg, 1);
        p.capture(&dir.join(name));
        let got = counts(&p.finish().lines());
        if got != (calls, in_calls, orphans) {
            wrong.push(format!("{name}: want {:?}, got {got:?}", (calls, in_calls, orphans)));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every packet of the sample twice, the copy 3 µs later, as a capture on
/// Linux `any` shows a routed packet (once in, once out): the same records.
#[test]
fn each_packet_seen_twice_gives_the_same_records() {
    let (frames, link) = read_frames(&repo_root().join("testdata/sipp_hold_dtmf.pcap"));
    let doubled: Vec<(i64, Vec<u8>)> =
        frames.iter().flat_map(|(t, f)| [(*t, f.clone()), (t + 3_000, f.clone())]).collect();
    let strip = |frames: &[(i64, Vec<u8>)]| -> (Vec<Value>, Value) {
        let mut p = Probe::new(Config::default(), 1);
        p.frames(link, frames);
        let lines = p.finish().lines();
        let summary = lines.iter().find(|l| l["type"] == "summary").unwrap().clone();
        // The time series counts what crossed the wire: doubled here.
        let records = lines
            .into_iter()
            .filter(|l| l["type"] != "summary" && l["type"] != "traffic")
            .collect();
        (records, summary)
    };
    let (want, _) = strip(&frames);
    let (got, summary) = strip(&doubled);
    assert_eq!(summary["duplicates_removed"], frames.len());
    assert!(!want.is_empty());
    assert_eq!(got, want);
}
