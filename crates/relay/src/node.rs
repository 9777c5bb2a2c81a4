//! The relay protocol as a sans-I/O state machine.
//!
//! A [`Node`] never touches a socket or a clock: the caller hands it
//! datagrams from neighbours ([`Node::handle`]), data from local applications
//! ([`Node::send`]) and the time ([`Node::handle_timeout`] when
//! [`Node::poll_timeout`] says so), and takes out what to transmit
//! ([`Node::poll_transmit`]) and what to deliver ([`Node::poll_delivery`]).
//! The simulator and the UDP node drive the same code.
//!
//! Per link: every datagram carries a link sequence number; the sender keeps
//! the data it sent for one delay budget; the receiver forwards at once, even
//! out of order, notes gaps and asks for them with NACKs — again while an
//! answer can still arrive within the budget, unless configured for one
//! round as Spines does. Retransmissions are capped by a token bucket earning
//! a share of a token per original packet. Hellos measure RTT and carry the
//! receiver's loss rate back to the sender; silence for `dead_after` kills a
//! link. Link-state updates are flooded reliably (acknowledged, resent) when
//! a link comes or goes or its cost moves by more than `lsu_change`.

use crate::packet::{self, Data, Datagram, Lsu, Message, NodeId, FLAG_CRTP, FLAG_RETRANSMIT};
use crate::routing::{self, ExpectedLatency, Metric};
use std::collections::{BTreeMap, HashMap, VecDeque};

const MS: i64 = 1_000_000;
/// Gaps remembered per link; a longer outage is not worth NACKing.
const MAX_MISSING: usize = 1024;
/// Token bucket depth for retransmissions.
const MAX_TOKENS: f64 = 32.0;
/// Queued datagrams and deliveries before the oldest are dropped.
const MAX_QUEUE: usize = 65_536;
/// Initial hop limit of data.
pub const TTL: u8 = 16;

/// Protocol settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node.
    pub id: NodeId,
    /// Hello period (Spines: 100 ms).
    pub hello_interval_ns: i64,
    /// A link silent this long is dead (Spines: 10 hellos).
    pub dead_after_ns: i64,
    /// Voice delay budget: history kept and recovery attempted within it.
    pub budget_ns: i64,
    /// NACK rounds per missing packet; 0 asks as long as the budget allows.
    pub max_nack_rounds: u8,
    /// Retransmissions allowed as a share of original data (Spines: 0.2).
    pub retransmit_share: f64,
    /// Recover lost data at all (false: gaps are counted and given up at
    /// once, plain forwarding, for comparison).
    pub recovery: bool,
    /// Link cost for routing.
    pub metric: Metric,
    /// Parameters of the expected-latency metric.
    pub expected_latency: ExpectedLatency,
    /// Relative cost change that triggers a link-state update (Spines: 0.1).
    pub lsu_change: f64,
    /// Resend an unacknowledged link-state update after this long.
    pub lsu_retransmit_ns: i64,
    /// Re-originate this node's link state this often even without a
    /// change, so copies elsewhere stay younger than `lsu_max_age_ns`.
    pub lsu_refresh_ns: i64,
    /// Drop another origin's link state not refreshed for this long: a
    /// vanished node, or a copy that captured its origin (see
    /// [`LSU_SEQ_WINDOW`]), is forgotten.
    pub lsu_max_age_ns: i64,
    /// Origins (this node included) held in the link-state database; LSUs
    /// from further origins are refused and counted.
    pub max_origins: usize,
    /// Routes are computed at most once per this interval (and once per
    /// call), however many link-state updates arrive.
    pub route_holddown_ns: i64,
}

impl Config {
    /// Defaults for node `id`: Spines' timing, repeated NACKs, expected latency.
    pub fn new(id: NodeId) -> Config {
        Config {
            id,
            hello_interval_ns: 100 * MS,
            dead_after_ns: 1000 * MS,
            budget_ns: 100 * MS,
            max_nack_rounds: 0,
            retransmit_share: 0.2,
            recovery: true,
            metric: Metric::ExpectedLatency,
            expected_latency: ExpectedLatency::default(),
            lsu_change: 0.1,
            lsu_retransmit_ns: 200 * MS,
            lsu_refresh_ns: 10_000 * MS,
            lsu_max_age_ns: 40_000 * MS,
            max_origins: 1024,
            route_holddown_ns: MS,
        }
    }
}

