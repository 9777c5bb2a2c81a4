//! The control side: insert, delete and list rules from any thread while
//! packet threads run. Each packet thread's [`RuleTable`] has a channel of
//! its own; a change is validated here, sent to every table and announced by
//! bumping a shared version, which a table checks with one atomic load per
//! group of packets. The packet path never takes a lock and never waits.

use crate::table::{ExactKey, RuleTable};
use crate::tuples::{entries, Side};
use crate::{
    check_text, error, Action, Filter, Rule, RuleError, RuleId, MAX_NETWORK_RULES,
    MAX_RULES_PER_NETWORK, MAX_SIP_RULES,
};
use hashbrown::HashMap;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};

/// A change for the tables.
pub(crate) enum Command {
    Insert(Arc<Rule>),
    Delete(RuleId),
}

#[derive(Default)]
struct Inner {
    next_id: RuleId,
    /// Every rule by id (ids grow, so this is insertion order).
    rules: BTreeMap<RuleId, Arc<Rule>>,
    /// Exact flows in use, so a duplicate is refused without a scan.
    exact: HashMap<ExactKey, RuleId>,
    /// Wildcard rules per index entry (network), for the per-network cap.
    per_network: HashMap<(Side, u8, u128), usize>,
    /// Each table's channel and the version it has applied.
    tables: Vec<(Sender<Command>, Arc<AtomicU64>)>,
    network: usize,
    sip: usize,
}

/// The rules of a run, shared by whoever changes them (cheap to clone).
#[derive(Clone, Default)]
pub struct Rules {
    inner: Arc<Mutex<Inner>>,
    version: Arc<AtomicU64>,
}

/// A rule as listed: what it is and how often it decided.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuleInfo {
    /// Its id (for deletion).
    pub id: RuleId,
    /// The operator's name, or empty.
    pub name: String,
    /// Highest wins.
    pub priority: i32,
    /// `exact`, `wildcard` or `sip`.
    pub kind: &'static str,
    /// The filter, as text.
    pub filter: String,
    /// `track`, `ignore`, `record` or `label`.
    pub action: &'static str,
    /// The label of a `label` rule.
    pub label: Option<String>,
    /// Packets (network rules) or calls and registrations (SIP rules) it decided.
    pub hits: u64,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rules({} rules)", self.len())
    }
}

