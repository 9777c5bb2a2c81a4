//! Call records against tshark's SIP view and SIPp's ground truth; bad input;
//! the SQLite store; the generator's known loss.

use crate::common;

use common::{calliper_jsonl, captures, check_truth, generate};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// A message of an INVITE transaction as tshark sees it.
struct InviteMessage {
    time: f64,
    call_id: String,
    /// The INVITE itself (else a response to one).
    request: bool,
    code: Option<u16>,
}

/// Every message whose CSeq method is INVITE, in capture order.
fn tshark_invite_messages(file: &Path) -> Vec<InviteMessage> {
    // The heplify TCP capture runs SIP on port 6060.
    let out = common::tshark_fields(
        file,
        &["-d", "tcp.port==6060,sip"],
        "sip.CSeq.method == \"INVITE\"",
        &["frame.time_epoch", "sip.Call-ID", "sip.Method", "sip.Status-Code"],
    );
    out.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() < 4 || f[1].is_empty() {
                return None;
            }
            Some(InviteMessage {
                time: f[0].parse().unwrap(),
                call_id: f[1].split(',').next().unwrap().to_string(),
                request: f[2] == "INVITE",
                code: f[3].split(',').next().unwrap().parse().ok(),
            })
        })
        .collect()
}

/// Per Call-ID that has an INVITE: the final status tshark sees for the call
/// (the first 2xx to an INVITE, else the last final response to one).
fn tshark_calls(file: &Path) -> BTreeMap<String, Option<u16>> {
    let mut calls: BTreeMap<String, Option<u16>> = BTreeMap::new();
    for m in tshark_invite_messages(file) {
        if m.request {
            calls.entry(m.call_id).or_insert(None);
        } else if let (Some(code), Some(st)) = (m.code, calls.get_mut(&m.call_id)) {
            if code >= 200 && !st.is_some_and(|s| s < 300) {
                *st = Some(code);
            }
        }
    }
    calls
}

#[test]
fn calls_and_final_status_match_tshark() {
    let mut checked = 0;
    let mut failures = vec![];
    for file in captures() {
        let want = tshark_calls(&file);
        if want.is_empty() {
            continue;
        }
        // This capture's clock jumps by years between packets; tshark ignores
        // time, our idle timeout would end the call, so widen it here.
        let extra: &[&str] = if file.ends_with("heplify__sip_ipv6_udp.pcap") {
            &["--call-timeout", "3e8", "--unanswered-timeout", "3e8"]
        } else {
            &[]
        };
        let lines = calliper_jsonl(&file, extra);
        let records: Vec<(String, Option<u16>)> = lines
            .iter()
            .filter(|l| l["type"] == "call")
            .map(|l| {
                (
                    l["call_id"].as_str().unwrap().to_string(),
                    l["final_status"].as_u64().map(|s| s as u16),
                )
            })
            .collect();
        let got: BTreeMap<String, Option<u16>> = records.iter().cloned().collect();
        let name = file.file_name().unwrap().to_string_lossy();
        // One record per Call-ID: a challenged INVITE and its retry are one call.
        if records.len() != got.len() {
            failures.push(format!("{name}: {} records for {} Call-IDs", records.len(), got.len()));
        }
        if got != want {
            failures.push(format!("{name}: tshark {want:?}\n   calliper {got:?}"));
        }
        checked += want.len();
    }
    assert!(failures.is_empty(), "calls differ from tshark:\n{}", failures.join("\n"));
    assert!(checked >= common::at_least(20, 5), "only {checked} calls checked");
}

#[test]
fn sipp_calls_match_sipp_ground_truth() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/pcaps/generated/sipp_calls.pcap");
    if !shared.exists()
        && common::skip_requested("shared-pcaps", &format!("{} not found", shared.display()))
    {
        return;
    }
    let lines = calliper_jsonl(&shared, &[]);
    let calls: Vec<&Value> = lines.iter().filter(|l| l["type"] == "call").collect();
    // SIPp's scenario: 20 calls, each answered with 200 and ended by the UAC's BYE.
    assert_eq!(calls.len(), 20);
    for c in &calls {
        assert_eq!(c["final_status"], 200);
        assert_eq!(c["state"], "completed");
        assert_eq!(c["hangup_by"], "caller");
        assert_eq!(c["from"]["user"], "sipp");
        assert_eq!(c["to"]["user"], "1000");
        assert!(c["setup_delay_ms"].as_f64().unwrap() >= 0.0);
        let streams = c["streams"].as_array().unwrap();
        assert_eq!(streams.len(), 3, "two audio directions and DTMF");
        let audio: Vec<&Value> = streams.iter().filter(|s| s["codec"] == "PCMA").collect();
        assert_eq!(audio.len(), 2);
        for s in audio {
            assert_eq!(s["packets"], 236);
            assert_eq!(s["lost"], 0);
        }
        let dirs: Vec<&str> = streams.iter().map(|s| s["direction"].as_str().unwrap()).collect();
        assert!(dirs.contains(&"caller_to_callee") && dirs.contains(&"callee_to_caller"));
    }
}

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

