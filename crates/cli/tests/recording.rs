//! Per-call recordings (`--record`): every call of every capture we hold,
//! recorded while analysed, and each call's file analysed again alone must
//! give the same record as the call had in the whole capture — except where
//! the run says (`partial`) that a message came in several packets, of
//! which the file holds only the last. Files are private, named from
//! nothing but safe characters, and the directory keeps to its budget by
//! deleting the oldest.

mod common;

use common::calliper_jsonl;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("calliper-recording-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    let _ = std::fs::remove_dir_all(&p);
    p
}

/// A call as the comparison sees it: its signalling facts and each
/// stream's counts.
fn key(c: &Value) -> String {
    let mut streams: Vec<String> = c["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}:{}>{}:{} {} p{} l{} e{} d{} j{}",
                s["src"],
                s["src_port"],
                s["dst"],
                s["dst_port"],
                s["ssrc"],
                s["packets"],
                s["lost"],
                s["expected"],
                s["duplicates"],
                s["mean_jitter_ms"]
            )
        })
        .collect();
    streams.sort();
    format!(
        "{} {} {} {} {} {} {} {} {} {} {:?}",
        c["call_id"],
        c["invite_ns"],
        c["answer_ns"],
        c["end_ns"],
        c["state"],
        c["final_status"],
        c["sip_messages"],
        c["invites"],
        c["rtcp_packets"],
        c["worst_mos"],
        streams
    )
}

/// `calliper ARGS`, run to its end.
fn calliper(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(args)
        .output()
        .unwrap()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path())
        .collect();
    v.sort();
    v
}

fn calls(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["type"] == "call").collect()
}

#[test]
fn each_calls_file_alone_gives_the_calls_record() {
    let (mut compared, mut partial_captures) = (0, 0);
    for pcap in common::captures() {
        let dir = temp("all");
        let lines = calliper_jsonl(
            &pcap,
            &["--record", "all", "--record-dir", dir.to_str().unwrap()],
        );
        let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
        let rec = &summary["recording"];
        let want: Vec<String> = calls(&lines).iter().map(|c| key(c)).collect();
        let mut got = Vec::new();
        for f in files(&dir) {
            let meta = std::fs::metadata(&f).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{}", f.display());
            let day = f.parent().unwrap();
            assert_eq!(
                std::fs::metadata(day).unwrap().permissions().mode() & 0o777,
                0o700
            );
            got.extend(calls(&calliper_jsonl(&f, &[])).iter().map(|c| key(c)));
        }
        assert_eq!(rec["dropped"], 0, "{}: {rec}", pcap.display());
        assert_eq!(rec["files"].as_u64().unwrap() as usize, files(&dir).len());
        let (mut want, mut got) = (want, got);
        want.sort();
        got.sort();
        if rec["partial"] == 0 {
            assert_eq!(got, want, "{}", pcap.display());
            compared += want.len();
        } else {
            // Said, not silent: and the calls are there, with their packets.
            partial_captures += 1;
            assert!(rec["packets"].as_u64().unwrap() > 0, "{}", pcap.display());
        }
    }
    assert!(
        compared >= common::at_least(40, 3),
        "{compared} calls compared"
    );
    eprintln!("{compared} calls equal alone; {partial_captures} captures with messages in several packets");
}

#[test]
fn signalling_only_and_rule_selected_calls() {
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let dir = temp("sip");
    let whole = calliper_jsonl(&pcap, &[]);
    calliper_jsonl(
        &pcap,
        &["--record", "sip", "--record-dir", dir.to_str().unwrap()],
    );
    let recorded = files(&dir);
    assert_eq!(recorded.len(), 3);
    for f in &recorded {
        for c in calls(&calliper_jsonl(f, &[])) {
            assert!(c["streams"].as_array().unwrap().is_empty(), "{c}");
            let orig = calls(&whole)
                .into_iter()
                .find(|o| o["call_id"] == c["call_id"])
                .unwrap();
            assert_eq!(c["sip_messages"], orig["sip_messages"]);
        }
    }
    // Nothing asked, one call selected by a rule: that call only, whole.
    let dir = temp("rule");
    let rules = temp("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nfrom_user = \"sipp\"\nto_user = \"1000\"\naction = \"record\"\n",
    )
    .unwrap();
    let lines = calliper_jsonl(
        &pcap,
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--record-dir",
            dir.to_str().unwrap(),
        ],
    );
    let selected: Vec<&Value> = calls(&lines)
        .into_iter()
        .filter(|c| c["record_payload"] == true)
        .collect();
    assert_eq!(files(&dir).len(), selected.len());
    assert!(!selected.is_empty());
}

