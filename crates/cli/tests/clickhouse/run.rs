//! Running `analyze` against the test servers, and reading what it said.

use crate::common::clickhouse::{Server, PASSWORD};
use crate::common::{captures, scratch};
use crate::compare::sqlite_rows;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The shared capture whose name contains `name`.
pub fn capture(name: &str) -> PathBuf {
    let found = captures().into_iter().find(|f| f.to_string_lossy().contains(name));
    found.unwrap_or_else(|| panic!("no shared capture named like {name}"))
}

/// The generated impaired capture (`calliper_testkit::generated::impaired`)
/// written to `path`, which it returns.
pub fn impaired_at(path: PathBuf) -> PathBuf {
    let spec = calliper_testkit::generated::impaired();
    std::fs::write(&path, calliper_testkit::generated::pcap(&spec)).unwrap();
    path
}

/// `analyze FILE --db DB --clickhouse URL --probe-name PROBE EXTRA...`,
/// with the test servers' password.
pub fn analyze_command(file: &Path, db: &Path, url: &str, probe: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_calliper"));
    c.args(["analyze", "--progress", "never", "--format", "jsonl", "-o", "/dev/null"])
        .arg("--db")
        .arg(db)
        .args(["--clickhouse", url, "--probe-name", probe])
        .args(extra)
        .arg(file)
        .env("CALLIPER_CLICKHOUSE_PASSWORD", PASSWORD);
    c
}

/// [`analyze_command`], run to its end.
pub fn analyze(file: &Path, db: &Path, url: &str, probe: &str, extra: &[&str]) -> Output {
    analyze_command(file, db, url, probe, extra).output().unwrap()
}

pub fn succeeded(out: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{what}: {}\n{err}", out.status);
    err
}

/// The rows a run reported sending, spooling and dropping.
pub fn reported(stderr: &str, what: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("clickhouse "))
        .unwrap_or_else(|| panic!("no clickhouse line in:\n{stderr}"));
    let after = line.split(what).nth(1).unwrap_or_else(|| panic!("no {what:?} in {line}"));
    after.split(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty()).unwrap().parse().unwrap()
}

pub fn db(name: &str) -> PathBuf {
    scratch(&format!("{name}.db"))
}

/// Polls `sql` (a count) on `ch` until it gives `want`, for up to 30 s: a
/// `Distributed` table forwards its rows to the other shards in the background.
pub fn wait_for(ch: &Server, sql: &str, want: usize) {
    let started = std::time::Instant::now();
    loop {
        let got = ch.query(sql);
        if got.trim() == want.to_string() {
            return;
        }
        assert!(started.elapsed().as_secs() < 30, "{sql}: {} after 30 s, want {want}", got.trim());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

pub fn sqlite_count(db: &Path, table: &str) -> usize {
    sqlite_rows(db, &format!("SELECT id FROM {table}"), &[]).len()
}
