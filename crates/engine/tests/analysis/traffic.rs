//! The time series: every interval's packets and bytes, by network and
//! transport protocol, equal what tshark shows for the same interval
//! (intervals aligned to multiples of their length), in both directions;
//! the application split adds up; calls started and ended add up to the
//! calls; the top talkers are tshark's busiest sources. (The database's
//! copy of the rows is the command's test, `crates/cli/tests/offline/traffic.rs`.)

use calliper_engine::Config;
use calliper_testkit::captures::repo_root;
use calliper_testkit::oracle::tshark_fields;
use calliper_testkit::probe::of_type;
use calliper_testkit::probe::Probe;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `analyze --format jsonl --interval 2 FILE` writes.
fn lines_every_2s(file: &Path) -> Vec<Value> {
    let mut p = Probe::new(Config { interval_ns: EVERY_NS, ..Config::default() }, 1);
    p.capture(file);
    p.finish().lines()
}

/// (interval start, network, transport) → (packets, bytes).
type Bins = BTreeMap<(i64, String, String), (u64, u64)>;

const EVERY_NS: i64 = 2_000_000_000;

fn testdata() -> Vec<PathBuf> {
    let dir = repo_root().join("testdata");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    files.sort();
    files
}

/// tshark's view: each frame's time, captured length and innermost IP
/// protocol (for IPv6, the next header after a hop-by-hop or fragment
/// header: MLD reports carry a hop-by-hop header).
fn tshark_bins(file: &Path) -> Bins {
    let out = tshark_fields(
        file,
        &["-E", "separator=|"],
        "",
        &[
            "frame.time_epoch",
            "frame.cap_len",
            "ip.proto",
            "ipv6.nxt",
            "ipv6.fraghdr.nxt",
            "ipv6.hopopts.nxt",
        ],
    );
    let mut bins = Bins::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('|').collect();
        let ns = calliper_testkit::oracle::epoch_ns(f[0]);
        let len: u64 = f[1].parse().unwrap();
        let last = |s: &str| {
            s.rsplit(',').next().filter(|v| !v.is_empty()).map(|v| v.parse::<u8>().unwrap())
        };
        // The innermost header decides (tunnels list outer values first).
        let (net, proto) = match (last(f[2]), last(f[4]).or(last(f[5])).or(last(f[3]))) {
            (_, Some(p)) if !f[3].is_empty() && (f[2].is_empty() || f[3].len() >= f[2].len()) => {
                ("ipv6", p)
            }
            (Some(p), _) => ("ipv4", p),
            (None, Some(p)) => ("ipv6", p),
            (None, None) => ("other", 0),
        };
        let transport = match (net, proto) {
            ("other", _) => "other",
            (_, 17) => "udp",
            (_, 6) => "tcp",
            (_, 132) => "sctp",
            (_, 1 | 58) => "icmp",
            _ => "other",
        };
        let e = bins
            .entry((ns.div_euclid(EVERY_NS) * EVERY_NS, net.to_string(), transport.to_string()))
            .or_default();
        e.0 += 1;
        e.1 += len;
    }
    bins
}

fn calliper_bins(rows: &[&Value]) -> Bins {
    let mut bins = Bins::new();
    for r in rows {
        let start = r["start_ns"].as_i64().unwrap();
        let (mut p, mut b) = (0, 0);
        for c in r["protocols"].as_array().unwrap() {
            let e = bins
                .entry((
                    start,
                    c["network"].as_str().unwrap().into(),
                    c["transport"].as_str().unwrap().into(),
                ))
                .or_default();
            e.0 += c["packets"].as_u64().unwrap();
            e.1 += c["bytes"].as_u64().unwrap();
            p += c["packets"].as_u64().unwrap();
            b += c["bytes"].as_u64().unwrap();
        }
        assert_eq!((p, b), (r["packets"].as_u64().unwrap(), r["bytes"].as_u64().unwrap()), "{r}");
    }
    bins
}