#[test]
fn the_budget_keeps_the_newest_and_bad_requests_are_refused() {
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let dir = temp("budget");
    let budget = 700_000u64;
    let lines = calliper_jsonl(
        &pcap,
        &[
            "--record",
            "all",
            "--record-dir",
            dir.to_str().unwrap(),
            "--record-max-size",
            &budget.to_string(),
        ],
    );
    let rec = &lines.iter().find(|l| l["type"] == "summary").unwrap()["recording"];
    let kept = files(&dir);
    let size: u64 = kept
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert!(
        size <= budget,
        "{size} bytes kept over a {budget} budget: {rec}"
    );
    assert!(rec["deleted_files"].as_u64().unwrap() >= 1, "{rec}");
    assert_eq!(
        rec["bytes"].as_u64().unwrap(),
        size + rec["deleted_bytes"].as_u64().unwrap(),
        "what was written is what is kept plus what was deleted: {rec}"
    );
    // The oldest went: the last call (INVITE at 2 s) is kept.
    assert!(
        kept.iter()
            .any(|f| f.to_string_lossy().ends_with("_3-836_127.0.1.1.pcap")),
        "{kept:?}"
    );
    assert!(
        !kept
            .iter()
            .any(|f| f.to_string_lossy().ends_with("_1-836_127.0.1.1.pcap")),
        "{kept:?}"
    );
    let out = calliper(&[
        "analyze",
        "--record",
        "all",
        "-o",
        "/dev/null",
        pcap.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --record-dir"));
}

#[test]
fn export_gives_the_recording_and_the_same_audio_as_the_capture() {
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let (dir, db) = (temp("export"), temp("export.db"));
    calliper_jsonl(
        &pcap,
        &[
            "--record",
            "all",
            "--record-dir",
            dir.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
        ],
    );
    let run = |args: &[&str]| {
        let out = calliper(&[&["export"], args].concat());
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let call = "2-836@127.0.1.1";
    let (db_s, dir_s) = (db.to_str().unwrap(), dir.to_str().unwrap());
    let out = temp("call.pcap");
    run(&[
        "pcap",
        call,
        "--db",
        db_s,
        "--record-dir",
        dir_s,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let alone = calliper_jsonl(&out, &[]);
    let alone = calls(&alone);
    assert_eq!(alone.len(), 1);
    assert_eq!(alone[0]["call_id"], call);
    // The audio from the recording is the audio from the whole capture.
    let (a, b) = (temp("from-capture.wav"), temp("from-recording.wav"));
    run(&[
        "audio",
        call,
        "--db",
        db_s,
        "--pcap",
        pcap.to_str().unwrap(),
        "-o",
        a.to_str().unwrap(),
    ]);
    run(&[
        "audio",
        call,
        "--db",
        db_s,
        "--record-dir",
        dir_s,
        "-o",
        b.to_str().unwrap(),
    ]);
    let (a, b) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert!(a.len() > 100_000);
    assert!(a == b, "the WAVs differ");
    // A call never recorded says so.
    let x = temp("x.pcap");
    let none = calliper(&[
        "export",
        "pcap",
        call,
        "--db",
        db_s,
        "--record-dir",
        "/nonexistent",
        "-o",
        x.to_str().unwrap(),
    ]);
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("no recording of call"));
}

#[path = "console/server.rs"]
mod server;

#[test]
fn the_console_sends_a_recorded_calls_pcap() {
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let (dir, db) = (temp("console"), temp("console.db"));
    calliper_jsonl(
        &pcap,
        &[
            "--record",
            "all",
            "--record-dir",
            dir.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
        ],
    );
    let s = server::Server::start(
        &db,
        "127.0.0.1:0",
        &["--record-dir", dir.to_str().unwrap()],
        &[],
    );
    let calls = s.get("/api/calls", &[]).json()["calls"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(calls.len(), 3);
    for c in &calls {
        let id = c["id"].as_i64().unwrap();
        let detail = s.get(&format!("/api/calls/{id}"), &[]).json();
        let link = detail["recording_pcap"].as_str().unwrap().to_string();
        assert_eq!(link, format!("/api/calls/{id}/pcap"));
        let r = s.get(&link, &[]);
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("content-type"),
            Some("application/vnd.tcpdump.pcap")
        );
        let file = calliper_store::recordings::find(
            &dir,
            c["invite_ns"].as_i64().unwrap(),
            c["call_id"].as_str().unwrap(),
        );
        assert_eq!(file.len(), 1);
        assert!(
            r.body == std::fs::read(&file[0]).unwrap(),
            "call {id}: not the file's bytes"
        );
    }
    assert_eq!(s.get("/api/calls/99/pcap", &[]).status, 404);
    assert_eq!(s.get("/api/calls/x/pcap", &[]).status, 400);
    // Without a recordings directory: no link, and a 404 that says why.
    let s = server::Server::start(&db, "127.0.0.1:0", &[], &[]);
    let id = calls[0]["id"].as_i64().unwrap();
    assert_eq!(
        s.get(&format!("/api/calls/{id}"), &[]).json()["recording_pcap"],
        Value::Null
    );
    let r = s.get(&format!("/api/calls/{id}/pcap"), &[]);
    assert_eq!(r.status, 404);
    assert!(r.text().contains("--record-dir"));
}

#[test]
fn the_probe_records_as_analyze_does() {
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let (dir, out) = (temp("probe"), temp("probe.jsonl"));
    let st = calliper(&[
        "probe",
        "--status-every",
        "0",
        "--format",
        "jsonl",
        "--record",
        "all",
        "--record-dir",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--read",
        pcap.to_str().unwrap(),
    ]);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let lines: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rec = &lines.iter().find(|l| l["type"] == "summary").unwrap()["recording"];
    assert_eq!(rec["files"], 3, "{rec}");
    let mut want: Vec<String> = calls(&calliper_jsonl(&pcap, &[]))
        .iter()
        .map(|c| key(c))
        .collect();
    let mut got: Vec<String> = files(&dir)
        .iter()
        .flat_map(|f| {
            calls(&calliper_jsonl(f, &[]))
                .iter()
                .map(|c| key(c))
                .collect::<Vec<_>>()
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
}

#[test]
fn nothing_already_there_is_written_to() {
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let (dir, db) = (temp("again"), temp("again.db"));
    let args = [
        "--record",
        "all",
        "--record-dir",
        dir.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
    ];
    calliper_jsonl(&pcap, &args);
    let first: Vec<(PathBuf, Vec<u8>)> = files(&dir)
        .into_iter()
        .map(|f| (f.clone(), std::fs::read(f).unwrap()))
        .collect();
    // A link planted where the next run's first file would go.
    let target = temp("precious");
    std::fs::write(&target, b"precious").unwrap();
    let planted = first[0].0.to_string_lossy().replace("_1_", "_1-1_");
    std::os::unix::fs::symlink(&target, &planted).unwrap();
    // The same capture again: new files beside the first run's, untouched.
    calliper_jsonl(&pcap, &args);
    for (f, bytes) in &first {
        assert!(
            std::fs::read(f).unwrap() == *bytes,
            "{} was written to",
            f.display()
        );
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    let all = files(&dir);
    assert_eq!(all.len(), 7, "{all:?}"); // 3 + 3 + the link
    assert!(
        all.iter().any(|f| f.to_string_lossy().contains("_1-2_")),
        "{all:?}"
    );
    // Two recordings of one call: the console says so, export lists them.
    let s = server::Server::start(
        &db,
        "127.0.0.1:0",
        &["--record-dir", dir.to_str().unwrap()],
        &[],
    );
    let id = s.get("/api/calls", &[]).json()["calls"][0]["id"]
        .as_i64()
        .unwrap();
    let r = s.get(&format!("/api/calls/{id}/pcap"), &[]);
    assert_eq!(r.status, 409, "{}", r.text());
    // Export never writes into the recordings.
    let inside = dir.join("x.pcap");
    let out = calliper(&[
        "export",
        "pcap",
        &id.to_string(),
        "--db",
        db.to_str().unwrap(),
        "--record-dir",
        dir.to_str().unwrap(),
        "-o",
        inside.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
}

#[test]
fn a_flood_of_calls_keeps_to_the_budget() {
    let pcap = temp("flood.pcap");
    common::generate(
        &[
            "--calls",
            "20",
            "--concurrent",
            "5",
            "--hold-mean",
            "5",
            "--flood",
            "3000",
            "--flood-rate",
            "3000",
        ],
        &pcap,
        &temp("flood.jsonl"),
    );
    let dir = temp("flood");
    let budget = 256 * 1024u64;
    let lines = calliper_jsonl(
        &pcap,
        &[
            "--record",
            "all",
            "--record-dir",
            dir.to_str().unwrap(),
            "--record-max-size",
            &budget.to_string(),
            "--max-unanswered",
            "100",
        ],
    );
    let rec = &lines.iter().find(|l| l["type"] == "summary").unwrap()["recording"];
    // On disk: whole blocks, as du counts them.
    let used: u64 = files(&dir)
        .iter()
        .map(|f| std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(f).unwrap()) * 512)
        .sum();
    assert!(
        used <= budget,
        "{used} bytes on disk over a {budget} budget: {rec}"
    );
    assert!(rec["deleted_files"].as_u64().unwrap() > 100, "{rec}");
}
