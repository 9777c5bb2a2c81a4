//! The simulated world of one run: the nodes, the emulated links between
//! them, the streams and the event queue, stepped in time order. Each step
//! hands a node one event (a datagram, a timer, a packet to send), then
//! carries out what the node produced: datagrams onto links, deliveries
//! into the report, its next timer into the queue.

use super::{voice, Ev, Flow, Report, Topology, TopologyError, MS};
use crate::emu::LinkEmulator;
use crate::node::{Config, Node};
use crate::packet::NodeId;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

pub(super) struct World {
    nodes: Vec<Node>,
    /// A node's place in `nodes` by its id.
    index: HashMap<NodeId, usize>,
    /// Each direction of each link. Ordered: the neighbours of each node
    /// are listed from it, and the figures must not depend on a hash order
    /// (the same file and seed give the same figures).
    emus: BTreeMap<(NodeId, NodeId), LinkEmulator>,
    flows: Vec<Flow>,
    /// Events by (time, order of scheduling), their payloads by order.
    queue: BinaryHeap<Reverse<(i64, u64)>>,
    events: HashMap<u64, Ev>,
    order: u64,
    /// Each node's timer as last armed (a timer event at another time is stale).
    next_timer: Vec<i64>,
    budget: i64,
    first_cut: i64,
    end: i64,
    report: Report,
    payload_buf: Vec<u8>,
}

impl World {
    /// The world of topology `t`, its first events scheduled.
    pub(super) fn new(t: &Topology) -> Result<World, TopologyError> {
        let s = &t.settings;
        let ids: BTreeSet<NodeId> = t.links.iter().flat_map(|l| [l.a, l.b]).collect();
        let ids: Vec<NodeId> = ids.into_iter().collect();
        let index: HashMap<NodeId, usize> = ids.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        t.validate()?;
        let emus = links(t)?;
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
        let flows = flows(t, &index, warmup)?;
        let end =
            flows.iter().map(|f| f.start + f.interval * f.packets as i64).max().unwrap_or(warmup)
                + 2 * budget
                + 1_000_000_000;
        let mut world = World {
            next_timer: vec![0; nodes.len()],
            nodes,
            index,
            emus,
            flows,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            order: 0,
            budget,
            first_cut: i64::MAX,
            end,
            report: Report::default(),
            payload_buf: Vec::new(),
        };
        for node in 0..world.nodes.len() {
            world.push(0, Ev::Timer { node });
        }
        for f in 0..world.flows.len() {
            world.push(world.flows[f].start, Ev::Send { stream: f, k: 0 });
        }
        for c in &t.cuts {
            let at = warmup + (c.at_ms * MS) as i64;
            world.first_cut = world.first_cut.min(at);
            world.push(at, Ev::Cut { a: c.a, b: c.b });
        }
        Ok(world)
    }

    fn push(&mut self, at: i64, ev: Ev) {
        self.order += 1;
        self.queue.push(Reverse((at, self.order)));
        self.events.insert(self.order, ev);
    }

    /// Steps every event up to the end of the run.
    pub(super) fn run(&mut self) {
        while let Some(Reverse((now, id))) = self.queue.pop() {
            if now > self.end {
                break;
            }
            let Some(ev) = self.events.remove(&id) else {
                continue;
            };
            let Some(touched) = self.handle(now, ev) else {
                continue;
            };
            self.transmit(now, touched);
            self.deliver(now, touched);
            let t = self.nodes[touched].poll_timeout().max(now);
            if t < self.next_timer[touched] {
                self.next_timer[touched] = t;
                self.push(t, Ev::Timer { node: touched });
            }
        }
    }