#[test]
fn intervals_hold_what_tshark_shows_by_protocol() {
    let mut compared = 0;
    for file in testdata() {
        let lines = lines_every_2s(&file);
        let rows: Vec<&Value> = of_type(&lines, "traffic").collect();
        let ours = calliper_bins(&rows);
        let theirs = tshark_bins(&file);
        for (k, v) in &theirs {
            assert_eq!(ours.get(k), Some(v), "{}: tshark's {k:?}", file.display());
        }
        for (k, v) in &ours {
            assert_eq!(theirs.get(k), Some(v), "{}: calliper's {k:?}", file.display());
        }
        // Rows are consecutive intervals, quiet ones reported empty (up to
        // 8 640 of them for one gap: this capture's clock jumps by years).
        let mut empties = 0;
        for w in rows.windows(2) {
            empties = if w[0]["packets"] == 0 { empties + 1 } else { 0 };
            if w[0]["end_ns"] != w[1]["start_ns"] {
                assert_eq!(empties, 8640, "{}: a gap after {}", file.display(), w[0]);
            }
        }
        let calls = of_type(&lines, "call").count() as u64;
        let sum = |k: &str| rows.iter().map(|r| r[k].as_u64().unwrap()).sum::<u64>();
        assert_eq!(sum("calls_ended"), calls, "{}", file.display());
        let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
        assert_eq!(sum("calls_started"), summary["calls"].as_u64().unwrap());
        // The streams' intervals folded into the rows hold every packet of
        // the stream records, unless a report came after its row had gone.
        let streams: Vec<&Value> = lines
            .iter()
            .flat_map(|l| match l["type"].as_str() {
                Some("call") => l["streams"].as_array().unwrap().iter().collect(),
                Some("stream") => vec![l],
                _ => vec![],
            })
            .collect();
        let recorded: u64 = streams.iter().map(|s| s["packets"].as_u64().unwrap()).sum();
        if summary.get("late_stream_intervals").is_none() {
            assert_eq!(sum("stream_packets"), recorded, "{}", file.display());
        } else {
            assert!(sum("stream_packets") < recorded, "{}", file.display());
        }
        compared += theirs.len();
    }
    assert!(compared > 20, "compared {compared} bins");
}

/// The sample's calls end with the input (their grace runs past its last
/// packet): the streams' last reports, made at the end, are in the last
/// rows, not late, and the rows hold every packet of the stream records.
#[test]
fn reports_made_at_the_end_of_the_input_are_in_the_rows() {
    let sample = repo_root().join("testdata/sipp_hold_dtmf.pcap");
    let lines = calliper_testkit::probe::analyze(&sample).lines();
    let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
    assert!(summary.get("late_stream_intervals").is_none(), "{summary}");
    let in_rows: u64 =
        of_type(&lines, "traffic").map(|r| r["stream_packets"].as_u64().unwrap()).sum();
    let recorded: u64 = of_type(&lines, "call")
        .flat_map(|c| c["streams"].as_array().unwrap())
        .map(|s| s["packets"].as_u64().unwrap())
        .sum();
    assert_eq!((in_rows, recorded), (2952, 2952));
}

/// (interval start, source address) → (packets, bytes), as tshark sees them.
fn tshark_talkers(file: &Path) -> BTreeMap<(i64, String), (u64, u64)> {
    let out = tshark_fields(
        file,
        &["-E", "separator=|"],
        "",
        &["frame.time_epoch", "frame.cap_len", "ip.src", "ipv6.src"],
    );
    let mut talkers = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('|').collect();
        let ns = calliper_testkit::oracle::epoch_ns(f[0]);
        // The innermost header: the last value listed.
        let last = |s: &str| s.rsplit(',').next().filter(|v| !v.is_empty()).map(str::to_string);
        let Some(src) = last(f[3]).or_else(|| last(f[2])) else {
            continue;
        };
        let e = talkers.entry((ns.div_euclid(EVERY_NS) * EVERY_NS, src)).or_insert((0, 0));
        e.0 += 1;
        e.1 += f[1].parse::<u64>().unwrap();
    }
    talkers
}

#[test]
fn top_talkers_are_tsharks_busiest_sources() {
    let mut checked = 0;
    for file in testdata() {
        let lines = lines_every_2s(&file);
        let theirs = tshark_talkers(&file);
        for row in of_type(&lines, "traffic") {
            let start = row["start_ns"].as_i64().unwrap();
            let listed = row["top_talkers"].as_array().unwrap();
            assert_eq!(row["talkers_untracked_packets"], 0, "{}", file.display());
            let mut all: Vec<(u64, u64, &String)> = theirs
                .range((start, String::new())..(start + EVERY_NS, String::new()))
                .map(|((_, a), (p, b))| (*b, *p, a))
                .collect();
            all.sort_by(|x, y| y.cmp(x));
            assert_eq!(listed.len(), all.len().min(10), "{}", file.display());
            for t in listed {
                let a = t["address"].as_str().unwrap().to_string();
                let want = theirs.get(&(start, a.clone()));
                let got = (t["packets"].as_u64().unwrap(), t["bytes"].as_u64().unwrap());
                assert_eq!(want, Some(&got), "{} {start} {a}", file.display());
                checked += 1;
            }
            // Nobody left out sent more than the last one listed.
            if let (Some(last), Some(next)) = (listed.last(), all.get(listed.len())) {
                assert!(next.0 <= last["bytes"].as_u64().unwrap(), "{}", file.display());
            }
        }
    }
    assert!(checked > 20, "{checked}");
}
