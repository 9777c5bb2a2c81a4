//! A deterministic discrete-event simulator: real [`Node`]s exchanging real
//! datagrams over emulated links (seeded loss, delay, jitter, cuts), so the
//! paper's experiments rerun in seconds and tests can pin their figures.

use crate::emu::LinkEmulator;
use crate::node::{Config, Counters, Node};
use crate::packet::NodeId;
use crate::routing::Metric;
use serde::Deserialize;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

const MS: f64 = 1e6;

/// A scenario: links, streams and link cuts (readable from TOML).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Protocol and run settings.
    #[serde(default)]
    pub settings: Settings,
    /// Bidirectional links.
    pub links: Vec<LinkSpec>,
    /// Voice-like streams.
    pub streams: Vec<StreamSpec>,
    /// Links cut during the run.
    #[serde(default)]
    pub cuts: Vec<Cut>,
}

/// Protocol and run settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Seed of every random choice.
    pub seed: u64,
    /// Routing metric.
    pub metric: Metric,
    /// NACK rounds per loss; 0 asks while the budget allows.
    pub nack_rounds: u8,
    /// Voice delay budget (ms).
    pub budget_ms: f64,
    /// Time for hellos and link state to settle before streams start (ms).
    pub warmup_ms: f64,
    /// Retransmissions allowed as a share of data.
    pub retransmit_share: f64,
    /// Disable recovery entirely (plain forwarding), for comparison.
    pub no_recovery: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            seed: 1,
            metric: Metric::ExpectedLatency,
            nack_rounds: 0,
            budget_ms: 100.0,
            warmup_ms: 1000.0,
            retransmit_share: 0.2,
            no_recovery: false,
        }
    }
}

/// A bidirectional link; both directions get the same (independent) emulation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// One end.
    pub a: NodeId,
    /// The other end.
    pub b: NodeId,
    /// One-way delay (ms).
    pub delay_ms: f64,
    /// Uniform extra delay (ms).
    #[serde(default)]
    pub jitter_ms: f64,
    /// Average loss (percent).
    #[serde(default)]
    pub loss_pct: f64,
    /// Burstiness b = P(loss | previous lost); 0 for independent loss.
    #[serde(default)]
    pub burst: f64,
}

/// Streams of packets from one node to another.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSpec {
    /// Entry node.
    pub from: NodeId,
    /// Exit node.
    pub to: NodeId,
    /// Packets per stream.
    pub packets: u64,
    /// Parallel streams of this kind.
    #[serde(default = "one")]
    pub count: u32,
    /// Packet interval (ms); 20 ms is 50 packets/s.
    #[serde(default = "twenty")]
    pub interval_ms: f64,
    /// Start after the warm-up (ms).
    #[serde(default)]
    pub start_ms: f64,
    /// Payload bytes (160: G.711 at 20 ms).
    #[serde(default = "payload")]
    pub payload: usize,
}

fn one() -> u32 {
    1
}
fn twenty() -> f64 {
    20.0
}
fn payload() -> usize {
    160
}

/// A link cut at a time (ms after the warm-up).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cut {
    /// One end.
    pub a: NodeId,
    /// The other end.
    pub b: NodeId,
    /// When (ms after the warm-up).
    pub at_ms: f64,
}

/// What the streams experienced.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Packets sent by all streams.
    pub sent: u64,
    /// Packets delivered (first copies).
    pub delivered: u64,
    /// Delivered within the budget.
    pub within_budget: u64,
    /// One-way delays of delivered packets (ns), sorted.
    pub delays_ns: Vec<i64>,
    /// Longest time without a delivery on any stream after a cut (ns).
    pub longest_gap_after_cut_ns: i64,
    /// Counters of all nodes, summed.
    pub counters: Counters,
    /// Packets the emulated links dropped.
    pub link_drops: u64,
}

