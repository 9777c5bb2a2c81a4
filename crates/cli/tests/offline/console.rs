//! The console's JSON API against a real server over real databases:
//! - every capture's calls come back from `/api/calls` as the analysis
//!   wrote them (its JSON lines, from the same run), and each call's ladder
//!   holds the SIP messages tshark finds with its Call-ID;
//! - each search filter returns exactly the calls the filter's own
//!   definition picks from the analysis's records (both directions);
//! - malformed parameters get 400 with a reason, never 500;
//! - off loopback a token is required; on loopback a foreign Host is refused;
//! - `/metrics` counts the stored calls and follows a database that grows.

use crate::common;
use crate::server;

use serde_json::Value;
use server::{analyze, enc, metric_sum, temp, Server};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Every call of a search, page by page.
fn all_calls(s: &Server, query: &str) -> Vec<Value> {
    s.all_pages(&format!("/api/calls?{query}"), "calls", 7)
}

/// (Call-ID, INVITE time): what names a call across the two outputs.
fn key(c: &Value) -> (String, i64) {
    (c["call_id"].as_str().unwrap().to_string(), c["invite_ns"].as_i64().unwrap())
}

/// The SIP messages tshark finds with this Call-ID (method or status), in
/// order, less copies: a frame identical in addresses, ports, IP ID, length, CSeq
/// and start line to one in the previous 5 ms is the same packet seen
/// twice (the duplicate filter's documented window). Only those from 64 s
/// before the call's INVITE to 64 s after its end: the API's documented
/// window (a Call-ID may come back later as another call).
fn tshark_messages(pcap: &Path, call_id: &str, invite_ns: i64, end_ns: i64) -> Vec<String> {
    let filter = format!("sip.Call-ID == \"{}\"", call_id.replace('"', "\\\""));
    let fields = [
        "frame.time_epoch",
        "ip.src",
        "ipv6.src",
        "ip.dst",
        "ipv6.dst",
        "ip.id",
        "udp.srcport",
        "udp.dstport",
        "tcp.srcport",
        "tcp.dstport",
        "frame.len",
        "sip.CSeq.seq",
        "sip.Method",
        "sip.Status-Code",
    ];
    // The heplify TCP capture runs SIP on port 6060.
    let listed = common::tshark_fields(pcap, &["-d", "tcp.port==6060,sip"], &filter, &fields);
    let mut seen: Vec<(f64, String)> = Vec::new();
    let mut out = Vec::new();
    for line in listed.lines() {
        let (t, rest) = line.split_once('\t').unwrap();
        let t: f64 = t.parse().unwrap();
        let window = (invite_ns as f64 / 1e9 - 64.0)..=(end_ns as f64 / 1e9 + 64.0);
        if !window.contains(&t) {
            continue;
        }
        if seen.iter().any(|(u, r)| r == rest && t - u <= 0.005) {
            continue;
        }
        seen.push((t, rest.to_string()));
        let f: Vec<&str> = rest.split('\t').collect();
        out.push(format!("{}{}", f[11], f[12]));
    }
    out
}

