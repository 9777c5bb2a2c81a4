//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

pub mod callpcaps;
pub mod clickhouse;
pub mod forged;
pub use calliper_testkit::crafted as hostile;
pub mod runs;

use calliper_testkit::probe::of_type;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How a measured command ended.
pub struct Measured {
    /// Exit status (the test fails if a signal ended it).
    pub code: i32,
    /// Peak resident memory, KiB.
    pub peak_rss_kib: i64,
    pub stdout: String,
    pub stderr: String,
}

/// Longest any measured command may run: beyond it the test fails as a
/// hang. The largest capture measured (the flood, 1.5 M packets) takes
/// about 5 s; the quadratic failures these tests guard against took minutes.
pub const HANG_LIMIT: Duration = Duration::from_secs(60);

/// Runs a command, failing the test if it hangs (killed after
/// [`HANG_LIMIT`]) or dies on a signal (a panic that aborts, a stack
/// overflow); returns its exit status, peak RSS and output.
///
/// The peak RSS comes from GNU time (`/usr/bin/time`, Debian package
/// `time`): a child spawned straight from this (large, multithreaded) test
/// process would report this process's RSS as its own peak, which the
/// kernel records when the child execs.
pub fn run_measured(cmd: &mut Command) -> Measured {
    assert!(
        Path::new("/usr/bin/time").exists(),
        "/usr/bin/time (Debian package `time`) is needed to measure peak memory; scripts/test.sh installs it"
    );
    let dir = calliper_testkit::captures::scratch_root();
    let tag = format!("{:?}", std::thread::current().id());
    let tag: String = tag.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    let (out_path, err_path, rss_path) = (
        dir.join(format!("calliper-out-{tag}")),
        dir.join(format!("calliper-err-{tag}")),
        dir.join(format!("calliper-rss-{tag}")),
    );
    let mut timed = Command::new("/usr/bin/time");
    timed.arg("-f").arg("%M").arg("-o").arg(&rss_path);
    timed.arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    let child = timed
        .process_group(0)
        .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()))
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !done.load(Ordering::Relaxed) {
                if start.elapsed() > HANG_LIMIT {
                    // SAFETY: kill on our own child's process group.
                    #[allow(unsafe_code)]
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        })
    };
    let status = child.wait_with_output().unwrap().status;
    done.store(true, Ordering::Relaxed);
    let hung = watchdog.join().unwrap();
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let rss = std::fs::read_to_string(&rss_path).unwrap_or_default();
    for p in [&out_path, &err_path, &rss_path] {
        std::fs::remove_file(p).ok();
    }
    assert!(!hung, "{cmd:?} hung: killed after {HANG_LIMIT:?}\n{stderr}");
    // GNU time writes "Command terminated by signal N" before the figure.
    assert!(
        !rss.contains("signal"),
        "{cmd:?} died on a signal (abort, stack overflow?): {rss}\n{stderr}"
    );
    let peak_rss_kib = rss
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS from /usr/bin/time: {rss:?}"));
    Measured { code: status.code().expect("GNU time exits normally"), peak_rss_kib, stdout, stderr }
}

// One definition, in testkit; each test binary uses some.
#[allow(unused_imports)]
pub use calliper_testkit::captures::{at_least, capture_dirs, captures, scratch, write_pcap};
#[allow(unused_imports)]
pub use calliper_testkit::oracle::{tshark, tshark_fields, wireshark_tool, KNOWN_DIFFERENCES};
pub use calliper_testkit::probe::kpi_rows_summed;
pub use calliper_testkit::skip_requested;

/// The repository's SIPp sample (`testdata/sipp_hold_dtmf.pcap`: calls
/// with hold and DTMF), the capture most tests run on.
pub fn sample_capture() -> PathBuf {
    calliper_testkit::captures::repo_root().join("testdata/sipp_hold_dtmf.pcap")
}

/// A directory of this test's own ([`scratch`]), created.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `calliper ARGS`, run to its end.
pub fn calliper(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_calliper")).args(args).output().unwrap()
}

/// `calliper export audio CALL --db DB --pcap PCAP -o WAV`, run to its end.
pub fn export_audio(call: &str, db: &str, pcap: &str, wav: &str) -> std::process::Output {
    calliper(&["export", "audio", call, "--db", db, "--pcap", pcap, "-o", wav])
}

