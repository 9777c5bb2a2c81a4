//! Wildcard rules in a tuple space: a hash table per (side, prefix length)
//! in use, keyed by the packet's address masked to that length. A rule is
//! indexed by its longer address constraint (source or destination; both
//! for `net`), and every field is checked on the candidates found. Before a
//! group's table is probed, a bitmap of its keys' hashes (kept exact by
//! per-bit counts, so deletion needs no rebuild) turns most misses away.

use crate::hash::Seeds;
use crate::net::mask;
use crate::table::Flow;
use crate::{Cidr, Rule, RuleId, WildFilter};
use hashbrown::HashTable;
use std::sync::Arc;

/// Which address a group's key is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Side {
    Src,
    Dst,
    /// Rules with no address constraint: one key, always probed.
    Any,
}

/// Bits in a group's prefilter (a false hit costs one table probe).
const FILTER_BITS: usize = 8192;

struct Group {
    side: Side,
    len: u8,
    mask: u128,
    salt: u64,
    /// Bit `h >> 51` set when some key hashes there.
    filter: Box<[u64]>,
    /// Keys per filter bit, so a bit is cleared when its last key goes.
    counts: Box<[u32]>,
    buckets: HashTable<Bucket>,
    rules: usize,
}

/// Rules under one masked address, best first.
struct Bucket {
    key: u128,
    rules: Vec<Arc<Rule>>,
}

/// Where a rule is indexed: (side, prefix length, key) per entry.
pub(crate) type Entries = Vec<(Side, u8, u128)>;

#[derive(Default)]
pub(crate) struct TupleSpace {
    groups: Vec<Group>,
}

/// The entries to index a rule under.
pub(crate) fn entries(w: &WildFilter) -> Entries {
    let one = |side, c: Cidr| (side, c.len, c.addr);
    match (w.net, w.src, w.dst) {
        (Some(n), _, _) => vec![one(Side::Src, n), one(Side::Dst, n)],
        (None, Some(s), Some(d)) if d.len > s.len => vec![one(Side::Dst, d)],
        (None, Some(s), _) => vec![one(Side::Src, s)],
        (None, None, Some(d)) => vec![one(Side::Dst, d)],
        (None, None, None) => vec![(Side::Any, 0, 0)],
    }
}

impl Group {
    fn bit(h: u64) -> usize {
        (h >> 51) as usize
    }
}

impl TupleSpace {
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub(crate) fn insert(&mut self, seeds: &Seeds, r: &Arc<Rule>, w: &WildFilter) -> Entries {
        let at = entries(w);
        for &(side, len, key) in &at {
            let gi = match self.groups.iter().position(|g| (g.side, g.len) == (side, len)) {
                Some(i) => i,
                None => {
                    self.groups.push(Group {
                        side,
                        len,
                        mask: mask(len),
                        salt: (side as u64) << 8 | len as u64,
                        filter: vec![0; FILTER_BITS / 64].into(),
                        counts: vec![0; FILTER_BITS].into(),
                        buckets: HashTable::new(),
                        rules: 0,
                    });
                    self.groups.len() - 1
                }
            };
            let g = &mut self.groups[gi];
            g.rules += 1;
            let h = seeds.one(key, g.salt);
            let salt = g.salt;
            let entry = g.buckets.entry(h, |b| b.key == key, |b| seeds.one(b.key, salt));
            let bucket = match entry {
                hashbrown::hash_table::Entry::Occupied(o) => o.into_mut(),
                hashbrown::hash_table::Entry::Vacant(v) => {
                    let bit = Group::bit(h);
                    g.counts[bit] += 1;
                    g.filter[bit / 64] |= 1 << (bit % 64);
                    v.insert(Bucket { key, rules: Vec::new() }).into_mut()
                }
            };
            let pos = bucket.rules.partition_point(|x| x.beats(r));
            bucket.rules.insert(pos, r.clone());
        }
        at
    }

    pub(crate) fn delete(&mut self, seeds: &Seeds, id: RuleId, at: Entries) {
        for (side, len, key) in at {
            let Some(gi) = self.groups.iter().position(|g| (g.side, g.len) == (side, len)) else {
                continue;
            };
            let g = &mut self.groups[gi];
            let h = seeds.one(key, g.salt);
            if let Ok(mut e) = g.buckets.find_entry(h, |b| b.key == key) {
                e.get_mut().rules.retain(|r| r.id != id);
                if e.get().rules.is_empty() {
                    e.remove();
                    let bit = Group::bit(h);
                    g.counts[bit] -= 1;
                    if g.counts[bit] == 0 {
                        g.filter[bit / 64] &= !(1 << (bit % 64));
                    }
                }
            }
            g.rules -= 1;
            if g.rules == 0 {
                self.groups.swap_remove(gi);
            }
        }
    }

    /// The best rule matching the packet, or `best` if none beats it.
    #[inline]
    pub(crate) fn best<'a>(
        &'a self,
        seeds: &Seeds,
        f: &Flow,
        src: u128,
        dst: u128,
        mut best: Option<&'a Rule>,
    ) -> Option<&'a Rule> {
        for g in &self.groups {
            let addr = match g.side {
                Side::Src => src,
                Side::Dst => dst,
                Side::Any => 0,
            };
            let key = addr & g.mask;
            let h = seeds.one(key, g.salt);
            let bit = Group::bit(h);
            if g.filter[bit / 64] & (1 << (bit % 64)) == 0 {
                continue;
            }
            let Some(bucket) = g.buckets.find(h, |b| b.key == key) else {
                continue;
            };
            // Best first: the first that matches is this bucket's best.
            for r in &bucket.rules {
                if best.is_some_and(|b| b.beats(r)) {
                    break;
                }
                if let crate::Filter::Wild(w) = &r.filter {
                    if matches(w, f, src, dst) {
                        best = Some(r);
                        break;
                    }
                }
            }
        }
        best
    }
}

#[inline]
fn matches(w: &WildFilter, f: &Flow, src: u128, dst: u128) -> bool {
    w.vlan.is_none_or(|v| f.vlan == Some(v))
        && w.protocol.is_none_or(|p| p == f.protocol)
        && w.src.is_none_or(|c| c.contains(src))
        && w.dst.is_none_or(|c| c.contains(dst))
        && w.net.is_none_or(|c| c.contains(src) || c.contains(dst))
        && w.sport.is_none_or(|r| r.contains(f.sport))
        && w.dport.is_none_or(|r| r.contains(f.dport))
        && w.port.is_none_or(|r| r.contains(f.sport) || r.contains(f.dport))
}