#[test]
fn every_capture_comes_back_through_the_api() {
    let mut checked_calls = 0;
    let mut checked_ladders = 0;
    for pcap in common::captures() {
        let db = temp("one.db");
        let _ = std::fs::remove_file(&db);
        let records = analyze(&pcap, &db);
        if records.is_empty() {
            continue;
        }
        let s = Server::on(&db);
        let retimed = std::cell::OnceCell::new();
        let listed = all_calls(&s, "order=asc");
        let want: BTreeSet<_> = records.iter().map(key).collect();
        let got: BTreeSet<_> = listed.iter().map(key).collect();
        assert_eq!(got, want, "{}", pcap.display());
        for c in &listed {
            let r = records.iter().find(|r| key(r) == key(c)).unwrap();
            for f in ["state", "final_status", "sip_messages", "caller_ip", "callee_ip"] {
                assert_eq!(c[f], r[f], "{} {f}", pcap.display());
            }
            assert_eq!(c["from_user"], r["from"]["user"], "{}", pcap.display());
            let id = c["id"].as_i64().unwrap();
            let d = s.get(&format!("/api/calls/{id}"), &[]).json();
            let streams = d["streams"].as_array().unwrap();
            assert_eq!(streams.len(), r["streams"].as_array().unwrap().len());
            for st in streams {
                // The interval reports add up to the stream's record.
                let iv = st["intervals"].as_array().unwrap();
                let sum: i64 = iv.iter().map(|i| i["packets"].as_i64().unwrap()).sum();
                assert_eq!(
                    sum,
                    st["packets"].as_i64().unwrap(),
                    "{} stream {}",
                    pcap.display(),
                    st["ssrc"]
                );
            }
            // The ladder against tshark: the same messages, in order, for
            // a call that is alone with its Call-ID in the capture.
            let messages = d["messages"].as_array().unwrap();
            let alone = records.iter().filter(|o| o["call_id"] == r["call_id"]).count() == 1;
            // A capture with stamps the analysis did not believe has its
            // messages at other times than tshark shows (time_jumps.rs).
            let retimed = *retimed.get_or_init(|| {
                let lines = common::calliper_jsonl(&pcap, &[]);
                lines.last().unwrap()["anomalies"]["time_implausible"].is_number()
            });
            if alone && !retimed {
                let ours: Vec<String> = messages
                    .iter()
                    .map(|m| match m["method"].as_str() {
                        Some(method) => method.to_string(),
                        None => m["status"].to_string(),
                    })
                    .collect();
                let theirs = tshark_messages(
                    &pcap,
                    c["call_id"].as_str().unwrap(),
                    c["invite_ns"].as_i64().unwrap(),
                    c["end_ns"].as_i64().unwrap(),
                );
                assert_eq!(ours, theirs, "{} {}", pcap.display(), c["call_id"]);
                checked_ladders += 1;
            }
            checked_calls += 1;
        }
    }
    assert!(checked_calls >= common::at_least(40, 5), "{checked_calls} calls checked");
    assert!(
        checked_ladders >= common::at_least(30, 5),
        "{checked_ladders} ladders checked against tshark"
    );
}

