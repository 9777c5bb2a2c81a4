//! Link-state routing: advertising this node's links, taking in and
//! flooding others' updates, ageing them out, recomputing routes.
//!
//! Hostile updates (docs/relay.md, "Hostile input"):
//! - sequence numbers compare as serial numbers (RFC 1982) and an update
//!   more than [`LSU_SEQ_WINDOW`] from the copy held, either way, is
//!   ignored (`lsu_out_of_window`) unless it comes straight from its origin;
//! - a copy of this node's own state it did not send makes it re-assert its
//!   state with a higher sequence number (`lsu_self_reasserted`), as OSPF
//!   does with self-originated LSAs (RFC 2328 §13.4);
//! - an update older than the copy held is answered with that copy
//!   (`lsu_stale`), so a restarted origin learns where to resume;
//! - every origin's state is refreshed every `lsu_refresh_ns` and forgotten
//!   after `lsu_max_age_ns` without one (`lsu_expired`), so no copy holds
//!   for ever;
//! - at most `max_origins` origins are held (`lsu_origins_refused`);
//! - routes are computed at most once per `route_holddown_ns`.

use super::*;
use std::collections::BTreeSet;

/// Largest forward jump of an origin's sequence number accepted from a
/// relaying neighbour. A forged update can push an origin's number at most
/// this far, and the origin's answer (one more) is within the window again.
pub const LSU_SEQ_WINDOW: u32 = 1 << 20;

/// How often stale origins are looked for.
const AGING_PERIOD_NS: i64 = 1_000 * MS;

/// An origin's link state as held here, and when it was last accepted.
#[derive(Debug)]
pub(super) struct Stored {
    pub(super) lsu: Lsu,
    pub(super) at: i64,
}

/// What an update is against the copy held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Take it and flood it.
    Newer,
    /// The copy held.
    Same,
    /// Older than the copy held (within the window): answer with ours.
    Older,
    /// Too far either way: ignore.
    OutOfWindow,
}

/// Judges update `new` against the copy `old`; `direct` when it came from
/// its origin itself, whose word overrides a copy out of the window.
pub(super) fn verdict(old: &Lsu, new: &Lsu, direct: bool) -> Verdict {
    let d = new.seq.wrapping_sub(old.seq) as i32;
    let w = LSU_SEQ_WINDOW as i32;
    match d {
        0 if direct && new.links != old.links => Verdict::Newer,
        0 => Verdict::Same,
        _ if d > 0 && d <= w => Verdict::Newer,
        _ if d < 0 && d >= -w => Verdict::Older,
        _ if direct => Verdict::Newer,
        _ => Verdict::OutOfWindow,
    }
}

/// Unacknowledged updates per (link, origin), with their resend times in
/// order: flooding, acknowledging and resending each cost O(log n).
#[derive(Debug, Default)]
pub(super) struct Pending {
    by_key: HashMap<(usize, NodeId), (u32, i64)>,
    queue: BTreeSet<(i64, usize, NodeId)>,
}

impl Pending {
    /// Expects an acknowledgement of `origin`'s `seq` on link `li` by `at`.
    fn insert(&mut self, li: usize, origin: NodeId, seq: u32, at: i64) {
        if let Some((_, old)) = self.by_key.insert((li, origin), (seq, at)) {
            self.queue.remove(&(old, li, origin));
        }
        self.queue.insert((at, li, origin));
    }

    /// An acknowledgement: forgets the update if it is the one awaited.
    fn ack(&mut self, li: usize, origin: NodeId, seq: u32) {
        if let Some(&(s, at)) = self.by_key.get(&(li, origin)) {
            if s == seq {
                self.by_key.remove(&(li, origin));
                self.queue.remove(&(at, li, origin));
            }
        }
    }

    /// The next update due by `now`, removed.
    fn pop_due(&mut self, now: i64) -> Option<(usize, NodeId)> {
        let &(at, li, origin) = self.queue.first().filter(|p| p.0 <= now)?;
        self.queue.remove(&(at, li, origin));
        self.by_key.remove(&(li, origin));
        Some((li, origin))
    }

    fn next_at(&self) -> i64 {
        self.queue.first().map_or(i64::MAX, |p| p.0)
    }

