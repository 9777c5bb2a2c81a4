//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Generator options for a busy capture with every impairment the analysis
/// must survive unchanged across ways of running it (threads, batches).
pub const IMPAIRED: &[&str] = &[
    "--calls",
    "400",
    "--concurrent",
    "150",
    "--hold-mean",
    "10",
    "--loss",
    "2",
    "--burst",
    "0.5",
    "--duplicate",
    "1",
    "--reorder",
    "1",
    "--seed",
    "9",
];

pub fn capture_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let shared = root.join("../shared/pcaps");
    if shared.is_dir() {
        vec![shared.join("public"), shared.join("generated")]
    } else {
        eprintln!("note: ../shared/pcaps not found; comparing on testdata/ only");
        vec![root.join("testdata")]
    }
}

pub fn captures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = capture_dirs()
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap_or_else(|e| panic!("{}: {e}", d.display())))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no captures found");
    v
}

pub fn calliper_jsonl(file: &Path, extra: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--format", "jsonl", "--progress", "never"])
        .args(extra)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "calliper failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs `calliper generate ARGS -o PCAP --truth TRUTH` and checks it succeeded.
pub fn generate(args: &[&str], pcap: &Path, truth: &Path) {
    let st = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .arg("generate")
        .args(args)
        .arg("-o")
        .arg(pcap)
        .arg("--truth")
        .arg(truth)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Runs `calliper generate ARGS` into a temporary directory and returns the
/// capture's bytes (the directory is removed).
pub fn generated_capture(name: &str, args: &[&str]) -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("calliper-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("capture.pcap");
    generate(args, &pcap, &dir.join("truth.jsonl"));
    let data = std::fs::read(&pcap).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    data
}

/// Checks every stream in the generator's truth (JSON lines) against the
/// streams of calliper's call records, exactly: packets = sent − dropped +
/// duplicated, lost = dropped, duplicates = duplicated, out of order =
/// reordered. Returns (streams checked, packets dropped).
pub fn check_truth(lines: &[Value], truth: &str) -> (usize, u64) {
    let mut ours = std::collections::HashMap::new();
    for c in lines.iter().filter(|l| l["type"] == "call") {
        for s in c["streams"].as_array().unwrap() {
            let key = (
                s["src"].as_str().unwrap().to_string(),
                s["ssrc"].as_u64().unwrap(),
            );
            let n = |k: &str| s[k].as_u64().unwrap();
            ours.insert(
                key,
                (n("packets"), n("lost"), n("duplicates"), n("out_of_order")),
            );
        }
    }
    let (mut n, mut dropped_total) = (0, 0);
    for line in truth.lines() {
        let t: Value = serde_json::from_str(line).unwrap();
        let f = |k: &str| t[k].as_u64().unwrap_or(0);
        let (sent, dropped, dup, reordered) =
            (f("sent"), f("dropped"), f("duplicated"), f("reordered"));
        let key = (
            t["src"].as_str().unwrap().to_string(),
            t["ssrc"].as_u64().unwrap(),
        );
        assert_eq!(
            ours.get(&key),
            Some(&(sent - dropped + dup, dropped, dup, reordered)),
            "{line}"
        );
        n += 1;
        dropped_total += dropped;
    }
    (n, dropped_total)
}
