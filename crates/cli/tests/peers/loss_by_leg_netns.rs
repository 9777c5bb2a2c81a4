//! Which leg lost the packets: SIPp calls through Kamailio with rtpengine
//! relaying the media (tests/netns/media_relay.sh), and again with
//! Calliper's edge node in rtpengine's place (Kamailio's `rtpengine` module
//! steering the calls into it over the ng protocol); nftables dropping RTP
//! at three points (the relay's output to each party, the callee's device)
//! and nowhere else. The console's call detail must charge each hop of
//! each direction exactly what nftables dropped on it, and the relayed hop
//! of a direction must carry the loss of the hop before it as well.

use crate::common;
use crate::server::{temp, Server};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// Each drop point's counters by `src:port>dst:port`.
fn drop_counters(path: &Path) -> HashMap<String, HashMap<String, u64>> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out: HashMap<String, HashMap<String, u64>> = HashMap::new();
    for listing in v.as_array().unwrap() {
        for item in listing["nftables"].as_array().unwrap() {
            let Some(set) = item.get("set") else { continue };
            let counts = out.entry(set["name"].as_str().unwrap().to_string()).or_default();
            for e in set["elem"].as_array().into_iter().flatten() {
                let c = &e["elem"]["val"]["concat"];
                let key = format!(
                    "{}:{}>{}:{}",
                    c[0].as_str().unwrap(),
                    c[1],
                    c[2].as_str().unwrap(),
                    c[3]
                );
                counts.insert(key, e["elem"]["counter"]["packets"].as_u64().unwrap());
            }
        }
    }
    out
}

fn hop_key(h: &Value) -> String {
    format!("{}>{}", h["src"].as_str().unwrap(), h["dst"].as_str().unwrap())
}

#[test]
fn each_hop_is_charged_the_loss_nftables_made_on_it() {
    let _turn = crate::turn();
    // One after the other: two rigs at once would share two vCPUs.
    for relay in ["rtpengine", "calliper"] {
        if !hops_are_charged(relay) {
            return;
        }
    }
}

/// The rig with `relay` relaying; false when namespaces cannot be made
/// and skipping them was asked for.
fn hops_are_charged(relay: &str) -> bool {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = calliper_testkit::captures::scratch_root().join(format!("legs-{relay}"));
    let mut rig = Command::new(root.join("tests/netns/media_relay.sh"));
    rig.arg(&dir).arg("3").env("RELAY", relay).env("CALLIPER", env!("CARGO_BIN_EXE_calliper"));
    let Some(log) = common::namespace_rig(&mut rig, "tests/netns/media_relay.sh") else {
        return false;
    };

    let drops = drop_counters(&dir.join("drops.json"));
    if relay == "calliper" {
        edge_served_every_call(&dir, &log, &drops);
    }
    let db = temp("legs.db");
    common::analyze_into_db(&dir.join("relay.pcap"), &db, &[]);
    let s = Server::on(&db);
    let calls = s.get("/api/calls", &[]).json()["calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 3, "{log}");
    let mut charged: HashMap<&str, u64> = HashMap::new();
    for c in &calls {
        let detail = s.get(&format!("/api/calls/{}", c["id"]), &[]).json();
        assert_eq!(
            detail["streams"].as_array().unwrap().len(),
            4,
            "two legs, two directions: {detail}"
        );
        let paths = detail["loss_by_leg"].as_array().unwrap();
        assert_eq!(paths.len(), 2, "{}", detail["loss_by_leg"]);
        for path in paths {
            let hops = path["hops"].as_array().unwrap();
            assert_eq!(hops.len(), 2, "{path}");
            // Relayed unchanged: the second hop inherits the first's loss.
            assert_eq!(hops[1]["relayed"], true, "{path}");
            let (first, second) = (&hops[0], &hops[1]);
            let lost = |h: &Value, k: &str| h[k].as_u64().unwrap();
            assert_eq!(
                lost(second, "lost"),
                lost(first, "lost") + lost(second, "introduced"),
                "{path}"
            );
            // Which drop point sits on each hop, and which hop has none.
            let (first_point, second_point) = match path["direction"].as_str().unwrap() {
                "caller_to_callee" => {
                    assert!(first["src"].as_str().unwrap().starts_with("10.90.1.2:"), "{path}");
                    (None, "relay_to_callee")
                }
                "callee_to_caller" => {
                    assert!(first["src"].as_str().unwrap().starts_with("10.90.2.2:"), "{path}");
                    (Some("callee_to_relay"), "relay_to_caller")
                }
                d => panic!("direction {d}"),
            };
            let truth = |point: Option<&str>, hop: &Value| {
                point.map_or(0, |p| {
                    drops.get(p).and_then(|d| d.get(&hop_key(hop))).copied().unwrap_or(0)
                })
            };
            assert_eq!(lost(first, "introduced"), truth(first_point, first), "{path}\n{drops:?}");
            assert_eq!(
                lost(second, "introduced"),
                truth(Some(second_point), second),
                "{path}\n{drops:?}"
            );
            *charged.entry(second_point).or_default() += lost(second, "introduced");
            if let Some(p) = first_point {
                *charged.entry(p).or_default() += lost(first, "introduced");
            }
        }
    }
    for point in ["relay_to_callee", "relay_to_caller", "callee_to_relay"] {
        let made: u64 = drops.get(point).map_or(0, |d| d.values().sum());
        assert!(made > 0, "nftables dropped nothing at {point}: the test would prove nothing");
        assert_eq!(charged.get(point).copied().unwrap_or(0), made, "{relay}: {point}");
    }
    std::fs::remove_dir_all(&dir).ok();
    true
}

/// Calliper's edge answered Kamailio's offer, answer and delete of each of
/// the three calls without an error, and relayed their media; the sends
/// that failed are exactly those nftables dropped in its output.
fn edge_served_every_call(dir: &Path, log: &str, drops: &HashMap<String, HashMap<String, u64>>) {
    let text = std::fs::read_to_string(dir.join("edge-stats.json"))
        .unwrap_or_else(|e| panic!("the edge wrote no counters ({e}):\n{log}"));
    let stats: Value = serde_json::from_str(&text).unwrap();
    let c = &stats["edge"]["control"];
    for (key, want) in [("offers", 3), ("answers", 3), ("deletes", 3), ("errors", 0)] {
        assert_eq!(c[key], want, "{key}: {stats}");
    }
    let dropped_on_output: u64 = ["relay_to_callee", "relay_to_caller"]
        .iter()
        .filter_map(|p| drops.get(*p))
        .flat_map(|d| d.values())
        .sum();
    assert!(dropped_on_output > 0, "{drops:?}");
    assert_eq!(stats["edge"]["send_errors"], dropped_on_output, "{stats}");
    assert!(c["media_relayed"].as_u64().unwrap() > 1000, "{stats}");
}
