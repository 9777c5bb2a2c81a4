//! The console inside a probe, beyond the live page: the probe's health
//! (`GET /api/health` and its metrics) checked against the probe's own
//! final summary, and the rule table changed at run time (write token
//! only, bearer only) with the records and the summary's hit counts as the
//! oracle of what a change did.

use crate::common;
use crate::server;

use calliper_testkit::probe::of_type;
use serde_json::Value;
use server::{request, request_with_body, temp, Probe, Response, Server};
use std::path::Path;
use std::time::{Duration, Instant};

const WRITE: &str = "write-token-0123456789abcdef";
const READ: &str = "read-token-0123456789abcdef";

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn summary(lines: &[Value]) -> &Value {
    lines.iter().find(|l| l["type"] == "summary").expect("no summary line")
}

#[test]
fn health_follows_the_probe_up_to_its_summary() {
    let out = temp("health.jsonl");
    let out_arg = out.to_str().unwrap();
    // Two threads: the shards' counters reach the page while they run.
    let args = ["--threads", "2", "--format", "jsonl", "-o", out_arg];
    let mut probe = Probe::start_with(&common::sample_capture(), &args, &[]);
    let mut reports: Vec<Value> = Vec::new();
    let mut scraped = false;
    while !probe.ended() {
        // The probe ends with its input: a request may meet it going.
        let Ok(r) = server::try_request(probe.addr, "GET", "/api/health", &[], b"") else {
            assert!(probe.wait(), "the probe failed");
            break;
        };
        if r.status == 200 {
            let h = r.json();
            if !scraped && h["engine"]["udp"].as_u64() > Some(0) {
                // The metrics give the same report's figures.
                let m = request(probe.addr, "GET", "/metrics", &[]).text();
                let after = request(probe.addr, "GET", "/api/health", &[]).json();
                let packets = server::metric_sum(&m, "calliper_probe_packets_total") as u64;
                assert!(
                    h["packets"].as_u64().unwrap() <= packets
                        && packets <= after["packets"].as_u64().unwrap(),
                    "metrics say {packets} packets, health {h} then {after}"
                );
                let udp = server::metric(&m, "calliper_engine_counter_total{counter=\"udp\"}");
                assert!(udp > 0.0, "{m}");
                assert!(
                    server::metric_sum(&m, "calliper_probe_resident_memory_bytes") > 1e6,
                    "{m}"
                );
                assert!(m.contains("calliper_probe_dropped_total{what=\"output_dropped\"} 0"));
                scraped = true;
            }
            reports.push(h);
        } else {
            // Only the moment before the first report may answer otherwise.
            assert!(reports.is_empty() && r.status == 503, "{}", r.text());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(probe.wait(), "the probe failed");
    assert!(scraped, "no report with packets before the probe ended");
    assert!(reports.len() >= 10, "{} reports in a 20 s replay", reports.len());
    let end = summary(&jsonl(&out)).clone();
    for pair in reports.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        for key in ["packets", "uptime_seconds", "calls_written"] {
            assert!(a[key].as_u64() <= b[key].as_u64(), "{key} went back: {a} then {b}");
        }
    }
    for h in &reports {
        assert_eq!(h["input"], common::sample_capture().to_str().unwrap());
        assert_eq!(h["threads"], 2);
        assert_eq!(h["capture"], Value::Null, "files have no ring");
        assert_eq!(h["interfaces"], serde_json::json!([]));
        // The engine's count is the reader's, taken at the same moment.
        assert_eq!(h["engine"]["packets"], h["packets"], "{h}");
        for key in ["udp", "sip_messages", "rtp_in_calls", "streams"] {
            assert!(
                h["engine"][key].as_u64() <= end[key].as_u64(),
                "{key}: {h} beyond the summary {end}"
            );
        }
        assert!(h["memory"]["resident_bytes"].as_u64().unwrap() > 1_000_000);
        assert!(h["dropped"].as_object().unwrap().values().all(|v| v == 0));
    }
    let last = reports.last().unwrap();
    // Shards report each second of capture time: the last report is at
    // most a couple of seconds behind the end.
    assert!(
        last["engine"]["rtp_in_calls"].as_u64().unwrap() * 10
            >= end["rtp_in_calls"].as_u64().unwrap() * 8,
        "last report {last} far behind the summary {end}"
    );
    assert!(last["calls_written"].as_u64().unwrap() <= 3, "{last}: the capture has three calls");
}

/// A request carrying `auth` (an Authorization value) and a JSON body.
fn post(probe: &Probe, auth: Option<&str>, body: &str) -> Response {
    let mut headers = vec![];
    if let Some(a) = auth {
        headers.push(("Authorization", a));
    }
    request_with_body(probe.addr, "POST", "/api/rules", &headers, body.as_bytes())
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn rules(probe: &Probe) -> Value {
    let r = request(probe.addr, "GET", "/api/rules", &[("Authorization", &bearer(READ))]);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn rules_change_at_run_time_with_the_write_token_only() {
    let out = temp("rules.jsonl");
    let rules_file = temp("rules.toml");
    std::fs::write(
        &rules_file,
        "[[rule]]\nname = \"loopback\"\nnet = \"127.0.0.0/8\"\naction = \"track\"\n",
    )
    .unwrap();
    let token_file = temp("read.token");
    std::fs::write(&token_file, READ).unwrap();
    std::fs::set_permissions(&token_file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .unwrap();
    let args = [
        "--format",
        "jsonl",
        "-o",
        out.to_str().unwrap(),
        "--rules",
        rules_file.to_str().unwrap(),
        "--token-file",
        token_file.to_str().unwrap(),
    ];
    let mut probe =
        Probe::start_with(&common::sample_capture(), &args, &[("CALLIPER_WRITE_TOKEN", WRITE)]);
    let listed = rules(&probe);
    assert_eq!(listed["writable"], true);
    assert_eq!(listed["total"], 1, "{listed}");
    assert_eq!(listed["rules"][0]["name"], "loopback");
    assert_eq!(listed["rules"][0]["kind"], "wildcard");

    // Who may not change anything, and what is not a rule.
    let rule = r#"{"to_user": "1000", "action": "label", "label": "console"}"#;
    let basic = format!("Basic {}", server::base64_encode(format!("ops:{WRITE}").as_bytes()));
    for (auth, want) in [
        (None, 401),
        (Some(bearer(READ)), 403),
        (Some(basic), 401), // the write token is taken as a bearer token only
        (Some(bearer("write-token-0123456789abcdeF")), 401),
    ] {
        let r = post(&probe, auth.as_deref(), rule);
        assert_eq!(r.status, want, "{auth:?}: {}", r.text());
    }
    let w = bearer(WRITE);
    for (body, want) in [
        ("not json", 400),
        (r#"{"bogus": 1}"#, 400),
        (r#"{"a": "10.0.0.1:5060", "b": "10.0.0.2:5060"}"#, 400),
        (r#"{"net": "127.0.0.0/8", "from_user": "x"}"#, 400),
        (r#"{"action": "label"}"#, 400),
        (r#"{"port": 1, "action": "label", "label": "a\u202eb"}"#, 400),
        (&format!(r#"{{"port": 1, "name": "{}"}}"#, "n".repeat(65)), 400),
    ] {
        let r = post(&probe, Some(&w), body);
        assert_eq!(r.status, want, "{body}: {}", r.text());
        assert!(r.json()["error"].as_str().is_some());
    }
    let r = request_with_body(
        probe.addr,
        "POST",
        "/api/rules",
        &[("Authorization", &w), ("Content-Type", "text/plain")],
        rule.as_bytes(),
    );
    assert_eq!(r.status, 415, "{}", r.text());
    let big = format!(r#"{{"name": "{}"}}"#, "x".repeat(20_000));
    assert_eq!(post(&probe, Some(&w), &big).status, 413);
    assert_eq!(rules(&probe)["total"], 1, "a refused change changed the table");

    // The label rule, added while the replay runs.
    let r = post(&probe, Some(&w), rule);
    assert_eq!(r.status, 201, "{}", r.text());
    let added = r.json();
    assert_eq!(added["filter"], "to_user=1000");
    let id = added["id"].as_u64().unwrap();

    // The file's rule removed: gone from the list, and only once.
    let delete = |path: &str| request(probe.addr, "DELETE", path, &[("Authorization", &w)]).status;
    assert_eq!(delete("/api/rules/1"), 204);
    assert_eq!(delete("/api/rules/1"), 404);
    assert_eq!(delete("/api/rules/one"), 400);
    let r = request(probe.addr, "PUT", "/api/rules/1", &[("Authorization", &w)]);
    assert_eq!(r.status, 405);
    // A path that takes other methods says so, in JSON.
    let r = request(probe.addr, "GET", "/api/rules/1", &[("Authorization", &w)]);
    assert_eq!(r.status, 405);
    assert!(r.json()["error"].as_str().unwrap().contains("DELETE"));
    let listed = rules(&probe);
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["rules"][0]["id"], id);

    let started = Instant::now();
    assert!(probe.wait(), "the probe failed");
    assert!(started.elapsed() < Duration::from_secs(60));
    // What the rule did is in the records: the calls whose INVITE came
    // after it carry its label, and its hits count exactly those.
    let lines = jsonl(&out);
    let calls: Vec<&Value> = of_type(&lines, "call").collect();
    assert_eq!(calls.len(), 3);
    let labelled: Vec<&str> = calls
        .iter()
        .filter(|c| c["labels"].as_array().is_some_and(|l| l.iter().any(|x| x == "console")))
        .map(|c| c["call_id"].as_str().unwrap())
        .collect();
    assert!(
        labelled.contains(&"3-836@127.0.1.1") && labelled.len() >= 2,
        "the INVITEs at 1 and 2 s came after the rule: {labelled:?}"
    );
    let end = summary(&lines);
    let listed = end["rules"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{end}");
    assert_eq!(listed[0]["hits"], labelled.len() as u64, "{end}");
}

#[test]
fn a_console_without_a_probe_or_a_write_token_changes_nothing() {
    let s = Server::sample("norules.db");
    for path in ["/api/rules", "/api/health"] {
        let r = s.get(path, &[]);
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        assert!(r.json()["error"].as_str().unwrap().contains("probe"));
    }
    // It says which parts it serves, so the UI offers only those pages.
    let parts = s.get("/api/console", &[]).json();
    let want = serde_json::json!({"database": true, "live": false, "probe": false, "rules": false, "store": "sqlite"});
    assert_eq!(parts, want);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], s.addr.port()));
    let r = request_with_body(addr, "POST", "/api/rules", &[], b"{}");
    assert_eq!(r.status, 405);
    assert!(r.text().contains("read-only"), "{}", r.text());

    // A probe with rules but no write token lists them, read-only.
    let rules_file = temp("ro-rules.toml");
    std::fs::write(&rules_file, "[[rule]]\nport = 5060\n").unwrap();
    let args = ["-o", "/dev/null", "--rules", rules_file.to_str().unwrap()];
    let probe = Probe::start_with(&common::sample_capture(), &args, &[]);
    let parts = request(probe.addr, "GET", "/api/console", &[]).json();
    let want = serde_json::json!({"database": false, "live": true, "probe": true, "rules": true, "store": "none"});
    assert_eq!(parts, want);
    let r = request(probe.addr, "GET", "/api/rules", &[]);
    assert_eq!(r.json()["writable"], false);
    assert_eq!(r.json()["total"], 1);
    let r = request_with_body(probe.addr, "POST", "/api/rules", &[], b"{}");
    assert_eq!(r.status, 405, "{}", r.text());
}

#[test]
fn a_write_token_must_be_strong_and_differ_from_the_read_token() {
    for (read, write, says) in [(Some(READ), READ, "differ"), (None, "short", "at least 16")] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_calliper"));
        cmd.args(["probe", "--http", "127.0.0.1:0", "-o", "/dev/null", "--read"])
            .arg(common::sample_capture())
            .env("CALLIPER_WRITE_TOKEN", write)
            .env_remove("CALLIPER_TOKEN");
        if let Some(t) = read {
            cmd.env("CALLIPER_TOKEN", t);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "started with {write:?}");
        assert!(err.contains(says), "{err}");
    }
}

/// The HEP collector's refusals reach the probe's metrics: messages
/// without the key are counted in `calliper_probe_dropped_total` while the
/// probe runs, as the summary counts them at its end.
#[test]
fn hep_refusals_are_in_the_metrics() {
    let key = temp("hep.key");
    std::fs::write(&key, "the-key\n").unwrap();
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["probe", "--http", "127.0.0.1:0", "-o", "/dev/null"])
        .args(["--hep-listen", &format!("udp:127.0.0.1:{port}")])
        .arg("--hep-listen-key")
        .arg(&key)
        .env_remove("CALLIPER_TOKEN")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr = server::console_address(&mut child);
    let agent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (src, dst) = (([192, 0, 2, 1].into(), 5060), ([192, 0, 2, 2].into(), 5060));
    let options = b"OPTIONS sip:a@b SIP/2.0\r\n\r\n";
    use calliper_wire::hep::{kind, Hep};
    let unkeyed =
        Hep { capture_id: 1, ..Hep::udp(kind::SIP, src, dst, 0, options) }.emit().unwrap();
    for _ in 0..3 {
        agent.send_to(&unkeyed, ("127.0.0.1", port)).unwrap();
    }
    let want = "calliper_probe_dropped_total{what=\"hep_listen_unauthenticated\"} 3";
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut m = String::new();
    while !m.contains(want) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        m = request(addr, "GET", "/metrics", &[]).text();
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(m.contains(want), "{m}");
}
