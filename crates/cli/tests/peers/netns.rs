//! Real peers in network namespaces (tests/netns/run.sh): SIPp and baresip
//! calls through a record-routing Kamailio, UDP on one leg and TCP on the
//! other, with nftables dropping RTP in the proxy. Calliper must report, per
//! stream, exactly the loss nftables counted, and each call's two legs as
//! one call. Meanwhile `calliper probe` (two threads) runs live on the
//! proxy's two interfaces, keeping what the proxy sends: its records must
//! equal `calliper analyze` of tcpdump's capture of the same packets, its
//! loss nftables' counts, and it must have lost nothing itself. Kamailio
//! also mirrors its SIP as HEP3 (siptrace, with a key) to a second probe
//! that only listens for HEP: its calls must be the captured calls.

use crate::common::{self, calliper_jsonl};
use calliper_testkit::probe::of_type;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

type Key = (String, u64, String, u64);

fn drop_counters(path: &Path) -> HashMap<Key, u64> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = HashMap::new();
    for item in v["nftables"].as_array().unwrap() {
        for e in item["set"]["elem"].as_array().into_iter().flatten() {
            let c = &e["elem"]["val"]["concat"];
            let key = (
                c[0].as_str().unwrap().to_string(),
                c[1].as_u64().unwrap(),
                c[2].as_str().unwrap().to_string(),
                c[3].as_u64().unwrap(),
            );
            out.insert(key, e["elem"]["counter"]["packets"].as_u64().unwrap());
        }
    }
    out
}

