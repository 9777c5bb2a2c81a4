//! Call records against tshark's SIP view (each Call-ID with an INVITE is
//! one call with tshark's final status; RFC 6076's first provisional
//! response and session request delay as tshark times them) and against
//! SIPp's ground truth.

use crate::tshark_oracle::Tally;
use calliper_engine::Config;
use calliper_testkit::captures::{at_least, captures, repo_root};
use calliper_testkit::oracle::tshark_fields;
use calliper_testkit::probe::Probe;
use calliper_testkit::skip_requested;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The call lines `analyze --format jsonl FILE` writes.
fn call_lines(file: &Path) -> Vec<Value> {
    let mut cfg = Config::default();
    // This capture's clock jumps by years between packets; tshark ignores
    // time, our idle timeout would end the call, so widen it here.
    if file.ends_with("heplify__sip_ipv6_udp.pcap") {
        cfg.call_idle_timeout_ns = 300_000_000 * 1_000_000_000;
        cfg.unanswered_timeout_ns = 300_000_000 * 1_000_000_000;
    }
    let mut p = Probe::new(cfg, 1);
    p.capture(file);
    p.finish().lines().into_iter().filter(|l| l["type"] == "call").collect()
}

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
    let out = tshark_fields(
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
    let mut tally = Tally::default();
    for file in captures() {
        let want = tshark_calls(&file);
        if want.is_empty() {
            continue;
        }
        let records: Vec<(String, Option<u16>)> = call_lines(&file)
            .iter()
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
            tally.failures.push(format!(
                "{name}: {} records for {} Call-IDs",
                records.len(),
                got.len()
            ));
        }
        if got != want {
            tally.failures.push(format!("{name}: tshark {want:?}\n   calliper {got:?}"));
        }
        tally.compared += want.len();
    }
    tally.finish("calls", at_least(20, 5));
}

#[test]
fn sipp_calls_match_sipp_ground_truth() {
    let shared = repo_root().join("../shared/pcaps/generated/sipp_calls.pcap");
    if !shared.exists()
        && skip_requested("shared-pcaps", &format!("{} not found", shared.display()))
    {
        return;
    }
    let calls = call_lines(&shared);
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
    let mut tally = Tally::default();
    for file in captures() {
        let want = tshark_setup(&file);
        if want.is_empty() || file.ends_with("heplify__sip_ipv6_udp.pcap") {
            continue;
        }
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        for call in &call_lines(&file) {
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
                tally.failures.push(format!(
                    "{name} {id}: first provisional {got_first:?} vs tshark {first:?}, SRD {got_srd:?} ms vs {srd:?}"
                ));
            }
            tally.compared += 1;
        }
    }
    tally.finish("calls", at_least(20, 5));
}
