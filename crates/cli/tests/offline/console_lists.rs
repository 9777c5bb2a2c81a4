//! The console's other stored lists and metrics against the analysis's
//! own output: `/api/alerts`, `/api/registrations` and `/api/kpi` equal
//! the rows the same run wrote as JSON lines, on every capture; their
//! parameters are checked; `/metrics` counts the stored calls and follows
//! a database that grows.

use crate::common;
use crate::server;

use calliper_testkit::probe::of_type;
use serde_json::Value;
use server::{analyze, metric_sum, temp, Server};
use std::path::Path;

#[test]
fn metrics_count_the_stored_calls_and_follow_a_growing_database() {
    let db = temp("metrics.db");
    let _ = std::fs::remove_file(&db);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    let first = analyze(&root.join("sipp_hold_dtmf.pcap"), &db);
    let s = Server::on(&db);
    let m = s.get("/metrics", &[]);
    assert_eq!(m.status, 200);
    assert!(m.header("content-type").is_some_and(|v| v.starts_with("text/plain; version=0.0.4")));
    let text = m.text();
    assert_eq!(metric_sum(&text, "calliper_calls_total"), first.len() as f64);
    let streams: usize = first.iter().map(|r| r["streams"].as_array().unwrap().len()).sum();
    assert_eq!(metric_sum(&text, "calliper_streams_total"), streams as f64);
    assert_eq!(
        metric_sum(&text, "calliper_call_mos_count"),
        first.iter().filter(|r| r["worst_mos"].is_f64()).count() as f64
    );
    let invites = tshark_count(&root.join("sipp_hold_dtmf.pcap"), "sip.Method == \"INVITE\"");
    assert!(
        text.contains(&format!("calliper_sip_requests_total{{method=\"INVITE\"}} {invites}\n")),
        "{text}"
    );
    // The database grows while the console runs: the counters follow.
    let more = analyze(&root.join("heplify__rtp_rtcp_sip_ipv4_udp.pcap"), &db);
    let text = s.get("/metrics", &[]).text();
    assert_eq!(metric_sum(&text, "calliper_calls_total"), (first.len() + more.len()) as f64);
}

#[test]
fn trunk_metrics_count_the_trunks_calls() {
    let db = temp("trunks.db");
    let _ = std::fs::remove_file(&db);
    let pcap = common::sample_capture();
    let lines = common::calliper_jsonl(
        &pcap,
        &["--db", db.to_str().unwrap(), "--trunk", "sipp-gw=127.0.2.1"],
    );
    let s = Server::on(&db);
    let text = s.get("/metrics", &[]).text();
    // Attempts: the INVITEs that open a dialog (no To tag) towards the trunk.
    let attempts =
        tshark_count(&pcap, "sip.Method == \"INVITE\" && !sip.to.tag && ip.dst == 127.0.2.1");
    assert!(attempts > 0);
    let answered = lines.iter().filter(|l| l["type"] == "call" && l["answer_ns"].is_i64()).count();
    assert!(
        text.contains(&format!("calliper_trunk_attempts_total{{trunk=\"sipp-gw\"}} {attempts}\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("calliper_trunk_answered_total{{trunk=\"sipp-gw\"}} {answered}\n")),
        "{text}"
    );
    // Calls outside a named trunk (keyed by addresses) get no series of their own.
    assert!(!text.contains(">"), "{text}");
}

fn tshark_count(pcap: &Path, filter: &str) -> usize {
    common::tshark(pcap, &["-Y", filter]).lines().count()
}

/// The rows of the list endpoint `path` (every page) equal `want`, both
/// seen through `key`, in any order; how many there are.
fn rows_equal<K: Ord + std::fmt::Debug>(
    s: &Server,
    path: &str,
    want: &[Value],
    key: impl Fn(&Value) -> K,
    pcap: &Path,
) -> usize {
    let mut got: Vec<K> = s.all_pages(path, "rows", 100).iter().map(&key).collect();
    let mut want: Vec<K> = want.iter().map(&key).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "{} {path}", pcap.display());
    want.len()
}

#[test]
fn alerts_registrations_and_kpis_come_back_as_the_analysis_wrote_them() {
    let (mut alerts, mut registrations, mut kpi_keys, mut load_rows) = (0, 0, 0, 0);
    let mut captures = common::captures();
    // One capture with alerts for sure: loss above the 5 % threshold.
    let lossy = temp("lossy.pcap");
    common::generate(
        "--calls 40 --concurrent 10 --hold-mean 20 --loss 8",
        &lossy,
        &temp("lossy.jsonl"),
    );
    captures.push(lossy);
    for pcap in captures {
        let db = temp("lists.db");
        let _ = std::fs::remove_file(&db);
        let lines =
            common::calliper_jsonl(&pcap, &["--db", db.to_str().unwrap(), "--kpi-interval", "60"]);
        let of = |t: &str| lines.iter().filter(|l| l["type"] == t).cloned().collect::<Vec<_>>();
        let (want_alerts, want_regs) = (of("alert"), of("registration"));
        let s = Server::on(&db);
        let alert_key = |a: &Value| {
            (
                a["ts_ns"].as_i64(),
                a["kind"].to_string(),
                a["call_id"].to_string(),
                a["key"].to_string(),
                a["unit"].to_string(),
            )
        };
        alerts += rows_equal(&s, "/api/alerts", &want_alerts, alert_key, &pcap);
        let reg_key = |r: &Value| {
            (
                r["ts_ns"].as_i64(),
                r["aor"].to_string(),
                r["outcome"].to_string(),
                r["status"].as_i64(),
            )
        };
        registrations += rows_equal(&s, "/api/registrations", &want_regs, reg_key, &pcap);
        // KPIs per minute, total: the analysis's rows summed by the test.
        let summed = common::kpi_rows_summed(lines.clone());
        let want: std::collections::BTreeMap<(i64, String), (u64, u64, u64)> = summed
            .iter()
            .filter(|l| l["type"] == "kpi" && l["dimension"] == "total")
            .map(|l| {
                let n = |k: &str| l[k].as_u64().unwrap();
                (
                    (l["start_ns"].as_i64().unwrap(), l["key"].as_str().unwrap().to_string()),
                    (n("attempts"), n("answered"), n("registrations")),
                )
            })
            .collect();
        let r = s.get("/api/kpi?dimension=total&interval=60", &[]).json();
        let got: std::collections::BTreeMap<(i64, String), (u64, u64, u64)> = r["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                let n = |k: &str| row["counts"][k].as_u64().unwrap();
                (
                    (row["start_ns"].as_i64().unwrap(), row["key"].as_str().unwrap().to_string()),
                    (n("attempts"), n("answered"), n("registrations")),
                )
            })
            .collect();
        assert_eq!(got, want, "{} KPIs", pcap.display());
        kpi_keys += want.len();
        load_rows += load_and_mos_are_the_analysis_summed(&s, &lines, &pcap);
        // ASR as the record crate defines it, from the counts.
        for row in r["rows"].as_array().unwrap() {
            let (a, n) = (
                row["counts"]["answered"].as_f64().unwrap(),
                row["counts"]["attempts"].as_f64().unwrap(),
            );
            if n > 0.0 {
                assert!((row["figures"]["asr"].as_f64().unwrap() - 100.0 * a / n).abs() < 1e-9);
            }
        }
    }
    assert!(alerts >= 1, "no alert compared");
    assert!(registrations >= common::at_least(5, 0), "{registrations} registrations compared");
    assert!(kpi_keys >= 10, "{kpi_keys} KPI rows compared");
    assert!(load_rows >= 10, "{load_rows} load rows and scored calls compared");
}

