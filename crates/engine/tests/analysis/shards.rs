//! Sharded analysis gives exactly the single-thread results: every record,
//! tracker row and counter, on every capture and on generated ones with
//! loss, duplicates and reordering, whether the shards read the file
//! themselves or are handed the packets. (`crates/cli/tests/offline/captures.rs`
//! checks that the command with `--threads 2` gives what this probe gives,
//! on every capture and the impaired one.)

use calliper_engine::Config;
use calliper_generate::Spec;
use calliper_testkit::captures::{captures, scratch};
use calliper_testkit::generated;
use calliper_testkit::probe::{kpi_rows_summed, Probe};
use serde_json::Value;
use std::path::Path;

/// Lines sorted (shards finish calls in their own order), KPI rows summed,
/// and the summary; shards read the file themselves.
fn run(file: &Path, threads: usize, cfg: &Config) -> (Vec<String>, Value) {
    lines(Probe::new(cfg.clone(), threads), file)
}

/// As [`run`], with the shards handed the packets (as live rings feed them).
fn run_pushed(file: &Path, threads: usize, cfg: &Config) -> (Vec<String>, Value) {
    lines(Probe::pushed(cfg.clone(), threads), file)
}

/// The records and rows, then every event (dated as one engine dates
/// them: a shard's clock must not run ahead of the packets it handles).
fn lines(mut p: Probe, file: &Path) -> (Vec<String>, Value) {
    p.capture(file);
    let outcome = p.finish();
    let mut lines = kpi_rows_summed(outcome.lines());
    let i = lines.iter().position(|l| l["type"] == "summary").unwrap();
    let summary = lines.remove(i);
    let mut records: Vec<String> = lines.iter().map(Value::to_string).collect();
    records.sort();
    let mut events: Vec<String> = outcome.events.iter().map(Value::to_string).collect();
    events.sort();
    records.extend(events);
    (records, summary)
}

/// `spec`'s capture, in a scratch file named after `name`.
fn generated_file(name: &str, spec: &Spec) -> std::path::PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("gen.pcap");
    std::fs::write(&pcap, generated::pcap(spec)).unwrap();
    pcap
}

#[test]
fn two_three_and_four_shards_match_one_thread() {
    let mut files = captures();
    let impaired = generated_file("shards", &generated::impaired());
    files.push(impaired.clone());
    let mut checked = 0;
    for f in &files {
        let mut cfg = Config::default();
        if f.ends_with("heplify__sip_ipv6_udp.pcap") {
            cfg.call_idle_timeout_ns = 300_000_000 * 1_000_000_000;
            cfg.unanswered_timeout_ns = 300_000_000 * 1_000_000_000;
        }
        let one = run(f, 1, &cfg);
        for t in [2, 3, 4] {
            let name = f.display();
            let many = run(f, t, &cfg);
            assert_eq!(many.0, one.0, "{name}: records differ with {t} threads");
            assert_eq!(many.1, one.1, "{name}: counters differ with {t} threads");
        }
        // Shards handed the packets (live rings, pipes): the same again.
        let pushed = run_pushed(f, 2, &cfg);
        assert_eq!(pushed.0, one.0, "{}: records differ with 2 threads, pushed", f.display());
        assert_eq!(pushed.1, one.1, "{}: counters differ with 2 threads, pushed", f.display());
        checked += one.0.len();
    }
    std::fs::remove_dir_all(impaired.parent().unwrap()).ok();
    assert!(checked > 400, "only {checked} records compared");
}

/// RTP that starts before its SDP is adopted by the shard that owns it,
/// dated by the packet that does it: shards that read the file themselves
/// give the same events as one thread although other shards' media passes
/// them by (an attacker review found a shard's clock running ahead).
#[test]
fn media_before_its_sdp_is_dated_alike_by_shards() {
    let pcap = calliper_testkit::crafted::media_before_its_sdp(40).save("early-media");
    let cfg = Config::default();
    let one = run(&pcap, 1, &cfg);
    let started = one.0.iter().filter(|l| l.contains("stream_started")).count();
    assert!(started >= 40, "only {started} streams started: nothing to compare");
    for t in [2, 4] {
        let many = run(&pcap, t, &cfg);
        assert_eq!(many.0, one.0, "records or events differ with {t} threads");
        assert_eq!(many.1, one.1, "counters differ with {t} threads");
    }
    std::fs::remove_file(pcap).ok();
}

/// One engine finishes the calls still open at the end of the input a
/// group of 1 024 at a time (so it never holds all their records), shards
/// all at once: the records, alerts, KPIs and counters are the same.
#[test]
fn calls_open_at_the_end_come_out_the_same_in_groups() {
    let spec = Spec {
        calls: 3000,
        concurrent: 2600.0,
        warm_start: true,
        duration: Some(4.0),
        codecs: "g729:1".into(),
        loss: 0.5,
        seed: 5,
        ..Spec::default()
    };
    let pcap = generated_file("open-at-end", &spec);
    let cfg = Config::default();
    let one = run(&pcap, 1, &cfg);
    let ongoing = one.0.iter().filter(|r| r.contains("\"ongoing\":true")).count();
    assert!(ongoing > 2 * 1024, "only {ongoing} calls open at the end: one group");
    let alert = one.0.iter().any(|r| r.contains("\"type\":\"alert\""));
    assert!(alert, "no alert to compare");
    let two = run(&pcap, 2, &cfg);
    assert_eq!(two.0, one.0, "records differ between one engine and shards");
    assert_eq!(two.1, one.1, "counters differ between one engine and shards");
    std::fs::remove_dir_all(pcap.parent().unwrap()).ok();
}
