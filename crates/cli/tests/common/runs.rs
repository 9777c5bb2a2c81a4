//! Runs of the binary on a crafted capture with one thread and two, for
//! the hostile-input tests: both must end by exit 0 within a memory bound
//! and agree.

use super::hostile::Pcap;
use super::run_measured;
use calliper_testkit::probe::of_type;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Peak RSS any of these small captures may take (KiB): the binary with its
/// fixed tables (duplicate filter 4 MiB) is about 10 MiB.
pub const SMALL_RSS_KIB: i64 = 64 * 1024;

pub struct Run {
    pub code: i32,
    pub lines: Vec<Value>,
    pub stderr: String,
    pub rss_kib: i64,
}

impl Run {
    pub fn summary(&self) -> Value {
        let mut s = self
            .lines
            .iter()
            .find(|l| l["type"] == "summary")
            .unwrap_or_else(|| panic!("no summary line\n{}", self.stderr))
            .clone();
        s.as_object_mut().unwrap().remove("input");
        s
    }

    pub fn calls(&self) -> Vec<&Value> {
        of_type(&self.lines, "call").collect()
    }

    /// The call record: fails unless there is exactly one.
    pub fn only_call(&self) -> &Value {
        let calls = self.calls();
        assert_eq!(calls.len(), 1, "{:?}", self.lines);
        calls[0]
    }

    /// The alerts of `kind`.
    pub fn alerts(&self, kind: &str) -> Vec<&Value> {
        self.lines.iter().filter(|l| l["type"] == "alert" && l["kind"] == kind).collect()
    }

    /// The alert of `kind`: fails unless there is exactly one.
    pub fn only_alert(&self, kind: &str) -> &Value {
        let alerts = self.alerts(kind);
        assert_eq!(alerts.len(), 1, "{kind}: {:?}", self.lines);
        alerts[0]
    }

    /// Call and stream records, sorted (shards finish in their own order).
    pub fn records(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.lines.iter().filter(|l| l["type"] != "summary").map(|l| l.to_string()).collect();
        v.sort();
        v
    }
}

pub fn analyze(file: &Path, threads: u32, extra: &[&str]) -> Run {
    let m = run_measured(
        Command::new(env!("CARGO_BIN_EXE_calliper"))
            .args(["analyze", "--format", "jsonl", "--progress", "never"])
            .args(["--threads", &threads.to_string()])
            .args(extra)
            .arg(file),
    );
    let lines = m
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let lines = super::kpi_rows_summed(lines);
    Run { code: m.code, lines, stderr: m.stderr, rss_kib: m.peak_rss_kib }
}

/// Runs the capture with one thread and two: both must exit 0 within
/// `rss_kib` and give the same counters and records. Returns the one-thread run.
pub fn both_ways(name: &str, capture: &Pcap, extra: &[&str], rss_kib: i64) -> Run {
    let (one, two) = both_runs(name, capture, extra, rss_kib);
    assert!(two.records() == one.records(), "{name}: records differ with 2 threads");
    one
}

/// [`both_ways`] with no extra options, under the small memory bound.
pub fn small(name: &str, capture: &Pcap) -> Run {
    both_ways(name, capture, &[], SMALL_RSS_KIB)
}

/// As [`both_ways`], comparing counters only (for a cap reached, where
/// which entries got the last places may depend on thread timing).
pub fn both_ways_counters(name: &str, capture: &Pcap, extra: &[&str], rss_kib: i64) -> Run {
    both_runs(name, capture, extra, rss_kib).0
}

pub fn both_runs(name: &str, capture: &Pcap, extra: &[&str], rss_kib: i64) -> (Run, Run) {
    let file = capture.save(name);
    let one = analyze(&file, 1, extra);
    let two = analyze(&file, 2, extra);
    if std::env::var_os("KEEP").is_none() {
        std::fs::remove_file(&file).ok();
    }
    for (t, r) in [(1, &one), (2, &two)] {
        assert_eq!(r.code, 0, "{name} with {t} threads: exit {}\n{}", r.code, r.stderr);
        assert!(
            r.rss_kib < rss_kib,
            "{name} with {t} threads: peak RSS {} KiB over {rss_kib} KiB",
            r.rss_kib
        );
    }
    assert_eq!(two.summary(), one.summary(), "{name}: counters differ with 2 threads");
    (one, two)
}
