//! The command on bad input, its SQLite store, and the generator's known
//! loss through it (the call records against tshark and SIPp are the
//! engine's tests: `crates/engine/tests/analysis/calls.rs`).

use crate::common;

use calliper_testkit::probe::of_type;
use common::{calliper_jsonl, check_truth};
use std::process::Command;

#[test]
fn truncated_capture_reports_offset_and_keeps_results() {
    let full = std::fs::read(common::sample_capture()).unwrap();
    let dir = common::scratch_dir("trunc");
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &full[..full.len() * 2 / 3 + 7]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--format", "jsonl", "--progress", "never"])
        .arg(&cut)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cut.pcap") && err.contains("byte offset"), "{err}");
    let calls = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"type\":\"call\""))
        .count();
    assert_eq!(calls, 3, "calls before the damage are still reported");
    // Not a capture at all.
    let junk = dir.join("notes.txt");
    std::fs::write(&junk, "hello, this is not a capture").unwrap();
    let out = common::calliper(&["analyze", "--progress", "never", junk.to_str().unwrap()]);
    // Refused before any work, as a usage error, with what it holds.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("notes.txt: not a capture file (pcap or pcapng): it begins with \"hell\""),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no report for a file that is not a capture");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sqlite_store_holds_calls_and_streams() {
    let dir = common::scratch_dir("db");
    let db = dir.join("calls.db");
    common::succeeded(&common::analyze_db(&common::sample_capture(), &db, &[]));
    // Call records name people and numbers: owner-only, as is the -o output.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "database created {mode:o}");
    let report = dir.join("report.txt");
    let sample = common::sample_capture();
    let out = common::calliper(&[
        "analyze",
        "--progress",
        "never",
        "-o",
        report.to_str().unwrap(),
        sample.to_str().unwrap(),
    ]);
    common::succeeded(&out);
    let mode = std::fs::metadata(&report).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "report created {mode:o}");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let calls: i64 = conn
        .query_row("SELECT count(*) FROM calls WHERE final_status = 200", [], |r| r.get(0))
        .unwrap();
    let streams: i64 = conn
        .query_row("SELECT count(*) FROM streams WHERE call IS NOT NULL", [], |r| r.get(0))
        .unwrap();
    let idx: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type='index' AND name LIKE 'calls_by_%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!((calls, streams), (3, 9));
    assert!(idx >= 3, "indexes by time, caller and callee");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn generated_loss_is_reported_exactly() {
    let (dir, pcap, truth) = common::generated(
        "gen",
        "--calls 60 --concurrent 20 --hold-mean 8 --hold-shape 4 --loss 3 --burst 0.5 --seed 7",
    );
    let lines = calliper_jsonl(&pcap, &[]);
    for c in of_type(&lines, "call") {
        assert_eq!(c["final_status"], 200);
    }
    let (n, total_lost) = check_truth(&lines, &std::fs::read_to_string(&truth).unwrap());
    assert_eq!(n, 120);
    assert!(total_lost > 0);
    std::fs::remove_dir_all(&dir).ok();
}
