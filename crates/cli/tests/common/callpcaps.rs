//! Helpers of the recording tests (`callpcap.rs`, `callpcap_export.rs`).

use calliper_testkit::probe::of_type;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A fresh path ending in `name` under the temporary directory.
pub fn temp(name: &str) -> PathBuf {
    let p = super::scratch(name);
    let _ = std::fs::remove_dir_all(&p);
    p
}

/// `calliper analyze --format jsonl` of `pcap` with every call recorded
/// under `dir` within `budget` bytes, and `extra` options: its lines.
pub fn record_within(pcap: &Path, dir: &Path, budget: u64, extra: &[&str]) -> Vec<Value> {
    let budget = budget.to_string();
    let dir = dir.to_str().unwrap();
    let record = ["--record", "all", "--record-dir", dir, "--record-max-size", &budget];
    super::calliper_jsonl(pcap, &[&record[..], extra].concat())
}

/// The recordings under `dir`, by day directory, sorted.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .collect();
    v.sort();
    v
}

/// The call records among JSON lines.
pub fn calls(lines: &[Value]) -> Vec<&Value> {
    of_type(lines, "call").collect()
}
