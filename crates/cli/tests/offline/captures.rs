//! Every public capture: analysed without a panic, with the calls and streams
//! it holds; and a capture whose packets all appear twice gives the same
//! records as the original.

use crate::common;

use common::calliper_jsonl;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn shared() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/pcaps/public");
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
    let calls: Vec<&Value> = lines.iter().filter(|l| l["type"] == "call").collect();
    let in_calls = calls.iter().map(|c| c["streams"].as_array().map_or(0, |s| s.len())).sum();
    let orphans = lines.iter().filter(|l| l["type"] == "stream").count();
    (calls.len(), in_calls, orphans)
}

#[test]
fn every_public_capture_gives_its_calls_and_streams() {
    let Some(dir) = shared() else {
        // The three captures copied into testdata/ are covered by the other tests.
        common::skip_requested("shared-pcaps", "../shared/pcaps/public not found");
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
        let extra: &[&str] = if name == "heplify__sip_ipv6_udp.pcap" {
            &["--call-timeout", "3e8", "--unanswered-timeout", "3e8"]
        } else {
            &[]
        };
        let got = counts(&calliper_jsonl(&dir.join(name), extra));
        if got != (calls, in_calls, orphans) {
            wrong.push(format!("{name}: want {:?}, got {got:?}", (calls, in_calls, orphans)));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Writes a pcap with every packet of `src` twice, as a capture on Linux
/// `any` shows a routed packet (once in, once out).
fn doubled(src: &Path, dst: &Path) -> usize {
    let data = std::fs::read(src).unwrap();
    assert_eq!(&data[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "little-endian pcap expected");
    let mut out = data[..24].to_vec();
    let mut at = 24;
    let mut n = 0;
    while at + 16 <= data.len() {
        let incl = u32::from_le_bytes(data[at + 8..at + 12].try_into().unwrap()) as usize;
        let rec = &data[at..at + 16 + incl];
        let mut copy = rec.to_vec();
        // The copy is 3 µs later (same second unless it wraps; ignore that).
        let usec = u32::from_le_bytes(copy[4..8].try_into().unwrap());
        copy[4..8].copy_from_slice(&(usec + 3).min(999_999).to_le_bytes());
        out.extend_from_slice(rec);
        out.extend_from_slice(&copy);
        at += 16 + incl;
        n += 1;
    }
    std::fs::write(dst, out).unwrap();
    n
}

#[test]
fn each_packet_seen_twice_gives_the_same_records() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let dst = std::env::temp_dir().join(format!("calliper-doubled-{}.pcap", std::process::id()));
    let packets = doubled(&src, &dst);
    let strip = |lines: Vec<Value>| -> (Vec<Value>, Value) {
        let summary = lines.iter().find(|l| l["type"] == "summary").unwrap().clone();
        // The time series counts what crossed the wire: doubled here.
        let records = lines
            .into_iter()
            .filter(|l| l["type"] != "summary" && l["type"] != "traffic")
            .collect();
        (records, summary)
    };
    let (want, _) = strip(calliper_jsonl(&src, &[]));
    let (got, summary) = strip(calliper_jsonl(&dst, &[]));
    std::fs::remove_file(&dst).ok();
    assert_eq!(summary["duplicates_removed"], packets);
    assert!(!want.is_empty());
    assert_eq!(got, want);
}

/// `-o -` is standard output, as for most tools, not a file named `-`.
#[test]
fn output_dash_is_stdout() {
    let dir = common::scratch("dash-output");
    std::fs::create_dir_all(&dir).unwrap();
    let capture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let args = "analyze --progress never --format jsonl -o -".split(' ');
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_calliper"));
    let out = cmd.current_dir(&dir).args(args).arg(&capture).output().unwrap();
    let created = dir.join("-").exists();
    std::fs::remove_dir_all(&dir).ok();
    common::succeeded(&out);
    assert!(!created, "a file named - was written");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.contains("\"type\":\"call\"")), "{text}");
}

/// The in-process probe the library crates' tests use
/// (`calliper_testkit::probe`) gives, on every capture, what `calliper
/// analyze --format jsonl --events all` writes: the same call and stream
/// lines, the same event lines and the same tracker rows (KPIs, traffic,
/// registrations, alerts, users), each in the same order with one thread,
/// and the same summary. With the default options,
/// and with those the engine's event tests use (`--interval 1
/// --dedup-window 0`) on two threads. So the tests moved out of this crate
/// (`crates/engine/tests`) still speak for the command-line tool.
#[test]
fn the_in_process_probe_gives_the_command_lines_records_events_and_counters() {
    let event_tests = calliper_engine::Config {
        interval_ns: 1_000_000_000,
        dedup_window_ns: 0,
        ..calliper_engine::Config::default()
    };
    let runs: [(&[&str], calliper_engine::Config, usize); 2] = [
        (&[], calliper_engine::Config::default(), 1),
        (&["--interval", "1", "--dedup-window", "0", "--threads", "2"], event_tests, 2),
    ];
    let (mut records, mut events, mut rows) = (0, 0, 0);
    for (flags, cfg, threads) in runs {
        for file in common::captures() {
            let name = format!("{} {flags:?}", file.display());
            let mut args = vec!["--events", "all"];
            args.extend_from_slice(flags);
            let cli = Lines::of(calliper_jsonl(&file, &args));
            let mut probe = calliper_testkit::probe::Probe::new(cfg.clone(), threads);
            probe.capture(&file);
            let out = probe.finish();
            let ours = Lines::of(out.lines().into_iter().chain(out.events).collect());
            // Each kind in order with one thread: both take what is
            // finished every EMIT_EVERY packets and end alike. Shards
            // deliver in an order of their own: compared as sets.
            for (what, cli, ours) in [
                ("records", &cli.records, &ours.records),
                ("events", &cli.events, &ours.events),
                ("tracker rows", &cli.rows, &ours.rows),
            ] {
                if threads == 1 {
                    same_lines(&name, what, cli, ours);
                } else {
                    assert_eq!(sorted(cli), sorted(ours), "{name}: {what}");
                }
            }
            same_counters(&name, &cli.summary, &ours.summary);
            records += ours.records.len();
            events += ours.events.len();
            rows += ours.rows.len();
        }
    }
    assert!(
        records >= common::at_least(200, 6)
            && events >= common::at_least(1600, 60)
            && rows >= common::at_least(400, 10),
        "only {records} records, {events} events and {rows} tracker rows compared"
    );
}

/// One run's lines by kind.
struct Lines {
    records: Vec<Value>,
    events: Vec<Value>,
    /// The trackers' rows.
    rows: Vec<Value>,
    summary: Value,
}

impl Lines {
    fn of(lines: Vec<Value>) -> Lines {
        // The trackers' lines, neither records nor events.
        const ROWS: &[&str] = &["kpi", "traffic", "registration", "alert", "user"];
        let mut l = Lines {
            records: Vec::new(),
            events: Vec::new(),
            rows: Vec::new(),
            summary: Value::Null,
        };
        for v in lines {
            match v["type"].as_str().unwrap_or("") {
                "call" | "stream" => l.records.push(v),
                "summary" => l.summary = v,
                t if ROWS.contains(&t) => l.rows.push(v),
                _ => l.events.push(v),
            }
        }
        l
    }
}

fn sorted(v: &[Value]) -> Vec<String> {
    let mut s: Vec<String> = v.iter().map(Value::to_string).collect();
    s.sort();
    s
}

/// Every counter of the probe's summary is the command's; the command
/// adds only the name of its input.
fn same_counters(name: &str, cli: &Value, ours: &Value) {
    const COMMAND_ONLY: &[&str] = &["input"];
    let (Some(cli), Some(ours)) = (cli.as_object(), ours.as_object()) else {
        panic!("{name}: a summary is missing");
    };
    for (k, v) in ours {
        assert_eq!(cli.get(k), Some(v), "{name}: summary {k}");
    }
    for k in cli.keys().filter(|k| !ours.contains_key(*k)) {
        assert!(COMMAND_ONLY.contains(&k.as_str()), "{name}: summary {k} only from the command");
    }
}

/// Fails at the first line where the command and the probe differ, showing
/// those two lines only.
fn same_lines(file: &str, what: &str, cli: &[Value], in_process: &[Value]) {
    let differ = cli.iter().zip(in_process).position(|(a, b)| a != b);
    if let Some(n) = differ {
        panic!(
            "{file}: {what} differ at line {n}:\ncommand:    {}\nin process: {}",
            cli[n], in_process[n]
        );
    }
    assert_eq!(cli.len(), in_process.len(), "{file}: {what}: lines");
}
