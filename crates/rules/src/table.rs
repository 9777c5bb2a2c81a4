//! A packet thread's copy of the rules, laid out for lookup: exact flows in
//! one hash table, wildcard filters in a tuple space ([`crate::tuples`]),
//! SIP filters in priority order.

use crate::control::Command;
use crate::hash::Seeds;
use crate::net::bits;
use crate::tuples::{Entries, TupleSpace};
use crate::{Action, ExactFilter, Filter, Rule, RuleId, SipFilter};
use hashbrown::{HashMap, HashTable};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

/// What a network rule sees of a packet.
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    /// Outermost VLAN ID.
    pub vlan: Option<u16>,
    /// IP protocol (6, 17, 132, …).
    pub protocol: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (0 when the transport has none or is a fragment).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// What a SIP rule sees of a call's first INVITE or of a REGISTER.
#[derive(Debug, Clone, Copy, Default)]
pub struct SipFacts<'a> {
    /// Request method.
    pub method: &'a str,
    /// From URI's user part.
    pub from_user: Option<&'a str>,
    /// From URI's host part.
    pub from_domain: Option<&'a str>,
    /// To URI's user part.
    pub to_user: Option<&'a str>,
    /// To URI's host part.
    pub to_domain: Option<&'a str>,
    /// User-Agent header.
    pub user_agent: Option<&'a str>,
}

/// VLAN key of exact rules that match any VLAN.
const ANY_VLAN: u16 = u16::MAX;

/// An exact flow in canonical order (lower end first), so both directions
/// find it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ExactKey {
    vlan: u16,
    protocol: u8,
    lo: (u128, u16),
    hi: (u128, u16),
}

impl ExactKey {
    fn new(vlan: u16, protocol: u8, a: (u128, u16), b: (u128, u16)) -> Self {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        ExactKey { vlan, protocol, lo, hi }
    }

    fn hash(&self, s: &Seeds) -> u64 {
        s.flow(self.vlan, self.protocol, self.lo, self.hi)
    }

    /// True when a packet from `a` to `b` (either way round) is this flow.
    #[inline(always)]
    fn is(&self, vlan: u16, protocol: u8, a: (u128, u16), b: (u128, u16)) -> bool {
        self.vlan == vlan
            && self.protocol == protocol
            && ((self.lo == a && self.hi == b) || (self.lo == b && self.hi == a))
    }

    pub(crate) fn of(f: &ExactFilter) -> Self {
        let v = f.vlan.unwrap_or(ANY_VLAN);
        ExactKey::new(v, f.protocol, (bits(f.a.0), f.a.1), (bits(f.b.0), f.b.1))
    }
}

/// Where a rule sits in the table, for deletion.
enum Place {
    Exact(ExactKey),
    Wild(Entries),
    Sip,
}

/// One packet thread's rules; changes arrive through [`RuleTable::sync`].
pub struct RuleTable {
    seeds: Seeds,
    exact: HashTable<(ExactKey, Arc<Rule>)>,
    /// Exact rules with a VLAN (when none, lookups need not probe twice).
    exact_vlan: usize,
    wild: TupleSpace,
    /// SIP rules, best first.
    sip: Vec<Arc<Rule>>,
    places: HashMap<RuleId, Place>,
    commands: Receiver<Command>,
    /// Whether lookups count their rule's hit (one shard of several counts).
    count_hits: bool,
    /// Bumped by the control side after each command it sends.
    version: Arc<AtomicU64>,
    seen: u64,
    /// The version applied, for the control side to see how far behind.
    applied: Arc<AtomicU64>,
}

impl RuleTable {
    pub(crate) fn new(
        commands: Receiver<Command>,
        version: Arc<AtomicU64>,
        applied: Arc<AtomicU64>,
    ) -> RuleTable {
        RuleTable {
            seeds: Seeds::new(),
            exact: HashTable::new(),
            exact_vlan: 0,
            wild: TupleSpace::default(),
            sip: Vec::new(),
            places: HashMap::new(),
            count_hits: true,
            commands,
            version,
            seen: 0,
            applied,
        }
    }

    /// A table that never changes and holds nothing (no rules given).
    pub fn empty() -> RuleTable {
        let (_, rx) = std::sync::mpsc::channel();
        RuleTable::new(rx, Arc::default(), Arc::default())
    }

    /// Applies the changes sent since the last call. One atomic load when
    /// there are none: call it once per group of packets.
    #[inline]
    pub fn sync(&mut self) {
        if self.version.load(Ordering::Acquire) != self.seen {
            self.apply_commands();
        }
    }

    #[cold]
    fn apply_commands(&mut self) {
        self.seen = self.version.load(Ordering::Acquire);
        while let Ok(c) = self.commands.try_recv() {
            self.apply(c);
        }
        self.applied.store(self.seen, Ordering::Release);
    }

    pub(crate) fn apply(&mut self, c: Command) {
        match c {
            Command::Insert(r) => self.insert(r),
            Command::Delete(id) => self.delete(id),
        }
    }

