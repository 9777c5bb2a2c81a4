//! KPIs against hand-built flows: one capture holds a flow for every
//! RFC 6076 metric and E.411 ratio, with times chosen so each figure is
//! known by hand; `analyze --db` stores the rows and `report kpi` must print
//! exactly those figures. (KPIs against SIPp's own statistics: kpi_sipp.rs.)

use crate::common;

use common::hostile::{sip, Endpoint, Pcap, CALLEE, CALLER, SEC, T0};
use common::{analyze_into_db, report_kpi};
use serde_json::Value;
use std::process::Command;

const MS: i64 = SEC / 1000;

struct Flow<'a> {
    p: &'a mut Pcap,
    call_id: &'static str,
    t0: i64,
}

impl Flow<'_> {
    fn send(&mut self, at_ms: i64, from: Endpoint, to: Endpoint, start: &str, cseq: &str) {
        let to_tag = !start.starts_with("INVITE") && !start.starts_with("REGISTER");
        let m = sip(start, self.call_id, cseq, to_tag, "");
        self.p.udp(self.t0 + at_ms * MS, from, to, &m);
    }
    fn up(&mut self, at_ms: i64, start: &str, cseq: &str) {
        self.send(at_ms, CALLER, CALLEE, start, cseq);
    }
    fn down(&mut self, at_ms: i64, start: &str, cseq: &str) {
        self.send(at_ms, CALLEE, CALLER, start, cseq);
    }
}

/// The flows, in time order (a pcap must be): each starts `t0` seconds in.
fn capture() -> Pcap {
    let mut p = Pcap::default();
    let invite = "INVITE sip:bob@example.net SIP/2.0";
    let flow = |p: &mut Pcap, call_id, t0_s: i64, steps: &[(i64, bool, &str, &str)]| {
        let mut f = Flow { p, call_id, t0: T0 + t0_s * SEC };
        for &(at, up, start, cseq) in steps {
            if up {
                f.up(at, start, cseq);
            } else {
                f.down(at, start, cseq);
            }
        }
    };
    // A: answered and completed. SRD 250 ms (100 Trying does not end it),
    // SDT 10 s, SDD 40 ms.
    flow(
        &mut p,
        "a",
        0,
        &[
            (0, true, invite, "1 INVITE"),
            (10, false, "SIP/2.0 100 Trying", "1 INVITE"),
            (250, false, "SIP/2.0 180 Ringing", "1 INVITE"),
            (1000, false, "SIP/2.0 200 OK", "1 INVITE"),
            (1010, true, "ACK sip:bob@example.net SIP/2.0", "1 ACK"),
        ],
    );
    // B: busy. Failed SRD 120 ms; effective (SEER) and NER.
    flow(
        &mut p,
        "b",
        2,
        &[(0, true, invite, "1 INVITE"), (120, false, "SIP/2.0 486 Busy Here", "1 INVITE")],
    );
    // C: redirected. Out of SER's and SEER's denominators; SRD 30 ms (not a failure).
    flow(
        &mut p,
        "c",
        3,
        &[(0, true, invite, "1 INVITE"), (30, false, "SIP/2.0 302 Moved Temporarily", "1 INVITE")],
    );
    // D: 503, E: 408: ineffective (ISA). Failed SRDs 50 and 100 ms.
    flow(
        &mut p,
        "d",
        4,
        &[
            (0, true, invite, "1 INVITE"),
            (50, false, "SIP/2.0 503 Service Unavailable", "1 INVITE"),
        ],
    );
    flow(
        &mut p,
        "e",
        5,
        &[(0, true, invite, "1 INVITE"), (100, false, "SIP/2.0 408 Request Timeout", "1 INVITE")],
    );
    // F: rang, then cancelled: NER's ring-no-answer (487 after 180). SRD 200 ms.
    flow(
        &mut p,
        "f",
        6,
        &[
            (0, true, invite, "1 INVITE"),
            (200, false, "SIP/2.0 180 Ringing", "1 INVITE"),
            (5000, true, "CANCEL sip:bob@example.net SIP/2.0", "1 CANCEL"),
            (5010, false, "SIP/2.0 200 OK", "1 CANCEL"),
            (5020, false, "SIP/2.0 487 Request Terminated", "1 INVITE"),
        ],
    );
    // G: never answered: Timer B, a local 408 (ISA), no SRD.
    flow(&mut p, "g", 7, &[(0, true, invite, "1 INVITE")]);
    // A hangs up: BYE at 11 s, its 200 OK 40 ms later.
    flow(
        &mut p,
        "a",
        0,
        &[
            (11_000, true, "BYE sip:bob@example.net SIP/2.0", "2 BYE"),
            (11_040, false, "SIP/2.0 200 OK", "2 BYE"),
        ],
    );
    // Registrations: a challenge, then the retry registered 80 ms after it
    // was sent (RRD 80 ms); another refused with 403 (IRA 50 %).
    let register = "REGISTER sip:example.com SIP/2.0";
    flow(
        &mut p,
        "r1",
        20,
        &[
            (0, true, register, "1 REGISTER"),
            (5, false, "SIP/2.0 401 Unauthorized", "1 REGISTER"),
            (100, true, register, "2 REGISTER"),
            (180, false, "SIP/2.0 200 OK", "2 REGISTER"),
        ],
    );
    flow(
        &mut p,
        "r2",
        21,
        &[(0, true, register, "1 REGISTER"), (60, false, "SIP/2.0 403 Forbidden", "1 REGISTER")],
    );
    // Time passes beyond G's Timer B, in the same minute's report.
    flow(&mut p, "late", 59, &[(0, true, "OPTIONS sip:bob@example.net SIP/2.0", "1 OPTIONS")]);
    p
}