#[test]
fn truncated_capture_reports_offset_and_keeps_results() {
    let full = std::fs::read(repo("testdata/sipp_hold_dtmf.pcap")).unwrap();
    let dir = std::env::temp_dir().join(format!("calliper-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--progress", "never"])
        .arg(&junk)
        .output()
        .unwrap();
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
    let dir = std::env::temp_dir().join(format!("calliper-db-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("calls.db");
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--progress", "never", "--db"])
        .arg(&db)
        .arg(repo("testdata/sipp_hold_dtmf.pcap"))
        .output()
        .unwrap();
    common::succeeded(&out);
    // Call records name people and numbers: owner-only, as is the -o output.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "database created {mode:o}");
    let report = dir.join("report.txt");
    let st = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--progress", "never", "-o"])
        .arg(&report)
        .arg(repo("testdata/sipp_hold_dtmf.pcap"))
        .status()
        .unwrap();
    assert!(st.success());
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
    let dir = std::env::temp_dir().join(format!("calliper-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pcap, truth) = (dir.join("gen.pcap"), dir.join("truth.jsonl"));
    generate(
        &[
            "--calls",
            "60",
            "--concurrent",
            "20",
            "--hold-mean",
            "8",
            "--hold-shape",
            "4",
            "--loss",
            "3",
            "--burst",
            "0.5",
            "--seed",
            "7",
        ],
        &pcap,
        &truth,
    );
    let lines = calliper_jsonl(&pcap, &[]);
    for c in lines.iter().filter(|l| l["type"] == "call") {
        assert_eq!(c["final_status"], 200);
    }
    let (n, total_lost) = check_truth(&lines, &std::fs::read_to_string(&truth).unwrap());
    assert_eq!(n, 120);
    assert!(total_lost > 0);
    std::fs::remove_dir_all(&dir).ok();
}

/// RFC 6076 timings computed from tshark's view of each call: the first
/// provisional response (100 included), and the session request delay from
/// the INVITE (after a 401/407 challenge, the next INVITE) to the first
/// response other than 100 that is not a challenge.
fn tshark_setup(file: &Path) -> BTreeMap<String, (Option<f64>, Option<f64>)> {
    #[derive(Default)]
    struct Setup {
        srd_from: f64,
        challenged: bool,
        answered: bool,
        first_provisional: Option<f64>,
        srd_to: Option<f64>,
    }
    let mut calls: BTreeMap<String, Setup> = BTreeMap::new();
    for m in tshark_invite_messages(file) {
        let t = m.time;
        if m.request {
            let c = calls.entry(m.call_id).or_insert(Setup { srd_from: t, ..Setup::default() });
            if c.challenged && !c.answered {
                // The retry with credentials: SRD starts again.
                (c.srd_from, c.challenged, c.srd_to) = (t, false, None);
            }
            continue;
        }
        let (Some(c), Some(code)) = (calls.get_mut(&m.call_id), m.code) else {
            continue;
        };
        if c.answered {
            continue; // later responses are to re-INVITEs
        }
        if code < 200 && c.first_provisional.is_none() {
            c.first_provisional = Some(t);
        }
        let challenge = code == 401 || code == 407;
        if code > 100 && !challenge && c.srd_to.is_none() {
            c.srd_to = Some(t);
        }
        c.challenged = challenge;
        c.answered = (200..300).contains(&code);
    }
    calls
        .into_iter()
        .map(|(id, c)| {
            let srd = c.srd_to.map(|to| (to - c.srd_from) * 1e3);
            (id, (c.first_provisional, srd))
        })
        .collect()
}

#[test]
fn setup_delays_follow_rfc_6076_as_tshark_shows_them() {
    let mut checked = 0;
    let mut failures = vec![];
    for file in captures() {
        let want = tshark_setup(&file);
        if want.is_empty() || file.ends_with("heplify__sip_ipv6_udp.pcap") {
            continue;
        }
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        for call in calliper_jsonl(&file, &[]).iter().filter(|l| l["type"] == "call") {
            let id = call["call_id"].as_str().unwrap();
            let Some((first, srd)) = want.get(id) else {
                continue;
            };
            let got_first = call["first_provisional_ns"].as_i64().map(|t| t as f64 / 1e9);
            let got_srd = call["setup_delay_ms"].as_f64();
            let near = |a: Option<f64>, b: Option<f64>, tol: f64| match (a, b) {
                (Some(a), Some(b)) => (a - b).abs() <= tol,
                (None, None) => true,
                _ => false,
            };
            // tshark prints times to the nanosecond as text; 1 µs covers rounding.
            if !near(got_first, *first, 1e-6) || !near(got_srd, *srd, 1e-3) {
                failures.push(format!(
                    "{name} {id}: first provisional {got_first:?} vs tshark {first:?}, SRD {got_srd:?} ms vs {srd:?}"
                ));
            }
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "setup timings differ:\n{}", failures.join("\n"));
    assert!(checked >= common::at_least(20, 5), "only {checked} calls checked");
}