/// Fails, with the command's standard error, unless it succeeded.
pub fn succeeded(out: &std::process::Output) {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `calliper analyze --progress never FILE`, the terminal report, run
/// under [`run_measured`] (a hang or a signal fails the test).
pub fn analyze_text(file: &Path) -> Measured {
    run_measured(
        Command::new(env!("CARGO_BIN_EXE_calliper"))
            .args(["analyze", "--progress", "never"])
            .arg(file),
    )
}

pub fn calliper_jsonl(file: &Path, extra: &[&str]) -> Vec<Value> {
    let analyze = ["analyze", "--format", "jsonl", "--progress", "never"];
    let out = calliper(&[&analyze, extra, &[file.to_str().unwrap()]].concat());
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

/// Runs `calliper generate FLAGS -o PCAP --truth TRUTH` (FLAGS as on a
/// command line, split at white space) and checks it succeeded.
pub fn generate(flags: &str, pcap: &Path, truth: &Path) {
    let st = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .arg("generate")
        .args(flags.split_whitespace())
        .arg("-o")
        .arg(pcap)
        .arg("--truth")
        .arg(truth)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Runs `calliper generate FLAGS` into scratch directory `name`: the
/// directory, the capture and the generator's truth (JSON lines).
pub fn generated(name: &str, flags: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch_dir(name);
    let (pcap, truth) = (dir.join("capture.pcap"), dir.join("truth.jsonl"));
    generate(flags, &pcap, &truth);
    (dir, pcap, truth)
}

/// Runs `calliper generate FLAGS` into a temporary directory and returns the
/// capture's bytes (the directory is removed).
pub fn generated_capture(name: &str, flags: &str) -> Vec<u8> {
    let (dir, pcap, _) = generated(name, flags);
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
    for c in of_type(lines, "call") {
        for s in c["streams"].as_array().unwrap() {
            let key = (s["src"].as_str().unwrap().to_string(), s["ssrc"].as_u64().unwrap());
            let n = |k: &str| s[k].as_u64().unwrap();
            ours.insert(key, (n("packets"), n("lost"), n("duplicates"), n("out_of_order")));
        }
    }
    let (mut n, mut dropped_total) = (0, 0);
    for line in truth.lines() {
        let t: Value = serde_json::from_str(line).unwrap();
        let f = |k: &str| t[k].as_u64().unwrap_or(0);
        let (sent, dropped, dup, reordered) =
            (f("sent"), f("dropped"), f("duplicated"), f("reordered"));
        let key = (t["src"].as_str().unwrap().to_string(), t["ssrc"].as_u64().unwrap());
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

/// A rig script of the repository's (`tests/...`), given its output
/// directory (`NAME` in this process's [`calliper_testkit::captures::scratch_root`]) as its
/// first argument and the binary as `CALLIPER`: the command and that
/// directory.
pub fn rig(script: &str, name: &str) -> (Command, PathBuf) {
    let dir = calliper_testkit::captures::scratch_root().join(name);
    let mut cmd = Command::new(calliper_testkit::captures::repo_root().join(script));
    cmd.env("CALLIPER", env!("CARGO_BIN_EXE_calliper")).arg(&dir);
    (cmd, dir)
}

/// Runs a rig script that builds network namespaces (`tests/netns`,
/// `tests/kpi`): its output, or None when it could not make them (exit 77)
/// and that skip was requested (`skip_requested`); any other failure fails.
pub fn namespace_rig(cmd: &mut Command, what: &str) -> Option<String> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what} must be runnable: {e}"));
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(77)
        && skip_requested("netns", &format!("network namespaces cannot be made here:\n{log}"))
    {
        return None;
    }
    assert!(out.status.success(), "{what} failed:\n{log}");
    Some(log)
}

/// Runs a namespace rig script (`rig`) that takes no argument but its
/// output directory: that directory and the script's output, or None as
/// `namespace_rig` says.
pub fn run_namespace_rig(script: &str, name: &str) -> Option<(PathBuf, String)> {
    let (mut cmd, dir) = rig(script, name);
    namespace_rig(&mut cmd, script).map(|log| (dir, log))
}

/// `calliper analyze` of `pcap` into a fresh database `db`, with `extra` options.
pub fn analyze_into_db(pcap: &Path, db: &Path, extra: &[&str]) {
    let _ = std::fs::remove_file(db);
    analyze_into_db_append(pcap, db, extra);
}

/// `calliper analyze --db DB PCAP` with `extra` options, adding to what
/// `db` holds.
pub fn analyze_into_db_append(pcap: &Path, db: &Path, extra: &[&str]) {
    succeeded(&analyze_db(pcap, db, &[&["-o", "/dev/null"], extra].concat()));
}

/// `calliper analyze --progress never EXTRA --db DB PCAP`, run to its end.
pub fn analyze_db(pcap: &Path, db: &Path, extra: &[&str]) -> std::process::Output {
    let (db, pcap) = (db.to_str().unwrap(), pcap.to_str().unwrap());
    calliper(&[&["analyze", "--progress", "never"], extra, &["--db", db, pcap]].concat())
}

/// `calliper report kpi --db DB --format jsonl` with `extra` options: its rows.
pub fn report_kpi(db: &Path, extra: &[&str]) -> Vec<Value> {
    let out = calliper(
        &[&["report", "kpi", "--format", "jsonl", "--db", db.to_str().unwrap()], extra].concat(),
    );
    succeeded(&out);
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}