fn close(v: &Value, want: f64, what: &str) {
    let got = v[what].as_f64().unwrap_or_else(|| panic!("{what} missing: {v}"));
    assert!((got - want).abs() < 1e-6, "{what}: got {got}, want {want}\n{v}");
}

#[test]
fn every_rfc6076_metric_and_e411_ratio_matches_hand_built_flows() {
    let pcap = capture().save("kpi-flows");
    let db = pcap.with_extension("db");
    analyze_into_db(&pcap, &db, &[]);
    let rows = report_kpi(&db, &["--interval", "1h"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(r["key"], "all");
    // Seven attempts: A answered, B busy, C redirected, D 503, E 408,
    // F cancelled after ringing, G unanswered.
    for (field, want) in [
        ("attempts", 7),
        ("answered", 1),
        ("redirected", 1),
        ("unresolved", 0),
        ("registrations", 2),
        ("registrations_failed", 1),
    ] {
        assert_eq!(r[field], want, "{field}\n{r}");
    }
    close(r, 100.0 / 7.0, "asr");
    close(r, 300.0 / 7.0, "ner"); // A, B, F
    close(r, 100.0 / 6.0, "ser"); // A / (7 - C)
    close(r, 200.0 / 6.0, "seer"); // A, B / (7 - C)
    close(r, 300.0 / 7.0, "isa"); // D, E, G
    close(r, 100.0 / 7.0, "scr"); // A
    close(r, (250.0 + 30.0 + 200.0) / 3.0, "srd_ms"); // A, C, F
    close(r, (120.0 + 50.0 + 100.0) / 3.0, "failed_srd_ms"); // B, D, E
    close(r, 40.0, "sdd_ms");
    close(r, 10.0, "sdt_s");
    close(r, 50.0, "ira");
    close(r, 80.0, "rrd_ms");
    // The text report sums the run up in the same figures.
    let text = common::analyze_text(&pcap).stdout;
    assert!(
        text.contains("kpi calls    attempts 7  ASR 14.3 %  NER 42.9 %  SER 16.7 %  SEER 33.3 %  ISA 42.9 %  SCR 14.3 %  SRD 160.0 ms  failed SRD 90.0 ms  SDD 40.0 ms  SDT 10.0 s"),
        "{text}"
    );
    assert!(text.contains("kpi register transactions 2  IRA 50.0 %  RRD 80.0 ms"), "{text}");
    // Every abbreviation the KPI lines use is spelt out once.
    let legend = text.lines().find(|l| l.starts_with("kpi legend")).expect(&text);
    for line in text.lines().filter(|l| l.starts_with("kpi ") && *l != legend) {
        for word in line
            .split_whitespace()
            .filter(|w| w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase()))
        {
            assert!(legend.contains(&format!("{word} ")), "{word} not in {legend}");
        }
    }

    // By domain: the calls' caller domain is example.com; a REGISTER's is
    // its AOR's (the To URI), example.net, which is also the callee domain.
    let by_domain = report_kpi(&db, &["--by", "domain"]);
    let keys: Vec<(&str, u64, u64)> = by_domain
        .iter()
        .map(|r| {
            let n = |f: &str| r[f].as_u64().unwrap();
            (r["key"].as_str().unwrap(), n("attempts"), n("registrations"))
        })
        .collect();
    assert_eq!(keys, [("example.com", 7, 0), ("example.net", 0, 2)]);
    let by_callee = report_kpi(&db, &["--by", "callee-domain"]);
    assert_eq!(by_callee.len(), 1);
    assert_eq!(by_callee[0]["key"], "example.net");
    assert_eq!(by_callee[0]["registrations"], 2);
    // A top of one folds the registrations' domain into `other`.
    let top1 = report_kpi(&db, &["--by", "domain", "--top", "1"]);
    assert_eq!(top1.len(), 2);
    assert_eq!(top1[0]["key"], "example.com");
    assert_eq!(top1[1]["key"], "other");
    assert_eq!(top1[1]["registrations"], 2);
    // A named trunk takes the calls of its address.
    analyze_into_db(&pcap, &db, &["--trunk", "carrier=10.0.0.2"]);
    let trunks = report_kpi(&db, &["--by", "trunk"]);
    assert_eq!(trunks[0]["key"], "carrier");
    assert_eq!(trunks[0]["attempts"], 7);
    let _ = std::fs::remove_file(&db);
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn a_report_refuses_what_it_cannot_answer() {
    let run =
        |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_calliper")).args(args).output().unwrap();
    let missing = run(&["report", "kpi", "--db", "/nonexistent/calls.db"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
    // A database of stored calls, asked for an interval shorter than the stored one.
    let pcap = capture().save("kpi-short");
    let db = pcap.with_extension("db");
    analyze_into_db(&pcap, &db, &[]);
    let short = run(&["report", "kpi", "--db", db.to_str().unwrap(), "--interval", "90s"]);
    assert_eq!(short.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&short.stderr).contains("not a multiple"),
        "{}",
        String::from_utf8_lossy(&short.stderr)
    );
    let bad_ner = run(&["analyze", "--ner-codes", "486,99", "/dev/null"]);
    assert_eq!(bad_ner.status.code(), Some(2));
    let _ = std::fs::remove_file(&db);
    let _ = std::fs::remove_file(&pcap);
}

/// Review findings, each on its own capture: a 2xx that crosses a CANCEL
/// keeps the BYE's SDD; keys seen first (a scan's quickly refused calls)
/// do not take the busiest key's place; nonsense options are refused.
#[test]
fn kpi_regressions_from_review() {
    let invite = "INVITE sip:bob@example.net SIP/2.0";
    let mut p = Pcap::default();
    let mut f = Flow { p: &mut p, call_id: "race", t0: T0 };
    f.up(0, invite, "1 INVITE");
    f.down(100, "SIP/2.0 180 Ringing", "1 INVITE");
    f.up(2000, "CANCEL sip:bob@example.net SIP/2.0", "1 CANCEL");
    f.down(2001, "SIP/2.0 200 OK", "1 INVITE");
    f.up(2010, "ACK sip:bob@example.net SIP/2.0", "1 ACK");
    f.up(5000, "BYE sip:bob@example.net SIP/2.0", "2 BYE");
    f.down(5030, "SIP/2.0 200 OK", "2 BYE");
    // 20 quickly refused attempts, each from its own domain, then 15 calls
    // from one domain that end later: with 10 keys, that domain must be kept.
    for i in 0..20 {
        let id = format!("junk-{i}");
        let t = T0 + 6 * SEC + i * 10 * MS;
        let m = String::from_utf8(common::hostile::sip(invite, &id, "1 INVITE", false, ""))
            .unwrap()
            .replace("alice@example.com", &format!("x@junk{i}.example"));
        p.udp(t, CALLER, CALLEE, m.as_bytes());
        let refused = common::hostile::sip("SIP/2.0 404 Not Found", &id, "1 INVITE", true, "");
        p.udp(t + MS, CALLEE, CALLER, &refused);
    }
    for i in 0..15 {
        let id = format!("real-{i}");
        let mut f = Flow {
            p: &mut p,
            call_id: Box::leak(id.into_boxed_str()),
            t0: T0 + 7 * SEC + i * 10 * MS,
        };
        f.up(0, invite, "1 INVITE");
        f.down(50, "SIP/2.0 200 OK", "1 INVITE");
        f.up(20_000, "BYE sip:bob@example.net SIP/2.0", "2 BYE");
        f.down(20_010, "SIP/2.0 200 OK", "2 BYE");
    }
    let pcap = p.save("kpi-review");
    let db = pcap.with_extension("db");
    analyze_into_db(&pcap, &db, &["--kpi-keys", "10"]);
    let total = &report_kpi(&db, &[])[0];
    assert_eq!(total["sdd_count"], 16, "the raced call's BYE has its SDD\n{total}");
    assert_eq!(total["bye_unanswered"], 0);
    let domains = report_kpi(&db, &["--by", "domain", "--top", "100"]);
    let busiest = &domains[0];
    assert_eq!(busiest["key"], "example.com", "{domains:?}");
    assert_eq!(busiest["attempts"], 16);
    let other = domains.iter().find(|r| r["key"] == "other").unwrap();
    assert_eq!(other["attempts"], 11, "20 junk domains, 9 kept beside example.com");
    for bad in [
        &["--kpi-interval", "0.5"][..],
        &["--kpi-interval", "1e-10"],
        &["--alert-scan-failures", "0"],
        &["--alert-scan-failures", "2.5"],
        &["--alert-asr-below", "500"],
        &["--alert-asr-window", "90"],
        &["--alert-scanner-agents", ""],
        &["--trunk", "other=10.0.0.1"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
            .args(["analyze", "--progress", "never", "-o", "/dev/null"])
            .args(bad)
            .arg(&pcap)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?} accepted");
    }
    let _ = std::fs::remove_file(&db);
    let _ = std::fs::remove_file(&pcap);
}
