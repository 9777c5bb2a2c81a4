//! A deterministic discrete-event simulator: real [`Node`]s exchanging real
//! datagrams over emulated links (seeded loss, delay, jitter, cuts), so the
//! paper's experiments rerun in seconds and tests can pin their figures.

use crate::emu::LinkEmulator;
use crate::node::{Config, Counters, Node};
use crate::packet::NodeId;
use crate::routing::Metric;
use serde::Deserialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

pub(crate) mod voice;

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

impl Topology {
    /// Checks every number against its range ([`crate::limits`]).
    pub fn validate(&self) -> Result<(), TopologyError> {
        crate::limits::topology(self).map_err(TopologyError)
    }
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
    /// On links with `crtp`: RFC 3545's N (0: plain RFC 2508). With N > 0
    /// the header checksum is on too, so gaps can be bridged and checked.
    pub crtp_repeats: u8,
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
            crtp_repeats: 0,
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
    /// Bandwidth each way (kb/s): 0 for none, else 1 to 10 000 000.
    #[serde(default)]
    pub rate_kbps: f64,
    /// Compress RTP headers on this link (cRTP).
    #[serde(default)]
    pub crtp: bool,
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
    /// Send each payload as the voice of an IPv4/UDP/RTP datagram (8 kHz
    /// clock, no UDP checksum), as a relay carrying calls does; else as
    /// opaque bytes.
    #[serde(default)]
    pub rtp: bool,
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
    /// Of those, dropped because a rate-limited link's queue was full.
    pub queue_drops: u64,
    /// Bytes the links carried (with the outer IPv4/UDP headers).
    pub link_bytes: u64,
    /// From the first stream's start to the last one's end (s).
    pub duration_s: f64,
    /// Delivered packets whose bytes differ from those sent (never, unless
    /// a link's header compression rebuilt a datagram wrongly).
    pub corrupted: u64,
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
    Arrive { node: usize, from: NodeId, bytes: Vec<u8> },
    Timer { node: usize },
    Send { stream: usize, k: u64 },
    Cut { a: NodeId, b: NodeId },
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
    rtp: bool,
    last_delivery: i64,
}

/// Runs a scenario to the end and reports.
pub fn run(t: &Topology) -> Result<Report, TopologyError> {
    let s = &t.settings;
    let ids: BTreeSet<NodeId> = t.links.iter().flat_map(|l| [l.a, l.b]).collect();
    let ids: Vec<NodeId> = ids.into_iter().collect();
    let index: HashMap<NodeId, usize> = ids.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    // Ordered: the neighbours of each node are listed from it, and the
    // figures must not depend on a hash order (the same file and seed give
    // the same figures).
    let mut emus: BTreeMap<(NodeId, NodeId), LinkEmulator> = BTreeMap::new();
    t.validate()?;
    for (i, l) in t.links.iter().enumerate() {
        for (dir, (x, y)) in [(l.a, l.b), (l.b, l.a)].into_iter().enumerate() {
            let seed = s.seed.wrapping_mul(1_000_003).wrapping_add((i * 2 + dir) as u64);
            let mut e = LinkEmulator::new(
                l.loss_pct / 100.0,
                l.burst,
                (l.delay_ms * MS) as i64,
                (l.jitter_ms * MS) as i64,
                seed,
            );
            e.rate_bps = (l.rate_kbps * 1000.0) as u64;
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
            c.retransmit_share = s.retransmit_share;
            c.recovery = !s.no_recovery;
            let nbrs: Vec<NodeId> = emus.keys().filter(|k| k.0 == id).map(|k| k.1).collect();
            Node::new(c, &nbrs, 0)
        })
        .collect();
    let crtp = calliper_crtp::Config {
        repeats: s.crtp_repeats,
        header_checksum: s.crtp_repeats > 0,
        ..calliper_crtp::Config::default()
    };
    for l in t.links.iter().filter(|l| l.crtp) {
        for (x, y) in [(l.a, l.b), (l.b, l.a)] {
            nodes[index[&x]]
                .compress_link(y, crtp)
                .map_err(|e| TopologyError(format!("link {x} - {y}: {e}")))?;
        }
    }
    let warmup = (s.warmup_ms * MS) as i64;
    let mut flows = Vec::new();
    for st in &t.streams {
        let (Some(&from), true) = (index.get(&st.from), index.contains_key(&st.to)) else {
            return Err(TopologyError(format!("stream {} -> {}: unknown node", st.from, st.to)));
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
                rtp: st.rtp,
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
        push(&mut queue, &mut events, flow.start, Ev::Send { stream: f, k: 0 });
    }
    let mut first_cut = i64::MAX;
    for c in &t.cuts {
        let at = warmup + (c.at_ms * MS) as i64;
        first_cut = first_cut.min(at);
        push(&mut queue, &mut events, at, Ev::Cut { a: c.a, b: c.b });
    }
    let end = flows.iter().map(|f| f.start + f.interval * f.packets as i64).max().unwrap_or(warmup)
        + 2 * budget
        + 1_000_000_000;

    let mut report = Report::default();
    let mut payload_buf = Vec::new();
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
                voice::payload(f.rtp, stream, k, f.interval, f.payload, &mut payload_buf);
                nodes[from].send(now, to, vport, &payload_buf);
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
            if let Some(at) = emu.admit(now, bytes.len()) {
                push(
                    &mut queue,
                    &mut events,
                    at,
                    Ev::Arrive { node: index[&peer], from: me, bytes },
                );
            }
        }
        while let Some(d) = nodes[touched].poll_delivery() {
            let f = &flows[d.vport as usize];
            // Which packet of the stream: its RTP sequence number (streams
            // of up to 65 536 packets; opaque payloads are all alike).
            let k = if f.rtp && d.payload.len() >= 32 {
                u16::from_be_bytes([d.payload[30], d.payload[31]]) as u64
            } else {
                0
            };
            voice::payload(f.rtp, d.vport as usize, k, f.interval, f.payload, &mut payload_buf);
            report.corrupted += (d.payload != payload_buf) as u64;
            let delay = now - d.sent_us as i64 * 1000;
            report.delivered += 1;
            report.within_budget += (delay <= budget) as u64;
            report.delays_ns.push(delay);
            let f = &mut flows[d.vport as usize];
            if now > first_cut && f.last_delivery > 0 {
                report.longest_gap_after_cut_ns =
                    report.longest_gap_after_cut_ns.max(now - f.last_delivery.max(first_cut));
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
        report.counters.add(&n.counters);
    }
    report.link_drops = emus.values().map(|e| e.lost).sum();
    report.queue_drops = emus.values().map(|e| e.queue_drops).sum();
    report.link_bytes = emus.values().map(|e| e.bytes).sum();
    let first = flows.iter().map(|f| f.start).min().unwrap_or(0);
    let last = flows.iter().map(|f| f.start + f.interval * f.packets as i64).max().unwrap_or(0);
    report.duration_s = (last - first) as f64 / 1e9;
    Ok(report)
}

#[cfg(test)]
mod tests;