/// Data delivered to a local application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Node the data entered at.
    pub origin: NodeId,
    /// Virtual port.
    pub vport: u16,
    /// Origin's message number.
    pub msg_seq: u32,
    /// Origin's send time (µs, origin's clock).
    pub sent_us: u64,
    /// The bytes.
    pub payload: Vec<u8>,
}

/// One overlay node.
#[derive(Debug)]
pub struct Node {
    cfg: Config,
    links: Vec<Link>,
    by_peer: HashMap<NodeId, usize>,
    /// Ordered: a new neighbour is sent the origins in one order, so a
    /// seeded run repeats.
    lsdb: BTreeMap<NodeId, Stored>,
    my_lsu_seq: u32,
    pending_lsu: Pending,
    routes: HashMap<NodeId, NodeId>,
    /// Link state changed: compute routes at this time.
    routes_due: Option<i64>,
    /// When routes were last computed.
    routes_at: i64,
    /// When this node's link state is next refreshed.
    next_refresh: i64,
    /// When stale origins are next looked for.
    next_aging: i64,
    msg_seq: u32,
    seen: HashMap<NodeId, Seen>,
    transmits: VecDeque<(NodeId, Vec<u8>)>,
    deliveries: VecDeque<Delivery>,
    compress_buf: Vec<u8>,
    /// Counters.
    pub counters: Counters,
}

fn us(ns: i64) -> u64 {
    (ns / 1000).max(0) as u64
}

