//! Helpers of the recording tests (`callpcap.rs`, `callpcap_export.rs`).

use serde_json::Value;
use std::path::{Path, PathBuf};

/// A fresh path ending in `name` under the temporary directory.
pub fn temp(name: &str) -> PathBuf {
    let p = super::scratch(name);
    let _ = std::fs::remove_dir_all(&p);
    p
}

/// `calliper ARGS`, run to its end.
pub fn calliper(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(args)
        .output()
        .unwrap()
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
    lines.iter().filter(|l| l["type"] == "call").collect()
}
