//! A capture of a HEP feed analyses like the traffic it copies: every SIP
//! packet of real captures is replaced by the HEP3 datagram an agent
//! would send for it (`calliper_testkit::captures::as_hep_feed`: to the
//! collector port 9060, with the original addresses, ports and time in its
//! chunks, sent a little later), media left as captured. The records must
//! equal the original capture's. Malformed HEP is counted, never read.

use calliper_engine::Config;
use calliper_testkit::captures::{as_hep_feed, repo_root};
use calliper_testkit::probe::of_type;
use calliper_testkit::probe::Probe;
use calliper_wire::decode;
use calliper_wire::emit;
use calliper_wire::hep::Hep;
use serde_json::Value;
use std::path::Path;

/// What `analyze --format jsonl FILE` writes.
fn lines(file: &Path) -> Vec<Value> {
    calliper_testkit::probe::analyze(file).lines()
}

/// What `analyze --format jsonl [--hep-port PORT] --threads T` writes for
/// an Ethernet capture of `feed`.
fn feed_lines(feed: &[(i64, Vec<u8>)], hep_port: Option<u16>, threads: usize) -> Vec<Value> {
    let mut p = Probe::new(Config { hep_port, ..Config::default() }, threads);
    p.frames(1, feed);
    p.finish().lines()
}

fn records(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["type"] == "call" || l["type"] == "stream").collect()
}

#[test]
fn a_hep_feed_gives_the_records_of_the_traffic_it_copies() {
    let original = repo_root().join("testdata/sipp_hold_dtmf.pcap");
    let want = lines(&original);
    assert!(records(&want).iter().any(|r| r["type"] == "call"));
    let (feed, sip) = as_hep_feed(&original, |_| {});
    assert!(sip > 0);
    for threads in [1, 2] {
        let got = feed_lines(&feed, Some(9060), threads);
        let summary = got.last().unwrap();
        assert_eq!(summary["hep"], sip, "{summary}");
        assert_eq!(records(&got), records(&want), "{threads} threads");
    }
    // HEP is read only when asked for: by default the feed is just UDP.
    let off = feed_lines(&feed, None, 1);
    assert!(!off.iter().any(|l| l["type"] == "call"));
}

/// The feed with each HEP message's payload compressed by the system's
/// `gzip` (chunk 0x0010): the same records as the plain feed.
#[test]
fn a_compressed_hep_feed_gives_the_same_records() {
    let original = repo_root().join("testdata/sipp_hold_dtmf.pcap");
    let want = lines(&original);
    let (feed, sip) = as_hep_feed(&original, |_| {});
    let gzip = |data: &[u8]| {
        use std::io::Write;
        let mut child = std::process::Command::new("gzip")
            .args(["-n", "-c"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("gzip must be runnable");
        child.stdin.take().unwrap().write_all(data).unwrap();
        child.wait_with_output().unwrap().stdout
    };
    let mut compressed = 0;
    let feed: Vec<(i64, Vec<u8>)> = feed
        .into_iter()
        .map(|(ts, frame)| {
            let f = decode(1, &frame).unwrap();
            let Some((sport, 9060, payload)) = f.udp() else {
                return (ts, frame);
            };
            let h = Hep::parse(payload).unwrap();
            let gz = gzip(h.payload);
            assert_eq!(&gz[..2], [0x1f, 0x8b]);
            let hep = Hep { payload: &gz, compressed: true, ..h }.emit().unwrap();
            compressed += 1;
            let ip = emit::Ipv4::new([10, 9, 9, 9].into(), [10, 9, 9, 10].into(), 17)
                .emit(&emit::udp(sport, 9060, &hep));
            (ts, emit::ethernet(&[], 0x0800, &ip))
        })
        .collect();
    assert_eq!(compressed, sip);
    let got = feed_lines(&feed, Some(9060), 1);
    let summary = got.last().unwrap();
    assert_eq!(summary["hep"], sip, "{summary}");
    assert_eq!(summary["hep_unread"], 0, "{summary}");
    assert_eq!(summary["anomalies"], serde_json::json!({}), "{summary}");
    assert_eq!(records(&got), records(&want));
}

#[test]
fn malformed_hep_is_counted_not_read() {
    let original = repo_root().join("testdata/sipp_hold_dtmf.pcap");
    // The first chunk's length runs past the message.
    let (feed, sip) = as_hep_feed(&original, |h| h[10..12].copy_from_slice(&[0xFF, 0xF0]));
    let got = feed_lines(&feed, Some(9060), 1);
    let summary = got.last().unwrap();
    assert_eq!(summary["anomalies"]["hep_bad_chunk"], sip, "{summary}");
    assert_eq!(summary["hep"], 0);
    assert!(!got.iter().any(|l| l["type"] == "call"));
}

/// An agent's time far from the capture's is not believed: a message
/// dated two minutes before its packet, or two seconds after, is taken
/// at its packet's time and counted.
#[test]
fn a_hep_time_far_from_the_capture_is_not_believed() {
    let original = repo_root().join("testdata/sipp_hold_dtmf.pcap");
    for shift in [-120i64, 2] {
        let (feed, sip) = as_hep_feed(&original, |h| {
            let at = h.windows(6).position(|w| w == [0, 0, 0, 9, 0, 10]).unwrap() + 6;
            let s = u32::from_be_bytes(h[at..at + 4].try_into().unwrap());
            h[at..at + 4].copy_from_slice(&((s as i64 + shift) as u32).to_be_bytes());
        });
        let got = feed_lines(&feed, Some(9060), 1);
        let summary = got.last().unwrap();
        assert_eq!(summary["anomalies"]["hep_clock_skew"], sip, "{shift}: {summary}");
        let first = feed.first().unwrap().0;
        for call in of_type(&got, "call") {
            let invite = call["invite_ns"].as_i64().unwrap();
            assert!(invite >= first, "{shift}: {invite} before the capture's first packet");
        }
    }
}
