//! `probe --filter`: the same packets as tcpdump keeps with the same
//! expression (tcpdump is the oracle), so the probe's records on a capture
//! equal `analyze` of tcpdump's filtered copy — compared both ways.

use crate::common;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Records (calls, streams, registrations, traffic rows) as sorted
/// canonical text, and the summary of a jsonl run.
fn split(stdout: &[u8]) -> (Vec<String>, Value) {
    let lines: Vec<Value> = String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("jsonl"))
        .collect();
    let summary = lines.iter().find(|l| l["type"] == "summary").cloned().expect("a summary line");
    let mut records: Vec<String> =
        lines.iter().filter(|l| l["type"] != "summary").map(Value::to_string).collect();
    records.sort_unstable();
    (records, summary)
}

/// Nanosecond timestamps, as the probe reads them, so records compare exactly.
fn tcpdump_filter(input: &Path, expr: &str, out: &Path) {
    let st = Command::new("tcpdump")
        .args(["--time-stamp-precision=nano", "-r"])
        .arg(input)
        .arg("-w")
        .arg(out)
        .arg(expr)
        .output()
        .unwrap_or_else(|e| panic!("tcpdump cannot run ({e}): scripts/test.sh installs it"));
    assert!(st.status.success(), "tcpdump: {}", String::from_utf8_lossy(&st.stderr));
}

#[test]
fn filtered_records_equal_analysis_of_tcpdumps_filtered_copy() {
    let _turn = crate::turn();
    let dir = common::scratch_dir("filter");
    let exprs = [
        "udp port 5060",
        "not udp port 5060",
        "udp and (port 5060 or portrange 10000-40000)",
        "greater 200",
        "ip6 or tcp",
    ];
    let mut compared = 0;
    let mut kept_some = 0;
    for pcap in common::captures() {
        let all = common::calliper_jsonl(&pcap, &[])
            .last()
            .and_then(|summary| summary["packets"].as_u64());
        let Some(all) = all else { continue };
        for expr in exprs {
            let copy = dir.join("filtered.pcap");
            tcpdump_filter(&pcap, expr, &copy);
            let probe = Command::new(env!("CARGO_BIN_EXE_calliper"))
                .args([
                    "probe",
                    "--format",
                    "jsonl",
                    "--status-every",
                    "0",
                    "--filter",
                    expr,
                    "--read",
                ])
                .arg(&pcap)
                .output()
                .unwrap();
            let analyze = Command::new(env!("CARGO_BIN_EXE_calliper"))
                .args(["analyze", "--format", "jsonl", "--progress", "never"])
                .arg(&copy)
                .output()
                .unwrap();
            let what = format!("{} with `{expr}`", pcap.display());
            // A capture tcpdump itself cannot read is not compared.
            if !probe.status.success() && analyze.status.code() != Some(0) {
                continue;
            }
            assert!(
                probe.status.code().is_some_and(|c| c <= 1),
                "{what}: {}",
                String::from_utf8_lossy(&probe.stderr)
            );
            let (mine, my_summary) = split(&probe.stdout);
            let (theirs, their_summary) = split(&analyze.stdout);
            assert_eq!(my_summary["packets"], their_summary["packets"], "{what}: packets kept");
            let kept = my_summary["packets"].as_u64().unwrap();
            assert_eq!(my_summary["filtered_out"].as_u64(), Some(all - kept), "{what}");
            kept_some += usize::from(kept > 0 && kept < all);
            // Both directions: every record of one is in the other, as
            // many times (sorted lists are equal as multisets).
            if let Some(r) = mine.iter().find(|r| theirs.binary_search(r).is_err()) {
                panic!("{what}: only the probe has {r}");
            }
            if let Some(r) = theirs.iter().find(|r| mine.binary_search(r).is_err()) {
                panic!("{what}: only analyze has {r}");
            }
            assert_eq!(mine.len(), theirs.len(), "{what}: record counts");
            compared += 1;
        }
    }
    assert!(compared >= common::at_least(50, 20), "compared {compared}");
    assert!(kept_some >= common::at_least(20, 5), "filters that split a capture: {kept_some}");
    std::fs::remove_dir_all(&dir).ok();
}
