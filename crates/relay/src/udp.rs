//! The relay node on a real UDP socket, and the client API.
//!
//! One socket carries both the overlay and the local applications: datagrams
//! from configured neighbours go to the protocol core; datagrams from this
//! host (loopback or the node's own address) are client requests; anything
//! else is counted and dropped, so a node never answers strangers and cannot
//! be used as a reflector. Loss, delay and jitter can be emulated per
//! neighbour on what this node sends (the kernel here has no netem).
//!
//! Client datagrams (to the node):
//!   `1, vport u16`                       bind: deliver `vport` to me
//!   `2, vport u16, dest u16, payload`    send `payload` to `vport` on `dest`
//!   `3, vport u16`                       release `vport`
//! Deliveries (to the client): `origin u16, vport u16, payload`.
//!
//! A virtual port belongs to the address (IP and port) that bound it. A
//! bind or release of it from any other address is refused and counted
//! (`vport_refused`) while the owner lives: until it releases the port, or
//! for `client_lease_ms` after its last bind ([`Client`] repeats its bind
//! every second). Port 0 is never bound (a send-only client).

use crate::batch_io::{self, RecvBatch, SendBatch};
use crate::emu::LinkEmulator;
use crate::node::{Config, Counters, LinkReport, Node};
use crate::packet::NodeId;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Socket-level counters of a running node.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SocketCounters {
    /// Datagrams received.
    pub received: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams from addresses that are neither neighbours nor local clients.
    pub strangers: u64,
    /// Malformed client requests (a bind of virtual port 0 included).
    pub bad_client: u64,
    /// Bind or release requests for a virtual port another live client
    /// holds, refused.
    pub vport_refused: u64,
    /// Deliveries for a virtual port no client bound.
    pub unbound: u64,
    /// Packets the emulator dropped.
    pub emulated_loss: u64,
    /// Send errors.
    pub send_errors: u64,
    /// Datagrams the kernel dropped because the socket's receive buffer was full.
    pub kernel_drops: u64,
    /// Datagrams too long to carry (received or to send), dropped.
    pub oversize: u64,
    /// Receive buffer the kernel granted (bytes).
    pub receive_buffer: u64,
    /// Sends that carried several datagrams through the stack at once (UDP_SEGMENT).
    pub segmented_sends: u64,
    /// Received messages that held several datagrams (UDP_GRO).
    pub coalesced_receives: u64,
    /// Datagrams from a keyed neighbour's address whose tag was wrong
    /// (forged, or sent with another key), dropped.
    pub forged: u64,
    /// Authentic datagrams received again, or too late for the window, dropped.
    pub replayed: u64,
}

/// Who holds a virtual port, and when they last said so.
#[derive(Debug, Clone, Copy)]
struct Binding {
    owner: SocketAddr,
    refreshed: i64,
}

/// What a keyed link's authentication refused ([`auth`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Refusals {
    /// Datagrams from the neighbour's address whose tag was wrong.
    pub forged: u64,
    /// Datagrams whose counter was taken already or too old.
    pub replayed: u64,
}

/// One link's report ([`LinkReport`]) and what its key refused.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LinkStats {
    /// The link as the node sees it.
    #[serde(flatten)]
    pub link: LinkReport,
    /// What its key refused.
    #[serde(flatten)]
    pub refused: Refusals,
}

/// A running relay node.
pub struct UdpNode {
    node: Node,
    socket: UdpSocket,
    local_ip: std::net::IpAddr,
    peers: HashMap<SocketAddr, NodeId>,
    addrs: HashMap<NodeId, SocketAddr>,
    emus: HashMap<NodeId, LinkEmulator>,
    /// The keyed links' authentication.
    auth: HashMap<NodeId, auth::LinkAuth>,
    /// What each keyed link refused (the socket counters' totals).
    refused: HashMap<NodeId, Refusals>,
    /// Delayed datagrams: (due ns, order) -> (peer, bytes).
    delayed: BinaryHeap<Reverse<(i64, u64)>>,
    delayed_data: HashMap<u64, (SocketAddr, Vec<u8>)>,
    order: u64,
    clients: HashMap<u16, Binding>,
    client_lease_ns: i64,
    start: Instant,
    busy_poll: bool,
    tx: SendBatch,
    counters: SocketCounters,
}

