//! Events for trackers ([`calliper_model::event`]): SIP messages, call
//! phases, registration transactions (REGISTER matched to its final
//! response by Call-ID and CSeq, always followed so the counters do not
//! depend on trackers) and finished records. Nothing runs per RTP packet.

use super::*;
use calliper_model::event::{CallChange, CallPhase, Registration, RegistrationOutcome, SipSeen};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// Trackers shared by the engines of a run (one lock per event: events
/// come with signalling and records, never per RTP packet).
pub type TrackerHub = Arc<Mutex<Vec<Box<dyn Tracker>>>>;

/// Registrations awaiting their final response, at most this many (the
/// oldest is given up, counted, beyond it).
const MAX_PENDING_REGISTERS: usize = 65_536;
/// A REGISTER without a final response after this long is given up
/// (Timer F, RFC 3261 §17.1.2.2).
const REGISTER_TIMEOUT_NS: i64 = 32 * SEC;

/// A REGISTER transaction on one leg: Call-ID, CSeq, client and registrar
/// addresses (a proxy forwards the same Call-ID and CSeq on a second leg).
type RegisterKey = (Box<str>, u32, IpAddr, IpAddr);

/// A REGISTER awaiting its final response.
struct Pending {
    ts_ns: i64,
    aor: Box<str>,
    contact: Option<Box<str>>,
    expires: Option<u32>,
    user_agent: Option<Box<str>>,
    client: (IpAddr, u16),
    registrar: (IpAddr, u16),
    credentials: bool,
}