    /// Updates awaiting acknowledgement.
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }
}

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
        self.next_refresh = now.saturating_add(self.cfg.lsu_refresh_ns);
        let lsu = Lsu { origin: self.cfg.id, seq: self.my_lsu_seq, links };
        self.flood(now, &lsu);
        self.lsdb.insert(self.cfg.id, Stored { lsu, at: now });
        self.routes_dirty(now);
        self.update_routes(now);
    }

    /// Takes an update from link `li`.
    pub(super) fn receive_lsu(&mut self, now: i64, li: usize, l: Lsu) {
        let ack = Message::LsAck { origin: l.origin, seq: l.seq };
        self.emit(li, 0, ack);
        if l.origin == self.cfg.id {
            self.own_state_seen(now, l.seq, Some(&l.links));
            return;
        }
        let direct = self.links[li].peer == l.origin;
        match self.lsdb.get(&l.origin).map(|s| verdict(&s.lsu, &l, direct)) {
            None if !self.admit_origin(&l) => self.counters.lsu_origins_refused += 1,
            None | Some(Verdict::Newer) => {
                self.flood(now, &l);
                self.lsdb.insert(l.origin, Stored { lsu: l, at: now });
                self.routes_dirty(now);
            }
            Some(Verdict::Same) => {}
            Some(Verdict::Older) => {
                self.counters.lsu_stale += 1;
                if let Some(s) = self.lsdb.get(&l.origin) {
                    let ours = s.lsu.clone();
                    self.send_lsu(now, li, ours);
                }
            }
            Some(Verdict::OutOfWindow) => self.counters.lsu_out_of_window += 1,
        }
    }

    /// An acknowledgement from link `li`. One of this node's own state with
    /// a sequence number past the last it sent means a neighbour holds a
    /// copy it did not send.
    pub(super) fn receive_lsack(&mut self, now: i64, li: usize, origin: NodeId, seq: u32) {
        self.pending_lsu.ack(li, origin, seq);
        if origin == self.cfg.id && (seq.wrapping_sub(self.my_lsu_seq) as i32) > 0 {
            self.own_state_seen(now, seq, None);
        }
    }

    /// A copy of this node's own state, numbered `seq`, with `links` when
    /// known: unless it is what this node last sent (or older), re-assert
    /// the state with a higher number, past `seq` when that stays within
    /// the window of the copies that are right.
    fn own_state_seen(&mut self, now: i64, seq: u32, links: Option<&[(NodeId, u32)]>) {
        let d = seq.wrapping_sub(self.my_lsu_seq) as i32;
        let ours = self.lsdb.get(&self.cfg.id).map(|s| &s.lsu.links[..]);
        if d < 0 || (d == 0 && links.is_some() && links == ours) {
            return;
        }
        self.counters.lsu_self_reasserted += 1;
        if d <= LSU_SEQ_WINDOW as i32 {
            self.my_lsu_seq = seq;
        }
        self.advertise(now, true);
    }

    /// Whether an update from a new origin may take a place in the table.
    /// When it is full, room is made only for an origin joining the graph
    /// this node reaches (a node it reaches names it as a neighbour), by
    /// dropping the oldest origin this node does not reach.
    fn admit_origin(&mut self, l: &Lsu) -> bool {
        if self.lsdb.len() < self.cfg.max_origins {
            return true;
        }
        let me = self.cfg.id;
        let reached = |n: NodeId| n == me || self.routes.contains_key(&n);
        let joins = l.links.iter().any(|&(n, _)| {
            reached(n)
                && self
                    .lsdb
                    .get(&n)
                    .is_some_and(|s| s.lsu.links.iter().any(|&(m, _)| m == l.origin))
        });
        if !joins {
            return false;
        }
        let victim = self
            .lsdb
            .iter()
            .filter(|&(&o, _)| !reached(o))
            .min_by_key(|&(&o, s)| (s.at, o))
            .map(|(&o, _)| o);
        let Some(v) = victim else {
            return false;
        };
        self.lsdb.remove(&v);
        self.counters.lsu_origins_evicted += 1;
        true
    }

    /// Sends an LSU to every live neighbour, reliably; the one it came from
    /// too: that one only acknowledges a copy it has, but a neighbour whose
    /// address was forged to send it learns what it was made to say and
    /// takes it like everyone else, so the origin's answer reaches all.
    pub(super) fn flood(&mut self, now: i64, lsu: &Lsu) {
        for li in 0..self.links.len() {
            if !self.links[li].alive {
                continue;
            }
            self.send_lsu(now, li, lsu.clone());
        }
    }

    /// Sends `lsu` on link `li` and expects its acknowledgement.
    fn send_lsu(&mut self, now: i64, li: usize, lsu: Lsu) {
        let at = now.saturating_add(self.cfg.lsu_retransmit_ns.max(1));
        self.pending_lsu.insert(li, lsu.origin, lsu.seq, at);
        self.emit(li, 0, Message::Lsu(lsu));
    }

    /// A link came up: the neighbour gets every other origin's state held
    /// here (this node's own went with the update the link caused), as
    /// OSPF's database exchange does. A restarted neighbour thus learns the
    /// number its state had reached.
    pub(super) fn send_database(&mut self, now: i64, li: usize) {
        let me = self.cfg.id;
        let origins: Vec<NodeId> = self.lsdb.keys().copied().filter(|&o| o != me).collect();
        for o in origins {
            if let Some(s) = self.lsdb.get(&o) {
                let lsu = s.lsu.clone();
                self.send_lsu(now, li, lsu);
            }
        }
    }

    /// LSU resends, refresh of this node's state, ageing, routes.
    pub(super) fn link_state_timers(&mut self, now: i64, changed: bool) {
        // Each resend is due again later, so one pass takes each at most once.
        for _ in 0..self.pending_lsu.len() {
            let Some((li, origin)) = self.pending_lsu.pop_due(now) else {
                break;
            };
            // Updates for links that died are dropped: the new LSU replaces them.
            if !self.links[li].alive {
                continue;
            }
            if let Some(s) = self.lsdb.get(&origin) {
                let lsu = s.lsu.clone();
                self.send_lsu(now, li, lsu);
            }
        }
        let refresh = now >= self.next_refresh;
        self.advertise(now, changed || refresh);
        if now >= self.next_aging {
            self.next_aging = now.saturating_add(AGING_PERIOD_NS);
            let (me, max_age) = (self.cfg.id, self.cfg.lsu_max_age_ns);
            let before = self.lsdb.len();
            self.lsdb.retain(|&o, s| o == me || now.saturating_sub(s.at) < max_age);
            let expired = (before - self.lsdb.len()) as u64;
            if expired > 0 {
                self.counters.lsu_expired += expired;
                self.routes_dirty(now);
            }
        }
        self.update_routes(now);
    }

    /// When the link-state timers next need to run.
    pub(super) fn link_state_timeout(&self) -> i64 {
        self.pending_lsu
            .next_at()
            .min(self.next_refresh)
            .min(self.next_aging)
            .min(self.routes_due.unwrap_or(i64::MAX))
    }

    /// The database changed at `now`: routes are due after the hold-down.
    pub(super) fn routes_dirty(&mut self, now: i64) {
        if self.routes_due.is_none() {
            let after = self.routes_at.saturating_add(self.cfg.route_holddown_ns);
            self.routes_due = Some(now.max(after));
        }
    }

    /// Computes routes if they are due: at most once per hold-down, over
    /// the database in place (nothing is copied).
    pub(super) fn update_routes(&mut self, now: i64) {
        if self.routes_due.is_none_or(|t| t > now) || self.routes_at >= now {
            return;
        }
        self.routes_due = None;
        self.routes_at = now;
        self.counters.route_computations += 1;
        let lsdb = &self.lsdb;
        let routes =
            routing::next_hops(self.cfg.id, |n| lsdb.get(&n).map_or(&[][..], |s| &s.lsu.links[..]));
        if routes != self.routes {
            self.counters.route_changes += 1;
            self.routes = routes;
        }
    }

    /// Origins held and updates awaiting acknowledgement.
    pub fn link_state_size(&self) -> (usize, usize) {
        (self.lsdb.len(), self.pending_lsu.len())
    }
}