impl Rules {
    /// No rules.
    pub fn new() -> Rules {
        Rules::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves consistent data
        // (every change is one push or remove).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A table for one packet thread, holding the current rules and
    /// receiving every later change.
    pub fn table(&self) -> RuleTable {
        let mut inner = self.lock();
        let (tx, rx) = channel();
        let applied = Arc::new(AtomicU64::new(0));
        let mut t = RuleTable::new(rx, self.version.clone(), applied.clone());
        for r in inner.rules.values() {
            t.apply(Command::Insert(r.clone()));
        }
        // Changes made after this point reach it through the channel.
        t.sync();
        inner.tables.push((tx, applied));
        t
    }

    /// Adds a rule and returns its id.
    pub fn insert(
        &self,
        name: &str,
        priority: i32,
        filter: Filter,
        action: Action,
    ) -> Result<RuleId, RuleError> {
        check_text("rule name", name, false)?;
        if let Action::Label(l) = &action {
            check_text("label", l, true)?;
        }
        let mut inner = self.lock();
        let sip = matches!(filter, Filter::Sip(_));
        if sip && inner.sip >= MAX_SIP_RULES {
            return error(format!("already {MAX_SIP_RULES} SIP rules"));
        }
        if !sip && inner.network >= MAX_NETWORK_RULES {
            return error(format!("already {MAX_NETWORK_RULES} network rules"));
        }
        if let Filter::Exact(f) = &filter {
            if let Some(other) = inner.exact.get(&ExactKey::of(f)) {
                return error(format!("rule {other} already has this exact flow"));
            }
        }
        if let Filter::Wild(w) = &filter {
            if let Some(&(side, len, key)) = entries(w)
                .iter()
                .find(|e| inner.per_network.get(*e).copied().unwrap_or(0) >= MAX_RULES_PER_NETWORK)
            {
                let network = match side {
                    Side::Any => "any address".to_string(),
                    _ => crate::Cidr { addr: key, len }.to_string(),
                };
                return error(format!(
                    "already {MAX_RULES_PER_NETWORK} wildcard rules on {network}: each is tried for every \
                     packet there; merge them (port ranges) or use exact flows"
                ));
            }
            for e in entries(w) {
                *inner.per_network.entry(e).or_default() += 1;
            }
        }
        inner.next_id += 1;
        let rule = Arc::new(Rule {
            id: inner.next_id,
            name: name.into(),
            priority,
            filter,
            action,
            hits: AtomicU64::new(0),
        });
        if sip {
            inner.sip += 1;
        } else {
            inner.network += 1;
        }
        let id = rule.id;
        if let Filter::Exact(f) = &rule.filter {
            inner.exact.insert(ExactKey::of(f), id);
        }
        inner.rules.insert(id, rule.clone());
        self.broadcast(&mut inner, || Command::Insert(rule.clone()));
        Ok(id)
    }

    /// Removes a rule; false when no rule has this id.
    pub fn delete(&self, id: RuleId) -> bool {
        let mut inner = self.lock();
        let Some(r) = inner.rules.remove(&id) else {
            return false;
        };
        match &r.filter {
            Filter::Sip(_) => inner.sip -= 1,
            Filter::Exact(f) => {
                inner.exact.remove(&ExactKey::of(f));
                inner.network -= 1;
            }
            Filter::Wild(w) => {
                inner.network -= 1;
                for e in entries(w) {
                    if let Some(n) = inner.per_network.get_mut(&e) {
                        *n -= 1;
                        if *n == 0 {
                            inner.per_network.remove(&e);
                        }
                    }
                }
            }
        }
        self.broadcast(&mut inner, || Command::Delete(id));
        true
    }

    /// Sends a change to every table, forgetting tables that are gone.
    fn broadcast(&self, inner: &mut Inner, c: impl Fn() -> Command) {
        inner.tables.retain(|(t, _)| t.send(c()).is_ok());
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Changes the slowest packet thread has yet to apply (a thread applies
    /// them with its next packets, or at its next batch end on a quiet
    /// link). A console refuses more beyond [`crate::MAX_PENDING_CHANGES`],
    /// so changes cannot pile up while no packet comes.
    pub fn pending_changes(&self) -> u64 {
        let inner = self.lock();
        let version = self.version.load(Ordering::Acquire);
        inner
            .tables
            .iter()
            .map(|(_, applied)| version.saturating_sub(applied.load(Ordering::Acquire)))
            .max()
            .unwrap_or(0)
    }

    /// Every rule with its hits so far, in insertion order.
    pub fn list(&self) -> Vec<RuleInfo> {
        self.lock().rules.values().map(|r| info(r)).collect()
    }

    /// Up to `limit` rules after the first `offset`, in insertion order,
    /// and how many rules there are in all (a console's page).
    pub fn list_page(&self, offset: usize, limit: usize) -> (Vec<RuleInfo>, usize) {
        let inner = self.lock();
        let page = inner.rules.values().skip(offset).take(limit).map(|r| info(r));
        (page.collect(), inner.rules.len())
    }

    /// One rule as listed, if it is in the table.
    pub fn get(&self, id: RuleId) -> Option<RuleInfo> {
        self.lock().rules.get(&id).map(|r| info(r))
    }

    /// Every rule as it was inserted (name, priority, filter, action), in
    /// insertion order: what a reload puts back when the new file fails.
    pub fn export(&self) -> Vec<(String, i32, Filter, Action)> {
        self.lock()
            .rules
            .values()
            .map(|r| (r.name.to_string(), r.priority, r.filter.clone(), r.action.clone()))
            .collect()
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.lock().rules.len()
    }

    /// True when there are no rules.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A rule as listed.
fn info(r: &Rule) -> RuleInfo {
    RuleInfo {
        id: r.id,
        name: r.name.to_string(),
        priority: r.priority,
        kind: match r.filter {
            Filter::Exact(_) => "exact",
            Filter::Wild(_) => "wildcard",
            Filter::Sip(_) => "sip",
        },
        filter: describe(&r.filter),
        action: r.action.name(),
        label: match &r.action {
            Action::Label(l) => Some(l.to_string()),
            _ => None,
        },
        hits: r.hits.load(Ordering::Relaxed),
    }
}

/// A filter as text, in the rule file's terms.
fn describe(f: &Filter) -> String {
    let mut s = String::new();
    let mut put = |k: &str, v: &dyn std::fmt::Display| {
        let sep = if s.is_empty() { "" } else { " " };
        let _ = write!(s, "{sep}{k}={v}");
    };
    match f {
        Filter::Exact(e) => {
            put("protocol", &crate::file::protocol_name(e.protocol));
            put("a", &format_args!("{}:{}", e.a.0, e.a.1));
            put("b", &format_args!("{}:{}", e.b.0, e.b.1));
            if let Some(v) = e.vlan {
                put("vlan", &v);
            }
        }
        Filter::Wild(w) => {
            if let Some(v) = w.vlan {
                put("vlan", &v);
            }
            if let Some(p) = w.protocol {
                put("protocol", &crate::file::protocol_name(p));
            }
            for (k, c) in [("src", w.src), ("dst", w.dst), ("net", w.net)] {
                if let Some(c) = c {
                    put(k, &c);
                }
            }
            for (k, r) in [("sport", w.sport), ("dport", w.dport), ("port", w.port)] {
                if let Some(r) = r {
                    put(k, &r);
                }
            }
        }
        Filter::Sip(f) => {
            if let Some(m) = &f.method {
                put("method", m);
            }
            for (k, p) in [
                ("from_user", &f.from_user),
                ("from_domain", &f.from_domain),
                ("to_user", &f.to_user),
                ("to_domain", &f.to_domain),
                ("user_agent", &f.user_agent),
            ] {
                if let Some(p) = p {
                    put(k, p);
                }
            }
        }
    }
    s
}
