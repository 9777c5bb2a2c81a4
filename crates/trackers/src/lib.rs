//! Trackers: consumers of the engine's events ([`calliper_model::event`]).
//! Each is a [`Tracker`] attached to a run without touching the engine.
//!
//! [`UserTracker`] keeps, per address of record, what its registrations
//! came to: contacts, user agent, granted expiry, last success and failure,
//! challenges and refused credentials; [`RegistrationLog`] keeps every
//! registration transaction for output; [`EventLog`] keeps the events of
//! chosen kinds (call phases, streams, intervals, RTCP, DTMF, anomalies);
//! [`Kpis`] keeps the service KPIs per interval and dimension; [`Alerts`]
//! raises alerts when thresholds are crossed; [`CallDetail`] keeps SIP
//! messages and interval reports for a database (the console's call view).
//! [`TrackerSet`] makes the ones a run keeps, attaches them and takes their
//! rows.

mod alerts;
mod call_detail;
mod event_log;
mod hep_out;
mod hep_quality;
mod hep_rtcp;
mod kpi;
mod set;
mod time_series;
pub use alerts::{Alert, AlertConfig, Alerts, MAX_ALERTS, MAX_FOLLOWED, SCANNER_AGENTS};
pub use call_detail::{
    CallDetail, MAX_DETAIL_BYTES, MAX_MESSAGE_BYTES, SIP_MESSAGE, STREAM_INTERVAL,
};
pub use calliper_model::kpi::{Counter, Dimension, KpiCounts, NerCodes, COUNTER_NAMES};
pub use event_log::{EventKind, EventLog, MAX_BACKLOG_BYTES};
pub use hep_out::{
    HepCounts, HepOut, HepTarget, FINISH_WITHIN as HEP_FINISH_WITHIN, MAX_QUEUED as MAX_HEP_QUEUED,
    MAX_QUEUED_BYTES as MAX_HEP_QUEUED_BYTES, SEND_TIMEOUT as HEP_SEND_TIMEOUT,
};
pub use hep_quality::MAX_CALLS as MAX_HEP_CALLS;
pub use kpi::{KpiConfig, Kpis, Trunk, MAX_ROWS as MAX_KPI_ROWS, OTHER, SETTLE_NS};
pub use set::{Dropped, TrackedRows, TrackerSet, TrackerSetConfig};
pub use time_series::{TimeSeries, MAX_TRAFFIC_ROWS};

use calliper_model::event::{Registration, RegistrationOutcome};
use calliper_model::{Event, Tracker};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Most addresses of record a [`UserTracker`] keeps (beyond it new ones are
/// counted in [`Users::dropped`]).
pub const MAX_USERS: usize = 100_000;
/// Most contacts kept per address of record (the most recent).
pub const MAX_CONTACTS: usize = 8;
/// Longest text kept (AOR, contact, user agent).
const MAX_TEXT: usize = 256;

/// A tracker's state, even after a panic elsewhere poisoned its lock (the
/// state stays consistent: every update is complete under the lock).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// One address of record, as its registrations describe it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct User {
    /// Address of record (the To URI of its REGISTERs).
    pub aor: String,
    /// Contacts bound by the latest successful registrations, newest last.
    pub contacts: Vec<String>,
    /// User-Agent of the latest REGISTER.
    pub user_agent: Option<String>,
    /// Where the latest REGISTER came from.
    pub client: Option<(IpAddr, u16)>,
    /// Expiry granted by the latest success, s.
    pub expires: Option<u32>,
    /// Time of the latest success (2xx), ns since the epoch.
    pub last_success_ns: Option<i64>,
    /// Time of the latest failure (anything but 2xx and a first challenge).
    pub last_failure_ns: Option<i64>,
    /// Status of the latest failure.
    pub last_failure_status: Option<u16>,
    /// Transactions by outcome.
    pub registered: u64,
    /// De-registrations (expiry 0).
    pub unregistered: u64,
    /// First challenges (401/407 to a request without credentials).
    pub challenged: u64,
    /// Refused credentials (401/407 to a request with them, or 403).
    pub auth_failed: u64,
    /// Other failures.
    pub failed: u64,
}

/// What a [`UserTracker`] has seen.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Users {
    /// By address of record.
    pub users: BTreeMap<String, User>,
    /// Registrations of new addresses refused beyond [`MAX_USERS`].
    pub dropped: u64,
}

