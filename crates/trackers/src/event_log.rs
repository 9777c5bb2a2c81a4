//! [`EventLog`]: the engine's events of the chosen kinds as JSON objects,
//! for output (the CLI's `--events`). The taker drains it; between drains
//! it keeps at most [`MAX_BACKLOG`] and counts what it drops.

use calliper_record::{Event, Tracker};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// Most events held between two takes.
pub const MAX_BACKLOG: usize = 1_000_000;

/// A kind of event the log can keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Call phases: started, trying, ringing, early media, answered, held,
    /// resumed, transferred, ended (`call_event` lines).
    Calls,
    /// Streams started and ended (`stream_started`, `stream_ended`).
    Streams,
    /// Streams' reporting intervals (`interval`).
    Intervals,
    /// RTCP report blocks (`rtcp`).
    Rtcp,
    /// DTMF digits (`dtmf`).
    Dtmf,
    /// Anomalies counted (`anomaly`).
    Anomalies,
}

impl EventKind {
    /// Every kind, in the order of their names.
    pub const ALL: [EventKind; 6] = [
        EventKind::Calls,
        EventKind::Streams,
        EventKind::Intervals,
        EventKind::Rtcp,
        EventKind::Dtmf,
        EventKind::Anomalies,
    ];

    /// The kind's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Calls => "calls",
            EventKind::Streams => "streams",
            EventKind::Intervals => "intervals",
            EventKind::Rtcp => "rtcp",
            EventKind::Dtmf => "dtmf",
            EventKind::Anomalies => "anomalies",
        }
    }

    /// The kind with this name.
    pub fn from_name(name: &str) -> Option<EventKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

#[derive(Debug, Default)]
struct Backlog {
    lines: Vec<(&'static str, Value)>,
    dropped: u64,
}

/// Events of the chosen kinds as (line type, JSON object), shared like the
/// other trackers: attach a clone, take from the original.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    kinds: u8,
    backlog: Arc<Mutex<Backlog>>,
}

impl EventLog {
    /// A log of these kinds.
    pub fn new(kinds: &[EventKind]) -> Self {
        EventLog {
            kinds: kinds.iter().fold(0, |a, k| a | k.bit()),
            backlog: Arc::default(),
        }
    }

    /// Takes the events since the last take.
    pub fn take(&self) -> Vec<(&'static str, Value)> {
        std::mem::take(&mut self.lock().lines)
    }

    /// Events dropped because the backlog was full.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.backlog.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wants(&self, k: EventKind) -> bool {
        self.kinds & k.bit() != 0
    }
}

/// The event's kind, line type and object, if the log keeps such events.
fn line(e: &Event<'_>) -> Option<(EventKind, &'static str, Value)> {
    let to = |v: Result<Value, serde_json::Error>| v.unwrap_or(Value::Null);
    Some(match e {
        Event::Call(c) => (EventKind::Calls, "call_event", to(serde_json::to_value(c))),
        Event::StreamStarted(s) => (
            EventKind::Streams,
            "stream_started",
            to(serde_json::to_value(s)),
        ),
        Event::StreamEnded(s) => {
            let mut v = to(serde_json::to_value(s.record));
            if let Value::Object(o) = &mut v {
                o.insert("call".into(), json!(s.call));
            }
            (EventKind::Streams, "stream_ended", v)
        }
        Event::Interval(i) => (
            EventKind::Intervals,
            "interval",
            to(serde_json::to_value(i)),
        ),
        Event::Rtcp(r) => (EventKind::Rtcp, "rtcp", to(serde_json::to_value(r))),
        Event::Dtmf(d) => (EventKind::Dtmf, "dtmf", to(serde_json::to_value(d))),
        Event::Anomaly(a) => (EventKind::Anomalies, "anomaly", to(serde_json::to_value(a))),
        _ => return None,
    })
}

impl Tracker for EventLog {
    fn event(&mut self, event: &Event<'_>) {
        if self.kinds == 0 {
            return;
        }
        let Some((kind, name, value)) = line(event) else {
            return;
        };
        if !self.wants(kind) {
            return;
        }
        let mut b = self.lock();
        if b.lines.len() >= MAX_BACKLOG {
            b.dropped += 1;
        } else {
            b.lines.push((name, value));
        }
    }
}
