//! The range of every number the relay reads from a file: a simulator
//! topology ([`crate::sim::Topology`]) or a node's configuration
//! ([`crate::udp::NodeConfig`]). A value outside its range (NaN and
//! infinities included) is refused with an error naming the field, the
//! value and the range, before anything runs: no setting can make a run
//! endless, overflow the clock or exhaust memory.

use crate::packet::{NodeId, MAX_LSU_LINKS};
use crate::sim::{LinkSpec, Topology};
use crate::udp::{Neighbour, NodeConfig};
use std::collections::HashSet;

/// Delay budget (ms).
pub const BUDGET_MS: (f64, f64) = (1.0, 2_000.0);
/// NACK rounds (0: while the budget allows).
pub const NACK_ROUNDS: (u64, u64) = (0, 16);
/// One-way delay and jitter of a link (ms).
pub const DELAY_MS: (f64, f64) = (0.0, 10_000.0);
/// Loss (percent).
pub const LOSS_PCT: (f64, f64) = (0.0, 99.99);
/// Burstiness, P(loss | previous lost).
pub const BURST: (f64, f64) = (0.0, 0.99);
/// Bandwidth (kb/s) when not 0 (none).
pub const RATE_KBPS: (f64, f64) = (1.0, 10_000_000.0);
/// RFC 3545's N on a compressed link.
pub const CRTP_REPEATS: (u64, u64) = (0, calliper_crtp::MAX_REPEATS as u64);
/// Simulator warm-up (ms).
pub const WARMUP_MS: (f64, f64) = (0.0, 60_000.0);
/// Retransmissions as a share of data.
pub const RETRANSMIT_SHARE: (f64, f64) = (0.0, 10.0);
/// Packets of one stream.
pub const PACKETS: (u64, u64) = (1, 10_000_000);
/// Parallel streams of one kind.
pub const COUNT: (u64, u64) = (0, 10_000);
/// Packet interval (ms).
pub const INTERVAL_MS: (f64, f64) = (0.1, 60_000.0);
/// Payload bytes of a simulated packet.
pub const PAYLOAD: (u64, u64) = (0, 8_000);
/// Any time within a simulation (ms): stream starts, stream ends, cuts.
pub const SIM_TIME_MS: (f64, f64) = (0.0, 86_400_000.0);
/// Packets of all streams together (each delivery's delay is kept).
pub const ALL_PACKETS: (u64, u64) = (0, 20_000_000);
/// Streams together (each has a virtual port).
pub const ALL_STREAMS: (u64, u64) = (0, 65_535);
/// Nodes of a simulation (the default origin table, `max_origins`).
pub const NODES: (u64, u64) = (1, 1_024);
/// Neighbours of one node (what one link-state update can carry).
pub const NEIGHBOURS: (u64, u64) = (0, MAX_LSU_LINKS as u64);
/// Socket buffer each way (bytes).
pub const SOCKET_BUFFER: (u64, u64) = (4_096, 1 << 28);
/// Lease of a client's virtual port after its last bind (ms); a
/// [`crate::udp::Client`] renews it every second.
pub const CLIENT_LEASE_MS: (u64, u64) = (3_000, 3_600_000);

fn float(field: &str, v: f64, (lo, hi): (f64, f64), unit: &str) -> Result<(), String> {
    if (lo..=hi).contains(&v) {
        return Ok(());
    }
    Err(format!("{field} = {v} is out of range: allowed {lo} to {hi}{unit}"))
}

fn int(field: &str, v: u64, (lo, hi): (u64, u64), unit: &str) -> Result<(), String> {
    if (lo..=hi).contains(&v) {
        return Ok(());
    }
    Err(format!("{field} = {v} is out of range: allowed {lo} to {hi}{unit}"))
}

fn rate(field: &str, v: f64) -> Result<(), String> {
    if v == 0.0 || (RATE_KBPS.0..=RATE_KBPS.1).contains(&v) {
        return Ok(());
    }
    Err(format!(
        "{field} = {v} is out of range: allowed 0 (none) or {} to {} kb/s",
        RATE_KBPS.0, RATE_KBPS.1
    ))
}

/// The emulation of one direction of a link (simulator link or neighbour).
fn emulation(at: &str, loss: f64, burst: f64, delay: f64, jitter: f64) -> Result<(), String> {
    float(&format!("{at}.loss_pct"), loss, LOSS_PCT, " %")?;
    float(&format!("{at}.burst"), burst, BURST, "")?;
    float(&format!("{at}.delay_ms"), delay, DELAY_MS, " ms")?;
    float(&format!("{at}.jitter_ms"), jitter, DELAY_MS, " ms")
}

