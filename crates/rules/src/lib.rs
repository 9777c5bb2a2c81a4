//! The rule table: which traffic the probe follows, ignores, records or
//! labels, changed while packets flow.
//!
//! A rule has a filter, an [`Action`] and a priority (highest wins; among
//! equals, the older rule). Filters come in three kinds, each looked up its
//! own way so the cost per packet does not grow with the number of rules:
//! - **exact** flows (transport, both addresses and ports, optionally a VLAN)
//!   in one hash table, matching both directions of the flow;
//! - **wildcard** flows (networks, port ranges, VLAN, transport) in a tuple
//!   space: one hash table per pair of prefix lengths in use;
//! - **SIP** filters (method, From/To user and domain, User-Agent), evaluated
//!   once per call or registration, not per packet.
//!
//! [`Rules`] is the control side (insert, delete, list from any thread);
//! each packet thread owns a [`RuleTable`] that applies the changes sent to
//! it at its next [`RuleTable::sync`], never taking a lock.

mod control;
mod file;
mod hash;
mod net;
mod pattern;
mod table;
mod tuples;

pub use control::{RuleInfo, Rules};
pub use file::{load_file, parse, reload_file, RuleSpec};
pub use net::{Cidr, PortRange};
pub use pattern::Pattern;
pub use table::{Flow, RuleTable, SipFacts};

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// What happens to traffic a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Analyse it (the default; a high-priority `track` overrides a broader `ignore`).
    Track,
    /// Drop it before any state is created; counted.
    Ignore,
    /// Analyse it and select its call for payload recording.
    Record,
    /// Analyse it and put this label on its call (alerts and searches use labels).
    Label(Arc<str>),
}

impl Action {
    /// The action's name in rule files and listings.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Track => "track",
            Action::Ignore => "ignore",
            Action::Record => "record",
            Action::Label(_) => "label",
        }
    }
}

/// An exact flow: both directions of it match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactFilter {
    /// VLAN ID; `None` matches any.
    pub vlan: Option<u16>,
    /// IP protocol (6 TCP, 17 UDP, 132 SCTP).
    pub protocol: u8,
    /// One end.
    pub a: (std::net::IpAddr, u16),
    /// The other end.
    pub b: (std::net::IpAddr, u16),
}

/// Networks and port ranges; every field given must match.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WildFilter {
    /// VLAN ID.
    pub vlan: Option<u16>,
    /// IP protocol.
    pub protocol: Option<u8>,
    /// Source network.
    pub src: Option<Cidr>,
    /// Destination network.
    pub dst: Option<Cidr>,
    /// Either address in this network.
    pub net: Option<Cidr>,
    /// Source ports.
    pub sport: Option<PortRange>,
    /// Destination ports.
    pub dport: Option<PortRange>,
    /// Either port in this range.
    pub port: Option<PortRange>,
}

/// SIP fields of a call's first INVITE or of a REGISTER; every field given must match.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SipFilter {
    /// Request method, exactly (e.g. `INVITE`, `REGISTER`).
    pub method: Option<String>,
    /// User part of the From URI.
    pub from_user: Option<Pattern>,
    /// Host part of the From URI.
    pub from_domain: Option<Pattern>,
    /// User part of the To URI.
    pub to_user: Option<Pattern>,
    /// Host part of the To URI.
    pub to_domain: Option<Pattern>,
    /// User-Agent header.
    pub user_agent: Option<Pattern>,
}

/// What a rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// One flow, by hash.
    Exact(ExactFilter),
    /// Networks and port ranges.
    Wild(WildFilter),
    /// SIP fields.
    Sip(SipFilter),
}

/// Identifies a rule for deletion and in listings.
pub type RuleId = u64;

/// One rule, shared by the control side and every table.
#[derive(Debug)]
pub struct Rule {
    /// Given by [`Rules::insert`], unique in a run.
    pub id: RuleId,
    /// The operator's name for it (from the file), or empty.
    pub name: Box<str>,
    /// Highest wins.
    pub priority: i32,
    /// What it matches.
    pub filter: Filter,
    /// What it does.
    pub action: Action,
    /// Packets (network rules) or calls and registrations (SIP rules) it decided.
    pub hits: AtomicU64,
}

impl Rule {
    /// True when `self` takes precedence over `other`.
    fn beats(&self, other: &Rule) -> bool {
        (self.priority, std::cmp::Reverse(self.id)) > (other.priority, std::cmp::Reverse(other.id))
    }

    /// Counts a decision (Relaxed: a statistic; shards may share the rule).
    fn hit(&self) {
        self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Most network (exact and wildcard) rules a table holds.
pub const MAX_NETWORK_RULES: usize = 200_000;
/// Most SIP rules (each is tried in turn when a call starts).
pub const MAX_SIP_RULES: usize = 10_000;
/// Longest label or name.
pub const MAX_LABEL: usize = 64;
/// Most wildcard rules indexed under one network (each is tried in turn
/// for every packet of that network).
pub const MAX_RULES_PER_NETWORK: usize = 64;
/// Changes the slowest packet thread may have left to apply before a
/// console's further changes are refused (a quiet link applies none).
pub const MAX_PENDING_CHANGES: u64 = 1024;

/// Checks a rule's name (`label` false; may be empty) or label: its
/// length, and no control or bidirectional-override characters (it is
/// shown to operators).
pub(crate) fn check_text(what: &str, s: &str, label: bool) -> Result<(), RuleError> {
    if s.len() > MAX_LABEL || (label && s.is_empty()) {
        let least = if label { 1 } else { 0 };
        return error(format!("a {what} must be {least} to {MAX_LABEL} bytes"));
    }
    let bidi = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if s.chars().any(|c| c.is_control() || bidi(c)) {
        return error(format!(
            "a {what} may not hold control or bidirectional-override characters"
        ));
    }
    Ok(())
}

/// Why a rule was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError(pub String);

impl std::fmt::Display for RuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RuleError {}

fn error<T>(msg: impl Into<String>) -> Result<T, RuleError> {
    Err(RuleError(msg.into()))
}
