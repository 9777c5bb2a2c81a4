//! [`LiveCalls`]: the calls a running probe has open, for the console's
//! live page — parties (from the INVITE), phase, times, and each stream's
//! latest interval report. A tracker: it sees the engine's events on the
//! packet thread, so each event costs O(1) amortised (no scan of the
//! table; allocation only for a new call). It holds at most
//! [`MAX_LIVE_CALLS`]: a new call beyond takes the place of the oldest one
//! not answered, else of the oldest (counted as `evicted`), so a flood
//! cannot keep new calls off the page. An ended call stays
//! [`ENDED_KEPT_NS`] of capture time so a viewer sees how it ended. Text
//! is cut to 128 bytes with control and bidirectional-override characters
//! shown as escapes (`calliper_model::text`: a caller name must not be
//! able to reorder what is shown).

use calliper_model::event::{CallPhase, SipSeen};
use calliper_model::{Event, Tracker};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
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
    calliper_model::text::visible(&s[..end]).into_owned()
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
    pub state: Option<calliper_model::CallState>,
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
    /// The capture time of the latest event (a live duration runs to it).
    pub now_ns: i64,
    /// The change counter.
    pub version: u64,
    /// Calls taken off the table to make room for newer ones.
    pub evicted: u64,
}

#[derive(Debug, Default)]
struct Table {
    calls: BTreeMap<u64, LiveCall>,
    /// The capture time of the latest event (not the largest: one packet
    /// dated years ahead must not age every call at once).
    now_ns: i64,
    /// A jump ahead seen once, taken when the next event agrees.
    jumped: bool,
    /// Calls in INVITE order while not answered (entries of calls since
    /// answered or gone are skipped when met): the first to make room.
    unanswered: VecDeque<u64>,
    /// Ended calls in the order they ended, to forget after [`ENDED_KEPT_NS`].
    ended: VecDeque<(i64, u64)>,
}

/// A step ahead larger than this is taken only when two events in a row
/// make it (a clock stepped), not from one stray packet.
const MAX_STEP_NS: i64 = 3_600_000_000_000;

impl Table {
    /// Moves the clock to an event's capture time, then forgets calls
    /// ended long enough before it.
    fn at(&mut self, ts_ns: i64) {
        let leap = self.now_ns != 0 && ts_ns > self.now_ns.saturating_add(MAX_STEP_NS);
        if leap && !self.jumped {
            self.jumped = true;
            return;
        }
        self.jumped = false;
        self.now_ns = ts_ns;
        self.expire();
    }

    /// Makes room for one more call: the oldest not answered goes, else
    /// the oldest. True when a call was taken off.
    fn make_room(&mut self) -> bool {
        while let Some(serial) = self.unanswered.pop_front() {
            if self.calls.get(&serial).is_some_and(|c| c.answer_ns.is_none() && c.end_ns.is_none())
            {
                self.calls.remove(&serial);
                return true;
            }
        }
        self.calls.pop_first().is_some()
    }

    /// Forgets the calls that ended more than [`ENDED_KEPT_NS`] before now.
    fn expire(&mut self) {
        let horizon = self.now_ns.saturating_sub(ENDED_KEPT_NS);
        while let Some(&(end, serial)) = self.ended.front() {
            if end >= horizon {
                break;
            }
            self.ended.pop_front();
            self.calls.remove(&serial);
        }
    }
}

