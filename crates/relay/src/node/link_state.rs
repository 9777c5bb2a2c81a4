//! Link-state routing: advertising this node's links, flooding others'
//! updates, recomputing routes.

use super::*;

impl Node {
    /// Originates a link-state update if links came or went (`changed`) or a
    /// cost moved by more than `lsu_change`.
    pub(super) fn advertise(&mut self, now: i64, changed: bool) {
        let mut links = Vec::new();
        let mut significant = changed;
        for l in &mut self.links {
            if !l.alive {
                significant |= l.advertised.take().is_some();
                continue;
            }
            let rtt = l.srtt_us.unwrap_or(1_000.0);
            let c = routing::cost(self.cfg.metric, rtt, l.tx_loss, self.cfg.expected_latency);
            match l.advertised {
                Some(a) if (c as f64 - a as f64).abs() <= self.cfg.lsu_change * a as f64 => {
                    links.push((l.peer, a));
                }
                _ => {
                    significant = true;
                    l.advertised = Some(c);
                    links.push((l.peer, c));
                }
            }
        }
        if !significant {
            return;
        }
        self.my_lsu_seq = self.my_lsu_seq.wrapping_add(1);
        self.counters.lsu_originated += 1;
        let lsu = Lsu {
            origin: self.cfg.id,
            seq: self.my_lsu_seq,
            links,
        };
        self.flood(now, &lsu, None);
        self.lsdb.insert(self.cfg.id, lsu);
        self.recompute_routes();
    }

    /// Sends an LSU to every live neighbour but `except`, reliably.
    pub(super) fn flood(&mut self, now: i64, lsu: &Lsu, except: Option<usize>) {
        for li in 0..self.links.len() {
            if Some(li) == except || !self.links[li].alive {
                continue;
            }
            self.pending_lsu
                .retain(|p| !(p.link == li && p.origin == lsu.origin));
            self.pending_lsu.push(PendingLsu {
                link: li,
                origin: lsu.origin,
                seq: lsu.seq,
                next_at: now + self.cfg.lsu_retransmit_ns,
            });
            self.emit(li, 0, Message::Lsu(lsu.clone()));
        }
    }

    pub(super) fn recompute_routes(&mut self) {
        let graph: HashMap<NodeId, Vec<(NodeId, u32)>> = self
            .lsdb
            .iter()
            .map(|(&n, l)| (n, l.links.clone()))
            .collect();
        let routes = routing::next_hops(self.cfg.id, &graph);
        if routes != self.routes {
            self.counters.route_changes += 1;
            self.routes = routes;
        }
    }
}
