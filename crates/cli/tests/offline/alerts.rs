//! Alerts against a hand-built capture holding one case of each: a call
//! losing 20 % of one stream, a call with audio one way only, an answered
//! call without RTP, a source refused 25 times in a minute, a scanner's
//! User-Agent, and a trunk whose ASR collapses. Each must raise exactly
//! its alert (and name its call or source), and nothing else may be raised.

use crate::common;

use common::hostile::{
    invite_or_ok, rtp, sip, Endpoint, Pcap, CALLEE, CALLEE_RTP, CALLER, CALLER_RTP, SEC, T0,
};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::process::Command;

const MS: i64 = SEC / 1000;

/// INVITE and 200 OK at `t` (offering PCMU), then RTP for `secs` seconds
/// from t + 1 s: caller to callee unless `up` is false, callee to caller
/// unless `down` is false, the caller's missing every `drop_every`th packet
/// (0: none), then BYE and its 200 OK.
fn call(p: &mut Pcap, id: &str, t: i64, secs: i64, up: bool, down: bool, drop_every: u16) {
    p.udp(t, CALLER, CALLEE, &invite_or_ok(id, false, ""));
    p.udp(t + 100 * MS, CALLEE, CALLER, &invite_or_ok(id, true, ""));
    let packets = (secs * 50) as u16;
    for i in 0..packets {
        let at = t + SEC + i as i64 * 20 * MS;
        let lost = drop_every > 0 && i % drop_every == drop_every - 1;
        if up && !lost {
            let m = rtp(0, i, i as u32 * 160, 0x1111, &[0xff; 160]);
            p.udp(at, CALLER_RTP, CALLEE_RTP, &m);
        }
        if down {
            let m = rtp(0, i, i as u32 * 160, 0x2222, &[0xff; 160]);
            p.udp(at + MS, CALLEE_RTP, CALLER_RTP, &m);
        }
    }
    let bye_at = t + SEC + secs * SEC + 100 * MS;
    let bye = "BYE sip:bob@10.0.0.2 SIP/2.0";
    p.udp(bye_at, CALLER, CALLEE, &sip(bye, id, "2 BYE", true, ""));
    p.udp(bye_at + 10 * MS, CALLEE, CALLER, &sip("SIP/2.0 200 OK", id, "2 BYE", true, ""));
}

/// `n` requests (start line `start`, CSeq 1 of its method, Call-IDs
/// `PREFIX-0`, `PREFIX-1`...) from `from` to the callee, `every` ns apart
/// from `t`, each answered with `refusal` `answer` ns after it.
fn refused(
    p: &mut Pcap,
    n: i64,
    from: Endpoint,
    (t, every, answer): (i64, i64, i64),
    start: &str,
    refusal: &str,
    prefix: &str,
) {
    let cseq = format!("1 {}", start.split(' ').next().unwrap());
    for i in 0..n {
        let at = t + i * every;
        let id = format!("{prefix}-{i}");
        p.udp(at, from, CALLEE, &sip(start, &id, &cseq, false, ""));
        p.udp(at + answer, CALLEE, from, &sip(refusal, &id, &cseq, true, ""));
    }
}

fn capture() -> Pcap {
    let mut p = Pcap::default();
    call(&mut p, "lossy", T0, 6, true, true, 5);
    call(&mut p, "one-way", T0 + 20 * SEC, 6, true, false, 0);
    call(&mut p, "silent", T0 + 40 * SEC, 6, false, false, 0);
    // A source refused 25 times within a second.
    let guesser = (Ipv4Addr::new(10, 0, 0, 9), 5060);
    let register = "REGISTER sip:example.net SIP/2.0";
    let forbidden = "SIP/2.0 403 Forbidden";
    refused(&mut p, 25, guesser, (T0 + 60 * SEC, 40 * MS, 5 * MS), register, forbidden, "guess");
    // A scanner, refused once.
    let scanner = (Ipv4Addr::new(10, 0, 0, 7), 5060);
    let ua = "User-Agent: friendly-scanner\r\n";
    p.udp(T0 + 65 * SEC, scanner, CALLEE, &sip(register, "scan", "1 REGISTER", false, ua));
    let not_found = sip("SIP/2.0 404 Not Found", "scan", "1 REGISTER", true, "");
    p.udp(T0 + 65 * SEC + 5 * MS, CALLEE, scanner, &not_found);
    // The trunk's next 20 attempts fail: its ASR falls to 3/20 at the
    // 20th attempt (the minimum), then 3/23.
    let invite = "INVITE sip:bob@example.net SIP/2.0";
    let unavailable = "SIP/2.0 503 Service Unavailable";
    refused(&mut p, 20, CALLER, (T0 + 70 * SEC, 100 * MS, 10 * MS), invite, unavailable, "fail");
    p
}

