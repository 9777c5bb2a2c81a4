//! Sharded analysis gives exactly the single-thread results: every record
//! and every counter, on every capture and on a generated one with loss,
//! duplicates and reordering.

use crate::common;

use common::{calliper_jsonl, captures, generate};
use serde_json::Value;
use std::path::Path;

/// Records sorted (shards finish calls in their own order) and the summary
/// without the input name.
fn run(file: &Path, threads: &str, extra: &[&str]) -> (Vec<String>, Value) {
    let mut args = vec!["--threads", threads];
    args.extend_from_slice(extra);
    let lines = common::kpi_rows_summed(calliper_jsonl(file, &args));
    let mut summary = lines
        .iter()
        .find(|l| l["type"] == "summary")
        .unwrap()
        .clone();
    summary.as_object_mut().unwrap().remove("input");
    let mut records: Vec<String> = lines
        .iter()
        .filter(|l| l["type"] != "summary")
        .map(|l| l.to_string())
        .collect();
    records.sort();
    (records, summary)
}

#[test]
fn two_and_three_shards_match_one_thread() {
    let dir = std::env::temp_dir().join(format!("calliper-threads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pcap, truth) = (dir.join("gen.pcap"), dir.join("truth.jsonl"));
    generate(common::IMPAIRED, &pcap, &truth);
    let mut files = captures();
    files.push(pcap);
    let mut checked = 0;
    for f in &files {
        let extra: &[&str] = if f.ends_with("heplify__sip_ipv6_udp.pcap") {
            &["--call-timeout", "3e8", "--unanswered-timeout", "3e8"]
        } else {
            &[]
        };
        let one = run(f, "1", extra);
        for t in ["2", "3"] {
            let many = run(f, t, extra);
            assert_eq!(
                many.0,
                one.0,
                "{}: records differ with {t} threads",
                f.display()
            );
            assert_eq!(
                many.1,
                one.1,
                "{}: counters differ with {t} threads",
                f.display()
            );
        }
        checked += one.0.len();
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(checked > 400, "only {checked} records compared");
}

/// One engine writes the calls still open at the end of the input a group
/// of 1 024 at a time (so it never holds all their records), shards all at
/// once: the records, alerts, KPIs and counters are the same.
#[test]
fn calls_open_at_the_end_come_out_the_same_in_groups() {
    let dir = common::scratch("open-at-end");
    std::fs::create_dir_all(&dir).unwrap();
    let (pcap, truth) = (dir.join("gen.pcap"), dir.join("truth.jsonl"));
    let args = "--calls 3000 --concurrent 2600 --warm-start --duration 4 \
                --codecs g729:1 --loss 0.5 --seed 5";
    let args: Vec<&str> = args.split_whitespace().collect();
    generate(&args, &pcap, &truth);
    let one = run(&pcap, "1", &[]);
    let ongoing = one
        .0
        .iter()
        .filter(|r| r.contains("\"ongoing\":true"))
        .count();
    assert!(
        ongoing > 2 * 1024,
        "only {ongoing} calls open at the end: one group"
    );
    assert!(
        one.0.iter().any(|r| r.contains("\"type\":\"alert\"")),
        "no alert to compare"
    );
    let two = run(&pcap, "2", &[]);
    assert_eq!(two.0, one.0, "records differ between one engine and shards");
    assert_eq!(
        two.1, one.1,
        "counters differ between one engine and shards"
    );
    std::fs::remove_dir_all(&dir).ok();
}
