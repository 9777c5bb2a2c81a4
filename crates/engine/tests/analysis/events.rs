//! The engine's events (`--events`) against tshark on real captures:
//! every stream's reporting intervals hold exactly the packets tshark
//! shows for that stream in that interval (both ways), and add up to the
//! stream's record; hold offers, DTMF digits and RTCP report blocks are
//! the ones tshark decodes; a sharded run delivers the same events.

use calliper_engine::Config;
use calliper_testkit::captures::{at_least, captures, repo_root};
use calliper_testkit::oracle::{epoch_ns, tshark_fields, KNOWN_DIFFERENCES, RTP_STREAM_FIELDS};
use calliper_testkit::probe::of_type;
use calliper_testkit::probe::Probe;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Interval length used here: short, so the captures cross many boundaries.
const INTERVAL_NS: i64 = 1_000_000_000;

type Key = (String, u64, String, u64, u64);

fn key(v: &Value) -> Key {
    (
        v["src"].as_str().unwrap().to_string(),
        v["src_port"].as_u64().unwrap(),
        v["dst"].as_str().unwrap().to_string(),
        v["dst_port"].as_u64().unwrap(),
        v["ssrc"].as_u64().unwrap(),
    )
}

/// What `analyze --format jsonl --events all --interval 1 --dedup-window 0
/// --threads N` writes for `file`: the records, every event, the summary.
fn events(file: &Path, threads: usize) -> Vec<Value> {
    let cfg = Config { interval_ns: INTERVAL_NS, dedup_window_ns: 0, ..Config::default() };
    let mut probe = Probe::new(cfg, threads);
    probe.capture(file);
    let out = probe.finish();
    let mut lines = out.lines();
    lines.extend(out.events.iter().cloned());
    lines
}

/// The innermost of a field tshark repeats per layer (tunnels).
fn last(field: &str) -> &str {
    field.rsplit(',').next().unwrap_or("")
}

/// tshark's RTP packets per (stream, interval start), for the streams in `keep`.
fn tshark_intervals(file: &Path, keep: &BTreeSet<Key>) -> BTreeMap<(Key, i64), u64> {
    let out = tshark_fields(
        file,
        &["-o", "rtp.heuristic_rtp:TRUE"],
        "rtp",
        &[&["frame.time_epoch"], &RTP_STREAM_FIELDS[..]].concat(),
    );
    let mut counts = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 8 || f[7].is_empty() {
            continue;
        }
        let addr = |v4: &str, v6: &str| {
            let a = if v6.is_empty() { last(v4) } else { last(v6) };
            a.to_string()
        };
        let ssrc = u64::from_str_radix(last(f[7]).trim_start_matches("0x"), 16).unwrap();
        let k: Key = (
            addr(f[1], f[2]),
            last(f[3]).parse().unwrap_or(0),
            addr(f[4], f[5]),
            last(f[6]).parse().unwrap_or(0),
            ssrc,
        );
        if !keep.contains(&k) {
            continue;
        }
        let t = epoch_ns(f[0]);
        *counts.entry((k, t.div_euclid(INTERVAL_NS) * INTERVAL_NS)).or_insert(0) += 1;
    }
    counts
}