impl Node {
    /// A node with these neighbours, starting at `now`.
    pub fn new(cfg: Config, neighbours: &[NodeId], now: i64) -> Node {
        let refresh = cfg.lsu_refresh_ns;
        let links: Vec<Link> = neighbours.iter().map(|&p| Link::new(p, now)).collect();
        let by_peer = neighbours.iter().enumerate().map(|(i, &p)| (p, i)).collect();
        Node {
            cfg,
            links,
            by_peer,
            lsdb: BTreeMap::new(),
            my_lsu_seq: 0,
            pending_lsu: Pending::default(),
            routes: HashMap::new(),
            routes_due: None,
            routes_at: i64::MIN,
            next_refresh: now.saturating_add(refresh),
            next_aging: now,
            msg_seq: 0,
            seen: HashMap::new(),
            transmits: VecDeque::new(),
            deliveries: VecDeque::new(),
            compress_buf: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.cfg.id
    }

    /// Next hop towards `dest`, if any, as of the last route computation
    /// (at most `route_holddown_ns` behind the link state).
    pub fn next_hop(&self, dest: NodeId) -> Option<NodeId> {
        self.routes.get(&dest).copied()
    }

    /// Whether the link to `peer` is up.
    pub fn link_alive(&self, peer: NodeId) -> bool {
        self.by_peer.get(&peer).is_some_and(|&i| self.links[i].alive)
    }

    /// Each link's report, in the order of the node file's neighbours.
    pub fn link_reports(&self) -> Vec<LinkReport> {
        self.links.iter().map(|l| l.report()).collect()
    }

    /// Smoothed RTT (µs) and loss towards `peer` as this node sees them.
    pub fn link_metrics(&self, peer: NodeId) -> Option<(f64, f64)> {
        let l = &self.links[*self.by_peer.get(&peer)?];
        Some((l.srtt_us.unwrap_or(0.0), l.tx_loss))
    }

    /// Sends application data to `vport` on node `dest`.
    pub fn send(&mut self, now: i64, dest: NodeId, vport: u16, payload: &[u8]) {
        self.msg_seq = self.msg_seq.wrapping_add(1);
        self.counters.originated += 1;
        let d = Data {
            origin: self.cfg.id,
            dest,
            vport,
            ttl: TTL,
            data_seq: 0,
            msg_seq: self.msg_seq,
            sent_us: us(now),
            payload,
        };
        if dest == self.cfg.id {
            self.deliver(&d);
            return;
        }
        self.route_data(now, &d);
    }

    /// Takes a datagram from neighbour `from`.
    pub fn handle(&mut self, now: i64, from: NodeId, bytes: &[u8]) {
        let Some(&li) = self.by_peer.get(&from) else {
            self.counters.not_neighbour += 1;
            return;
        };
        let Ok(d) = packet::decode(bytes) else {
            self.counters.malformed += 1;
            return;
        };
        let link = &mut self.links[li];
        link.last_heard = now;
        if !link.alive {
            link.alive = true;
            link.next_hello = now;
            self.advertise(now, true);
            self.send_database(now, li);
        }
        self.measure(li, d.link_seq);
        match d.msg {
            Message::Data(x) => {
                let first_copy = self.account(now, li, x.data_seq, d.flags & FLAG_RETRANSMIT != 0);
                if !first_copy {
                    self.counters.duplicates += 1;
                } else if d.flags & FLAG_CRTP != 0 {
                    self.crtp_receive(now, li, &x, bytes);
                } else {
                    self.accept(now, &x);
                }
            }
            Message::CrtpState(b) => self.crtp_state(li, b),
            Message::Nack(seqs) => self.retransmit(now, li, &seqs),
            Message::Hello { seq, echo_us, rx_loss, reply } => {
                let link = &mut self.links[li];
                link.tx_loss = rx_loss as f64 / 10_000.0;
                if reply {
                    let rtt = us(now).saturating_sub(echo_us) as f64;
                    link.srtt_us = Some(match link.srtt_us {
                        Some(s) => 0.875 * s + 0.125 * rtt,
                        None => rtt,
                    });
                } else {
                    let answer = Message::Hello {
                        seq,
                        echo_us,
                        rx_loss: (link.rx_loss * 10_000.0).round() as u16,
                        reply: true,
                    };
                    self.emit(li, 0, answer);
                }
                self.advertise(now, false);
            }
            Message::Lsu(l) => self.receive_lsu(now, li, l),
            Message::LsAck { origin, seq } => self.receive_lsack(now, li, origin, seq),
            Message::Tail { next_data_seq } => self.tail(now, li, next_data_seq),
        }
    }

    /// Delivers data for this node, forwards the rest.
    fn accept(&mut self, now: i64, x: &Data<'_>) {
        if x.dest == self.cfg.id {
            self.deliver(x);
        } else if x.ttl <= 1 {
            self.counters.ttl_expired += 1;
        } else {
            self.counters.forwarded += 1;
            self.route_data(now, &Data { ttl: x.ttl - 1, ..*x });
        }
    }

    /// Runs what is due at `now`: hellos, dead links, NACK rounds, tails,
    /// LSU resends.
    pub fn handle_timeout(&mut self, now: i64) {
        let mut changed = false;
        for li in 0..self.links.len() {
            let (interval, dead_after, budget) =
                (self.cfg.hello_interval_ns, self.cfg.dead_after_ns, self.cfg.budget_ns);
            let link = &mut self.links[li];
            if link.alive && now - link.last_heard >= dead_after {
                link.alive = false;
                let gone = link.missing.len() as u64;
                link.tally.given_up(&mut self.counters, gone);
                link.missing.clear();
                link.rx_next = None;
                link.rx_data_next = None;
                changed = true;
                self.crtp_flush(now, li);
            }
            let link = &mut self.links[li];
            if now >= link.next_hello {
                link.next_hello = now + interval;
                let total = link.window_rx + link.window_lost;
                if total > 0 {
                    let sample = link.window_lost as f64 / total as f64;
                    link.rx_loss = 0.9 * link.rx_loss + 0.1 * sample;
                    link.window_rx = 0;
                    link.window_lost = 0;
                }
                link.hello_seq = link.hello_seq.wrapping_add(1);
                let hello = Message::Hello {
                    seq: link.hello_seq,
                    echo_us: us(now),
                    rx_loss: (link.rx_loss * 10_000.0).round() as u16,
                    reply: false,
                };
                self.emit(li, 0, hello);
                if self.links[li].before_data() {
                    let next_data_seq = self.links[li].tx_data_seq;
                    self.counters.tails_sent += 1;
                    self.emit(li, 0, Message::Tail { next_data_seq });
                }
            }
            if let Some(next_data_seq) = self.links[li].take_tail(now) {
                self.counters.tails_sent += 1;
                self.emit(li, 0, Message::Tail { next_data_seq });
            }
            let link = &mut self.links[li];
            while link.history.front().is_some_and(|h| now - h.1 > budget) {
                link.history.pop_front();
            }
            self.nack_due(now, li);
            self.crtp_release(now, li);
        }
        self.link_state_timers(now, changed);
    }

    /// When [`Node::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> i64 {
        let mut t = i64::MAX;
        for l in &self.links {
            t = t.min(l.next_hello);
            if l.alive {
                t = t.min(l.last_heard + self.cfg.dead_after_ns);
            }
            for m in l.missing.values() {
                t = t.min(m.next_at);
            }
            if let Some(at) = l.tail_due() {
                t = t.min(at);
            }
        }
        t.min(self.link_state_timeout())
    }

