//! Rules applied end to end on a real capture (`analyze --rules FILE`):
//! ignoring a subnet removes exactly its calls and packets, a SIP label lands
//! on exactly the calls tshark says come from a user prefix, a flow rule
//! selects exactly the calls tshark sees on that flow for recording; two
//! threads agree with one.

use crate::common;

use calliper_testkit::probe::of_type;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The capture: INVITEs to two providers, CANCELs and REGISTERs (MIT,
/// testdata/PROVENANCE.md), kept in the repository.
fn capture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/suricata__sip-method_sip.pcap")
}

/// Writes a rule file into a fresh directory and returns its path.
fn rule_file(name: &str, text: &str) -> PathBuf {
    let dir = calliper_testkit::captures::scratch_root().join(format!("rules-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("rules.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `analyze --format jsonl` without duplicate removal (so packet counts
/// compare with tshark's frames); returns (calls, summary).
fn analyze(extra: &[&str]) -> (Vec<Value>, Value) {
    let lines = common::calliper_jsonl(&capture(), &[&["--dedup-window", "0"], extra].concat());
    let calls = of_type(&lines, "call").cloned().collect();
    let summary = lines.iter().find(|l| l["type"] == "summary").unwrap().clone();
    (calls, summary)
}

fn call_ids(calls: &[Value]) -> BTreeSet<String> {
    calls.iter().map(|c| c["call_id"].as_str().unwrap().to_string()).collect()
}

/// Call-IDs of SIP messages tshark shows under `filter`.
fn tshark_call_ids(filter: &str) -> BTreeSet<String> {
    common::tshark(&capture(), &["-Y", filter, "-T", "fields", "-e", "sip.Call-ID"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Calls as text, sorted, with the given fields removed (for comparing runs).
fn without(calls: &[Value], fields: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = calls
        .iter()
        .map(|c| {
            let mut c = c.clone();
            for f in fields {
                c.as_object_mut().unwrap().remove(*f);
            }
            c.to_string()
        })
        .collect();
    v.sort();
    v
}

const IGNORE_SUBNET: &str = r#"
[[rule]]
name = "provider B"
net = "200.68.120.0/24"
action = "ignore"
"#;

#[test]
fn ignoring_a_subnet_removes_exactly_its_calls_and_packets() {
    let (all, base) = analyze(&[]);
    let rules = rule_file("ignore", IGNORE_SUBNET);
    let (kept, summary) = analyze(&["--rules", rules.to_str().unwrap()]);
    let in_subnet = |c: &Value| {
        ["caller_ip", "callee_ip"].iter().any(|k| c[k].as_str().unwrap().starts_with("200.68.120."))
    };
    let expected: Vec<Value> = all.iter().filter(|c| !in_subnet(c)).cloned().collect();
    assert!(expected.len() < all.len(), "the capture has a call in the subnet");
    assert!(!expected.is_empty(), "and calls outside it");
    // The other calls are unchanged, field for field.
    assert_eq!(without(&kept, &[]), without(&expected, &[]));
    // Every packet to or from the subnet was dropped, as tshark counts them.
    let frames =
        common::tshark(&capture(), &["-Y", "ip.addr==200.68.120.0/24"]).lines().count() as u64;
    assert!(frames > 0);
    assert_eq!(summary["rule_ignored_packets"], frames);
    assert_eq!(summary["rules"][0]["hits"], frames);
    assert_eq!(summary["rules"][0]["name"], "provider B");
    assert_eq!(summary["packets"], base["packets"]);
}

#[test]
fn a_sip_rule_labels_exactly_the_calls_from_a_user_prefix() {
    let (all, _) = analyze(&[]);
    let rules = rule_file(
        "label",
        "[[rule]]\nfrom_user = \"3510*\"\naction = \"label\"\nlabel = \"prefix-3510\"\n",
    );
    let (labelled, summary) = analyze(&["--rules", rules.to_str().unwrap()]);
    let with_label: Vec<Value> = labelled
        .iter()
        .filter(|c| c["labels"] == serde_json::json!(["prefix-3510"]))
        .cloned()
        .collect();
    let oracle = tshark_call_ids("sip.Method == \"INVITE\" && sip.from.user matches \"^3510\"");
    assert!(!oracle.is_empty() && oracle.len() < call_ids(&all).len());
    assert_eq!(call_ids(&with_label), oracle);
    // Nothing else changed: same calls, same figures.
    assert_eq!(without(&labelled, &["labels"]), without(&all, &[]));
    assert_eq!(summary["rules"][0]["hits"], with_label.len() as u64);
}

const RECORD_FLOW: &str = r#"
[[rule]]
net = "212.242.33.35/32"
port = 5060
protocol = "udp"
action = "record"
"#;

#[test]
fn a_network_rule_selects_exactly_the_calls_on_its_flow_for_recording() {
    let (all, _) = analyze(&[]);
    let rules = rule_file("record", RECORD_FLOW);
    let (calls, _) = analyze(&["--rules", rules.to_str().unwrap()]);
    let selected: Vec<Value> =
        calls.iter().filter(|c| c["record_payload"] == true).cloned().collect();
    // tshark: Call-IDs of SIP on that flow that are calls (have an INVITE).
    let on_flow = tshark_call_ids("sip && ip.addr==212.242.33.35 && udp.port==5060");
    let oracle: BTreeSet<String> = call_ids(&all).intersection(&on_flow).cloned().collect();
    assert!(!oracle.is_empty() && oracle.len() < call_ids(&all).len());
    assert_eq!(call_ids(&selected), oracle);
    assert_eq!(without(&calls, &["record_payload"]), without(&all, &[]));
}

#[test]
fn two_threads_apply_rules_as_one_does() {
    let text = format!("{IGNORE_SUBNET}{RECORD_FLOW}[[rule]]\nfrom_user = \"3510*\"\naction = \"label\"\nlabel = \"x\"\n");
    let rules = rule_file("threads", &text);
    let (one, s1) = analyze(&["--rules", rules.to_str().unwrap()]);
    let (two, s2) = analyze(&["--rules", rules.to_str().unwrap(), "--threads", "2"]);
    assert_eq!(without(&one, &[]), without(&two, &[]));
    assert_eq!(s1["rules"], s2["rules"], "hits are counted once, not per thread");
    assert_eq!(s1["rule_ignored_packets"], s2["rule_ignored_packets"]);
}

#[test]
fn a_bad_rule_file_is_refused_naming_the_rule() {
    let rules =
        rule_file("bad", "[[rule]]\nnet = \"10.0.0.0/8\"\n[[rule]]\nnet = \"10.0.0.1/8\"\n");
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--rules", rules.to_str().unwrap()])
        .arg(capture())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rule 2") && err.contains("host bits"), "{err}");
    assert!(out.stdout.is_empty(), "nothing analysed with a broken rule file");
}
