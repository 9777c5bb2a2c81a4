//! The probe's configuration file: keys are the flags' long names, the
//! command line wins, mistakes are named, `--check-config` says what it
//! would run with. Driven with `--read`, so no capture privilege is needed.

use crate::common;
use calliper_testkit::probe::of_type;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(name)
}

fn probe(args: &[&str], config: &str) -> Output {
    let dir = common::scratch_dir("config");
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("{n}.toml"));
    std::fs::write(&file, config).unwrap();
    Command::new(env!("CARGO_BIN_EXE_calliper"))
        .arg("probe")
        .arg("--config")
        .arg(&file)
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn keys_set_flags_and_the_command_line_wins() {
    let pcap = testdata("sipp_hold_dtmf.pcap");
    let config = format!(
        "read = [{:?}]\nformat = \"jsonl\"\nsip_port = [5060]\nno-rtp-heuristic = true\ncall-timeout = 100\n",
        pcap.to_str().unwrap()
    );
    let o = probe(&[], &config);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "call", "jsonl from the file's `format`");
    // The flag overrides the file's format.
    let o = probe(&["--format", "text"], &config);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("call "), "{}", text(&o));
}

#[test]
fn mistakes_are_named() {
    let cases = [
        ("max-cals = 3\n", "unknown key `max-cals`"),
        ("no-rtp-heuristic = \"yes\"\n", "is a switch"),
        ("format = \"xml\"\n", "xml"),
        ("max-calls = { a = 1 }\n", "string or a number"),
        ("read = [", "not valid TOML"),
        ("check-config = true\n", "unknown key `check-config`"),
    ];
    for (config, want) in cases {
        let o = probe(&["--read", "/dev/null"], config);
        assert_eq!(o.status.code(), Some(2), "{config}: {}", text(&o));
        assert!(text(&o).contains(want), "{config}: want {want:?} in {}", text(&o));
    }
    let o = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["probe", "--config", "/nonexistent/probe.toml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("/nonexistent/probe.toml"), "{}", text(&o));
}

#[test]
fn check_config_reports_and_does_not_run() {
    let pcap = testdata("sipp_hold_dtmf.pcap");
    let config = format!("read = [{:?}]\nmax-calls = 1234\n", pcap.to_str().unwrap());
    let o = probe(&["--check-config"], &config);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("max-calls = 1234\n") && t.contains("# call-timeout = 300 (default)\n"),
        "{t}"
    );
    assert!(!t.contains("call "), "no analysis: {t}");
    // What it prints on stdout reads back as the configuration, and says
    // the same again (found by the new-user walk of session 42: the
    // defaults given as keys called for other flags).
    let settings = String::from_utf8_lossy(&o.stdout).to_string();
    let again = probe(&["--check-config"], &settings);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(String::from_utf8_lossy(&again.stdout), settings);
    // Texts that look like numbers stay texts (found by review: a probe
    // name or file named 1.10 read back as 1.1), and numbers stay numbers.
    let o = probe(&["--check-config", "-o", "1.10", "--call-grace", "2.5"], &config);
    let settings = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(settings.contains("output = \"1.10\"\n") && settings.contains("call-grace = 2.5\n"));
    let again = probe(&["--check-config"], &settings);
    assert_eq!(String::from_utf8_lossy(&again.stdout), settings, "{}", text(&again));
    // A value that is not UTF-8 cannot be TOML: it is left out and said,
    // not printed as a lossy copy that names another file (attack review).
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"x\xff.out");
    let o = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["probe", "--check-config", "--read", pcap.to_str().unwrap(), "-o"])
        .arg(odd)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("# output: a value that is not UTF-8") && !t.contains('\u{FFFD}'), "{t}");
    // No input at all: the three kinds are named (it once named
    // --interface alone).
    let o = probe(&["--check-config"], "");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for input in ["--interface", "--read", "--hep-listen"] {
        assert!(text(&o).contains(input), "{input}: {}", text(&o));
    }
    // A missing interface is named with the ones that exist.
    let o = probe(&["--check-config", "-i", "nosuch0"], "");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no network interface named `nosuch0` (there are: "), "{}", text(&o));
}

#[test]
fn a_flag_that_conflicts_with_a_key_overrides_it() {
    // The file captures live; the command line replays a file instead.
    let pcap = testdata("sipp_hold_dtmf.pcap");
    let o =
        probe(&["--read", pcap.to_str().unwrap()], "interface = [\"lo\"]\nformat = \"jsonl\"\n");
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"type\":\"call\""));
}

#[test]
fn an_output_cut_short_is_ended_before_the_next_run_appends() {
    let pcap = testdata("sipp_hold_dtmf.pcap");
    let out = calliper_testkit::captures::scratch_root().join("append.jsonl");
    std::fs::write(&out, "{\"type\":\"call\",\"cut").unwrap();
    let o = probe(
        &["--read", pcap.to_str().unwrap(), "-o", out.to_str().unwrap()],
        "format = \"jsonl\"\n",
    );
    assert!(o.status.success(), "{}", text(&o));
    let written = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).ok();
    let mut lines = written.lines();
    assert_eq!(lines.next(), Some("{\"type\":\"call\",\"cut"));
    let parsed =
        lines.map(serde_json::from_str::<serde_json::Value>).collect::<Result<Vec<_>, _>>();
    let parsed = parsed.expect("every appended line is whole JSON");
    assert_eq!(of_type(&parsed, "call").count(), 3);
}