#[test]
fn intervals_hold_tshark_packets_and_add_up_to_the_record() {
    let mut compared_streams = 0;
    let mut compared_intervals = 0;
    for file in captures() {
        let lines = events(&file, 1);
        let ended: BTreeMap<Key, &Value> =
            of_type(&lines, "stream_ended").map(|l| (key(l), l)).collect();
        if ended.is_empty() {
            continue;
        }
        // Intervals per stream, in order.
        let mut ours: BTreeMap<(Key, i64), u64> = BTreeMap::new();
        let mut by_stream: BTreeMap<Key, Vec<&Value>> = BTreeMap::new();
        for i in of_type(&lines, "interval") {
            by_stream.entry(key(i)).or_default().push(i);
            let start = i["start_ns"].as_i64().unwrap();
            assert_eq!(start % INTERVAL_NS, 0, "{}: unaligned {i}", file.display());
            let prev = ours.insert((key(i), start), i["packets"].as_u64().unwrap());
            assert!(prev.is_none(), "{}: interval twice: {i}", file.display());
        }
        for (k, record) in &ended {
            let iv = by_stream.get(k).unwrap_or_else(|| {
                panic!("{}: stream {k:?} ended without intervals", file.display())
            });
            let sum = |f: &str| iv.iter().map(|i| i[f].as_i64().unwrap()).sum::<i64>();
            for f in ["packets", "expected", "lost", "duplicates"] {
                assert_eq!(
                    sum(f),
                    record[f].as_i64().unwrap(),
                    "{}: {k:?}: intervals' {f} do not add up to the record",
                    file.display()
                );
            }
            let lasts: Vec<bool> = iv.iter().map(|i| i["last"] == true).collect();
            assert_eq!(lasts.iter().filter(|&&l| l).count(), 1, "{}: {k:?}", file.display());
            assert!(lasts[lasts.len() - 1], "{}: {k:?}: last is not last", file.display());
            assert!(
                iv.windows(2).all(|w| w[0]["end_ns"].as_i64() <= w[1]["start_ns"].as_i64()),
                "{}: {k:?}: intervals overlap",
                file.display()
            );
            for i in iv {
                // A MOS is on the 1–4.5 scale, or absent for streams not scored.
                if let Some(mos) = i["mos"].as_f64() {
                    assert!((1.0..=4.5).contains(&mos), "{}: {i}", file.display());
                } else {
                    assert!(i["mos_scale"].is_null(), "{}: {i}", file.display());
                }
            }
        }
        // Streams tshark sees differently on purpose (the stream oracle's list).
        let name = file.file_name().unwrap().to_str().unwrap();
        let known = |k: &Key| {
            KNOWN_DIFFERENCES.iter().any(|(f, ssrc, _)| *f == name && *ssrc as u64 == k.4)
        };
        ours.retain(|(k, _), _| !known(k));
        let keep: BTreeSet<Key> = ended.keys().filter(|k| !known(k)).cloned().collect();
        let theirs = tshark_intervals(&file, &keep);
        // Both ways: the same (stream, interval) cells with the same counts.
        for (cell, n) in &ours {
            assert_eq!(
                theirs.get(cell),
                Some(n),
                "{}: {cell:?}: calliper {n} packets, tshark {:?}",
                file.display(),
                theirs.get(cell)
            );
        }
        for (cell, n) in &theirs {
            assert_eq!(
                ours.get(cell),
                Some(n),
                "{}: {cell:?}: tshark {n} packets, calliper {:?}",
                file.display(),
                ours.get(cell)
            );
        }
        compared_streams += ended.len();
        compared_intervals += ours.len();
    }
    let least = at_least(40, 8);
    assert!(
        compared_streams >= least,
        "only {compared_streams} streams compared (expected at least {least})"
    );
    eprintln!("{compared_streams} streams, {compared_intervals} intervals equal to tshark's");
}

#[test]
fn hold_and_resume_follow_the_offers_tshark_decodes() {
    let file = repo_root().join("testdata/sipp_hold_dtmf.pcap");
    // tshark: INVITE requests whose SDP offers audio send-only or inactive
    // (hold), and re-INVITEs offering send-receive (resume), by Call-ID.
    let offers = |filter: &str| -> Vec<String> {
        tshark_fields(&file, &[], filter, &["sip.Call-ID"]).lines().map(str::to_string).collect()
    };
    let holds = offers(
        r#"sip.Method == "INVITE" && (sdp.media_attr == "sendonly" || sdp.media_attr == "inactive")"#,
    );
    let lines = events(&file, 1);
    let phase = |p: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l["type"] == "call_event" && l["phase"] == p)
            .map(|l| l["call_id"].as_str().unwrap().to_string())
            .collect()
    };
    let mut held = phase("held");
    let mut theirs = holds.clone();
    held.sort();
    theirs.sort();
    assert!(!theirs.is_empty(), "the capture has hold offers");
    assert_eq!(held, theirs, "held calls differ from tshark's hold offers");
    // Each hold here is followed by a resume offer (a send-receive re-INVITE).
    let mut resumed = phase("resumed");
    resumed.sort();
    assert_eq!(resumed, theirs);
    for l in lines.iter().filter(|l| l["phase"] == "held") {
        assert_eq!(l["by"], "caller", "{l}");
    }
}

#[test]
fn dtmf_events_are_the_digits_tshark_decodes() {
    let mut compared = 0;
    for file in captures() {
        // tshark: the first end packet of each event (stream, RTP timestamp).
        let out = tshark_fields(
            &file,
            &["-o", "rtp.heuristic_rtp:TRUE"],
            "rtpevent.end_of_event == 1",
            &[
                "ip.src",
                "udp.srcport",
                "ip.dst",
                "udp.dstport",
                "rtp.ssrc",
                "rtp.timestamp",
                "rtpevent.event_id",
            ],
        );
        let mut theirs: BTreeMap<Key, Vec<u64>> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        for l in out.lines() {
            let f: Vec<&str> = l.split('\t').map(last).collect();
            if f.len() < 7 || !seen.insert((f[..6].join(" "), f[5].to_string())) {
                continue;
            }
            let k: Key = (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].to_string(),
                f[3].parse().unwrap(),
                u64::from_str_radix(f[4].trim_start_matches("0x"), 16).unwrap(),
            );
            theirs.entry(k).or_default().push(f[6].parse().unwrap());
        }
        let lines = events(&file, 1);
        let mut ours: BTreeMap<Key, Vec<u64>> = BTreeMap::new();
        for d in of_type(&lines, "dtmf") {
            let digit = d["digit"].as_str().unwrap();
            let id = match digit {
                "*" => 10,
                "#" => 11,
                d => d.parse().unwrap_or_else(|_| 12 + (d.as_bytes()[0] - b'A') as u64),
            };
            ours.entry(key(d)).or_default().push(id);
        }
        // Digits on streams of calls only: tshark's on those streams.
        theirs.retain(|k, _| ours.contains_key(k));
        assert_eq!(ours, theirs, "{}: DTMF digits differ", file.display());
        compared += ours.values().map(Vec::len).sum::<usize>();
    }
    assert!(compared >= 4, "only {compared} digits compared");
}

