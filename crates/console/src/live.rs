//! [`LiveCalls`]: the calls a running probe has open, for the console's
//! live page — parties (from the INVITE), phase, times, and each stream's
//! latest interval report. A tracker: it sees the engine's events on the
//! packet thread, so it does little per event (no allocation but for a new
//! call) and holds at most [`MAX_LIVE_CALLS`] (new ones beyond are
//! counted, not kept). An ended call stays [`ENDED_KEPT_NS`] so a viewer
//! sees how it ended.

use calliper_record::event::{CallPhase, SipSeen};
use calliper_record::{Event, Tracker};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most calls followed at once.
pub const MAX_LIVE_CALLS: usize = 10_000;
/// How long an ended call stays on the live page, ns (capture time).
pub const ENDED_KEPT_NS: i64 = 30_000_000_000;
/// Most streams shown per call (the first ones).
const MAX_STREAMS: usize = 8;
/// Longest text kept (user, Call-ID, user agent).
const MAX_TEXT: usize = 128;

fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// One stream's latest interval.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LiveStream {
    /// Sender, `addr:port`.
    pub src: String,
    /// Receiver, `addr:port`.
    pub dst: String,
    /// Codec.
    pub codec: String,
    /// MOS of the latest interval, if scored.
    pub mos: Option<f64>,
    /// Loss of the latest interval, percent.
    pub loss_percent: f64,
    /// Jitter at the latest interval's end, ms.
    pub jitter_ms: f64,
    /// When that interval ended, ns.
    pub at_ns: i64,
}

/// One call as the live page shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LiveCall {
    /// The engine's serial of the call.
    pub serial: u64,
    /// Call-ID.
    pub call_id: String,
    /// Caller (From user, else URI).
    pub caller: String,
    /// Callee (To user, else URI).
    pub callee: String,
    /// The caller's User-Agent.
    pub user_agent: Option<String>,
    /// Latest phase (`started`, `ringing`, `answered`, `held`, `ended`...).
    pub phase: CallPhase,
    /// The final status, once there is one.
    pub status: Option<u16>,
    /// How it ended, once it has.
    pub state: Option<calliper_record::CallState>,
    /// INVITE time, ns.
    pub invite_ns: i64,
    /// Answer time, ns.
    pub answer_ns: Option<i64>,
    /// End time, ns.
    pub end_ns: Option<i64>,
    /// Latest capture time seen for the call, ns.
    pub updated_ns: i64,
    /// Its streams' latest intervals.
    pub streams: Vec<LiveStream>,
}

/// The open calls at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Newest INVITE first, at most the number asked for.
    pub calls: Vec<LiveCall>,
    /// The latest capture time seen (a live duration runs to it).
    pub now_ns: i64,
    /// The change counter.
    pub version: u64,
    /// Calls not followed because the table was full.
    pub untracked: u64,
}

#[derive(Debug, Default)]
struct Table {
    calls: BTreeMap<u64, LiveCall>,
    /// Latest capture time seen in any event.
    now_ns: i64,
}

/// The open calls, shared: attach a clone to the engine, read from another.
#[derive(Debug, Clone, Default)]
pub struct LiveCalls {
    table: Arc<Mutex<Table>>,
    /// Bumped at every change (the live page sends only when it moved).
    version: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
}

impl LiveCalls {
    /// Nothing open yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the live page shows.
    pub fn snapshot(&self, limit: usize) -> Snapshot {
        let t = self.lock();
        let mut calls: Vec<LiveCall> = t.calls.values().rev().take(limit).cloned().collect();
        calls.sort_by_key(|c| std::cmp::Reverse(c.invite_ns));
        Snapshot {
            calls,
            now_ns: t.now_ns,
            version: self.version.load(Ordering::Relaxed),
            untracked: self.dropped.load(Ordering::Relaxed),
        }
    }