/// Registrations per address of record. Cloning shares the state, so a
/// run can keep one handle and give the engine the other.
#[derive(Debug, Clone, Default)]
pub struct UserTracker {
    state: Arc<Mutex<Users>>,
}

impl UserTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// What it has seen so far.
    pub fn users(&self) -> Users {
        lock(&self.state).clone()
    }

    /// Registrations of new addresses refused beyond [`MAX_USERS`].
    pub fn dropped(&self) -> u64 {
        lock(&self.state).dropped
    }

    fn registration(u: &mut Users, r: &Registration<'_>) {
        let aor = cut(r.aor);
        if !u.users.contains_key(&aor) && u.users.len() >= MAX_USERS {
            u.dropped += 1;
            return;
        }
        let user = u.users.entry(aor.clone()).or_insert_with(|| User { aor, ..User::default() });
        user.user_agent = r.user_agent.map(cut).or(user.user_agent.take());
        user.client = Some(r.client);
        match r.outcome {
            RegistrationOutcome::Registered => {
                user.registered += 1;
                user.last_success_ns = Some(r.ts_ns);
                user.expires = r.expires;
                if let Some(c) = r.contact.map(cut) {
                    user.contacts.retain(|x| *x != c);
                    if user.contacts.len() >= MAX_CONTACTS {
                        user.contacts.remove(0);
                    }
                    user.contacts.push(c);
                }
            }
            RegistrationOutcome::Unregistered => {
                user.unregistered += 1;
                user.last_success_ns = Some(r.ts_ns);
                user.expires = Some(0);
                user.contacts.clear();
            }
            RegistrationOutcome::Challenged => user.challenged += 1,
            RegistrationOutcome::AuthFailed | RegistrationOutcome::Failed => {
                if r.outcome == RegistrationOutcome::AuthFailed {
                    user.auth_failed += 1;
                } else {
                    user.failed += 1;
                }
                user.last_failure_ns = Some(r.ts_ns);
                user.last_failure_status = Some(r.status);
            }
        }
    }
}

impl Tracker for UserTracker {
    fn event(&mut self, event: &Event<'_>) {
        if let Event::Registration(r) = event {
            let mut u = lock(&self.state);
            Self::registration(&mut u, r);
        }
    }
}

/// One registration transaction, as output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegistrationRecord {
    /// Final response time, ns since the epoch.
    pub ts_ns: i64,
    /// Request time.
    pub request_ns: i64,
    /// Address of record.
    pub aor: String,
    /// Contact (response's, else request's).
    pub contact: Option<String>,
    /// Granted expiry, s.
    pub expires: Option<u32>,
    /// Final status.
    pub status: u16,
    /// What it came to.
    pub outcome: RegistrationOutcome,
    /// Request's User-Agent.
    pub user_agent: Option<String>,
    /// Call-ID.
    pub call_id: String,
    /// CSeq number.
    pub cseq: u32,
    /// Client address.
    pub client: IpAddr,
    /// Client port.
    pub client_port: u16,
    /// Registrar address.
    pub registrar: IpAddr,
    /// Registrar port.
    pub registrar_port: u16,
}

/// Registration transactions, handed out as they complete (shared like
/// [`UserTracker`]). The taker drains them, so it holds only the backlog.
#[derive(Debug, Clone, Default)]
pub struct RegistrationLog {
    done: Arc<Mutex<Vec<RegistrationRecord>>>,
}

impl RegistrationLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the transactions completed since the last call.
    pub fn take(&self) -> Vec<RegistrationRecord> {
        std::mem::take(&mut *lock(&self.done))
    }
}

impl Tracker for RegistrationLog {
    fn event(&mut self, event: &Event<'_>) {
        if let Event::Registration(r) = event {
            let rec = RegistrationRecord {
                ts_ns: r.ts_ns,
                request_ns: r.request_ns,
                aor: cut(r.aor),
                contact: r.contact.map(cut),
                expires: r.expires,
                status: r.status,
                outcome: r.outcome,
                user_agent: r.user_agent.map(cut),
                call_id: cut(r.call_id),
                cseq: r.cseq,
                client: r.client.0,
                client_port: r.client.1,
                registrar: r.registrar.0,
                registrar_port: r.registrar.1,
            };
            lock(&self.done).push(rec);
        }
    }
}