/// A database of several captures (each analysed into it in turn) and the
/// records of all of them.
fn mixed_database(name: &str) -> (PathBuf, Vec<Value>) {
    let db = temp(name);
    let _ = std::fs::remove_file(&db);
    let generated = temp("generated.pcap");
    common::generate(
        "--calls 120 --concurrent 20 --hold-mean 30 --loss 3 --burst 0.5",
        &generated,
        &temp("truth.jsonl"),
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    let mut records = Vec::new();
    for p in [
        generated,
        root.join("sipp_hold_dtmf.pcap"),
        root.join("heplify__rtp_rtcp_sip_ipv4_udp.pcap"),
        root.join("suricata__sip-method_sip.pcap"),
        root.join("sngrep__ipv6frag.pcap"),
    ] {
        records.extend(analyze(&p, &db));
    }
    (db, records)
}

/// `*` and `?` wildcards, case-sensitive: the API's definition.
fn glob(pattern: &str, text: &str) -> bool {
    fn go(p: &[char], t: &[char]) -> bool {
        match p.first() {
            None => t.is_empty(),
            Some('*') => (0..=t.len()).any(|i| go(&p[1..], &t[i..])),
            Some('?') => !t.is_empty() && go(&p[1..], &t[1..]),
            Some(c) => t.first() == Some(c) && go(&p[1..], &t[1..]),
        }
    }
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    go(&p, &t)
}

fn in_network(ip: &Value, net: &str) -> bool {
    let (a, bits) = net.split_once('/').unwrap();
    let (a, bits): (std::net::IpAddr, u32) = (a.parse().unwrap(), bits.parse().unwrap());
    match (a, ip.as_str().and_then(|s| s.parse().ok())) {
        (std::net::IpAddr::V4(n), Some(std::net::IpAddr::V4(i))) => {
            bits == 0 || u32::from(n) >> (32 - bits) == u32::from(i) >> (32 - bits)
        }
        _ => false,
    }
}

#[test]
fn each_filter_returns_exactly_the_calls_it_describes() {
    let (db, records) = mixed_database("mixed.db");
    let s = Server::on(&db);
    let streams = |r: &Value| r["streams"].as_array().cloned().unwrap_or_default();
    let invites: Vec<i64> = {
        let mut v: Vec<i64> = records.iter().map(|r| r["invite_ns"].as_i64().unwrap()).collect();
        v.sort();
        v
    };
    let (mid_from, mid_to) = (invites[invites.len() / 4], invites[invites.len() * 3 / 4]);
    let a_caller = records
        .iter()
        .find_map(|r| r["from"]["user"].as_str().filter(|u| u.len() > 3))
        .expect("a caller with a user part")
        .to_string();
    let prefix = format!("{}*", &a_caller[..2]);
    type Pick = Box<dyn Fn(&Value) -> bool>;
    let cases: Vec<(String, Pick)> = vec![
        (format!("caller={}", enc(&a_caller)), {
            let u = a_caller.clone();
            Box::new(move |r: &Value| r["from"]["user"] == u.as_str())
        }),
        (format!("caller={}", enc(&prefix)), {
            let p = prefix.clone();
            Box::new(move |r: &Value| r["from"]["user"].as_str().is_some_and(|u| glob(&p, u)))
        }),
        (
            "status=2xx".into(),
            Box::new(|r: &Value| {
                r["final_status"].as_i64().is_some_and(|c| (200..300).contains(&c))
            }),
        ),
        ("status=none".into(), Box::new(|r: &Value| r["final_status"].is_null())),
        ("state=completed".into(), Box::new(|r: &Value| r["state"] == "completed")),
        (
            "codec=PCMU".into(),
            Box::new(move |r: &Value| streams(r).iter().any(|s| s["codec"] == "PCMU")),
        ),
        (
            "mos_below=4.1".into(),
            Box::new(|r: &Value| r["worst_mos"].as_f64().is_some_and(|m| m < 4.1)),
        ),
        (
            "loss_above=3".into(),
            Box::new(move |r: &Value| {
                streams(r).iter().any(|s| s["loss_percent"].as_f64().is_some_and(|l| l > 3.0))
            }),
        ),
        (
            "min_duration=30".into(),
            Box::new(|r: &Value| r["duration_ms"].as_f64().is_some_and(|d| d >= 30_000.0)),
        ),
        (
            "max_duration=20".into(),
            Box::new(|r: &Value| r["duration_ms"].as_f64().is_some_and(|d| d <= 20_000.0)),
        ),
        (
            "ip=127.0.0.0%2F8".into(),
            Box::new(move |r: &Value| {
                in_network(&r["caller_ip"], "127.0.0.0/8")
                    || in_network(&r["callee_ip"], "127.0.0.0/8")
                    || streams(r).iter().any(|s| {
                        in_network(&s["src"], "127.0.0.0/8") || in_network(&s["dst"], "127.0.0.0/8")
                    })
            }),
        ),
        (
            format!("from={mid_from}&to={mid_to}"),
            Box::new(move |r: &Value| {
                let t = r["invite_ns"].as_i64().unwrap();
                t >= mid_from && t < mid_to
            }),
        ),
        (
            "state=completed&codec=PCMA&min_duration=10".into(),
            Box::new(move |r: &Value| {
                r["state"] == "completed"
                    && streams(r).iter().any(|s| s["codec"] == "PCMA")
                    && r["duration_ms"].as_f64().is_some_and(|d| d >= 10_000.0)
            }),
        ),
    ];
    let mut both_ways = 0;
    for (query, pick) in &cases {
        let want: BTreeSet<_> = records.iter().filter(|r| pick(r)).map(key).collect();
        let got: BTreeSet<_> = all_calls(&s, query).iter().map(key).collect();
        assert_eq!(got, want, "{query}");
        // A filter that picks all or nothing proves little.
        if !want.is_empty() && want.len() < records.len() {
            both_ways += 1;
        }
    }
    assert!(both_ways >= 10, "only {both_ways} filters split the calls");
    // Orders: newest first by default; by MOS ascending with the unscored first.
    let by_time = all_calls(&s, "");
    assert!(by_time.windows(2).all(|w| w[0]["invite_ns"].as_i64() >= w[1]["invite_ns"].as_i64()));
    let by_mos = all_calls(&s, "sort=mos&order=asc");
    let mos: Vec<f64> =
        by_mos.iter().map(|c| c["worst_mos"].as_f64().unwrap_or(f64::NEG_INFINITY)).collect();
    assert!(mos.windows(2).all(|w| w[0] <= w[1]), "{mos:?}");
    assert_eq!(by_mos.len(), records.len());
    // The CSV holds the same calls, one row each, and says nothing follows.
    let csv = s.get("/api/calls.csv?state=completed", &[]);
    assert_eq!(csv.status, 200);
    assert_eq!(csv.header("x-calliper-more"), Some("false"));
    let completed = records.iter().filter(|r| r["state"] == "completed").count();
    assert_eq!(csv.text().lines().count(), completed + 1);
}

#[test]
fn malformed_parameters_get_400_with_a_reason() {
    let s = Server::sample("small.db");
    s.assert_bad_requests(&[
        "/api/calls?from=yesterday",
        "/api/calls?status=7xx",
        "/api/calls?ip=300.1.1.1",
        "/api/calls?mos_below=abc",
        "/api/calls?loss_above=1e999",
        "/api/calls?limit=-1",
        "/api/calls?limit=99999999999999999999",
        "/api/calls?offset=100000001",
        "/api/calls?sort=caller",
        "/api/calls?order=sideways",
        "/api/calls?nonsense=1",
        "/api/calls?caller=a&caller=b",
        "/api/calls?caller=%00",
        "/api/calls?%ZZ",
        "/api/calls/abc",
        "/api/calls/-1",
        "/api/calls/99999999999999999999999",
        "/api/calls.csv?limit=100001",
    ]);
    assert_eq!(s.get("/api/calls/999999", &[]).status, 404);
    assert_eq!(s.get("/nowhere", &[]).status, 404);
    // Random bytes in every parameter: answered, never with a 5xx.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let names =
        ["from", "to", "caller", "ip", "status", "mos_below", "limit", "offset", "sort", "codec"];
    for i in 0..400 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 40) as usize;
        let value: String = (0..len)
            .map(|k| format!("%{:02X}", (x.rotate_left(k as u32 * 5) & 0xff) as u8))
            .collect();
        let q = format!("/api/calls?{}={value}", names[i % names.len()]);
        let r = s.get(&q, &[]);
        assert!(r.status == 200 || r.status == 400, "{q}: {} {}", r.status, r.text());
    }
    // Still serving.
    assert_eq!(s.get("/api/calls", &[]).status, 200);
}

#[test]
fn a_database_from_an_older_version_is_shown_without_ladders() {
    let db = temp("old.db");
    let _ = std::fs::remove_file(&db);
    let records = analyze(&common::sample_capture(), &db);
    // What an older version wrote: no call detail, no alerts or registrations tables.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "DROP TABLE sip_messages; DROP TABLE stream_intervals; DROP TABLE alerts; DROP TABLE registrations; PRAGMA user_version = 6;",
    )
    .unwrap();
    drop(conn);
    let s = Server::on(&db);
    assert_eq!(all_calls(&s, "").len(), records.len());
    let d = s.get("/api/calls/1", &[]).json();
    assert_eq!(d["messages"].as_array().unwrap().len(), 0);
    assert!(!d["streams"].as_array().unwrap().is_empty());
    assert_eq!(s.get("/api/calls?alert=low_mos", &[]).status, 200);
    let m = s.get("/metrics", &[]).text();
    assert_eq!(metric_sum(&m, "calliper_calls_total"), records.len() as f64);
    // The server only read it: the old tables are still missing.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master WHERE name = 'sip_messages'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(n, 0);
}