/// The open calls, shared: attach a clone to the engine, read from another.
#[derive(Debug, Clone, Default)]
pub struct LiveCalls {
    table: Arc<Mutex<Table>>,
    /// Bumped at every change (the live page sends only when it moved).
    version: Arc<AtomicU64>,
    evicted: Arc<AtomicU64>,
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
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }

    /// Time passing with no events (a live probe's clock, trusted, unlike
    /// a packet's stamp): calls ended long enough ago leave the page on a
    /// quiet link as they would with traffic.
    pub fn tick(&self, now_ns: i64) {
        let mut t = self.lock();
        if now_ns <= t.now_ns {
            return;
        }
        let before = t.calls.len();
        t.now_ns = now_ns;
        t.jumped = false;
        t.expire();
        // Open calls' ages moved too: the page is sent again.
        let moved = t.calls.len() != before || !t.calls.is_empty();
        drop(t);
        if moved {
            self.changed();
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
        t.at(m.ts_ns);
        if t.calls.contains_key(&serial) {
            return;
        }
        if t.calls.len() >= MAX_LIVE_CALLS && t.make_room() {
            self.evicted.fetch_add(1, Ordering::Relaxed);
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
        t.unanswered.push_back(serial);
        drop(t);
        self.changed();
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
                t.at(c.ts_ns);
                let Some(call) = t.calls.get_mut(&c.call) else {
                    return;
                };
                call.phase = c.phase;
                call.updated_ns = c.ts_ns;
                call.status = c.status.filter(|s| *s >= 200).or(call.status);
                let mut ended = false;
                match c.phase {
                    CallPhase::Answered => call.answer_ns = call.answer_ns.or(Some(c.ts_ns)),
                    CallPhase::Ended if call.end_ns.is_none() => {
                        call.end_ns = Some(c.ts_ns);
                        call.state = c.state;
                        ended = true;
                    }
                    _ => {}
                }
                if ended {
                    t.ended.push_back((c.ts_ns, c.call));
                }
                drop(t);
                self.changed();
            }
            Event::Interval(i) => {
                let Some(serial) = i.call else { return };
                let mut t = self.lock();
                t.at(i.reported_ns);
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
                match call.streams.iter_mut().find(|s| s.src == src && s.dst == dst) {
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
    use calliper_model::event::{CallChange, SipTransport};
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
            via_hep: false,
        };
        t.event(&Event::Sip(&m));
    }

    fn phase(t: &mut LiveCalls, serial: u64, ts_ns: i64, phase: CallPhase) {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let c = CallChange {
            ts_ns,
            clock_ns: ts_ns,
            call: serial,
            call_id: "c1",
            phase,
            status: Some(200),
            state: (phase == CallPhase::Ended).then_some(calliper_model::CallState::Completed),
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
        assert_eq!((c.answer_ns, c.end_ns, c.status), (Some(2_000), Some(3_000), Some(200)));
        // Another call's event 30 s later lets the ended one go.
        invite(&mut t, 2, 3_000 + ENDED_KEPT_NS + 1);
        phase(&mut t, 2, 3_000 + ENDED_KEPT_NS + 2, CallPhase::Ringing);
        let s = t.snapshot(10);
        assert_eq!(s.calls.iter().map(|c| c.serial).collect::<Vec<_>>(), vec![2]);
    }

    /// On a quiet link the probe's clock, not the next event, lets an
    /// ended call go, and only once it has been shown its 30 s.
    #[test]
    fn the_probe_clock_clears_ended_calls_without_traffic() {
        let mut t = LiveCalls::new();
        invite(&mut t, 1, 1_000);
        invite(&mut t, 2, 1_500);
        phase(&mut t, 1, 3_000, CallPhase::Ended);
        let v = t.version();
        t.tick(3_000 + ENDED_KEPT_NS);
        assert_eq!(t.snapshot(10).calls.len(), 2, "kept its 30 s");
        assert!(t.version() > v, "the open calls' ages moved");
        let v = t.version();
        t.tick(3_000 + ENDED_KEPT_NS + 1);
        let s = t.snapshot(10);
        assert_eq!(s.calls.iter().map(|c| c.serial).collect::<Vec<_>>(), vec![2]);
        assert!(s.version > v, "the page is told");
        assert_eq!(s.now_ns, 3_000 + ENDED_KEPT_NS + 1, "ages run on the clock");
        // The clock never goes back.
        t.tick(0);
        assert_eq!(t.snapshot(10).now_ns, 3_000 + ENDED_KEPT_NS + 1);
    }

    #[test]
    fn beyond_the_cap_new_calls_take_the_place_of_unanswered_ones() {
        let mut t = LiveCalls::new();
        // A table full of calls, the first ten answered.
        for serial in 0..MAX_LIVE_CALLS as u64 {
            invite(&mut t, serial, serial as i64);
            if serial < 10 {
                phase(&mut t, serial, serial as i64, CallPhase::Answered);
            }
        }
        // Three more: they are shown, and the oldest unanswered went.
        for serial in 0..3 {
            invite(&mut t, 1_000_000 + serial, 1_000_000);
        }
        let s = t.snapshot(3);
        assert_eq!(s.calls.iter().filter(|c| c.serial >= 1_000_000).count(), 3);
        assert_eq!(s.evicted, 3);
        let table = t.lock();
        assert_eq!(table.calls.len(), MAX_LIVE_CALLS);
        assert!((0..10).all(|s| table.calls.contains_key(&s)), "answered calls stay");
        assert!(!table.calls.contains_key(&10) && !table.calls.contains_key(&12));
    }

    #[test]
    fn one_packet_dated_years_ahead_does_not_age_every_call() {
        let mut t = LiveCalls::new();
        invite(&mut t, 1, 1_000);
        phase(&mut t, 1, 2_000, CallPhase::Ended);
        invite(&mut t, 2, 20 * 365 * 86_400 * 1_000_000_000);
        invite(&mut t, 3, 3_000);
        let s = t.snapshot(10);
        assert_eq!(s.calls.len(), 3, "the ended call stays its 30 s");
        assert_eq!(s.now_ns, 3_000);
        // A clock that really stepped: two events in a row.
        invite(&mut t, 4, 10 * MAX_STEP_NS);
        invite(&mut t, 5, 10 * MAX_STEP_NS + 1);
        assert_eq!(t.snapshot(10).now_ns, 10 * MAX_STEP_NS + 1);
        assert_eq!(t.snapshot(10).calls.len(), 4, "then the ended call goes");
    }

    #[test]
    fn text_cannot_reorder_or_control_the_page() {
        assert_eq!(cut("ali\u{202e}ce\u{1b}[2J"), "ali\\u{202e}ce\\u{1b}[2J");
        assert_eq!(cut(&"é".repeat(100)).len(), 128);
    }
}
