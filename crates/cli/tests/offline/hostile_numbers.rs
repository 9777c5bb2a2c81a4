//! Hostile input, round three: numbers that cannot be faked. One test per
//! case of the attacker review (docs/hostile-input.md), each on a capture
//! built by `common::forged`, with one thread and with two.

use crate::common;

use calliper_testkit::probe::of_type;
use common::forged;
use common::runs::{both_ways, small, Run, SMALL_RSS_KIB};
use serde_json::Value;

/// A scan of `n` attempts: `n` calls, each failed with the server's 404,
/// and one scanning alert. The calls and the alert.
fn refused_scan(run: &Run, n: usize) -> (Vec<&Value>, &Value) {
    let calls = run.calls();
    assert_eq!(calls.len(), n);
    for c in &calls {
        let failed = (&Value::from("failed"), &Value::from(404));
        assert_eq!((&c["state"], &c["final_status"]), failed, "{c}");
    }
    (calls, run.only_alert("scanning"))
}

#[test]
fn fake_answers_from_a_scanner_are_not_answers() {
    let run = small("fake-answers", &forged::fake_answers(25));
    let (calls, scanning) = refused_scan(&run, 25);
    for c in &calls {
        assert!(c["answer_ns"].is_null(), "{c}");
    }
    let summary = run.summary();
    assert_eq!(summary["anomalies"]["sip_response_unmatched"], 25);
    assert_eq!(scanning["source"], "192.0.2.66");
}

#[test]
fn foreign_media_does_not_join_the_call() {
    let run = small("foreign-media", &forged::foreign_media());
    let call = run.only_call();
    let streams = call["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "{streams:?}");
    for s in streams {
        assert_ne!(s["src"], "10.0.9.9", "{s}");
        assert_eq!(s["lost"], 0);
    }
    assert!(call["worst_mos"].as_f64().unwrap() > 4.0, "{call}");
    assert!(run.alerts("low_mos").is_empty() && run.alerts("high_loss").is_empty());
    // 400 packets sent, every third lost: 266 refused, counted.
    assert_eq!(run.summary()["rtp_foreign"], 266);
}

#[test]
fn outage_counts_as_loss_not_as_a_restart() {
    let run = small("outage", &forged::outage());
    let calls = run.calls();
    let streams = calls[0]["streams"].as_array().unwrap();
    let caller = streams.iter().find(|s| s["direction"] == "caller_to_callee").unwrap();
    assert_eq!(
        (&caller["lost"], &caller["seq_resets"], &caller["seq_outages"]),
        (&Value::from(3000), &Value::from(0), &Value::from(1)),
        "{caller}"
    );
    assert!(calls[0]["worst_mos"].as_f64().unwrap() < 3.0, "{}", calls[0]);
}

#[test]
fn silent_call_without_bye_raises_no_rtp() {
    // Cut off by the end of input 60 s on, and expired idle (300 s) 400 s on.
    for later_s in [60, 400] {
        let name = format!("silent-{later_s}");
        let run = small(&name, &forged::silent_call(later_s));
        assert_eq!(run.only_alert("no_rtp")["call_id"], "silent", "{name}");
    }
}

#[test]
fn display_name_cannot_stand_in_for_the_uri() {
    let run = small("display-name", &forged::display_name_uri());
    let from = &run.calls()[0]["from"];
    assert_eq!(from["user"], "attacker");
    assert_eq!(from["uri"], "sip:attacker@evil.example");
    assert_eq!(from["display_name"], "<sip:boss@corp.example>");
}

#[test]
fn time_series_gaps_of_days_stay_small_and_alike() {
    // 20 packets 22 hours apart (1.5 days was 100 008 rows, 164 180 with
    // two threads, and 274 MB; more than a day between lone packets is
    // now not believed: time_jumps.rs).
    let run = small("quiet-gaps", &forged::quiet_gaps(20, 79_200));
    let rows: Vec<&Value> = of_type(&run.lines, "traffic").collect();
    // Each gap: 30 quiet rows one by one, then one spanning the rest.
    assert_eq!(rows.len(), 20 + 19 * 31, "{}", rows.len());
    let spans: i64 =
        rows.iter().map(|r| r["end_ns"].as_i64().unwrap() - r["start_ns"].as_i64().unwrap()).sum();
    assert_eq!(spans, 19 * 79_200 * 1_000_000_000 + 10_000_000_000, "rows cover the capture");
}

#[test]
fn rule_ignored_media_is_counted_alike_with_threads() {
    let rules = calliper_testkit::captures::scratch_root().join("ignore-media.toml");
    let rule = "[[rule]]\nprotocol = \"udp\"\na = \"10.0.0.1:40000\"\nb = \"10.0.0.2:30000\"\naction = \"ignore\"\n";
    std::fs::write(&rules, rule).unwrap();
    let run = both_ways(
        "rule-ignored-media",
        &forged::call_with_media(),
        &["--rules", rules.to_str().unwrap()],
        SMALL_RSS_KIB,
    );
    // The flow's packets both ways: 250 each.
    assert_eq!(run.summary()["rule_ignored_packets"], 500);
    std::fs::remove_file(&rules).ok();
}

#[test]
fn anomaly_events_are_dated_by_their_packet() {
    let run = both_ways(
        "anomaly-time",
        &forged::anomaly_mid_group(),
        &["--events", "anomalies"],
        SMALL_RSS_KIB,
    );
    let events: Vec<&Value> = of_type(&run.lines, "anomaly").collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["kind"], "sip_missing_call_id");
    assert_eq!(events[0]["ts_ns"], forged::ANOMALY_AT);
}

