//! A deterministic discrete-event simulator: real [`Node`]s exchanging real
//! datagrams over emulated links (seeded loss, delay, jitter, cuts), so the
//! paper's experiments rerun in seconds and tests can pin their figures.

use crate::node::Counters;
use crate::packet::NodeId;
use crate::routing::Metric;
use serde::Deserialize;

pub(crate) mod voice;
mod world;

use world::World;

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
    let mut world = World::new(t)?;
    world.run();
    Ok(world.into_report())
}

#[cfg(test)]
mod tests;
