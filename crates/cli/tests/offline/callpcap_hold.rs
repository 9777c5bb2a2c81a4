//! Messages in several packets against crafted captures (from an attacker
//! review of the recording hold): each call's file holds the frames of its
//! own messages, no more and no fewer; what cannot be recorded is counted.
//! Frames are told apart by their capture times.

use crate::common;

use common::callpcaps::{files, temp};
use common::hostile::{ipv4, sctp, sip, tcp, udp, Pcap, CALLEE, CALLER};
use serde_json::Value;
use std::collections::BTreeMap;

const MS: i64 = 1_000_000;

fn invite(call_id: &str) -> Vec<u8> {
    sip("INVITE sip:bob@example.net SIP/2.0", call_id, "1 INVITE", false, "")
}

fn segment(p: &mut Pcap, t: i64, seq: u32, flags: u8, payload: &[u8]) {
    p.ipv4(t, &ipv4(CALLER.0, CALLEE.0, 6, 0, 0, &tcp(40000, 5060, seq, flags, payload)));
}

/// Records `pcap` with `--record all`: each file's frame times (ms) by the
/// Call-ID in its name, and the run's summary.
fn record(pcap: &Pcap, name: &str) -> (BTreeMap<String, Vec<i64>>, Value) {
    let dir = temp(name);
    let lines = common::calliper_jsonl(
        &pcap.save(name),
        &["--record", "all", "--record-dir", dir.to_str().unwrap()],
    );
    let mut by_call = BTreeMap::new();
    for f in files(&dir) {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let call = name.rsplit('_').next().unwrap().trim_end_matches(".pcap").to_string();
        let mut r = calliper_capture::CaptureReader::new(std::fs::File::open(&f).unwrap()).unwrap();
        let mut times = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            times.push(p.ts_ns / MS);
        }
        by_call.insert(call, times);
    }
    (by_call, lines.last().unwrap().clone())
}

#[test]
fn pipelined_messages_take_only_their_own_segments() {
    // Each segment ends one INVITE and starts the next (a busy trunk).
    let msgs: Vec<Vec<u8>> = (0..6).map(|k| invite(&format!("call{k}"))).collect();
    let stream: Vec<u8> = msgs.concat();
    let mut cuts: Vec<usize> = Vec::new();
    let mut at = 0;
    for m in &msgs {
        cuts.push(at + m.len() / 2);
        at += m.len();
    }
    cuts.push(stream.len());
    let (mut p, mut from) = (Pcap::default(), 0);
    for (k, &to) in cuts.iter().enumerate() {
        segment(&mut p, (1000 + k as i64 * 10) * MS, 1000 + from as u32, 0x18, &stream[from..to]);
        from = to;
    }
    let (files, summary) = record(&p, "pipelined");
    for k in 0..6 {
        let want = vec![1000 + k * 10, 1000 + (k + 1) * 10];
        assert_eq!(files[&format!("call{k}")], want, "call{k}: {files:?}");
    }
    assert_eq!(summary["recording"]["partial"], 0);
}

#[test]
fn a_new_connection_on_the_same_addresses_starts_afresh() {
    // Half of X's INVITE, a reset, then Y's whole INVITE on the same ports.
    let (x, y) = (invite("callX"), invite("callY"));
    let mut p = Pcap::default();
    segment(&mut p, 1000 * MS, 1000, 0x18, &x[..x.len() / 2]);
    segment(&mut p, 1010 * MS, 1000 + x.len() as u32 / 2, 0x14, &[]);
    segment(&mut p, 6000 * MS, 50_000, 0x18, &y);
    let (files, _) = record(&p, "reuse");
    assert_eq!(files.keys().collect::<Vec<_>>(), ["callY"]);
    assert_eq!(files["callY"], [6000]);
}

#[test]
fn a_fragment_id_used_again_after_its_timeout_starts_afresh() {
    // X's INVITE loses its second fragment; 35 s later Y's uses the same id.
    let mut p = Pcap::default();
    for (t, call, whole) in [(1000, "callX", false), (36_000, "callY", true)] {
        let dgram = udp(CALLER.1, CALLEE.1, &invite(call));
        let half = dgram.len() / 2 / 8 * 8;
        p.ipv4(t * MS, &ipv4(CALLER.0, CALLEE.0, 17, 7, 0x2000, &dgram[..half]));
        if whole {
            p.ipv4(
                (t + 1) * MS,
                &ipv4(CALLER.0, CALLEE.0, 17, 7, (half / 8) as u16, &dgram[half..]),
            );
        }
    }
    let (files, summary) = record(&p, "fragid");
    assert_eq!(summary["defrag"]["timed_out"], 1, "{summary}");
    assert_eq!(files.keys().collect::<Vec<_>>(), ["callY"]);
    assert_eq!(files["callY"], [36_000, 36_001]);
}

#[test]
fn a_segment_ending_many_calls_messages_is_recorded_for_each_or_counted() {
    // 40 whole INVITEs and half of a 41st in one segment, the rest next.
    let msgs: Vec<Vec<u8>> = (0..41).map(|k| invite(&format!("call{k}"))).collect();
    let last = &msgs[40];
    let mut first = msgs[..40].concat();
    first.extend_from_slice(&last[..last.len() / 2]);
    let mut p = Pcap::default();
    segment(&mut p, 1000 * MS, 1000, 0x18, &first);
    segment(&mut p, 1010 * MS, 1000 + first.len() as u32, 0x18, &last[last.len() / 2..]);
    let (files, summary) = record(&p, "many");
    // 32 calls a frame; the 8 beyond are counted, never silent.
    assert_eq!(summary["record_calls_missed"], 8, "{summary}");
    assert_eq!(files.len(), 33);
    assert_eq!(files["call40"], [1000, 1010]);
    assert!((0..32).all(|k| files[&format!("call{k}")] == [1000]));
}

#[test]
fn an_sctp_message_given_up_leaves_nothing_to_the_next() {
    // X's INVITE begins; Y's begins before X's ends (X is abandoned), then ends.
    let (x, y) = (invite("callX"), invite("callY"));
    let half = y.len() / 2;
    let mut p = Pcap::default();
    for (t, flags, tsn, piece) in [
        (1000, 0x02, 1, &x[..x.len() / 2]),
        (1010, 0x02, 2, &y[..half]),
        (1020, 0x01, 3, &y[half..]),
    ] {
        p.ipv4(t * MS, &ipv4(CALLER.0, CALLEE.0, 132, 0, 0, &sctp(CALLER.1, flags, tsn, piece)));
    }
    let (files, summary) = record(&p, "sctp");
    assert_ne!(summary["sctp"]["dropped_pieces"], 0, "{summary}");
    assert_eq!(files.keys().collect::<Vec<_>>(), ["callY"]);
    assert_eq!(files["callY"], [1010, 1020]);
}
