//! The probe's console (`calliper probe --http`) while it replays a
//! capture at the capture's own pace (`--realtime`): each call appears on
//! the live page within a second of its INVITE's place in the capture,
//! with the parties and phases the capture holds (tshark), both as JSON
//! and as pushed events; and the stored calls are searchable meanwhile.

use crate::common;
use crate::server;

use serde_json::Value;
use server::Probe;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn calls_appear_live_as_the_capture_unfolds() {
    let pcap = common::sample_capture();
    // The oracle: each call's first INVITE, its offset in the capture and
    // its parties.
    let invites: Vec<(f64, String, String, String)> = common::tshark_fields(
        &pcap,
        &[],
        "sip.Method == \"INVITE\" && !sip.to.tag",
        &["frame.time_relative", "sip.Call-ID", "sip.from.user", "sip.to.user"],
    )
    .lines()
    .map(|l| {
        let f: Vec<&str> = l.split('\t').collect();
        (f[0].parse().unwrap(), f[1].into(), f[2].into(), f[3].into())
    })
    .collect();
    assert_eq!(invites.len(), 3, "{invites:?}");
    let db = calliper_testkit::captures::scratch_root().join("live.db");
    let _ = std::fs::remove_file(&db);
    let probe = Probe::start(&pcap, &db);
    for (offset, call_id, from, to) in &invites {
        // Seen within a second of its place in the capture.
        let deadline = Duration::from_secs_f64(offset + 1.5);
        let call = loop {
            let snap = probe.live();
            if let Some(c) =
                snap["calls"].as_array().unwrap().iter().find(|c| c["call_id"] == call_id.as_str())
            {
                break c.clone();
            }
            assert!(
                probe.started.elapsed() < deadline,
                "{call_id} not on the live page after {:?}",
                probe.started.elapsed()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            probe.started.elapsed() + Duration::from_millis(100) >= Duration::from_secs_f64(*offset),
            "{call_id} appeared before its INVITE's time: the replay did not keep the capture's pace"
        );
        assert_eq!(call["caller"], from.as_str());
        assert_eq!(call["callee"], to.as_str());
    }
    // The first call is answered about 0.3 s after its INVITE (the capture's 200 OK), with its streams' quality once an interval ends.
    let start = Instant::now();
    loop {
        let snap = probe.live();
        let first = snap["calls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["call_id"] == invites[0].1.as_str())
            .cloned()
            .unwrap();
        if first["answer_ns"].is_i64() && !first["streams"].as_array().unwrap().is_empty() {
            let s = &first["streams"][0];
            assert_eq!(s["codec"], "PCMA");
            assert!(s["mos"].as_f64().unwrap() > 4.0, "{s}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "no answer and streams: {first}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The pushed events carry the same snapshot.
    let mut s = TcpStream::connect(probe.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET /api/live/events HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let complete = |got: &[u8]| {
        let t = String::from_utf8_lossy(got);
        t.split_once("data: ").is_some_and(|(_, rest)| rest.contains("\n\n"))
    };
    while !complete(&got) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the event stream closed");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.contains("content-type: text/event-stream"), "{text}");
    let data = text.split("data: ").nth(1).unwrap();
    let json: Value = serde_json::from_str(data.split("\n\n").next().unwrap().trim()).unwrap();
    assert_eq!(json["calls"].as_array().unwrap().len(), 3);
    // Stored calls are searchable while the probe runs (none has ended yet,
    // so the search answers, with nothing in it).
    let r = server::request(probe.addr, "GET", "/api/calls", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn a_busy_probe_pushes_at_most_four_times_a_second() {
    // 300 calls starting in the first second and ending within seconds:
    // the live table changes hundreds of times a second.
    let dir = common::scratch_dir("live-busy");
    let (pcap, db) = (dir.join("busy.pcap"), dir.join("busy.db"));
    common::generate(
        "--calls 300 --concurrent 300 --warm-start --hold-mean 2 --hold-shape 2 --duration 6",
        &pcap,
        &dir.join("truth.jsonl"),
    );
    let probe = Probe::start(&pcap, &db);
    let mut s = TcpStream::connect(probe.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    write!(s, "GET /api/live/events HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let (mut got, mut buf) = (Vec::new(), vec![0u8; 1 << 20]);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        if let Ok(n) = s.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
    }
    let frames = String::from_utf8_lossy(&got).matches("data: ").count();
    assert!((3..=14).contains(&frames), "{frames} pushes in 3 s (at most 4 a second, and some)");
    let snap = probe.live();
    assert!(snap["version"].as_u64().unwrap() > 50, "the table changed often: {}", snap["version"]);
}
