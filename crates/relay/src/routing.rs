//! Link costs and shortest paths.
//!
//! Each node floods its live links with a cost; every node runs Dijkstra
//! over the same database, so next hops agree. Costs are in microseconds
//! (hops count as 1 000 000 µs each so all metrics share one unit).

use crate::packet::NodeId;
use std::collections::{BinaryHeap, HashMap};

/// How a link's cost is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// Every link costs the same.
    Hops,
    /// One-way latency (RTT / 2).
    Latency,
    /// Loss rate (−ln(1 − p)), ties broken by latency.
    Loss,
    /// Expected latency with one recovery round (Amir et al.; reference §5).
    ExpectedLatency,
}

/// Parameters of the expected-latency metric.
#[derive(Debug, Clone, Copy)]
pub struct ExpectedLatency {
    /// Loss detection time Δ (µs).
    pub delta_us: f64,
    /// Cost of a packet that is not recovered in time, Tmax (µs).
    pub tmax_us: f64,
}

impl Default for ExpectedLatency {
    /// The paper's simulation: Δ = 2 ms, Tmax = 100 ms.
    fn default() -> Self {
        ExpectedLatency { delta_us: 2_000.0, tmax_us: 100_000.0 }
    }
}

/// Cost of a link with round-trip time `rtt_us` and loss `p` (0–1), in µs.
pub fn cost(metric: Metric, rtt_us: f64, p: f64, el: ExpectedLatency) -> u32 {
    let t = rtt_us / 2.0;
    let p = p.clamp(0.0, 1.0);
    let c = match metric {
        Metric::Hops => 1_000_000.0,
        Metric::Latency => t,
        Metric::Loss => -(1.0 - p.min(0.999_999)).ln() * 1e7 + t / 1000.0,
        Metric::ExpectedLatency => {
            // (1−p)·T + (p − 2p² + p³)·(3T + Δ) + (2p² − p³)·Tmax: the form
            // whose residual (2p² − p³) matches one NACK round; see reference §5.
            let recovered = p - 2.0 * p * p + p * p * p;
            let lost = 2.0 * p * p - p * p * p;
            (1.0 - p) * t + recovered * (3.0 * t + el.delta_us) + lost * el.tmax_us
        }
    };
    c.clamp(1.0, u32::MAX as f64) as u32
}

/// Next hop from `me` to every reachable node; `links(n)` is what node `n`
/// advertises, `(neighbour, cost)`. Only the part of the graph reachable
/// from `me` is visited, read in place.
pub fn next_hops<'a>(
    me: NodeId,
    links: impl Fn(NodeId) -> &'a [(NodeId, u32)],
) -> HashMap<NodeId, NodeId> {
    let mut dist: HashMap<NodeId, (u64, NodeId)> = HashMap::new();
    let mut heap = BinaryHeap::new();
    dist.insert(me, (0, me));
    heap.push(std::cmp::Reverse((0u64, me, me)));
    while let Some(std::cmp::Reverse((d, node, first))) = heap.pop() {
        if dist.get(&node).is_some_and(|&(best, _)| d > best) {
            continue;
        }
        for &(next, c) in links(node) {
            // Only links both ends report are used (a dead link may linger on one side).
            let back = links(next).iter().any(|&(n, _)| n == node);
            if !back {
                continue;
            }
            let nd = d + c as u64;
            let hop = if node == me { next } else { first };
            // Ties go to the smaller next hop, so every run picks the same path.
            let better = match dist.get(&next) {
                None => true,
                Some(&(od, oh)) => nd < od || (nd == od && hop < oh),
            };
            if better {
                dist.insert(next, (nd, hop));
                heap.push(std::cmp::Reverse((nd, next, hop)));
            }
        }
    }
    dist.into_iter().filter(|&(n, _)| n != me).map(|(n, (_, hop))| (n, hop)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_latency_matches_the_reference_vectors() {
        // Reference §5, Spines' form with d = RTT/2, Δ = 10 ms, MAX = 600 ms
        // (costs in ms there, µs here).
        let el = ExpectedLatency { delta_us: 10_000.0, tmax_us: 600_000.0 };
        for (rtt_ms, p, want_ms) in
            [(20.0, 0.0, 10.000), (20.0, 0.01, 10.411), (20.0, 0.05, 14.230), (60.0, 0.02, 31.796)]
        {
            let got = cost(Metric::ExpectedLatency, rtt_ms * 1000.0, p, el) as f64 / 1000.0;
            assert!((got - want_ms).abs() < 0.002, "rtt {rtt_ms} p {p}: {got} vs {want_ms}");
        }
    }

    #[test]
    fn shortest_paths_avoid_costly_links() {
        // 1 - 2 - 4 cheap, 1 - 3 - 4 costly.
        let mut g: HashMap<NodeId, Vec<(NodeId, u32)>> = HashMap::new();
        for (a, b, c) in [(1, 2, 10), (2, 4, 10), (1, 3, 5), (3, 4, 100)] {
            g.entry(a).or_default().push((b, c));
            g.entry(b).or_default().push((a, c));
        }
        let view = |g: &HashMap<NodeId, Vec<(NodeId, u32)>>| {
            next_hops(1, |n| g.get(&n).map_or(&[], Vec::as_slice))
        };
        let hops = view(&g);
        assert_eq!(hops[&4], 2);
        assert_eq!(hops[&3], 3);
        // A link only one side reports is not used.
        g.get_mut(&4).unwrap().retain(|&(n, _)| n != 2);
        assert_eq!(view(&g)[&4], 3);
    }
}