/// Checks every number of a simulator topology.
pub fn topology(t: &Topology) -> Result<(), String> {
    let s = &t.settings;
    int("settings.nack_rounds", s.nack_rounds.into(), NACK_ROUNDS, "")?;
    float("settings.budget_ms", s.budget_ms, BUDGET_MS, " ms")?;
    float("settings.warmup_ms", s.warmup_ms, WARMUP_MS, " ms")?;
    let share = s.retransmit_share;
    float("settings.retransmit_share", share, RETRANSMIT_SHARE, "")?;
    int("settings.crtp_repeats", s.crtp_repeats.into(), CRTP_REPEATS, "")?;
    links(&t.links)?;
    let ends: HashSet<(NodeId, NodeId)> = t.links.iter().map(|l| (l.a, l.b)).collect();
    let (mut all_packets, mut all_streams) = (0u64, 0u64);
    for (i, st) in t.streams.iter().enumerate() {
        let at = format!("streams[{i}]");
        int(&format!("{at}.packets"), st.packets, PACKETS, "")?;
        int(&format!("{at}.count"), st.count.into(), COUNT, "")?;
        let interval = st.interval_ms;
        float(&format!("{at}.interval_ms"), interval, INTERVAL_MS, " ms")?;
        float(&format!("{at}.start_ms"), st.start_ms, SIM_TIME_MS, " ms")?;
        int(&format!("{at}.payload"), st.payload as u64, PAYLOAD, " bytes")?;
        let end = st.start_ms + st.packets as f64 * interval;
        let field = format!("{at}: start_ms + packets × interval_ms");
        float(&field, end, SIM_TIME_MS, " ms")?;
        all_packets += st.packets * st.count as u64;
        all_streams += st.count as u64;
    }
    int("streams: count × packets, all together", all_packets, ALL_PACKETS, "")?;
    int("streams: count, all together", all_streams, ALL_STREAMS, "")?;
    for (i, c) in t.cuts.iter().enumerate() {
        float(&format!("cuts[{i}].at_ms"), c.at_ms, SIM_TIME_MS, " ms")?;
        if !ends.contains(&(c.a, c.b)) && !ends.contains(&(c.b, c.a)) {
            return Err(format!("cuts[{i}]: no link {} - {}", c.a, c.b));
        }
    }
    Ok(())
}

/// The links of a topology, and the nodes and degrees they make.
fn links(links: &[LinkSpec]) -> Result<(), String> {
    let mut degree: std::collections::HashMap<NodeId, u64> = Default::default();
    for (i, l) in links.iter().enumerate() {
        let at = format!("links[{i}]");
        if l.a == l.b {
            return Err(format!("{at}: a = b = {} (a link joins two nodes)", l.a));
        }
        emulation(&at, l.loss_pct, l.burst, l.delay_ms, l.jitter_ms)?;
        rate(&format!("{at}.rate_kbps"), l.rate_kbps)?;
        for n in [l.a, l.b] {
            *degree.entry(n).or_default() += 1;
        }
    }
    int("nodes (ends of links)", degree.len() as u64, NODES, "")?;
    for (n, d) in degree {
        int(&format!("links of node {n}"), d, NEIGHBOURS, "")?;
    }
    Ok(())
}

/// Checks every number of a node's configuration, and that neighbours
/// are distinct and not the node itself.
pub fn node_config(c: &NodeConfig) -> Result<(), String> {
    int("nack_rounds", c.nack_rounds.into(), NACK_ROUNDS, "")?;
    float("budget_ms", c.budget_ms, BUDGET_MS, " ms")?;
    let buffer = c.socket_buffer as u64;
    int("socket_buffer", buffer, SOCKET_BUFFER, " bytes")?;
    int("client_lease_ms", c.client_lease_ms, CLIENT_LEASE_MS, " ms")?;
    let n = c.neighbours.len() as u64;
    int("neighbours (how many)", n, NEIGHBOURS, "")?;
    let (mut ids, mut addrs) = (HashSet::new(), HashSet::new());
    for (i, nb) in c.neighbours.iter().enumerate() {
        neighbour(&format!("neighbours[{i}]"), nb)?;
        if nb.id == c.id || !ids.insert(nb.id) {
            return Err(format!("neighbours[{i}].id = {}: repeated, or this node's", nb.id));
        }
        if !addrs.insert(nb.addr) {
            return Err(format!("neighbours[{i}].addr = {}: repeated", nb.addr));
        }
    }
    Ok(())
}

fn neighbour(at: &str, n: &Neighbour) -> Result<(), String> {
    emulation(at, n.loss_pct, n.burst, n.delay_ms, n.jitter_ms)?;
    rate(&format!("{at}.rate_kbps"), n.rate_kbps)?;
    int(&format!("{at}.crtp_repeats"), n.crtp_repeats.into(), CRTP_REPEATS, "")
}

#[cfg(test)]
mod tests;
