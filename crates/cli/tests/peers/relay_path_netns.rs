//! The relay in the call path (tests/netns/relay_path.sh): SIPp calls
//! steered by two Kamailio proxies, with `rtpengine_manage()` as shipped,
//! across caller — edge A — core — edge C — callee, where nftables drops
//! 5 % of all UDP but SIP at random wherever a link leaves a node. Through
//! rtpengine at both edges (the baseline) the parties lose about a tenth of
//! the media; through Calliper's overlay (edge, core and edge nodes, keyed
//! links) nearly nothing, while a forger owning edge A's address sends the
//! core made-up datagrams of every kind. Measured at each party by `calliper
//! probe`, and late packets by tshark's reading of the same interface.

use crate::common;
use calliper_testkit::probe::of_type;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const CALLS: u64 = 16;
/// Packets in SIPp's g711a.pcap, which each party plays once per call.
const PER_CALL: u64 = 236;
/// Made-up datagrams of each of the five kinds the forger sends.
const FORGED: u64 = 100;

/// What one party received of the other's media, over all calls.
#[derive(Debug, Default)]
struct Received {
    /// Packets sent (every call plays the whole file).
    sent: u64,
    /// Packets received (each once).
    received: u64,
    /// Arrived more than 100 ms after the fastest packet of their stream
    /// would have put them (too late for a 100 ms buffer).
    late: u64,
}

impl Received {
    fn percent(n: u64, of: u64) -> f64 {
        100.0 * n as f64 / of.max(1) as f64
    }
    fn lost(&self) -> u64 {
        self.sent - self.received
    }
    fn loss(&self) -> f64 {
        Self::percent(self.lost(), self.sent)
    }
    /// Lost, or too late for a 100 ms buffer.
    fn residual(&self) -> f64 {
        Self::percent(self.lost() + self.late, self.sent)
    }
}

/// Runs the rig with `relay`; None when namespaces cannot be made here.
fn run(relay: &str) -> Option<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = calliper_testkit::captures::scratch_root().join(format!("path-{relay}"));
    let mut rig = Command::new(root.join("tests/netns/relay_path.sh"));
    rig.arg(&dir)
        .arg(CALLS.to_string())
        .arg("5")
        .arg(FORGED.to_string())
        .env("RELAY", relay)
        .env("CALLIPER", env!("CARGO_BIN_EXE_calliper"));
    common::namespace_rig(&mut rig, "tests/netns/relay_path.sh")?;
    Some(dir)
}

/// Each RTP packet to `party` in the capture, by source port and SSRC
/// (every call plays the same file, SSRC and all): (seq, timestamp,
/// arrival in s), as tshark reads them.
fn tshark_rtp(pcap: &Path, party: &str) -> HashMap<String, Vec<(u16, u32, f64)>> {
    // Not the copies quoted in ICMP errors (a party's port not yet open).
    let filter = format!("rtp && !icmp && ip.dst == {party}");
    let fields = ["udp.srcport", "rtp.ssrc", "rtp.seq", "rtp.timestamp", "frame.time_epoch"];
    let listed =
        common::tshark_fields(pcap, &["-d", "udp.port==40000-40999,rtp"], &filter, &fields);
    let mut by_stream: HashMap<String, Vec<(u16, u32, f64)>> = HashMap::new();
    for line in listed.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), fields.len(), "tshark line {line:?}");
        let packet = (f[2].parse().unwrap(), f[3].parse().unwrap(), f[4].parse().unwrap());
        by_stream.entry(format!("{}/{}", f[0], f[1])).or_default().push(packet);
    }
    by_stream
}

/// Packets later than 100 ms past the stream's fastest transit (arrival
/// less the RTP timestamp at 8 kHz, both from the stream's first packet).
fn late_for_100ms(packets: &[(u16, u32, f64)]) -> u64 {
    let (_, ts0, t0) = packets[0];
    let transit: Vec<f64> = packets
        .iter()
        .map(|&(_, ts, t)| (t - t0) - ts.wrapping_sub(ts0) as i32 as f64 / 8000.0)
        .collect();
    let fastest = transit.iter().copied().fold(f64::INFINITY, f64::min);
    transit.iter().filter(|&&d| d - fastest > 0.100).count() as u64
}

