//! Capture times the analysis believes (docs/hostile-input.md, Time): a
//! lone packet stamped decades away is an anomaly analysed at its
//! neighbour's time, so the calls, the time series and the KPIs stay where
//! the capture is; a jump the next packet agrees with is a capture going
//! on at a new time. (`export audio` reading the believed times is the
//! command's test, `crates/cli/tests/offline/time_jumps.rs`.)

use calliper_engine::Config;
use calliper_testkit::captures::{read_frames, repo_root};
use calliper_testkit::probe::of_type;
use calliper_testkit::probe::Probe;
use serde_json::Value;

const DAY: i64 = 86_400_000_000_000;

/// The sample capture's packets: (time, frame), and its link type.
fn sample() -> (Vec<(i64, Vec<u8>)>, u16) {
    read_frames(&repo_root().join("testdata/sipp_hold_dtmf.pcap"))
}

/// What `analyze --format jsonl --events intervals` writes for `packets`:
/// the records, the trackers' rows and the interval events, then the
/// summary.
fn analyse(packets: &[(i64, Vec<u8>)], link: u16) -> Vec<Value> {
    let mut p = Probe::new(Config::default(), 1);
    p.frames(link, packets);
    let out = p.finish();
    let mut lines = out.lines();
    let summary = lines.pop().unwrap();
    lines.extend(out.events.into_iter().filter(|e| e["type"] == "interval"));
    lines.push(summary);
    lines
}

/// (Call-ID, INVITE time, duration) of each call.
fn calls(lines: &[Value]) -> Vec<(String, i64, f64)> {
    let mut v: Vec<_> = of_type(lines, "call")
        .map(|c| {
            (
                c["call_id"].as_str().unwrap().to_string(),
                c["invite_ns"].as_i64().unwrap(),
                c["duration_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    v.sort_by_key(|c| c.1);
    v
}

fn implausible(lines: &[Value]) -> &Value {
    &lines.last().unwrap()["anomalies"]["time_implausible"]
}

#[test]
fn lone_stamps_far_off_move_nothing() {
    let (mut packets, link) = sample();
    let before = analyse(&packets, link);
    let (first, last) = (packets[0].0, packets[packets.len() - 1].0);
    // An RTP packet stamped 70 years on, a SIP one at the epoch, and one
    // decades back: none moves a call, a time series row or a KPI row.
    packets[100].0 += 70 * 365 * DAY;
    packets[2].0 = 0;
    packets[1500].0 -= 30 * 365 * DAY;
    let after = analyse(&packets, link);
    assert_eq!(implausible(&after), 3, "{}", after.last().unwrap());
    assert!(implausible(&before).is_null());
    // The same calls; a re-timed SIP message moves its call's figures by
    // no more than the gap to the packet before it (the 200 OK: 0.3 s).
    let (a, b) = (calls(&after), calls(&before));
    assert_eq!(a.len(), b.len());
    for (a, b) in a.iter().zip(&b) {
        assert_eq!((&a.0, a.1), (&b.0, b.1));
        assert!((a.2 - b.2).abs() < 400.0, "{a:?} against {b:?}");
    }
    let times = |kind: &str, field: &str| -> Vec<i64> {
        after.iter().filter(|l| l["type"] == kind).map(|l| l[field].as_i64().unwrap()).collect()
    };
    for (kind, field) in [("traffic", "start_ns"), ("kpi", "start_ns"), ("interval", "start_ns")] {
        let t = times(kind, field);
        assert!(!t.is_empty(), "no {kind} rows");
        for t in t {
            assert!(
                t >= first - DAY && t <= last + DAY,
                "a {kind} row at {t}, outside the capture's {first}..{last}"
            );
        }
    }
}

#[test]
fn a_jump_the_next_packet_agrees_with_is_believed() {
    let (packets, link) = sample();
    let once = calls(&analyse(&packets, link));
    // The same calls again ten years on, spliced after the first.
    let later: Vec<(i64, Vec<u8>)> =
        packets.iter().map(|(t, f)| (t + 3650 * DAY, f.clone())).collect();
    let both = analyse(&[packets, later].concat(), link);
    // The packet after the jump comes in the same batch and agrees.
    assert!(implausible(&both).is_null(), "{}", both.last().unwrap());
    let got = calls(&both);
    assert_eq!(got.len(), 2 * once.len(), "{got:?}");
    for (a, b) in once.iter().zip(&got[once.len()..]) {
        assert_eq!(b.0, a.0);
        assert_eq!(b.1, a.1 + 3650 * DAY, "{b:?} is the call ten years on");
    }
}

/// The first packet has no packet before it: its batch's median judges it.
#[test]
fn an_absurd_first_packet_is_judged_too() {
    let (mut packets, link) = sample();
    let (first, last) = (packets[1].0, packets[packets.len() - 1].0);
    packets[0].0 += 70 * 365 * DAY;
    let after = analyse(&packets, link);
    assert_eq!(implausible(&after), 1, "{}", after.last().unwrap());
    for l in after.iter().filter(|l| l["type"] != "summary") {
        for field in ["invite_ns", "end_ns", "start_ns", "first_ns", "last_ns"] {
            if let Some(t) = l[field].as_i64() {
                assert!(t >= first - DAY && t <= last + DAY, "{field} {t} in {l}");
            }
        }
    }
}