/// `/api/kpi/load` per minute against the analysis's time-series rows
/// summed by the test (the most calls open, calls started and ended), and
/// `/api/kpi/mos` against its call records banded by the test.
/// Returns how many rows and scored calls it compared.
fn load_and_mos_are_the_analysis_summed(s: &Server, lines: &[Value], pcap: &Path) -> usize {
    let mut want = std::collections::BTreeMap::<i64, (i64, i64, i64)>::new();
    for l in of_type(lines, "traffic") {
        let start = l["start_ns"].as_i64().unwrap().div_euclid(60_000_000_000) * 60_000_000_000;
        let e = want.entry(start).or_default();
        e.0 = e.0.max(l["calls_open"].as_i64().unwrap());
        e.1 += l["calls_started"].as_i64().unwrap();
        e.2 += l["calls_ended"].as_i64().unwrap();
    }
    let r = s.get("/api/kpi/load?interval=60", &[]).json();
    let got: std::collections::BTreeMap<i64, (i64, i64, i64)> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let n = |k: &str| row[k].as_i64().unwrap();
            (n("start_ns"), (n("max_calls_open"), n("calls_started"), n("calls_ended")))
        })
        .collect();
    assert_eq!(got, want, "{} load", pcap.display());
    let (mut bands, mut without) = ([0u64; 8], 0);
    for c in lines.iter().filter(|l| l["type"] == "call" && l["invite_ns"].is_i64()) {
        match c["worst_mos"].as_f64() {
            Some(m) => bands[((m - 1.0) * 2.0).floor().clamp(0.0, 7.0) as usize] += 1,
            None if c["answer_ns"].is_i64() => without += 1,
            None => {}
        }
    }
    let r = s.get("/api/kpi/mos", &[]).json();
    let got: Vec<u64> =
        r["bands"].as_array().unwrap().iter().map(|b| b["calls"].as_u64().unwrap()).collect();
    assert_eq!(got, bands, "{} MOS bands", pcap.display());
    assert_eq!(r["answered_without_mos"], without, "{}", pcap.display());
    assert_eq!(r["bands"][0]["from"], 1.0);
    assert_eq!(r["bands"][7]["to"], 5.0);
    want.len() + bands.iter().sum::<u64>() as usize
}

#[test]
fn list_parameters_are_checked() {
    let s = Server::sample("lists-bad.db");
    s.assert_bad_requests(&[
        "/api/alerts?nonsense=1",
        "/api/alerts?from=yesterday",
        "/api/alerts?limit=0",
        "/api/alerts?kind=a&kind=b",
        "/api/registrations?outcome=%01",
        "/api/registrations?offset=-1",
        "/api/kpi?dimension=planet",
        "/api/kpi?interval=0",
        "/api/kpi?interval=99999999999",
        "/api/kpi?caller=x",
        "/api/kpi/load?dimension=total",
        "/api/kpi/load?interval=0",
        "/api/kpi/mos?interval=60",
        "/api/kpi/mos?from=yesterday",
    ]);
    assert_eq!(s.get("/api/alerts?kind=low_mos&from=2026-01-01", &[]).status, 200);
}
