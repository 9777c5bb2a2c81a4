//! A wrong file or directory is refused before any work, in one
//! vocabulary ("not a capture file", "a directory", "cannot create"), with
//! its path and a usage error's exit code.

use crate::common;
use std::path::Path;
use std::process::{Command, Output};

use common::calliper;

/// Asserts a refusal: exit 2, nothing on standard output, and `words` in
/// the one line on standard error.
fn refused(out: &Output, words: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(words), "{words:?} not in {err}");
}

#[test]
fn wrong_files_and_directories_are_refused_before_any_work() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = root.join("README.md");
    let capture = common::sample_capture();
    let dir = common::scratch_dir("wrong-input");
    let d = dir.to_str().unwrap();
    let db = dir.join("calls.db");
    common::analyze_into_db(&capture, &db, &[]);

    // A text file given as a capture, alone or after a good one.
    for args in [
        vec!["analyze", readme.to_str().unwrap()],
        vec!["analyze", capture.to_str().unwrap(), readme.to_str().unwrap()],
    ] {
        refused(
            &calliper(&args),
            "README.md: not a capture file (pcap or pcapng): it begins with \"# Ca\"",
        );
    }
    let empty = dir.join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    refused(&calliper(&["analyze", empty.to_str().unwrap()]), "empty.pcap: empty file");
    refused(&calliper(&["analyze", d]), &format!("{d} is a directory, not a capture file"));

    // A directory given as a database.
    refused(
        &calliper(&["report", "kpi", "--db", d]),
        &format!("cannot open {d}: a directory, not a database file"),
    );

    // A directory, or a missing one, as the WAV: refused before decoding
    // (which would print each stream's notes first).
    let export = |output: &str| {
        common::export_audio(
            "1-836@127.0.1.1",
            db.to_str().unwrap(),
            capture.to_str().unwrap(),
            output,
        )
    };
    refused(&export(d), &format!("cannot create {d}: a directory"));
    let missing = dir.join("no-such-dir/call.wav");
    refused(
        &export(missing.to_str().unwrap()),
        &format!("no directory {}", dir.join("no-such-dir").display()),
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The text report's figures carry their precision and words: each call's
/// setup (INVITE to its first response) to 0.1 ms as tshark times it, the
/// fixed jitter buffers named with their MOS, and "call" in the singular.
#[test]
fn the_text_report_speaks_plainly() {
    let capture = common::sample_capture();
    let fields = common::tshark_fields(
        &capture,
        &[],
        "sip.CSeq.method == \"INVITE\"",
        &["frame.time_epoch", "sip.Call-ID"],
    );
    // The first INVITE and the first response after it, per call.
    let mut first: Vec<(String, f64, Option<f64>)> = Vec::new();
    for line in fields.lines() {
        let (t, id) = line.split_once('\t').unwrap();
        let t: f64 = t.parse().unwrap();
        match first.iter_mut().find(|c| c.0 == id) {
            None => first.push((id.to_string(), t, None)),
            Some(c) => {
                c.2.get_or_insert(t);
            }
        }
    }
    let dir = common::scratch_dir("plain-text");
    let db = dir.join("calls.db");
    let out = common::analyze_db(&capture, &db, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    common::succeeded(&out);
    assert_eq!(first.len(), 3);
    for (id, invite, response) in &first {
        let setup = (response.unwrap() - invite) * 1e3;
        let line = text.lines().find(|l| l.starts_with(&format!("call {id} "))).expect(&text);
        assert!(line.ends_with(&format!("setup {setup:.1} ms")), "{line}: tshark {setup:.3} ms");
    }
    let voice = text.lines().find(|l| l.contains(" PCMA ")).expect(&text);
    assert!(voice.contains("(jitter buffer fixed at 50 ms "), "{voice}");
    assert!(voice.contains(", at 200 ms "), "{voice}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("stored 3 calls in"));

    // One call: singular.
    let one = dir.join("one.pcap");
    let filter = format!("sip.Call-ID == \"{}\"", first[0].0);
    let status = Command::new("tshark")
        .args(["-r", capture.to_str().unwrap(), "-Y", &filter, "-w", one.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(status.status.success());
    let db1 = dir.join("one.db");
    let out = common::analyze_db(&one, &db1, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("stored 1 call in"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Every example `analyze --help` gives runs as written, with the sample
/// capture for its capture files and scratch files for its outputs.
#[test]
fn analyze_help_examples_run() {
    let capture = common::sample_capture();
    let dir = common::scratch_dir("help-examples");
    let help = String::from_utf8(calliper(&["analyze", "--help"]).stdout).unwrap();
    let examples: Vec<&str> = help
        .split("Examples:")
        .nth(1)
        .expect("analyze --help has examples")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("calliper "))
        .collect();
    assert!(examples.len() >= 5, "{help}");
    for example in examples {
        let words: Vec<String> = example
            .split('#')
            .next()
            .unwrap()
            .split_whitespace()
            .map(|w| {
                if w.ends_with(".pcap") || w.ends_with(".pcapng") {
                    capture.to_str().unwrap().to_string()
                } else if w.ends_with(".db") || w.ends_with(".jsonl") {
                    dir.join(w).to_str().unwrap().to_string()
                } else {
                    w.to_string()
                }
            })
            .collect();
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        let out = calliper(&[&args[..], &["--progress", "never"]].concat());
        assert!(out.status.success(), "{example}: {}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Analysing a capture again into the database that holds it warns that
/// its calls are stored twice (the walk-through found it silent).
#[test]
fn analysing_a_capture_again_into_its_database_warns() {
    let dir = common::scratch_dir("again");
    let db = dir.join("calls.db");
    let capture = common::sample_capture();
    let args = [
        "analyze",
        "--progress",
        "never",
        "-o",
        "/dev/null",
        "--db",
        db.to_str().unwrap(),
        capture.to_str().unwrap(),
    ];
    let first = calliper(&args);
    assert!(!String::from_utf8_lossy(&first.stderr).contains("already holds"));
    let again = calliper(&args);
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        said.contains("already holds an analysis of") && said.contains("stored again"),
        "{said}"
    );
    // `report kpi` explains its abbreviations once, after the tables.
    let kpi = calliper(&["report", "kpi", "--db", db.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&kpi.stdout);
    assert_eq!(text.matches("answer-seizure ratio").count(), 1, "{text}");
    assert!(text.trim_end().ends_with("definitions in docs/kpi.md"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `probe --hep-listen` refuses, before listening: an address off loopback
/// without a key (anyone could feed calls in), a --hep-port that is not the
/// collector's, an unknown transport and a missing key file.
#[test]
fn a_hep_collector_is_refused_when_unsafe_or_inconsistent() {
    let run = |args: &[&str]| calliper(&[&["probe", "-o", "/dev/null"], args].concat());
    refused(
        &run(&["--hep-listen", "udp:0.0.0.0:19061"]),
        "--hep-listen on 0.0.0.0:19061 (not loopback) needs --hep-listen-key",
    );
    refused(
        &run(&["--hep-listen", "udp:127.0.0.1:19061", "--hep-port", "9060"]),
        "--hep-port 9060 differs from the --hep-listen port 19061",
    );
    let out = run(&["--hep-listen", "sctp:127.0.0.1:19061"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give udp:ADDR:PORT or tcp:ADDR:PORT"));
    // A key without a collector is refused, not silently unused; port 0
    // is refused where it is a collector's.
    let capture = common::sample_capture();
    let out = run(&["--read", capture.to_str().unwrap(), "--hep-listen-key", "/dev/null"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hep-listen-key"));
    for (flag, value) in [("--hep", "udp:127.0.0.1:0"), ("--hep-port", "0")] {
        let out = calliper(&["analyze", flag, value, capture.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
    }
    refused(
        &run(&["--hep-listen", "tcp:127.0.0.1:19061", "--hep-listen-key", "/nonexistent/hep.key"]),
        "cannot read the HEP key file /nonexistent/hep.key",
    );
}

#[test]
fn bad_event_kinds_and_formats_are_refused() {
    let file = common::sample_capture();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_calliper"))
            .arg("analyze")
            .args(args)
            .arg(&file)
            .output()
            .unwrap()
    };
    let o = run(&["--format", "jsonl", "--events", "calls,bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("`bogus` is not an event kind"));
    let o = run(&["--events", "calls"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--format jsonl"));
    let o = run(&["--format", "jsonl", "--interval", "0.5"]);
    assert_eq!(o.status.code(), Some(2));
}

/// A negative number is an option's value, refused for its range, in every
/// subcommand; clap's own advice (`-- -1`) would make it a file name.
#[test]
fn negative_numbers_are_refused_for_their_range() {
    let file = common::sample_capture();
    let file = file.to_str().unwrap();
    for (args, says) in [
        (&["analyze", "--threads", "-1", file][..], "-1 is not in 1..=64"),
        (&["generate", "--calls", "-3", "-o", "/dev/null"][..], "'-3' for '--calls"),
        (&["probe", "--read", file, "--threads", "-2"][..], "-2 is not in 1..=64"),
        // Found by the new-user walk of session 42: a call table of none
        // dropped every call uncounted, and a MOS of 7 alerted on every call.
        (&["analyze", "--max-calls", "0", file][..], "`0` is not a whole number of at least 1"),
        (&["analyze", "--alert-mos-below", "7", file][..], "`7` is not a MOS (1 to 5), or off"),
    ] {
        let out = calliper(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {says:?} not in {err}");
        assert!(!err.contains("tip:"), "{args:?}: {err}");
    }
    // `--check-config` reads the command line the same way.
    let out = calliper(&["probe", "--check-config", "--read", file, "--call-grace", "-0"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.lines().any(|l| l == "call-grace = \"-0\""), "{said}");
}

/// A report must not land on a database: `-o` and `--db` naming one file
/// (found by the new-user walk of session 42: the report's lines were lost
/// and the database's calls replaced, with exit status 0), or `-o` naming
/// an existing database (meant as `--db`). Both are refused and the
/// database keeps its calls.
#[test]
fn a_report_is_not_written_over_a_database() {
    let capture = common::sample_capture();
    let dir = common::scratch_dir("report-over-db");
    let db = dir.join("calls.db");
    common::analyze_into_db(&capture, &db, &[]);
    let before = std::fs::read(&db).unwrap();
    let (c, d) = (capture.to_str().unwrap(), db.to_str().unwrap());
    let fresh = dir.join("new.out");
    let f = fresh.to_str().unwrap();
    // Another name for the new file (found by review: only the same text
    // was caught before the file existed).
    let f_again = dir.join("sub/../new.out");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let wal = format!("{d}-wal");
    let day_dir = dir.join("days");
    std::fs::create_dir_all(&day_dir).unwrap();
    let day_file = day_dir.join("calliper-2026-11-22.db");
    let (days, day) = (day_dir.to_str().unwrap(), day_file.to_str().unwrap());
    let of_the_db = "a file of the database (--db)";
    for (args, says) in [
        (vec!["analyze", c, "-o", d, "--db", d, "--format", "jsonl"], of_the_db),
        (vec!["analyze", c, "-o", f, "--db", f], of_the_db),
        (vec!["analyze", c, "-o", f_again.to_str().unwrap(), "--db", f], of_the_db),
        (vec!["analyze", c, "-o", &wal, "--db", d, "--format", "jsonl"], of_the_db),
        (vec!["analyze", c, "--db-dir", days, "-o", day], "is in the --db-dir directory"),
        (vec!["analyze", c, "-o", d], "is a SQLite database: -o would write the report over it"),
        (vec!["probe", "--read", c, "-o", d], "is a SQLite database"),
    ] {
        refused(&calliper(&args), says);
    }
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert!(!fresh.exists());
    // A FIFO named as the report is refused at once: the database check
    // must not open it for reading, which waits for a writer (found by
    // review of the check).
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let mut child = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", c, "-o", fifo.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            panic!("analyze -o FIFO still running after 10 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    refused(&child.wait_with_output().unwrap(), "is a FIFO or socket: not a file to write");
    // A file named as a directory is said to be one (was "File exists").
    for args in [
        vec!["analyze", c, "--record", "all", "--record-dir", d],
        vec!["analyze", c, "--db-dir", d],
    ] {
        refused(&calliper(&args), "a file, not a directory");
    }
    assert_eq!(std::fs::read(&db).unwrap(), before);
    std::fs::remove_dir_all(&dir).ok();
}
