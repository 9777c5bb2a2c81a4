//! Files that cannot be aimed (hostile input, round three,
//! docs/hostile-input.md): outputs never reach an input by a hard link or
//! anything by a symbolic link, the recordings' budget deletes only what
//! Calliper named, and a FIFO in place of a file read at start-up is
//! refused, not waited on.

use crate::common;

use common::calliper;
use common::callpcaps::{files, temp};
use common::hostile;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn an_output_hard_linked_to_the_input_is_refused() {
    let dir = temp("hard-link");
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.pcap");
    std::fs::copy(common::sample_capture(), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let link = dir.join("out");
    std::fs::hard_link(&input, &link).unwrap();
    for opt in ["-o", "--db"] {
        let out = calliper(&["analyze", opt, link.to_str().unwrap(), input.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opt}: {err}");
        assert!(err.contains("also an input"), "{opt}: {err}");
        assert_eq!(std::fs::read(&input).unwrap(), before, "{opt} truncated the input");
    }
}

#[test]
fn an_output_with_other_names_is_refused() {
    let dir = temp("other-names");
    std::fs::create_dir_all(&dir).unwrap();
    let other = dir.join("important.txt");
    std::fs::write(&other, b"important\n").unwrap();
    let link = dir.join("out");
    std::fs::hard_link(&other, &link).unwrap();
    for args in [
        vec![
            "analyze",
            "--format",
            "jsonl",
            "-o",
            link.to_str().unwrap(),
            common::sample_capture().to_str().unwrap(),
        ],
        vec!["generate", "--calls", "1", "-o", link.to_str().unwrap()],
    ] {
        let out = calliper(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.contains("other names"), "{args:?}: {err}");
        assert_eq!(std::fs::read(&other).unwrap(), b"important\n", "{args:?} wrote over it");
    }
}

#[test]
fn outputs_are_never_written_through_symbolic_links() {
    let dir = temp("symlinks");
    let db = temp("symlinks.db");
    let (dir_s, db_s) = (dir.to_str().unwrap(), db.to_str().unwrap());
    let pcap = common::sample_capture();
    let out = calliper(&[
        "analyze",
        "--record",
        "all",
        "--record-dir",
        dir_s,
        "--db",
        db_s,
        pcap.to_str().unwrap(),
    ]);
    common::succeeded(&out);
    let recordings = files(&dir);
    assert!(recordings.len() >= 2);
    let victim = &recordings[1];
    let before = std::fs::read(victim).unwrap();
    let link = temp("to-another-recording.pcap");
    std::os::unix::fs::symlink(victim, &link).unwrap();
    // Call 1's recording, exported "to" a link aimed at call 2's.
    let out = calliper(&[
        "export",
        "pcap",
        "1",
        "--db",
        db_s,
        "--record-dir",
        dir_s,
        "-o",
        link.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(
        &std::fs::read(victim).unwrap(),
        &before,
        "another call's recording was overwritten"
    );
    for args in [
        vec!["analyze", "-o", link.to_str().unwrap(), pcap.to_str().unwrap()],
        vec!["generate", "--calls", "1", "-o", link.to_str().unwrap()],
    ] {
        let out = calliper(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.contains("symbolic link"), "{args:?}: {err}");
        assert_eq!(&std::fs::read(victim).unwrap(), &before, "{args:?} wrote through the link");
    }
}

#[test]
fn the_recordings_budget_deletes_only_what_calliper_named() {
    let dir = temp("operator-files");
    // The sample's calls are on 2023-11-14 (UTC); an operator keeps a
    // capture of their own in that day's directory, bigger than the budget.
    let day = dir.join("2023-11-14");
    std::fs::create_dir_all(&day).unwrap();
    let mine = day.join("mine.pcap");
    std::fs::write(&mine, vec![0u8; 2 << 20]).unwrap();
    let out = calliper(&[
        "analyze",
        "--record",
        "all",
        "--record-dir",
        dir.to_str().unwrap(),
        "--record-max-size",
        "700000",
        common::sample_capture().to_str().unwrap(),
    ]);
    common::succeeded(&out);
    assert_eq!(std::fs::metadata(&mine).unwrap().len(), 2 << 20, "the operator's file was deleted");
}

/// Runs `calliper ARGS` and requires it to end within 10 s with an error
/// containing `why`.
fn refused_at_once(args: &[&str], why: &str) {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(args)
        .env_remove("CALLIPER_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(!status.success(), "{args:?}: {err}");
            assert!(err.contains(why), "{args:?}: {err}");
            return;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("{args:?} waited on a FIFO");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_fifo_as_configuration_or_token_file_is_refused_at_once() {
    let fifo = temp("fifo");
    let made = Command::new("mkfifo").args(["-m", "600"]).arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo (coreutils) is needed");
    let f = fifo.to_str().unwrap();
    let pcap = hostile::non_ascii_rtpmap().save("fifo-input");
    refused_at_once(&["probe", "--config", f, "--read", pcap.to_str().unwrap()], "regular file");
    let db = temp("fifo.db");
    let out = calliper(&[
        "analyze",
        "--db",
        db.to_str().unwrap(),
        common::sample_capture().to_str().unwrap(),
    ]);
    assert!(out.status.success());
    refused_at_once(
        &["serve", "--db", db.to_str().unwrap(), "--token-file", f, "--http", "127.0.0.1:0"],
        "regular file",
    );
    std::fs::remove_file(&pcap).ok();
}