    /// Hands one event to its node: the node touched, or None (a stale
    /// timer, a cut).
    fn handle(&mut self, now: i64, ev: Ev) -> Option<usize> {
        match ev {
            Ev::Arrive { node, from, bytes } => {
                self.nodes[node].handle(now, from, &bytes);
                Some(node)
            }
            Ev::Timer { node } => {
                if self.next_timer[node] != now {
                    return None;
                }
                self.next_timer[node] = i64::MAX;
                self.nodes[node].handle_timeout(now);
                Some(node)
            }
            Ev::Send { stream, k } => {
                let f = &self.flows[stream];
                self.report.sent += 1;
                let (from, to, vport) = (f.from, f.to, f.vport);
                voice::payload(f.rtp, stream, k, f.interval, f.payload, &mut self.payload_buf);
                self.nodes[from].send(now, to, vport, &self.payload_buf);
                if k + 1 < f.packets {
                    let at = f.start + f.interval * (k as i64 + 1);
                    self.push(at, Ev::Send { stream, k: k + 1 });
                }
                Some(from)
            }
            Ev::Cut { a, b } => {
                for key in [(a, b), (b, a)] {
                    if let Some(e) = self.emus.get_mut(&key) {
                        e.down = true;
                    }
                }
                None
            }
        }
    }

    /// Puts the datagrams node `touched` sent onto their links.
    fn transmit(&mut self, now: i64, touched: usize) {
        let me = self.nodes[touched].id();
        while let Some((peer, bytes)) = self.nodes[touched].poll_transmit() {
            let Some(emu) = self.emus.get_mut(&(me, peer)) else {
                continue;
            };
            if let Some(at) = emu.admit(now, bytes.len()) {
                self.push(at, Ev::Arrive { node: self.index[&peer], from: me, bytes });
            }
        }
    }

    /// Takes what node `touched` delivered into the report.
    fn deliver(&mut self, now: i64, touched: usize) {
        while let Some(d) = self.nodes[touched].poll_delivery() {
            let f = &self.flows[d.vport as usize];
            // Which packet of the stream: its RTP sequence number (streams
            // of up to 65 536 packets; opaque payloads are all alike).
            let k = if f.rtp && d.payload.len() >= 32 {
                u16::from_be_bytes([d.payload[30], d.payload[31]]) as u64
            } else {
                0
            };
            let buf = &mut self.payload_buf;
            voice::payload(f.rtp, d.vport as usize, k, f.interval, f.payload, buf);
            let report = &mut self.report;
            report.corrupted += (d.payload != *buf) as u64;
            let delay = now - d.sent_us as i64 * 1000;
            report.delivered += 1;
            report.within_budget += (delay <= self.budget) as u64;
            report.delays_ns.push(delay);
            let f = &mut self.flows[d.vport as usize];
            if now > self.first_cut && f.last_delivery > 0 {
                report.longest_gap_after_cut_ns =
                    report.longest_gap_after_cut_ns.max(now - f.last_delivery.max(self.first_cut));
            }
            f.last_delivery = now;
        }
    }

    /// The report of the run, with the nodes' and links' counters.
    pub(super) fn into_report(self) -> Report {
        let mut report = self.report;
        report.delays_ns.sort_unstable();
        for n in &self.nodes {
            report.counters.add(&n.counters);
        }
        report.link_drops = self.emus.values().map(|e| e.lost).sum();
        report.queue_drops = self.emus.values().map(|e| e.queue_drops).sum();
        report.link_bytes = self.emus.values().map(|e| e.bytes).sum();
        let first = self.flows.iter().map(|f| f.start).min().unwrap_or(0);
        let last =
            self.flows.iter().map(|f| f.start + f.interval * f.packets as i64).max().unwrap_or(0);
        report.duration_s = (last - first) as f64 / 1e9;
        report
    }
}

/// Each direction of each link, emulated with its own seed.
fn links(t: &Topology) -> Result<BTreeMap<(NodeId, NodeId), LinkEmulator>, TopologyError> {
    let mut emus = BTreeMap::new();
    for (i, l) in t.links.iter().enumerate() {
        for (dir, (x, y)) in [(l.a, l.b), (l.b, l.a)].into_iter().enumerate() {
            let seed = t.settings.seed.wrapping_mul(1_000_003).wrapping_add((i * 2 + dir) as u64);
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
    Ok(emus)
}

/// The streams, `count` of each spec, numbered in order (their virtual ports).
fn flows(
    t: &Topology,
    index: &HashMap<NodeId, usize>,
    warmup: i64,
) -> Result<Vec<Flow>, TopologyError> {
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
    Ok(flows)
}