#[test]
fn calls_through_kamailio_report_the_loss_nftables_counted() {
    let _turn = crate::turn();
    let (mut rig, dir) = common::rig("tests/netns/run.sh", "netns");
    rig.arg("3");
    let Some(log) = common::namespace_rig(&mut rig, "tests/netns/run.sh") else {
        return;
    };
    // A capture that itself lost packets would show loss nftables never made.
    for side in ["a", "b", "pa", "pb"] {
        let log =
            std::fs::read_to_string(dir.join(format!("tcpdump-{side}.log"))).unwrap_or_default();
        let kernel_drops: u64 = log
            .lines()
            .find(|l| l.contains("dropped by kernel"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        assert_eq!(
            kernel_drops, 0,
            "tcpdump on side {side} lost packets (machine overloaded?): the loss comparison would be meaningless\n{log}"
        );
    }
    let drops = drop_counters(&dir.join("drops.json"));
    let lines = calliper_jsonl(&dir.join("calls.pcap"), &[]);
    let calls: Vec<&Value> = of_type(&lines, "call").collect();
    // Three SIPp calls and one baresip call, each seen on both legs.
    assert_eq!(calls.len(), 4, "{log}");
    let mut compared = 0;
    let mut dropped = 0;
    for c in &calls {
        assert_eq!(c["invites"], 2, "both legs' INVITEs in one call: {c}");
        assert_eq!(c["final_status"], 200);
        assert_eq!(c["state"], "completed");
        let streams = c["streams"].as_array().unwrap();
        assert_eq!(streams.len(), 2, "{c}");
        for s in streams {
            let key = (
                s["src"].as_str().unwrap().to_string(),
                s["src_port"].as_u64().unwrap(),
                s["dst"].as_str().unwrap().to_string(),
                s["dst_port"].as_u64().unwrap(),
            );
            let want = drops.get(&key).copied().unwrap_or(0);
            assert_eq!(s["lost"].as_u64().unwrap(), want, "{key:?}");
            compared += 1;
            dropped += want;
            if key.1 >= 40_000 {
                // baresip sends RTCP; its receiver reports never exceed the truth.
                assert!(s["rtcp_reports"].as_u64().unwrap() > 0, "{key:?}");
                assert!(s["rtcp_cumulative_lost"].as_u64().unwrap() <= want, "{key:?}");
            }
        }
    }
    assert_eq!(compared, 8);
    assert!(dropped > 0, "nftables dropped nothing: the test would prove nothing");
    probe_equals_offline_analysis(&dir, &drops, &log);
    hep_feed_gives_the_captured_calls(&dir, &lines, &log);
    std::fs::remove_dir_all(&dir).ok();
}

/// The live probe's records equal the offline analysis of tcpdump's capture
/// of the same packets, line for line (tcpdump writes nanosecond times, and
/// both read the kernel's timestamp of each packet); each stream's loss
/// equals nftables' count; the probe's kernel ring dropped nothing.
fn probe_equals_offline_analysis(dir: &Path, drops: &HashMap<Key, u64>, log: &str) {
    let probe_log = std::fs::read_to_string(dir.join("probe.log")).unwrap_or_default();
    // Records compared line for line; the time series by its IPv4 UDP and
    // TCP packet total (live, quiet intervals pass by the clock and are
    // reported empty). The interfaces' own IPv6 and ARP chatter is left out:
    // it comes when it likes, and may fall between tcpdump's start and the
    // probe's (CI once saw one such packet more in tcpdump's capture).
    let records = |lines: Vec<Value>| -> (Vec<String>, Value, u64) {
        // KPI rows add up: a live run splits them by the clock.
        let lines = common::kpi_rows_summed(lines);
        let summary = lines.iter().find(|l| l["type"] == "summary").cloned();
        let traffic = of_type(&lines, "traffic")
            .flat_map(|l| l["protocols"].as_array().unwrap())
            .filter(|p| {
                p["network"] == "ipv4" && (p["transport"] == "udp" || p["transport"] == "tcp")
            })
            .map(|p| p["packets"].as_u64().unwrap())
            .sum();
        let mut rest: Vec<String> = lines
            .iter()
            .filter(|l| l["type"] != "summary" && l["type"] != "traffic")
            .map(|l| l.to_string())
            .collect();
        rest.sort();
        (rest, summary.unwrap_or(Value::Null), traffic)
    };
    let text = std::fs::read_to_string(dir.join("probe.jsonl"))
        .unwrap_or_else(|e| panic!("the probe wrote no output ({e}):\n{probe_log}\n{log}"));
    let (live, summary, live_packets) =
        records(text.lines().map(|l| serde_json::from_str(l).unwrap()).collect());
    let (offline, _, offline_packets) = records(calliper_jsonl(&dir.join("proxy.pcap"), &[]));
    assert_eq!(live_packets, offline_packets, "time series packets");
    let calls = live.iter().filter(|l| l.contains("\"type\":\"call\"")).count();
    assert_eq!(calls, 4, "four calls live:\n{probe_log}");
    assert_eq!(live, offline, "live records differ from the offline analysis");
    assert_eq!(summary["capture"]["dropped"], 0, "{summary}");
    assert!(summary["capture"]["received"].as_u64().unwrap() > 0);
    for line in &live {
        let c: Value = serde_json::from_str(line).unwrap();
        if c["type"] != "call" {
            continue;
        }
        assert_eq!(c["capture_dropped"], 0);
        assert!(c.get("ongoing").is_none(), "ended before the probe stopped: {c}");
        for s in c["streams"].as_array().unwrap() {
            let key = (
                s["src"].as_str().unwrap().to_string(),
                s["src_port"].as_u64().unwrap(),
                s["dst"].as_str().unwrap().to_string(),
                s["dst_port"].as_u64().unwrap(),
            );
            assert_eq!(s["lost"].as_u64(), drops.get(&key).copied(), "{key:?}");
        }
    }
}

/// `calliper probe --hep-listen` fed by Kamailio's siptrace (HEP3 over UDP,
/// with a key) writes the calls `calliper analyze` finds in the capture of
/// both legs: the same Call-IDs, parties, status, state and message counts,
/// and times within 20 ms (the agent stamps a message when Kamailio handles
/// it, the capture when the endpoint's kernel sees it). HEP carries no
/// media, so the calls have no streams.
fn hep_feed_gives_the_captured_calls(dir: &Path, captured: &[Value], log: &str) {
    let probe_log = std::fs::read_to_string(dir.join("hep-probe.log")).unwrap_or_default();
    let text = std::fs::read_to_string(dir.join("hep.jsonl"))
        .unwrap_or_else(|e| panic!("the HEP probe wrote no output ({e}):\n{probe_log}\n{log}"));
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
    let hep = &summary["hep_listen"];
    assert!(hep["received"].as_u64().unwrap() > 0, "{summary}\n{probe_log}");
    assert_eq!(hep["received"], summary["hep"], "every message read as HEP: {summary}");
    for counter in ["dropped", "unauthenticated", "malformed", "too_long"] {
        assert_eq!(hep[counter], 0, "{counter}: {summary}");
    }
    assert_eq!(summary["anomalies"], serde_json::json!({}), "{summary}");
    let by_id = |lines: &[Value]| -> std::collections::BTreeMap<String, Value> {
        of_type(lines, "call")
            .map(|c| (c["call_id"].as_str().unwrap().to_string(), c.clone()))
            .collect()
    };
    let (fed, want) = (by_id(&lines), by_id(captured));
    assert_eq!(fed.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{probe_log}");
    assert_eq!(fed.len(), 4);
    for (id, c) in &fed {
        let w = &want[id];
        for field in [
            "caller_ip",
            "caller_port",
            "callee_ip",
            "callee_port",
            "from",
            "to",
            "caller_user_agent",
            "callee_user_agent",
            "final_status",
            "final_reason",
            "state",
            "hangup_by",
            "hangup_reason",
            "invites",
            "sip_messages",
            "setup_delay_to_failure",
        ] {
            assert_eq!(c.get(field), w.get(field), "{id}: {field}");
        }
        for field in ["invite_ns", "first_provisional_ns", "ringing_ns", "answer_ns", "end_ns"] {
            let (a, b) = (c[field].as_i64(), w[field].as_i64());
            assert_eq!(a.is_some(), b.is_some(), "{id}: {field}");
            if let (Some(a), Some(b)) = (a, b) {
                assert!((a - b).abs() < 20_000_000, "{id}: {field} {a} against {b}");
            }
        }
        assert_eq!(c["streams"], serde_json::json!([]), "{id}: HEP carries no media");
    }
}
