//! rtpengine → Calliper over HEP (tests/netns/hep_rtcp.sh): rtpengine relays
//! a baresip call's media and sends each RTCP packet it relays to
//! `calliper probe --hep-listen` as HEP type 5 (JSON), while Kamailio
//! mirrors the call's SIP there. The probe never sees the media, yet the
//! call's record carries the RTCP reports: one entry per reporter and
//! source SSRC, whose count, largest fraction lost, last cumulative lost
//! and largest jitter equal what tshark reads in the RTCP packets the
//! proxy received, compared both ways.

use crate::common;
use calliper_testkit::probe::of_type;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// (reporter address, port, reporter SSRC, source SSRC) → (reports, largest
/// fraction lost /256, last cumulative lost, largest jitter), from tshark.
type Blocks = BTreeMap<(String, u64, u64, u64), (u64, u64, i64, u64)>;

fn tshark_blocks(pcap: &Path) -> Blocks {
    let out = common::tshark_fields(
        pcap,
        &["-E", "occurrence=f"],
        "rtcp.ssrc.fraction",
        &[
            "ip.src",
            "udp.srcport",
            "rtcp.senderssrc",
            "rtcp.ssrc.identifier",
            "rtcp.ssrc.fraction",
            "rtcp.ssrc.cum_nr",
            "rtcp.ssrc.jitter",
        ],
    );
    let mut blocks = Blocks::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let key = (f[0].to_string(), f[1].parse().unwrap(), hex(f[2]), hex(f[3]));
        let (fraction, cum, jitter): (u64, i64, u64) =
            (f[4].parse().unwrap(), f[5].parse().unwrap(), f[6].parse().unwrap());
        let e = blocks.entry(key).or_insert((0, 0, 0, 0));
        *e = (e.0 + 1, e.1.max(fraction), cum, e.3.max(jitter));
    }
    blocks
}

#[test]
fn rtpengine_rtcp_over_hep_joins_the_call() {
    let _turn = crate::turn();
    let Some((dir, log)) = common::run_namespace_rig("tests/netns/hep_rtcp.sh", "hep-rtcp") else {
        return;
    };
    let probe_log = std::fs::read_to_string(dir.join("hep-probe.log")).unwrap_or_default();
    let lines: Vec<Value> = std::fs::read_to_string(dir.join("hep.jsonl"))
        .unwrap_or_else(|e| panic!("no output ({e}):\n{probe_log}\n{log}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls: Vec<&Value> = of_type(&lines, "call").collect();
    assert_eq!(calls.len(), 1, "{probe_log}");
    let call = calls[0];
    assert_eq!((&call["final_status"], &call["state"]), (&200.into(), &"completed".into()));
    assert_eq!(call["streams"], serde_json::json!([]), "the probe saw no media");
    let mut reported = Blocks::new();
    for r in call["agent_reports"].as_array().unwrap_or(&Vec::new()) {
        assert_eq!(r["kind"], "rtcp", "{r}");
        let key = (
            r["src"].as_str().unwrap().to_string(),
            r["src_port"].as_u64().unwrap(),
            r["ssrc"].as_u64().unwrap(),
            r["source_ssrc"].as_u64().unwrap(),
        );
        let fraction = r["max_fraction_lost_percent"].as_f64().unwrap() * 256.0 / 100.0;
        let value = (
            r["reports"].as_u64().unwrap(),
            fraction.round() as u64,
            r["cumulative_lost"].as_i64().unwrap(),
            r["max_jitter_units"].as_u64().unwrap(),
        );
        assert!(reported.insert(key, value).is_none(), "one entry per pair");
    }
    let captured = tshark_blocks(&dir.join("rtcp.pcap"));
    assert!(captured.len() >= 2, "baresip sent RTCP both ways: {captured:?}\n{log}");
    assert_eq!(reported, captured, "agent reports against tshark\n{probe_log}");
    let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
    let blocks: u64 = captured.values().map(|v| v.0).sum();
    assert_eq!(summary["hep_reports"], blocks, "{summary}");
    std::fs::remove_dir_all(&dir).ok();
}