/// What `party` received: the probe's streams to it, each checked against
/// tshark's count of the same stream (both ways: no stream in one alone).
fn received(dir: &Path, name: &str, party: &str) -> Received {
    let lines: Vec<Value> = std::fs::read_to_string(dir.join(format!("{name}.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls: Vec<&Value> = of_type(&lines, "call").collect();
    assert_eq!(calls.len() as u64, CALLS, "{name}: {calls:?}");
    let mut tshark = tshark_rtp(&dir.join(format!("{name}.pcap")), party);
    let mut got = Received::default();
    for s in calls.iter().flat_map(|c| c["streams"].as_array().unwrap()) {
        if s["dst"] != party {
            continue;
        }
        let ssrc = format!("{}/0x{:08x}", s["src_port"], s["ssrc"].as_u64().unwrap());
        let packets =
            tshark.remove(&ssrc).unwrap_or_else(|| panic!("{name}: tshark has no stream {ssrc}"));
        assert_eq!(s["packets"], packets.len() as u64, "{name} {ssrc}: {s}");
        got.sent += PER_CALL;
        got.received += packets.len() as u64;
        got.late += late_for_100ms(&packets);
    }
    assert!(tshark.is_empty(), "{name}: streams the probe missed: {tshark:?}");
    assert_eq!(got.sent, CALLS * PER_CALL, "{name}: {got:?}");
    got
}

/// nftables' drops at each link end (x1, c1, c2, x2).
fn link_drops(dir: &Path) -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(dir.join("drops.json")).unwrap();
    let tables: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut drops = Vec::new();
    for o in tables.iter().flat_map(|t| t["nftables"].as_array().unwrap()) {
        if let Some(c) = o.get("counter") {
            drops.push((c["name"].as_str().unwrap().to_string(), c["packets"].as_u64().unwrap()));
        }
    }
    assert_eq!(drops.len(), 4, "{text}");
    drops
}

fn node(dir: &Path, id: u8) -> Value {
    let p = dir.join(format!("node-{id}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

#[test]
fn the_overlay_delivers_what_a_lossy_path_takes_from_rtpengine() {
    let _turn = crate::turn();
    let Some(base) = run("rtpengine") else {
        return;
    };
    let Some(overlay) = run("calliper") else {
        return;
    };
    for dir in [&base, &overlay] {
        for (end, n) in link_drops(dir) {
            assert!(n > 20, "{}: {end} dropped only {n}", dir.display());
        }
    }
    for (name, party) in [("callee", "10.90.2.2"), ("caller", "10.90.1.2")] {
        let b = received(&base, name, party);
        let o = received(&overlay, name, party);
        eprintln!(
            "{name}: rtpengine lost {:.2} % ({b:?}); the overlay lost {:.3} %, late {} ({o:?})",
            b.loss(),
            o.residual(),
            o.late
        );
        // Two links, 5 % at each: about 9.75 %.
        assert!((5.0..15.0).contains(&b.loss()), "{name}: baseline {b:?}");
        assert!(o.residual() <= 0.1, "{name}: overlay {o:?}");
    }
    // The core refused every made-up datagram, and no node any of its own.
    for id in [1, 2, 3] {
        let sock = &node(&overlay, id)["socket"];
        let want = if id == 2 { 5 * FORGED } else { 0 };
        assert_eq!(sock["forged"], want, "node {id}: {sock}");
        assert_eq!(sock["replayed"], 0, "node {id}: {sock}");
    }
    // Each link's report: the forgeries charged to the link whose address
    // they claimed, and the gaps in what came from each neighbour against
    // nftables' drops where that neighbour's datagrams leave it (data, most
    // of what crosses, so a little below the drops).
    let drops: std::collections::HashMap<String, u64> = link_drops(&overlay).into_iter().collect();
    let ends = [(1, 2, "drops_c1"), (2, 1, "drops_x1"), (2, 3, "drops_x2"), (3, 2, "drops_c2")];
    for (id, from, end) in ends {
        let n = node(&overlay, id);
        let links = n["links"].as_array().unwrap();
        assert_eq!(links.len(), if id == 2 { 2 } else { 1 }, "node {id}: {n}");
        let l = links.iter().find(|l| l["neighbour"] == from).unwrap();
        let forged = if (id, from) == (2, 1) { 5 * FORGED } else { 0 };
        assert_eq!(l["forged"], forged, "{l}");
        assert!(l["rtt_ms"].as_f64().unwrap() < 50.0, "{l}");
        let (gaps, dropped) = (l["gaps"].as_u64().unwrap(), drops[end]);
        let told = format!("node {id} from {from}: {gaps} gaps, {end} {dropped}");
        assert!(dropped / 2 < gaps && gaps <= dropped, "{told}");
        assert!(l["loss_after_recovery_percent"].as_f64().unwrap() <= 0.5, "{l}");
    }
    for id in [1, 3] {
        let n = node(&overlay, id);
        for (key, want) in
            [("offers", CALLS), ("answers", CALLS), ("deletes", CALLS), ("errors", 0)]
        {
            assert_eq!(n["edge"]["control"][key], want, "node {id} {key}: {n}");
        }
        assert!(n["protocol"]["recovered"].as_u64().unwrap() > 0, "node {id}: {n}");
    }
    for dir in [base, overlay] {
        std::fs::remove_dir_all(dir).ok();
    }
}
