//! A node's file: its settings and neighbours, with the defaults a file
//! may leave out (one definition, for serde and for [`NodeConfig::new`]).

use crate::packet::NodeId;
use crate::routing::Metric;
use serde::Deserialize;
use std::net::SocketAddr;

/// A node's configuration file (TOML).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id.
    pub id: NodeId,
    /// Address to bind (overlay and clients).
    pub listen: SocketAddr,
    /// Routing metric.
    #[serde(default = "default_metric")]
    pub metric: Metric,
    /// NACK rounds (1 = one attempt; 0 = while the budget allows).
    #[serde(default)]
    pub nack_rounds: u8,
    /// Voice delay budget (ms).
    #[serde(default = "default_budget")]
    pub budget_ms: f64,
    /// Ask neighbours again for what a link lost (false: forward what
    /// arrives and count the rest given up, to measure what recovery buys).
    #[serde(default = "default_true")]
    pub recovery: bool,
    /// Poll the socket without sleeping: lowest latency, one core always busy.
    #[serde(default)]
    pub busy_poll: bool,
    /// Send a run of equal-sized datagrams to one neighbour as one
    /// segmented send (UDP GSO: fewer system calls). False: one send per
    /// datagram, so a firewall or loss emulator on the path sees, and
    /// decides on, each datagram.
    #[serde(default = "default_true")]
    pub segment_sends: bool,
    /// Socket buffer size to ask for each way (bytes); a burst the node
    /// cannot yet read waits here rather than being dropped.
    #[serde(default = "default_socket_buffer")]
    pub socket_buffer: usize,
    /// How long a client's binding of a virtual port outlives its last
    /// bind request (ms); meanwhile no other client may take the port.
    #[serde(default = "default_client_lease")]
    pub client_lease_ms: u64,
    /// Neighbours (none: an edge alone, or a node waiting for clients).
    #[serde(default)]
    pub neighbours: Vec<Neighbour>,
    /// An ng control endpoint, so SIP proxies steer calls' media through
    /// this node ([`crate::edge`]).
    #[serde(default)]
    pub edge: Option<crate::edge::EdgeConfig>,
}

impl NodeConfig {
    /// Node `id` on `listen`, without neighbours, every other setting as a
    /// node file that leaves it out (the same defaults serde takes).
    pub fn new(id: NodeId, listen: SocketAddr) -> NodeConfig {
        NodeConfig {
            id,
            listen,
            metric: default_metric(),
            nack_rounds: 0,
            budget_ms: default_budget(),
            recovery: default_true(),
            busy_poll: false,
            segment_sends: default_true(),
            socket_buffer: default_socket_buffer(),
            client_lease_ms: default_client_lease(),
            neighbours: Vec::new(),
            edge: None,
        }
    }

    /// Checks every number against its range ([`crate::limits`]), and that
    /// neighbours are distinct.
    pub fn validate(&self) -> Result<(), String> {
        crate::limits::node_config(self)?;
        if let Some(e) = &self.edge {
            e.control_addr()?;
            e.control_config()?;
            for (i, p) in e.peers.iter().enumerate() {
                if p.node == self.id {
                    return Err(format!("edge.peers[{i}].node = {}: this node's own id", p.node));
                }
                if p.address == e.address {
                    return Err(format!(
                        "edge.peers[{i}].address = {}: this edge's own address (edge.address)",
                        p.address
                    ));
                }
            }
        }
        Ok(())
    }
}

fn default_client_lease() -> u64 {
    30_000
}

fn default_socket_buffer() -> usize {
    4 << 20
}

fn default_metric() -> Metric {
    Metric::ExpectedLatency
}
fn default_budget() -> f64 {
    100.0
}
fn default_true() -> bool {
    true
}

/// A configured neighbour and the emulation applied to what we send it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Neighbour {
    /// Its id.
    pub id: NodeId,
    /// Its address.
    pub addr: SocketAddr,
    /// Emulated loss on our packets to it (percent).
    #[serde(default)]
    pub loss_pct: f64,
    /// Burstiness of that loss.
    #[serde(default)]
    pub burst: f64,
    /// Emulated extra one-way delay (ms).
    #[serde(default)]
    pub delay_ms: f64,
    /// Emulated jitter (ms).
    #[serde(default)]
    pub jitter_ms: f64,
    /// Emulated bandwidth towards it (kb/s): 0 for none, else 1 to 10 000 000.
    #[serde(default)]
    pub rate_kbps: f64,
    /// Compress the RTP headers of the datagrams carried on this link
    /// (cRTP); the neighbour must say the same of us.
    #[serde(default)]
    pub crtp: bool,
    /// With `crtp`: RFC 3545's N (0: plain RFC 2508); the header checksum
    /// comes with it. Both ends the same.
    #[serde(default)]
    pub crtp_repeats: u8,
    /// The link's key (a file of 16 to 1 024 bytes, the same at both
    /// ends): every datagram on the link is authenticated ([`super::auth`]).
    /// Without one, whoever sends from the neighbour's address is it.
    #[serde(default)]
    pub key_file: Option<std::path::PathBuf>,
}

impl Neighbour {
    /// Neighbour `id` at `addr`: no emulation, no compression, no key (as a
    /// node file's table that names only these).
    pub fn new(id: NodeId, addr: SocketAddr) -> Neighbour {
        Neighbour {
            id,
            addr,
            loss_pct: 0.0,
            burst: 0.0,
            delay_ms: 0.0,
            jitter_ms: 0.0,
            rate_kbps: 0.0,
            crtp: false,
            crtp_repeats: 0,
            key_file: None,
        }
    }
}