#[test]
fn a_scanner_answering_copies_of_its_own_is_not_answered() {
    let run = small("self-answered", &forged::self_answered_copies(25));
    refused_scan(&run, 25);
}

#[test]
fn a_bye_from_outside_the_call_does_not_end_it() {
    let run = small("outsider-bye", &forged::outsider_bye());
    let c = &run.calls()[0];
    assert_eq!(c["state"], "answered", "{c}");
    assert!(c["hangup_by"].is_null(), "{c}");
    assert!(c["duration_ms"].as_f64().unwrap() > 9_000.0, "{c}");
    assert_eq!(run.summary()["anomalies"]["sip_request_from_outsider"], 1);
}

#[test]
fn behind_nat_only_the_signalling_address_sends_the_callers_media() {
    let run = small("nat-stranger", &forged::natted_caller_and_a_stranger());
    let streams = run.calls()[0]["streams"].as_array().unwrap().clone();
    let sources: Vec<&str> = streams.iter().map(|s| s["src"].as_str().unwrap()).collect();
    assert_eq!(sources.len(), 2, "{sources:?}");
    assert!(sources.contains(&"203.0.113.5") && !sources.contains(&"203.0.113.77"), "{sources:?}");
    assert_eq!(run.summary()["rtp_foreign"], 125);
}

#[test]
fn an_outsiders_own_leg_neither_answers_nor_ends_the_call() {
    let run = small("outsider-legs", &forged::outsider_legs());
    let c = &run.calls()[0];
    assert_eq!(
        (&c["state"], &c["final_status"]),
        (&Value::from("completed"), &Value::from(200)),
        "{c}"
    );
    // Ended by the callee's BYE (a hop), not the outsider's.
    assert_eq!(c["hangup_by"], "callee", "{c}");
    assert!(c["duration_ms"].as_f64().unwrap() > 10_000.0, "{c}");
    let streams = c["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "{streams:?}");
    let summary = run.summary();
    assert_eq!(summary["rtp_foreign"], 125);
    assert!(summary["anomalies"]["sip_request_from_outsider"].as_u64().unwrap() >= 1, "{summary}");
}

#[test]
fn another_calls_sdp_cannot_take_this_calls_media() {
    let run = small("sdp-thief", &forged::sdp_of_another_call());
    let victim = run.calls().into_iter().find(|c| c["call_id"] == "victim").unwrap().clone();
    assert_eq!(victim["t38_packets"], 0, "{victim}");
    let caller = victim["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["direction"] == "caller_to_callee")
        .unwrap()
        .clone();
    // Every third lost, the first included (not counted: nothing came before it).
    assert_eq!(caller["lost"], 166, "{caller}");
    assert_eq!(run.summary()["anomalies"]["sdp_media_of_another_call"], 1);
}