impl Report {
    /// Share of sent packets delivered.
    pub fn delivered_ratio(&self) -> f64 {
        self.delivered as f64 / self.sent.max(1) as f64
    }
    /// Share of sent packets delivered within the budget.
    pub fn within_budget_ratio(&self) -> f64 {
        self.within_budget as f64 / self.sent.max(1) as f64
    }
    /// Delay percentile (0–100), ms.
    pub fn delay_percentile_ms(&self, pct: f64) -> f64 {
        if self.delays_ns.is_empty() {
            return f64::NAN;
        }
        let i = ((pct / 100.0) * (self.delays_ns.len() - 1) as f64).round() as usize;
        self.delays_ns[i] as f64 / MS
    }
}

enum Ev {
    Arrive {
        node: usize,
        from: NodeId,
        bytes: Vec<u8>,
    },
    Timer {
        node: usize,
    },
    Send {
        stream: usize,
        k: u64,
    },
    Cut {
        a: NodeId,
        b: NodeId,
    },
}

/// Why a topology cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError(pub String);

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TopologyError {}

struct Flow {
    from: usize,
    to: NodeId,
    vport: u16,
    packets: u64,
    start: i64,
    interval: i64,
    payload: usize,
    last_delivery: i64,
}

/// Runs a scenario to the end and reports.
pub fn run(t: &Topology) -> Result<Report, TopologyError> {
    let s = &t.settings;
    let ids: BTreeSet<NodeId> = t.links.iter().flat_map(|l| [l.a, l.b]).collect();
    let ids: Vec<NodeId> = ids.into_iter().collect();
    let index: HashMap<NodeId, usize> = ids.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut emus: HashMap<(NodeId, NodeId), LinkEmulator> = HashMap::new();
    for (i, l) in t.links.iter().enumerate() {
        if l.a == l.b
            || !(0.0..100.0).contains(&l.loss_pct)
            || l.delay_ms < 0.0
            || l.jitter_ms < 0.0
        {
            return Err(TopologyError(format!("link {} - {}: bad values", l.a, l.b)));
        }
        for (dir, (x, y)) in [(l.a, l.b), (l.b, l.a)].into_iter().enumerate() {
            let seed = s
                .seed
                .wrapping_mul(1_000_003)
                .wrapping_add((i * 2 + dir) as u64);
            let e = LinkEmulator::new(
                l.loss_pct / 100.0,
                l.burst,
                (l.delay_ms * MS) as i64,
                (l.jitter_ms * MS) as i64,
                seed,
            );
            if emus.insert((x, y), e).is_some() {
                return Err(TopologyError(format!("link {x} - {y} listed twice")));
            }
        }
    }
    let budget = (s.budget_ms * MS) as i64;
    let mut nodes: Vec<Node> = ids
        .iter()
        .map(|&id| {
            let mut c = Config::new(id);
            c.metric = s.metric;
            c.max_nack_rounds = s.nack_rounds;
            c.budget_ns = budget;
            c.retransmit_share = if s.no_recovery {
                0.0
            } else {
                s.retransmit_share
            };
            let nbrs: Vec<NodeId> = emus.keys().filter(|k| k.0 == id).map(|k| k.1).collect();
            Node::new(c, &nbrs, 0)
        })
        .collect();
    let warmup = (s.warmup_ms * MS) as i64;
    let mut flows = Vec::new();
    for st in &t.streams {
        let (Some(&from), true) = (index.get(&st.from), index.contains_key(&st.to)) else {
            return Err(TopologyError(format!(
                "stream {} -> {}: unknown node",
                st.from, st.to
            )));
        };
        for _ in 0..st.count {
            flows.push(Flow {
                from,
                to: st.to,
                vport: flows.len() as u16,
                packets: st.packets,
                start: warmup + (st.start_ms * MS) as i64,
                interval: (st.interval_ms * MS) as i64,
                payload: st.payload,
                last_delivery: 0,
            });
        }
    }

    let mut queue: BinaryHeap<Reverse<(i64, u64)>> = BinaryHeap::new();
    let mut events: HashMap<u64, Ev> = HashMap::new();
    let mut order = 0u64;
    let mut push = |queue: &mut BinaryHeap<_>, events: &mut HashMap<u64, Ev>, at: i64, ev: Ev| {
        order += 1;
        queue.push(Reverse((at, order)));
        events.insert(order, ev);
    };
    let mut next_timer = vec![0; nodes.len()];
    for node in 0..nodes.len() {
        push(&mut queue, &mut events, 0, Ev::Timer { node });
    }
    for (f, flow) in flows.iter().enumerate() {
        push(
            &mut queue,
            &mut events,
            flow.start,
            Ev::Send { stream: f, k: 0 },
        );
    }
    let mut first_cut = i64::MAX;
    for c in &t.cuts {
        let at = warmup + (c.at_ms * MS) as i64;
        first_cut = first_cut.min(at);
        push(&mut queue, &mut events, at, Ev::Cut { a: c.a, b: c.b });
    }
    let end = flows
        .iter()
        .map(|f| f.start + f.interval * f.packets as i64)
        .max()
        .unwrap_or(warmup)
        + 2 * budget
        + 1_000_000_000;

    let mut report = Report::default();
    let payload_buf = vec![0x55u8; flows.iter().map(|f| f.payload).max().unwrap_or(0)];
    while let Some(Reverse((now, id))) = queue.pop() {
        if now > end {
            break;
        }
        let Some(ev) = events.remove(&id) else {
            continue;
        };
        let touched = match ev {
            Ev::Arrive { node, from, bytes } => {
                nodes[node].handle(now, from, &bytes);
                node
            }
            Ev::Timer { node } => {
                if next_timer[node] != now {
                    continue;
                }
                next_timer[node] = i64::MAX;
                nodes[node].handle_timeout(now);
                node
            }
            Ev::Send { stream, k } => {
                let f = &flows[stream];
                report.sent += 1;
                let (from, to, vport) = (f.from, f.to, f.vport);
                nodes[from].send(now, to, vport, &payload_buf[..f.payload]);
                if k + 1 < f.packets {
                    let at = f.start + f.interval * (k as i64 + 1);
                    push(&mut queue, &mut events, at, Ev::Send { stream, k: k + 1 });
                }
                from
            }
            Ev::Cut { a, b } => {
                for key in [(a, b), (b, a)] {
                    if let Some(e) = emus.get_mut(&key) {
                        e.down = true;
                    }
                }
                continue;
            }
        };
        // Carry out what the node produced.
        let me = nodes[touched].id();
        while let Some((peer, bytes)) = nodes[touched].poll_transmit() {
            let Some(emu) = emus.get_mut(&(me, peer)) else {
                continue;
            };
            if s.no_recovery
                && crate::packet::decode(&bytes)
                    .is_ok_and(|d| matches!(d.msg, crate::packet::Message::Nack(_)))
            {
                continue;
            }
            if let Some(at) = emu.admit(now) {
                push(
                    &mut queue,
                    &mut events,
                    at,
                    Ev::Arrive {
                        node: index[&peer],
                        from: me,
                        bytes,
                    },
                );
            }
        }
        while let Some(d) = nodes[touched].poll_delivery() {
            let delay = now - d.sent_us as i64 * 1000;
            report.delivered += 1;
            report.within_budget += (delay <= budget) as u64;
            report.delays_ns.push(delay);
            let f = &mut flows[d.vport as usize];
            if now > first_cut && f.last_delivery > 0 {
                report.longest_gap_after_cut_ns = report
                    .longest_gap_after_cut_ns
                    .max(now - f.last_delivery.max(first_cut));
            }
            f.last_delivery = now;
        }
        let t = nodes[touched].poll_timeout().max(now);
        if t < next_timer[touched] {
            next_timer[touched] = t;
            push(&mut queue, &mut events, t, Ev::Timer { node: touched });
        }
    }
    report.delays_ns.sort_unstable();
    for n in &nodes {
        let c = &n.counters;
        let r = &mut report.counters;
        r.originated += c.originated;
        r.forwarded += c.forwarded;
        r.delivered += c.delivered;
        r.duplicates += c.duplicates;
        r.gaps += c.gaps;
        r.recovered += c.recovered;
        r.given_up += c.given_up;
        r.nacks_sent += c.nacks_sent;
        r.retransmitted += c.retransmitted;
        r.retransmit_no_tokens += c.retransmit_no_tokens;
        r.retransmit_not_held += c.retransmit_not_held;
        r.no_route += c.no_route;
        r.ttl_expired += c.ttl_expired;
        r.lsu_originated += c.lsu_originated;
        r.route_changes += c.route_changes;
        r.queue_overflow += c.queue_overflow;
    }
    report.link_drops = emus.values().map(|e| e.lost).sum();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(
        hops: usize,
        loss_pct: f64,
        burst: f64,
        rounds: u8,
        packets: u64,
        seed: u64,
    ) -> Report {
        let links = (0..hops)
            .map(|i| LinkSpec {
                a: i as NodeId + 1,
                b: i as NodeId + 2,
                delay_ms: 10.0,
                jitter_ms: 0.0,
                loss_pct,
                burst,
            })
            .collect();
        let t = Topology {
            settings: Settings {
                seed,
                nack_rounds: rounds,
                ..Settings::default()
            },
            links,
            streams: vec![StreamSpec {
                from: 1,
                to: hops as NodeId + 1,
                packets,
                count: 10,
                interval_ms: 20.0,
                start_ms: 0.0,
                payload: 160,
            }],
            cuts: vec![],
        };
        run(&t).unwrap()
    }

    #[test]
    fn clean_link_delivers_everything_at_link_delay() {
        let r = chain(1, 0.0, 0.0, 1, 500, 1);
        assert_eq!(r.sent, 5000);
        assert_eq!(r.delivered, 5000);
        assert_eq!(r.delay_percentile_ms(50.0), 10.0);
        assert_eq!(r.counters.retransmitted, 0);
    }

    /// One 10 ms link at 5 % loss, one NACK round: the residual is one loss
    /// of the original and one of the NACK or the resend, 2p² − p³ ≈ 0.49 %.
    #[test]
    fn single_attempt_leaves_about_2p2_minus_p3() {
        let r = chain(1, 5.0, 0.0, 1, 10_000, 7);
        let lost = 1.0 - r.delivered_ratio();
        assert!(lost < 0.0055 && lost > 0.0040, "residual loss {lost}");
        assert!(r.counters.retransmitted > 0);
    }

    /// Repeated rounds inside the 100 ms budget recover nearly everything.
    #[test]
    fn repeated_attempts_leave_under_0_05_percent() {
        let r = chain(1, 5.0, 0.0, 0, 10_000, 7);
        let lost = 1.0 - r.delivered_ratio();
        assert!(lost <= 0.0005, "residual loss {lost}");
        assert!(r.within_budget_ratio() >= 0.9995);
    }

    #[test]
    fn two_lossy_links_deliver_999_per_mille_within_budget() {
        let r = chain(2, 5.0, 0.0, 0, 10_000, 11);
        assert!(
            r.within_budget_ratio() >= 0.999,
            "{}",
            r.within_budget_ratio()
        );
    }

    /// A link cut: traffic moves to the other path after dead-link detection.
    #[test]
    fn reroute_after_a_cut_within_1_1_s() {
        let link = |a, b, delay_ms| LinkSpec {
            a,
            b,
            delay_ms,
            jitter_ms: 0.0,
            loss_pct: 0.0,
            burst: 0.0,
        };
        let t = Topology {
            settings: Settings::default(),
            links: vec![
                link(1, 2, 5.0),
                link(2, 4, 5.0),
                link(1, 3, 20.0),
                link(3, 4, 20.0),
            ],
            streams: vec![StreamSpec {
                from: 1,
                to: 4,
                packets: 250,
                count: 1,
                interval_ms: 20.0,
                start_ms: 0.0,
                payload: 160,
            }],
            cuts: vec![Cut {
                a: 2,
                b: 4,
                at_ms: 2000.0,
            }],
        };
        let r = run(&t).unwrap();
        let gap = r.longest_gap_after_cut_ns as f64 / 1e9;
        assert!(gap > 0.9 && gap <= 1.1, "gap {gap} s");
        // Before the cut the short path (10 ms), after it the long one (40 ms);
        // while routes converge node 2 hands packets back to 1 (50 ms).
        assert_eq!(r.delay_percentile_ms(0.0), 10.0);
        assert_eq!(r.delay_percentile_ms(90.0), 40.0);
        assert_eq!(r.delay_percentile_ms(100.0), 50.0);
        assert!(r.counters.route_changes > 0);
    }
}