impl UdpNode {
    /// Binds the socket and builds the node.
    pub fn bind(cfg: &NodeConfig, seed: u64) -> io::Result<UdpNode> {
        cfg.validate().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let socket = UdpSocket::bind(cfg.listen)?;
        let receive_buffer = batch_io::set_buffers(&socket, cfg.socket_buffer) as u64;
        let mut c = Config::new(cfg.id);
        c.metric = cfg.metric;
        c.max_nack_rounds = cfg.nack_rounds;
        c.budget_ns = (cfg.budget_ms * 1e6) as i64;
        c.recovery = cfg.recovery;
        let ids: Vec<NodeId> = cfg.neighbours.iter().map(|n| n.id).collect();
        let emus = cfg
            .neighbours
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut e = LinkEmulator::new(
                    n.loss_pct / 100.0,
                    n.burst,
                    (n.delay_ms * 1e6) as i64,
                    (n.jitter_ms * 1e6) as i64,
                    seed.wrapping_mul(31).wrapping_add(i as u64),
                );
                e.rate_bps = (n.rate_kbps * 1000.0) as u64;
                (n.id, e)
            })
            .collect();
        let mut node = Node::new(c, &ids, 0);
        let auth = link_keys(cfg)?;
        for n in cfg.neighbours.iter().filter(|n| n.crtp) {
            let crtp = calliper_crtp::Config {
                repeats: n.crtp_repeats,
                header_checksum: n.crtp_repeats > 0,
                ..calliper_crtp::Config::default()
            };
            node.compress_link(n.id, crtp).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("neighbour {}: {e}", n.id))
            })?;
        }
        Ok(UdpNode {
            node,
            local_ip: socket.local_addr()?.ip(),
            socket,
            peers: cfg.neighbours.iter().map(|n| (n.addr, n.id)).collect(),
            addrs: cfg.neighbours.iter().map(|n| (n.id, n.addr)).collect(),
            emus,
            auth,
            refused: HashMap::new(),
            delayed: BinaryHeap::new(),
            delayed_data: HashMap::new(),
            order: 0,
            clients: HashMap::new(),
            client_lease_ns: (cfg.client_lease_ms as i64).saturating_mul(1_000_000),
            start: Instant::now(),
            busy_poll: cfg.busy_poll,
            tx: if cfg.segment_sends {
                SendBatch::default()
            } else {
                SendBatch::default().without_segmentation()
            },
            counters: SocketCounters { receive_buffer, ..SocketCounters::default() },
        })
    }

    /// Socket counters, with the kernel's drop count read now.
    pub fn counters(&mut self) -> &SocketCounters {
        if let Ok(d) = batch_io::kernel_drops(&self.socket) {
            self.counters.kernel_drops = d;
        }
        self.counters.sent = self.tx.sent;
        self.counters.send_errors = self.tx.errors;
        self.counters.segmented_sends = self.tx.segmented;
        self.counters.oversize += std::mem::take(&mut self.tx.oversize);
        self.counters.forged = self.refused.values().map(|r| r.forged).sum();
        self.counters.replayed = self.refused.values().map(|r| r.replayed).sum();
        &self.counters
    }

    /// Each link's report, with what its key refused.
    pub fn link_stats(&self) -> Vec<LinkStats> {
        let reports = self.node.link_reports();
        let with_refused = |link: LinkReport| LinkStats {
            refused: self.refused.get(&link.neighbour).copied().unwrap_or_default(),
            link,
        };
        reports.into_iter().map(with_refused).collect()
    }

    /// The protocol's counters.
    pub fn protocol_counters(&self) -> &Counters {
        &self.node.counters
    }

    /// Cuts or restores the emulated link to `peer` (everything sent to it is lost).
    pub fn set_link_down(&mut self, peer: NodeId, down: bool) {
        if let Some(e) = self.emus.get_mut(&peer) {
            e.down = down;
        }
    }

    fn now(&self) -> i64 {
        self.start.elapsed().as_nanos() as i64
    }

    /// Runs until `until` returns true (checked at least every 100 ms).
    /// Each turn takes a batch of datagrams, runs due timers, then sends
    /// everything the batch produced in one batch.
    pub fn run(&mut self, mut until: impl FnMut(&mut Self) -> bool) -> io::Result<()> {
        let mut rx = RecvBatch::new(&self.socket);
        let mut last_wait = 0u64;
        loop {
            self.counters.oversize += std::mem::take(&mut rx.truncated);
            self.counters.coalesced_receives += std::mem::take(&mut rx.coalesced);
            if until(self) {
                self.tx.flush(&self.socket);
                return Ok(());
            }
            let n = if self.busy_poll {
                rx.recv(&self.socket, false)?
            } else {
                let now = self.now();
                let next = self
                    .node
                    .poll_timeout()
                    .min(self.delayed.peek().map_or(i64::MAX, |r| r.0 .0))
                    .min(now + 100_000_000);
                // A setsockopt per turn costs more than forwarding a packet:
                // change the timeout only when it moves by more than an eighth.
                let wait = (next - now).max(50_000) as u64;
                if wait.abs_diff(last_wait) > last_wait / 8 {
                    self.socket.set_read_timeout(Some(Duration::from_nanos(wait)))?;
                    last_wait = wait;
                }
                rx.recv(&self.socket, true)?
            };
            let now = self.now();
            self.counters.received += n as u64;
            for i in 0..n {
                if let Some((from, bytes)) = rx.get(i) {
                    self.datagram(now, from, bytes);
                }
            }
            if self.node.poll_timeout() <= now {
                self.node.handle_timeout(now);
            }
            self.flush(now);
            if n == 0 && self.busy_poll {
                std::hint::spin_loop();
            }
        }
    }

    fn datagram(&mut self, now: i64, from: SocketAddr, b: &[u8]) {
        if let Some(&peer) = self.peers.get(&from) {
            let opened = match self.auth.get_mut(&peer) {
                Some(a) => a.open(b),
                None => Ok(b),
            };
            match opened {
                Ok(d) => self.node.handle(now, peer, d),
                Err(why) => {
                    let r = self.refused.entry(peer).or_default();
                    match why {
                        auth::Refused::Forged => r.forged += 1,
                        auth::Refused::Replayed => r.replayed += 1,
                    }
                }
            }
            return;
        }
        if !(from.ip().is_loopback() || from.ip() == self.local_ip) {
            self.counters.strangers += 1;
            return;
        }
        match b {
            [1, 0, 0] | [3, 0, 0] => self.counters.bad_client += 1,
            [1, v0, v1] => self.bind_vport(now, from, u16::from_be_bytes([*v0, *v1])),
            [3, v0, v1] => self.release_vport(now, from, u16::from_be_bytes([*v0, *v1])),
            [2, v0, v1, d0, d1, payload @ ..] => {
                let vport = u16::from_be_bytes([*v0, *v1]);
                let dest = u16::from_be_bytes([*d0, *d1]);
                self.node.send(now, dest, vport, payload);
            }
            _ => self.counters.bad_client += 1,
        }
    }

    /// Whether `vport` is held by a live client other than `from`.
    fn held_by_other(&self, now: i64, from: SocketAddr, vport: u16) -> bool {
        self.clients.get(&vport).is_some_and(|b| {
            b.owner != from && now.saturating_sub(b.refreshed) < self.client_lease_ns
        })
    }

    /// Binds `vport` to `from`, or renews its binding; refused (and
    /// counted) while another live client holds it.
    fn bind_vport(&mut self, now: i64, from: SocketAddr, vport: u16) {
        if self.held_by_other(now, from, vport) {
            self.counters.vport_refused += 1;
            return;
        }
        let b = Binding { owner: from, refreshed: now };
        self.clients.insert(vport, b);
    }

    /// Releases `vport` if `from` holds it (or its holder's lease ran out).
    fn release_vport(&mut self, now: i64, from: SocketAddr, vport: u16) {
        if self.held_by_other(now, from, vport) {
            self.counters.vport_refused += 1;
            return;
        }
        self.clients.remove(&vport);
    }

    fn flush(&mut self, now: i64) {
        let wall = wall_ns();
        while let Some((peer, bytes)) = self.node.poll_transmit() {
            let Some(&addr) = self.addrs.get(&peer) else {
                continue;
            };
            // A keyed link's trailer, sealed now (what the emulator drops
            // leaves a gap in the counters, which the window allows).
            let trailer = self.auth.get_mut(&peer).map(|a| a.seal(wall, &bytes));
            let trailer: &[u8] = trailer.as_ref().map_or(&[], |t| &t[..]);
            let due = match self.emus.get_mut(&peer) {
                Some(e) => match e.admit(now, bytes.len() + trailer.len()) {
                    Some(t) => t,
                    None => {
                        self.counters.emulated_loss += 1;
                        continue;
                    }
                },
                None => now,
            };
            if due <= now {
                self.tx.push_parts(&self.socket, addr, &bytes, trailer);
            } else {
                self.order += 1;
                self.delayed.push(Reverse((due, self.order)));
                self.delayed_data.insert(self.order, (addr, [&bytes[..], trailer].concat()));
            }
        }
        while let Some(&Reverse((due, id))) = self.delayed.peek() {
            if due > now {
                break;
            }
            self.delayed.pop();
            if let Some((addr, bytes)) = self.delayed_data.remove(&id) {
                self.send(addr, &bytes);
            }
        }
        while let Some(d) = self.node.poll_delivery() {
            // A lapsed binding still receives until another client binds.
            let Some(client) = self.clients.get(&d.vport).map(|b| b.owner) else {
                self.counters.unbound += 1;
                continue;
            };
            let [o0, o1] = d.origin.to_be_bytes();
            let [v0, v1] = d.vport.to_be_bytes();
            self.tx.push_parts(&self.socket, client, &[o0, o1, v0, v1], &d.payload);
        }
        self.tx.flush(&self.socket);
    }

    fn send(&mut self, to: SocketAddr, b: &[u8]) {
        self.tx.push(&self.socket, to, b);
    }
}

pub mod auth;
mod client;
mod config;
pub use client::Client;
pub use config::{Neighbour, NodeConfig};

/// The wall clock, ns (keyed links' counters follow it: [`auth`]).
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Each keyed neighbour's authentication (see [`auth`]).
fn link_keys(cfg: &NodeConfig) -> io::Result<HashMap<NodeId, auth::LinkAuth>> {
    let mut keys = HashMap::new();
    for n in &cfg.neighbours {
        if let Some(path) = &n.key_file {
            let key = auth::load_key(path).map_err(|e| {
                io::Error::new(e.kind(), format!("neighbours (id {}) key_file {e}", n.id))
            })?;
            keys.insert(n.id, auth::LinkAuth::new(key, cfg.id, n.id, wall_ns()));
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests;