/// What the engine keeps for events: the trackers and open registrations.
#[derive(Default)]
pub(crate) struct Events {
    hub: Option<TrackerHub>,
    /// This engine delivers signalling events (one shard of several does).
    signalling: bool,
    /// This engine delivers finished records (a sharded run's reader does,
    /// after merging).
    records: bool,
    pending: HashMap<RegisterKey, Pending>,
    /// Pending keys in arrival order, for expiry from the front.
    order: VecDeque<(i64, RegisterKey)>,
    /// Anomalies already delivered: (total, by kind) of the signalling
    /// counters and of this shard's own ([`Engine::anomaly_events`]).
    pub(crate) anomalies_seen: [(u64, BTreeMap<&'static str, u64>); 2],
    /// Both counters' `anomaly_total` when their events were last delivered.
    pub(crate) anomaly_total_seen: u64,
    /// Open calls are being finished a group at a time: records drained in
    /// between are not yet all the records before the clock.
    pub(crate) finishing: bool,
}

/// Expiry of a REGISTER or Contact: the Contact's `expires` header
/// parameter (after the `<URI>`, not inside it; any case), else the Expires header.
fn expiry(m: &SipMessage<'_>) -> Option<u32> {
    let param = m.contact.and_then(|c| {
        let params = c.rfind('>').map_or(c, |gt| &c[gt + 1..]);
        params.split(';').skip(1).find_map(|p| {
            let (k, v) = p.split_once('=')?;
            k.trim().eq_ignore_ascii_case("expires").then(|| v.trim().parse().ok())?
        })
    });
    param.or_else(|| m.expires.and_then(|e| e.trim().parse().ok()))
}

fn boxed(s: Option<&str>) -> Option<Box<str>> {
    s.map(|s| cut(s).into())
}

/// Hands one event to every tracker of `hub`.
pub(crate) fn deliver_to(hub: &TrackerHub, e: &Event<'_>) {
    // A tracker that panicked poisoned the lock; its data is its own.
    let mut ts = hub.lock().unwrap_or_else(|p| p.into_inner());
    for t in ts.iter_mut() {
        t.event(e);
    }
}

impl Events {
    /// True when media events go somewhere: every engine with trackers
    /// delivers those of the streams it owns.
    #[inline]
    pub(crate) fn media(&self) -> bool {
        self.hub.is_some()
    }

    pub(crate) fn deliver(&self, e: &Event<'_>) {
        if let Some(hub) = &self.hub {
            deliver_to(hub, e);
        }
    }
}

impl Engine {
    /// Attaches trackers. `signalling`: this engine delivers SIP, call and
    /// registration events; `records`: it delivers finished records (a
    /// sharded run's shards leave those to the reader, which merges them).
    pub fn set_trackers(&mut self, hub: TrackerHub, signalling: bool, records: bool) {
        self.events.hub = Some(hub);
        self.events.signalling = signalling;
        self.events.records = records;
    }

    /// True when signalling events go somewhere.
    #[inline]
    pub(crate) fn signalling_events(&self) -> bool {
        self.events.hub.is_some() && self.events.signalling
    }

    /// Delivers the records about to be drained: later ones are held
    /// until the clock or after.
    pub(crate) fn record_events(&self) {
        if let (Some(hub), true) = (&self.events.hub, self.events.records) {
            let before = if self.events.finishing { i64::MIN } else { self.now };
            deliver_records(hub, &self.out, before);
        }
    }

    /// A SIP message: its event, and the registration it may complete.
    pub(crate) fn sip_event(
        &mut self,
        now: i64,
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        m: &SipMessage<'_>,
        call: Option<u64>,
    ) {
        let (method, status) = match m.start {
            Some(StartLine::Request { method, .. }) => (Some(method), None),
            Some(StartLine::Response { code, .. }) => (None, Some(code)),
            None => (None, None),
        };
        if m.cseq_method == Some("REGISTER") {
            self.register(now, src, dst, m, status);
        }
        if !self.signalling_events() {
            return;
        }
        self.events.deliver(&Event::Sip(&SipSeen {
            ts_ns: now,
            src,
            dst,
            transport: self.sip_transport,
            call_id: m.call_id.unwrap_or(""),
            method,
            status,
            cseq_method: m.cseq_method,
            call,
            bytes: m.raw,
            via_hep: self.sip_via_hep,
        }));
    }

    /// Follows a REGISTER transaction; delivers it at its final response.
    fn register(
        &mut self,
        now: i64,
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        m: &SipMessage<'_>,
        status: Option<u16>,
    ) {
        // An over-long Call-ID was counted as an anomaly; cutting it would
        // merge transactions that differ after the cut.
        let (Some(call_id), Some(cseq)) = (m.call_id, m.cseq) else {
            return;
        };
        if call_id.len() > MAX_CALL_ID {
            return;
        }
        self.expire_registers(now);
        let Some(status) = status else {
            return self.register_request(now, (call_id, cseq), src, dst, m);
        };
        if status < 200 {
            return;
        }
        // The response goes from the registrar back to the client.
        let ev = &mut self.events;
        let Some(p) = ev.pending.remove(&(Box::from(call_id), cseq, dst.0, src.0)) else {
            return;
        };
        let expires = expiry(m).or(p.expires);
        let outcome = match status {
            200..=299 if expires == Some(0) => RegistrationOutcome::Unregistered,
            200..=299 => RegistrationOutcome::Registered,
            401 | 407 if !p.credentials => RegistrationOutcome::Challenged,
            401 | 403 | 407 => RegistrationOutcome::AuthFailed,
            _ => RegistrationOutcome::Failed,
        };
        self.counters.registrations += 1;
        if !(ev.hub.is_some() && ev.signalling) {
            return;
        }
        ev.deliver(&Event::Registration(&Registration {
            ts_ns: now,
            clock_ns: self.now,
            request_ns: p.ts_ns,
            aor: &p.aor,
            contact: m.contact.or(p.contact.as_deref()),
            expires,
            status,
            outcome,
            user_agent: p.user_agent.as_deref(),
            call_id,
            cseq,
            client: p.client,
            registrar: p.registrar,
        }));
    }

    /// A REGISTER request opens its transaction (retransmissions keep the
    /// first one's time); past [`MAX_PENDING_REGISTERS`] the oldest still
    /// open is given up, counted.
    fn register_request(
        &mut self,
        now: i64,
        (call_id, cseq): (&str, u32),
        src: (IpAddr, u16),
        dst: (IpAddr, u16),
        m: &SipMessage<'_>,
    ) {
        let ev = &mut self.events;
        let key: RegisterKey = (call_id.into(), cseq, src.0, dst.0);
        if ev.pending.contains_key(&key) {
            return;
        }
        // Full: give up the oldest still open (the queue's front may
        // hold transactions answered meanwhile; every open one is in it).
        while ev.pending.len() >= MAX_PENDING_REGISTERS {
            let Some((_, oldest)) = ev.order.pop_front() else {
                break;
            };
            if ev.pending.remove(&oldest).is_some() {
                self.counters.registers_given_up += 1;
            }
        }
        let to = NameAddr::parse(m.to.unwrap_or(""));
        ev.pending.insert(
            key.clone(),
            Pending {
                ts_ns: now,
                aor: cut(to.uri).into(),
                contact: boxed(m.contact),
                expires: expiry(m),
                user_agent: boxed(m.user_agent),
                client: src,
                registrar: dst,
                credentials: m.authorization,
            },
        );
        ev.order.push_back((now, key));
    }

    /// Gives up REGISTERs unanswered for [`REGISTER_TIMEOUT_NS`]: only the
    /// queue's front is looked at (entries answered meanwhile are skipped).
    fn expire_registers(&mut self, now: i64) {
        let ev = &mut self.events;
        while let Some((t, _)) = ev.order.front() {
            // The queue also holds answered transactions; past twice the
            // cap its front goes early, and an open one there is given up.
            let overfull = ev.order.len() > 2 * MAX_PENDING_REGISTERS;
            if now - t < REGISTER_TIMEOUT_NS && !overfull {
                break;
            }
            let Some((t, key)) = ev.order.pop_front() else {
                break;
            };
            if ev.pending.get(&key).is_some_and(|p| p.ts_ns == t) {
                ev.pending.remove(&key);
                self.counters.registers_given_up += 1;
            }
        }
    }

    /// A call phase change.
    pub(crate) fn call_event(
        &self,
        idx: Idx,
        now: i64,
        phase: CallPhase,
        status: Option<u16>,
        by: Option<Side>,
    ) {
        if !self.signalling_events() {
            return;
        }
        let Some(c) = self.calls.get(idx) else {
            return;
        };
        if c.ignored {
            return;
        }
        self.events.deliver(&Event::Call(&CallChange {
            ts_ns: now,
            clock_ns: self.now,
            call: c.serial,
            call_id: c.text.call_id(),
            phase,
            status,
            state: None,
            by,
            reason: None,
            parties: (c.caller.0, c.callee.0),
        }));
    }
}

impl Engine {
    /// A call pushed out by the unanswered-INVITE cap ended without a record.
    pub(crate) fn call_discarded_event(&self, c: &Call) {
        if self.signalling_events() {
            self.events.deliver(&Event::Call(&CallChange {
                ts_ns: self.now,
                clock_ns: self.now,
                call: c.serial,
                call_id: c.text.call_id(),
                phase: CallPhase::Ended,
                status: None,
                state: None,
                by: None,
                reason: Some("discarded: too many unanswered INVITEs (--max-unanswered)"),
                parties: (c.caller.0, c.callee.0),
            }));
        }
    }
}

/// Delivers finished records (one engine's, or a sharded run's merged
/// ones): a call's end (as its merged record says) and then its record;
/// then that every record held until before `before` has come.
pub(crate) fn deliver_records(hub: &TrackerHub, records: &[Record], before: i64) {
    for r in records {
        match r {
            Record::Call(c) => {
                deliver_to(hub, &Event::Call(&ended(c)));
                deliver_to(hub, &Event::CallRecord(c));
            }
            Record::Stream(s) => deliver_to(hub, &Event::OrphanStream(s)),
        }
    }
    deliver_to(hub, &Event::RecordsBefore(before));
}

/// A call's end, as its record says.
fn ended(r: &CallRecord) -> CallChange<'_> {
    CallChange {
        ts_ns: r.end_ns,
        clock_ns: r.held_until_ns,
        call: r.serial,
        call_id: &r.call_id,
        phase: CallPhase::Ended,
        status: r.final_status,
        state: Some(r.state),
        by: r.hangup_by,
        reason: r.hangup_reason.as_deref().or(r.final_reason.as_deref()),
        parties: (r.caller_ip, r.callee_ip),
    }
}

/// A call's progress: (any response, ringing, answered).
pub(crate) fn progress(c: &Call) -> (bool, bool, bool) {
    (c.responded, c.ringing_ns.is_some(), c.answer_ns.is_some())
}

/// The phase a message moved its call to, from its progress before and after.
pub(crate) fn phase_change(
    before: (bool, bool, bool),
    after: (bool, bool, bool),
    m: &SipMessage<'_>,
) -> Option<CallPhase> {
    if after.2 && !before.2 {
        Some(CallPhase::Answered)
    } else if after.1 && !before.1 {
        Some(if m.has_sdp() { CallPhase::EarlyMedia } else { CallPhase::Ringing })
    } else if after.0 && !before.0 && m.status().is_some_and(|s| s < 200) {
        Some(CallPhase::Trying)
    } else {
        None
    }
}
