//! A wrong file or directory is refused before any work, in one
//! vocabulary ("not a capture file", "a directory", "cannot create"), with
//! its path and a usage error's exit code.

use crate::common;
use std::path::Path;
use std::process::{Command, Output};

fn calliper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(args)
        .output()
        .unwrap()
}

/// Asserts a refusal: exit 2, nothing on standard output, and `words` in
/// the one line on standard error.
fn refused(out: &Output, words: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(words), "{words:?} not in {err}");
}

#[test]
fn wrong_files_and_directories_are_refused_before_any_work() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = root.join("README.md");
    let capture = root.join("testdata/sipp_hold_dtmf.pcap");
    let dir = common::scratch("wrong-input");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let db = dir.join("calls.db");
    common::analyze_into_db(&capture, &db, &[]);

    // A text file given as a capture, alone or after a good one.
    for args in [
        vec!["analyze", readme.to_str().unwrap()],
        vec![
            "analyze",
            capture.to_str().unwrap(),
            readme.to_str().unwrap(),
        ],
    ] {
        refused(
            &calliper(&args),
            "README.md: not a capture file (pcap or pcapng): it begins with \"# Ca\"",
        );
    }
    let empty = dir.join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    refused(
        &calliper(&["analyze", empty.to_str().unwrap()]),
        "empty.pcap: empty file",
    );
    refused(
        &calliper(&["analyze", d]),
        &format!("{d} is a directory, not a capture file"),
    );

    // A directory given as a database.
    refused(
        &calliper(&["report", "kpi", "--db", d]),
        &format!("cannot open {d}: a directory, not a database file"),
    );

    // A directory, or a missing one, as the WAV: refused before decoding
    // (which would print each stream's notes first).
    let export = |output: &str| {
        calliper(&[
            "export",
            "audio",
            "1-836@127.0.1.1",
            "--db",
            db.to_str().unwrap(),
            "--pcap",
            capture.to_str().unwrap(),
            "-o",
            output,
        ])
    };
    refused(&export(d), &format!("cannot create {d}: a directory"));
    let missing = dir.join("no-such-dir/call.wav");
    refused(
        &export(missing.to_str().unwrap()),
        &format!("no directory {}", dir.join("no-such-dir").display()),
    );
    std::fs::remove_dir_all(&dir).ok();
}