#[test]
fn each_threshold_crossed_raises_its_alert_and_nothing_else() {
    let pcap = capture().save("alerts");
    let db = pcap.with_extension("db");
    let _ = std::fs::remove_file(&db);
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--progress", "never", "--format", "jsonl", "--db"])
        .arg(&db)
        .arg(&pcap)
        .output()
        .unwrap();
    common::succeeded(&out);
    let alerts: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["type"] == "alert")
        .collect();
    let got: Vec<(String, String)> = alerts
        .iter()
        .map(|a| {
            let about = a["call_id"].as_str().or(a["source"].as_str()).unwrap_or("-");
            (a["kind"].as_str().unwrap().to_string(), about.to_string())
        })
        .collect();
    let mut want = vec![
        ("high_loss", "lossy"),
        ("low_mos", "lossy"),
        ("one_way_audio", "one-way"),
        ("no_rtp", "silent"),
        ("scanning", "10.0.0.9"),
        ("scanner_agent", "10.0.0.7"),
        ("low_asr", "fail-16"),
    ];
    let mut got_sorted = got.clone();
    got_sorted.sort();
    want.sort();
    let want: Vec<(String, String)> =
        want.into_iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert_eq!(got_sorted, want, "{alerts:#?}");
    let find = |kind: &str| alerts.iter().find(|a| a["kind"] == kind).unwrap();
    let loss = find("high_loss")["value"].as_f64().unwrap();
    assert!((loss - 20.0).abs() < 0.5, "loss {loss}");
    assert!(find("low_mos")["value"].as_f64().unwrap() < 3.1);
    assert_eq!(find("one_way_audio")["key"], "callee_to_caller", "the direction without audio");
    assert_eq!(find("scanning")["value"], 20.0, "raised once, at the threshold");
    assert_eq!(find("scanner_agent")["key"], "friendly-scanner");
    let asr = find("low_asr");
    assert_eq!(asr["key"], "10.0.0.1>10.0.0.2");
    assert!((asr["value"].as_f64().unwrap() - 15.0).abs() < 1e-9, "{asr}");

    // Stored too, one row each.
    assert_eq!(stored_alerts(&db), alerts.len() as i64);

    // The text report shows them too.
    let text = common::analyze_text(&pcap).stdout;
    assert_eq!(text.lines().filter(|l| l.starts_with("alert ")).count(), 7, "{text}");
    assert!(text.contains("alert no_rtp call silent"), "{text}");
    assert!(text.contains("alert scanning source 10.0.0.9"), "{text}");
    // Each figure with its unit, in the rows and the text.
    for (kind, unit) in [
        ("low_mos", "MOS"),
        ("high_loss", "%"),
        ("one_way_audio", "s"),
        ("no_rtp", "s"),
        ("low_asr", "%"),
        ("scanning", "refused requests in a minute"),
        ("scanner_agent", ""),
    ] {
        assert_eq!(find(kind)["unit"], unit, "{kind}");
        let line = text.lines().find(|l| l.starts_with(&format!("alert {kind} "))).unwrap();
        if !unit.is_empty() {
            assert!(
                line.contains(&format!(" {unit} threshold ")) && line.ends_with(unit),
                "{line}"
            );
        }
    }

    // Thresholds turned off raise nothing.
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--progress", "never", "--format", "jsonl"])
        .args(["--alert-mos-below", "off", "--alert-loss-above", "off"])
        .args(["--alert-media-after", "off", "--alert-asr-below", "off"])
        .args(["--alert-scan-failures", "off", "--alert-scanner-agents", "off"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("\"type\":\"alert\""));
    let _ = std::fs::remove_file(&db);
    let _ = std::fs::remove_file(&pcap);
}

/// Rows in the database's `alerts` table.
fn stored_alerts(db: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT COUNT(*) FROM alerts", [], |r| r.get(0)).unwrap()
}

/// A trunk answering 60 % of its calls, which last 4 minutes, and refusing
/// 40 % at once: its ASR is 60 %, so no `low_asr`, although the refused
/// calls' records are all written before the first answered call's.
#[test]
fn long_answered_calls_do_not_make_a_trunk_look_failed() {
    let mut p = Pcap::default();
    let invite = "INVITE sip:bob@example.net SIP/2.0";
    let mut events: Vec<(i64, bool, Vec<u8>)> = Vec::new();
    for i in 0..100 {
        let id = format!("c{i}");
        let t = T0 + i * 3 * SEC;
        events.push((t, true, sip(invite, &id, "1 INVITE", false, "")));
        if i % 5 < 3 {
            events.push((t + 50 * MS, false, sip("SIP/2.0 200 OK", &id, "1 INVITE", true, "")));
            let bye = sip("BYE sip:bob@example.net SIP/2.0", &id, "2 BYE", true, "");
            events.push((t + 240 * SEC, true, bye));
            let ok = sip("SIP/2.0 200 OK", &id, "2 BYE", true, "");
            events.push((t + 240 * SEC + 10 * MS, false, ok));
        } else {
            events.push((
                t + 50 * MS,
                false,
                sip("SIP/2.0 486 Busy Here", &id, "1 INVITE", true, ""),
            ));
        }
    }
    events.sort_by_key(|e| e.0);
    for (t, up, m) in events {
        if up {
            p.udp(t, CALLER, CALLEE, &m);
        } else {
            p.udp(t, CALLEE, CALLER, &m);
        }
    }
    let pcap = p.save("alerts-asr");
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--progress", "never", "--format", "jsonl"])
        .args(["--alert-media-after", "off"])
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let alerts: Vec<&str> = stdout.lines().filter(|l| l.contains("\"type\":\"alert\"")).collect();
    assert!(alerts.is_empty(), "{alerts:#?}");
    let _ = std::fs::remove_file(&pcap);
}