#[test]
fn rtcp_events_are_the_report_blocks_tshark_decodes() {
    let mut compared = 0;
    for file in captures() {
        let lines = events(&file, 1);
        // A block is about a stream when its receiver sends it: keyed by
        // (reporter = the stream's receiver, the stream's sender, SSRC) — a
        // proxied call's legs carry the same SSRC between other addresses.
        type Reported = (String, String, u64);
        let reported = |k: Key| (k.2, k.0, k.4);
        let call_streams: BTreeSet<Reported> = lines
            .iter()
            .filter(|l| l["type"] == "stream_ended" && !l["call"].is_null())
            .map(|l| reported(key(l)))
            .collect();
        let mut ours: BTreeMap<Reported, Vec<i64>> = BTreeMap::new();
        for r in of_type(&lines, "rtcp") {
            ours.entry(reported(key(r))).or_default().push(r["cumulative_lost"].as_i64().unwrap());
        }
        let out = tshark_fields(
            &file,
            &["-E", "occurrence=a"],
            "rtcp.ssrc.identifier",
            &["ip.src", "ip.dst", "rtcp.ssrc.identifier", "rtcp.ssrc.cum_nr"],
        );
        let mut theirs: BTreeMap<Reported, Vec<i64>> = BTreeMap::new();
        for l in out.lines() {
            let f: Vec<&str> = l.split('\t').collect();
            // Report blocks come first; SDES chunk SSRCs (no block) follow.
            let lost = f.get(3).unwrap_or(&"").split(',').filter(|l| !l.is_empty());
            for (id, lost) in f[2].split(',').zip(lost) {
                let ssrc = u64::from_str_radix(id.trim_start_matches("0x"), 16).unwrap();
                let k = (last(f[0]).to_string(), last(f[1]).to_string(), ssrc);
                if call_streams.contains(&k) {
                    theirs.entry(k).or_default().push(lost.parse().unwrap());
                }
            }
        }
        assert_eq!(ours, theirs, "{}: RTCP blocks differ", file.display());
        compared += ours.values().map(Vec::len).sum::<usize>();
    }
    assert!(compared >= 2, "only {compared} RTCP blocks compared");
}

#[test]
fn two_threads_deliver_the_same_events() {
    for name in ["sipp_hold_dtmf.pcap", "heplify__rtp_rtcp_sip_ipv4_udp.pcap"] {
        let file = repo_root().join("testdata").join(name);
        let sorted = |threads: usize| -> Vec<String> {
            let mut v: Vec<String> = events(&file, threads)
                .into_iter()
                .filter(|l| !matches!(l["type"].as_str(), Some("call" | "stream" | "summary")))
                .map(|l| l.to_string())
                .collect();
            v.sort();
            v
        };
        let one = sorted(1);
        assert!(one.len() > 10, "{name}: only {} events", one.len());
        assert_eq!(one, sorted(2), "{name}: events differ with two threads");
    }
}

#[test]
fn anomaly_events_count_what_the_summary_counts() {
    let mut kinds = 0;
    for file in captures() {
        for threads in [1, 2] {
            let lines = events(&file, threads);
            let mut ours: BTreeMap<String, u64> = BTreeMap::new();
            for a in of_type(&lines, "anomaly") {
                *ours.entry(a["kind"].as_str().unwrap().into()).or_default() +=
                    a["count"].as_u64().unwrap();
            }
            let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
            let counted: BTreeMap<String, u64> = summary["anomalies"]
                .as_object()
                .expect("the summary has anomalies")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
                .collect();
            assert_eq!(ours, counted, "{} ({threads} threads)", file.display());
            kinds += counted.len();
        }
    }
    let least = at_least(8, 4);
    assert!(kinds >= least, "only {kinds} anomaly kinds compared");
}
