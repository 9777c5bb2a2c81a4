//! An INVITE flood with hostile messages mixed into real calls: memory stays
//! under its cap, the flood is counted, and the real calls come out right.

use crate::common;

use common::{check_truth, generate, run_measured};
use serde_json::Value;
use std::process::Command;

/// Peak resident memory allowed for the analysis, documented in
/// docs/hostile-input.md. Measured: about 150 MiB.
const RSS_CAP_KIB: i64 = 256 * 1024;

/// The generator's real calls (not the flood's): `n` of them, each completed.
fn completed_real_calls(lines: &[Value], n: usize) -> Vec<&Value> {
    let real: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "call" && l["call_id"].as_str().unwrap().starts_with("gen-"))
        .collect();
    assert_eq!(real.len(), n);
    for c in &real {
        assert_eq!(c["state"], "completed", "{}", c["call_id"]);
    }
    real
}

#[test]
fn invite_flood_and_hostile_messages() {
    let dir = common::scratch_dir("flood");
    let (pcap, truth, out) =
        (dir.join("flood.pcap"), dir.join("truth.jsonl"), dir.join("out.jsonl"));
    generate(
        "--calls 300 --concurrent 30 --hold-mean 20 --loss 2 --flood 1000000 --hostile 1000 --seed 7",
        &pcap,
        &truth,
    );
    let run = run_measured(
        Command::new(env!("CARGO_BIN_EXE_calliper"))
            .args(["analyze", "--format", "jsonl", "--progress", "never", "-o"])
            .arg(&out)
            .arg(&pcap),
    );
    let (code, rss_kib) = (run.code, run.peak_rss_kib);
    assert_eq!(code, 0);
    eprintln!("peak RSS {} MiB", rss_kib / 1024);
    assert!(rss_kib < RSS_CAP_KIB, "peak RSS {rss_kib} KiB over the cap");

    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // Two threads count the same, records and counters alike.
    let two = run_measured(
        Command::new(env!("CARGO_BIN_EXE_calliper"))
            .args(["analyze", "--format", "jsonl", "--progress", "never", "--threads", "2"])
            .arg(&pcap),
    );
    assert_eq!(two.code, 0, "{}", two.stderr);
    let sorted = |text: &str| {
        let parsed = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let mut v: Vec<String> = common::kpi_rows_summed(parsed)
            .into_iter()
            .map(|mut j: Value| {
                j.as_object_mut().unwrap().remove("input");
                j.to_string()
            })
            .collect();
        v.sort();
        v
    };
    assert!(sorted(&two.stdout) == sorted(&text), "two threads differ on the flood");
    let truth = std::fs::read_to_string(&truth).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
    // The flood went to its own list and was evicted there, not the real calls.
    assert_eq!(summary["calls_evicted"], 0);
    let evicted = summary["unanswered_evicted"].as_u64().unwrap();
    assert!(evicted >= 800_000, "only {evicted} flood INVITEs evicted");
    // Each kind of hostile message was refused and counted (200 of each).
    for kind in [
        "sip_too_many_headers",
        "sip_bad_content_length",
        "sip_call_id_too_long",
        "sip_not_sip",
        "sdp_bad_line",
    ] {
        assert_eq!(summary["anomalies"][kind], 200, "{kind}");
    }
    // Every real call is there, answered, with exactly the loss the generator made.
    for c in completed_real_calls(&lines, 300) {
        assert_eq!(c["final_status"], 200, "{}", c["call_id"]);
    }
    assert_eq!(check_truth(&lines, &truth).0, 600);
}

/// A scan against a proxy that challenges every INVITE with 407 fills the
/// call table with calls waiting for a retry that never comes: they make
/// room for each other (counted, no record) and never push out real calls.
#[test]
fn challenged_flood_does_not_evict_real_calls() {
    let (dir, pcap, truth) = common::generated("407", "--calls 200 --concurrent 20 --hold-mean 10 --flood 100000 --flood-rate 2000 --flood-challenged --seed 11");
    let lines = common::calliper_jsonl(&pcap, &["--max-calls", "1000"]);
    let truth = std::fs::read_to_string(&truth).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let summary = lines.last().unwrap();
    assert_eq!(summary["calls_evicted"], 0, "{summary}");
    let dropped = summary["challenged_evicted"].as_u64().unwrap();
    assert!(dropped >= 90_000, "only {dropped} challenged calls made room");
    completed_real_calls(&lines, 200);
    assert_eq!(check_truth(&lines, &truth).0, 400);
}