    /// Whether this table counts rule hits: in a run whose threads all see
    /// every packet, exactly one should.
    pub fn count_hits(&mut self, on: bool) {
        self.count_hits = on;
    }

    /// True when no network rule exists: the packet path skips lookups.
    #[inline]
    pub fn no_network_rules(&self) -> bool {
        self.exact.is_empty() && self.wild.is_empty()
    }

    /// True when no SIP rule exists.
    pub fn no_sip_rules(&self) -> bool {
        self.sip.is_empty()
    }

    fn insert(&mut self, r: Arc<Rule>) {
        let place = match &r.filter {
            Filter::Exact(f) => {
                let key = ExactKey::of(f);
                self.exact_vlan += f.vlan.is_some() as usize;
                let s = self.seeds;
                self.exact.insert_unique(key.hash(&s), (key, r.clone()), |(k, _)| k.hash(&s));
                Place::Exact(key)
            }
            Filter::Wild(w) => Place::Wild(self.wild.insert(&self.seeds, &r, w)),
            Filter::Sip(_) => {
                insert_ordered(&mut self.sip, r.clone());
                Place::Sip
            }
        };
        self.places.insert(r.id, place);
    }

    fn delete(&mut self, id: RuleId) {
        match self.places.remove(&id) {
            Some(Place::Exact(key)) => {
                if let Ok(e) = self.exact.find_entry(key.hash(&self.seeds), |(k, _)| *k == key) {
                    let ((_, r), _) = e.remove();
                    if let Filter::Exact(f) = &r.filter {
                        self.exact_vlan -= f.vlan.is_some() as usize;
                    }
                }
            }
            Some(Place::Wild(at)) => self.wild.delete(&self.seeds, id, at),
            Some(Place::Sip) => self.sip.retain(|r| r.id != id),
            None => {}
        }
    }

    /// The best network rule for a packet, its hit counted; `None` when no
    /// rule matches (track by default).
    #[inline]
    pub fn lookup(&self, f: &Flow) -> Option<&Action> {
        if self.no_network_rules() {
            return None;
        }
        self.lookup_rule(f).map(|r| {
            if self.count_hits {
                r.hit();
            }
            &r.action
        })
    }

    fn lookup_rule(&self, f: &Flow) -> Option<&Rule> {
        let (src, dst) = (bits(f.src), bits(f.dst));
        let mut best: Option<&Rule> = None;
        if !self.exact.is_empty() {
            let (a, b) = ((src, f.sport), (dst, f.dport));
            let mut probe = |vlan| {
                let h = self.seeds.flow(vlan, f.protocol, a, b);
                if let Some((_, r)) = self.exact.find(h, |(k, _)| k.is(vlan, f.protocol, a, b)) {
                    if best.is_none_or(|b| r.beats(b)) {
                        best = Some(r);
                    }
                }
            };
            probe(ANY_VLAN);
            if let (Some(v), true) = (f.vlan, self.exact_vlan > 0) {
                probe(v);
            }
        }
        self.wild.best(&self.seeds, f, src, dst, best)
    }

    /// The best SIP rule for a call's first INVITE or a REGISTER, its hit counted.
    pub fn lookup_sip(&self, facts: &SipFacts<'_>) -> Option<&Action> {
        if self.sip.is_empty() {
            return None;
        }
        // Lower-cased once for every rule's patterns (which are lower case).
        let lower = |v: Option<&str>| v.map(str::to_ascii_lowercase);
        let (fu, fd, tu, td, ua) = (
            lower(facts.from_user),
            lower(facts.from_domain),
            lower(facts.to_user),
            lower(facts.to_domain),
            lower(facts.user_agent),
        );
        let lowered = SipFacts {
            method: facts.method,
            from_user: fu.as_deref(),
            from_domain: fd.as_deref(),
            to_user: tu.as_deref(),
            to_domain: td.as_deref(),
            user_agent: ua.as_deref(),
        };
        let r = self.sip.iter().find(|r| match &r.filter {
            Filter::Sip(s) => sip_matches(s, &lowered),
            _ => false,
        })?;
        if self.count_hits {
            r.hit();
        }
        Some(&r.action)
    }
}

/// Inserts keeping `v` best first.
fn insert_ordered(v: &mut Vec<Arc<Rule>>, r: Arc<Rule>) {
    let at = v.partition_point(|x| x.beats(&r));
    v.insert(at, r);
}

fn sip_matches(s: &SipFilter, f: &SipFacts<'_>) -> bool {
    let field = |p: &Option<crate::Pattern>, v: Option<&str>| {
        p.as_ref().is_none_or(|p| v.is_some_and(|v| p.matches_lowered(v)))
    };
    s.method.as_deref().is_none_or(|m| m == f.method)
        && field(&s.from_user, f.from_user)
        && field(&s.from_domain, f.from_domain)
        && field(&s.to_user, f.to_user)
        && field(&s.to_domain, f.to_domain)
        && field(&s.user_agent, f.user_agent)
}