    /// Next datagram to send: (neighbour, bytes).
    pub fn poll_transmit(&mut self) -> Option<(NodeId, Vec<u8>)> {
        self.transmits.pop_front()
    }

    /// Next delivery to a local application.
    pub fn poll_delivery(&mut self) -> Option<Delivery> {
        self.deliveries.pop_front()
    }

    /// Link loss measurement over all datagrams (reordering counts as loss
    /// here; it is rare on a link and the figure is smoothed).
    fn measure(&mut self, li: usize, seq: u32) {
        let link = &mut self.links[li];
        match link.rx_next {
            Some(next) if (seq.wrapping_sub(next) as i32) < 0 => {}
            Some(next) => {
                link.window_lost += seq.wrapping_sub(next);
                link.window_rx += 1;
                link.rx_next = Some(seq.wrapping_add(1));
            }
            None => {
                link.window_rx += 1;
                link.rx_next = Some(seq.wrapping_add(1));
            }
        }
    }

    fn route_data(&mut self, now: i64, d: &Data<'_>) {
        self.update_routes(now);
        let Some(&li) = self.routes.get(&d.dest).and_then(|hop| self.by_peer.get(hop)) else {
            self.counters.no_route += 1;
            return;
        };
        let mut compressed = std::mem::take(&mut self.compress_buf);
        let (flags, payload) = if self.compress_for(li, now, d.payload, &mut compressed) {
            (FLAG_CRTP, &compressed[..])
        } else {
            (0, d.payload)
        };
        let link = &mut self.links[li];
        let seq = link.next_link_seq();
        let data_seq = link.tx_data_seq;
        link.tx_data_seq = data_seq.wrapping_add(1);
        link.data_sent(now);
        let mut bytes = Vec::with_capacity(packet::HEADER + packet::DATA_HEADER + payload.len());
        packet::encode(
            &Datagram {
                flags,
                link_seq: seq,
                msg: Message::Data(Data { data_seq, payload, ..*d }),
            },
            &mut bytes,
        );
        self.compress_buf = compressed;
        link.history.push_back((data_seq, now, bytes.clone()));
        link.tokens = (link.tokens + self.cfg.retransmit_share).min(MAX_TOKENS);
        let peer = link.peer;
        self.push_transmit(peer, bytes);
    }

    /// Sends a control message on link `li` (consuming a link sequence number).
    fn emit(&mut self, li: usize, flags: u8, msg: Message<'_>) {
        let link = &mut self.links[li];
        let seq = link.next_link_seq();
        let mut bytes = Vec::new();
        packet::encode(&Datagram { flags, link_seq: seq, msg }, &mut bytes);
        let peer = link.peer;
        self.push_transmit(peer, bytes);
    }

    fn push_transmit(&mut self, peer: NodeId, bytes: Vec<u8>) {
        if self.transmits.len() >= MAX_QUEUE {
            self.transmits.pop_front();
            self.counters.queue_overflow += 1;
        }
        self.transmits.push_back((peer, bytes));
    }

    fn deliver(&mut self, d: &Data<'_>) {
        if !self.seen.entry(d.origin).or_default().first(d.msg_seq) {
            self.counters.duplicates += 1;
            return;
        }
        self.counters.delivered += 1;
        if self.deliveries.len() >= MAX_QUEUE {
            self.deliveries.pop_front();
            self.counters.queue_overflow += 1;
        }
        self.deliveries.push_back(Delivery {
            origin: d.origin,
            vport: d.vport,
            msg_seq: d.msg_seq,
            sent_us: d.sent_us,
            payload: d.payload.to_vec(),
        });
    }
}

mod compression;
mod counters;
mod link;
mod link_state;
mod recovery;
mod seen;

use compression::LinkCrtp;
pub use counters::Counters;
pub use link::LinkReport;
use link::{Link, Missing};
pub use link_state::LSU_SEQ_WINDOW;
use link_state::{Pending, Stored};
use seen::Seen;

#[cfg(test)]
mod tests;