    /// The change counter.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    fn changed(&self) {
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    /// A call's INVITE: the call starts being followed.
    fn invite(&self, m: &SipSeen<'_>, serial: u64) {
        let mut t = self.lock();
        t.now_ns = t.now_ns.max(m.ts_ns);
        if t.calls.contains_key(&serial) {
            return;
        }
        if t.calls.len() >= MAX_LIVE_CALLS {
            drop(t);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let parsed = calliper_sip::parse(m.bytes, false).ok();
        let party = |v: Option<&str>| {
            v.map(calliper_sip::NameAddr::parse)
                .map(|na| cut(na.user.unwrap_or(na.uri)))
                .unwrap_or_default()
        };
        let call = LiveCall {
            serial,
            call_id: cut(m.call_id),
            caller: party(parsed.as_ref().and_then(|p| p.from)),
            callee: party(parsed.as_ref().and_then(|p| p.to)),
            user_agent: parsed.as_ref().and_then(|p| p.user_agent).map(cut),
            phase: CallPhase::Started,
            status: None,
            state: None,
            invite_ns: m.ts_ns,
            answer_ns: None,
            end_ns: None,
            updated_ns: m.ts_ns,
            streams: Vec::new(),
        };
        t.calls.insert(serial, call);
        drop(t);
        self.changed();
    }

    /// Forgets calls that ended more than [`ENDED_KEPT_NS`] ago.
    fn expire(t: &mut Table) {
        let horizon = t.now_ns.saturating_sub(ENDED_KEPT_NS);
        t.calls.retain(|_, c| c.end_ns.is_none_or(|e| e >= horizon));
    }
}

impl Tracker for LiveCalls {
    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::Sip(m) => {
                if let (Some("INVITE"), Some(serial)) = (m.method, m.call) {
                    self.invite(m, serial);
                }
            }
            Event::Call(c) => {
                let mut t = self.lock();
                t.now_ns = t.now_ns.max(c.ts_ns);
                if let Some(call) = t.calls.get_mut(&c.call) {
                    call.phase = c.phase;
                    call.updated_ns = c.ts_ns;
                    call.status = c.status.filter(|s| *s >= 200).or(call.status);
                    match c.phase {
                        CallPhase::Answered => call.answer_ns = call.answer_ns.or(Some(c.ts_ns)),
                        CallPhase::Ended => {
                            call.end_ns = Some(c.ts_ns);
                            call.state = c.state;
                        }
                        _ => {}
                    }
                }
                Self::expire(&mut t);
                drop(t);
                self.changed();
            }
            Event::Interval(i) => {
                let Some(serial) = i.call else { return };
                let mut t = self.lock();
                t.now_ns = t.now_ns.max(i.reported_ns);
                let Some(call) = t.calls.get_mut(&serial) else {
                    return;
                };
                let (src, dst) = (
                    format!("{}:{}", i.stream.src, i.stream.src_port),
                    format!("{}:{}", i.stream.dst, i.stream.dst_port),
                );
                let figures = |s: &mut LiveStream| {
                    s.mos = i.mos;
                    s.loss_percent = i.figures.loss_percent;
                    s.jitter_ms = i.figures.jitter_ms;
                    s.at_ns = i.figures.end_ns;
                };
                let full = call.streams.len() >= MAX_STREAMS;
                match call
                    .streams
                    .iter_mut()
                    .find(|s| s.src == src && s.dst == dst)
                {
                    Some(s) => figures(s),
                    None if !full => {
                        let mut s = LiveStream {
                            src,
                            dst,
                            codec: cut(i.codec),
                            mos: None,
                            loss_percent: 0.0,
                            jitter_ms: 0.0,
                            at_ns: 0,
                        };
                        figures(&mut s);
                        call.streams.push(s);
                    }
                    None => return,
                }
                call.updated_ns = call.updated_ns.max(i.reported_ns);
                drop(t);
                self.changed();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use calliper_record::event::{CallChange, SipTransport};
    use std::net::{IpAddr, Ipv4Addr};

    const INVITE: &[u8] = b"INVITE sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP a\r\nFrom: \"Alice\" <sip:alice@example.com>;tag=1\r\nTo: <sip:bob@example.com>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nUser-Agent: phone/1\r\nContent-Length: 0\r\n\r\n";

    fn invite(t: &mut LiveCalls, serial: u64, ts_ns: i64) {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let m = SipSeen {
            ts_ns,
            src: (ip, 5060),
            dst: (ip, 5062),
            transport: SipTransport::Udp,
            call_id: "c1",
            method: Some("INVITE"),
            status: None,
            cseq_method: Some("INVITE"),
            call: Some(serial),
            bytes: INVITE,
        };
        t.event(&Event::Sip(&m));
    }

    fn phase(t: &mut LiveCalls, serial: u64, ts_ns: i64, phase: CallPhase) {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let c = CallChange {
            ts_ns,
            call: serial,
            call_id: "c1",
            phase,
            status: Some(200),
            state: (phase == CallPhase::Ended).then_some(calliper_record::CallState::Completed),
            by: None,
            reason: None,
            parties: (ip, ip),
        };
        t.event(&Event::Call(&c));
    }

    #[test]
    fn a_call_is_followed_from_invite_to_its_end_and_then_forgotten() {
        let mut t = LiveCalls::new();
        invite(&mut t, 1, 1_000);
        let s = t.snapshot(10);
        assert_eq!(s.calls.len(), 1);
        let c = &s.calls[0];
        assert_eq!((c.caller.as_str(), c.callee.as_str()), ("alice", "bob"));
        assert_eq!(c.user_agent.as_deref(), Some("phone/1"));
        let v = s.version;
        phase(&mut t, 1, 2_000, CallPhase::Answered);
        phase(&mut t, 1, 3_000, CallPhase::Ended);
        let s = t.snapshot(10);
        assert!(s.version > v);
        let c = &s.calls[0];
        assert_eq!(
            (c.answer_ns, c.end_ns, c.status),
            (Some(2_000), Some(3_000), Some(200))
        );
        // Another call's event 30 s later lets the ended one go.
        invite(&mut t, 2, 3_000 + ENDED_KEPT_NS + 1);
        phase(&mut t, 2, 3_000 + ENDED_KEPT_NS + 2, CallPhase::Ringing);
        let s = t.snapshot(10);
        assert_eq!(
            s.calls.iter().map(|c| c.serial).collect::<Vec<_>>(),
            vec![2]
        );
    }

    #[test]
    fn beyond_the_cap_calls_are_counted_not_kept() {
        let mut t = LiveCalls::new();
        for serial in 0..MAX_LIVE_CALLS as u64 + 3 {
            invite(&mut t, serial, serial as i64);
        }
        let s = t.snapshot(5);
        assert_eq!(s.calls.len(), 5);
        assert_eq!(s.untracked, 3);
        assert_eq!(t.lock().calls.len(), MAX_LIVE_CALLS);
    }
}
