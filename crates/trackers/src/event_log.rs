//! [`EventLog`]: the engine's events of the chosen kinds as JSON lines,
//! for output (the CLI's `--events`). The taker drains it; between drains
//! it holds at most [`MAX_BACKLOG_BYTES`] and counts the events it drops
//! (the end of a run ends every call at once, so a backlog can be large).

use calliper_model::{Event, Tracker};
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// Most bytes of JSON lines held between two takes.
pub const MAX_BACKLOG_BYTES: usize = 256 << 20;

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
    lines: Vec<u8>,
    dropped: u64,
}

/// One output line: its type, then the event's fields.
#[derive(Serialize)]
struct Line<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    event: &'a T,
}

/// Events of the chosen kinds as (line type, JSON object), shared like the
/// other trackers: attach a clone, take from the original.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    kinds: u8,
    /// Most bytes held ([`MAX_BACKLOG_BYTES`]).
    limit: usize,
    backlog: Arc<Mutex<Backlog>>,
}

impl EventLog {
    /// A log of these kinds.
    pub fn new(kinds: &[EventKind]) -> Self {
        EventLog {
            kinds: kinds.iter().fold(0, |a, k| a | k.bit()),
            limit: MAX_BACKLOG_BYTES,
            backlog: Arc::default(),
        }
    }

    /// Takes the events since the last take, as JSON lines.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut self.lock().lines)
    }

    /// Events dropped because the backlog was full.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Backlog> {
        crate::lock(&self.backlog)
    }

    fn wants(&self, k: EventKind) -> bool {
        self.kinds & k.bit() != 0
    }
}

/// Appends the event's line to `out` if the log keeps its kind.
fn write(log: &EventLog, e: &Event<'_>, out: &mut Vec<u8>) -> serde_json::Result<()> {
    fn line<T: Serialize>(
        out: &mut Vec<u8>,
        kind: &'static str,
        event: &T,
    ) -> serde_json::Result<()> {
        serde_json::to_writer(&mut *out, &Line { kind, event })?;
        out.push(b'\n');
        Ok(())
    }
    match e {
        Event::Call(c) if log.wants(EventKind::Calls) => line(out, "call_event", c),
        Event::StreamStarted(s) if log.wants(EventKind::Streams) => line(out, "stream_started", s),
        Event::StreamEnded(s) if log.wants(EventKind::Streams) => line(out, "stream_ended", s),
        Event::Interval(i) if log.wants(EventKind::Intervals) => line(out, "interval", i),
        Event::Rtcp(r) if log.wants(EventKind::Rtcp) => line(out, "rtcp", r),
        Event::Dtmf(d) if log.wants(EventKind::Dtmf) => line(out, "dtmf", d),
        Event::Anomaly(a) if log.wants(EventKind::Anomalies) => line(out, "anomaly", a),
        _ => Ok(()),
    }
}

impl Tracker for EventLog {
    fn event(&mut self, event: &Event<'_>) {
        if self.kinds == 0 {
            return;
        }
        let mut b = self.lock();
        let before = b.lines.len();
        // Serialising into memory fails only on a map with non-string keys
        // (none here); a line that failed or would pass the cap is dropped.
        let ok = write(self, event, &mut b.lines).is_ok();
        if !ok || b.lines.len() > self.limit {
            b.lines.truncate(before);
            b.dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use calliper_model::event::Anomaly;

    fn anomaly(log: &mut EventLog) {
        log.event(&Event::Anomaly(&Anomaly { ts_ns: 1, kind: "sip_bad_content_length", count: 2 }));
    }

    #[test]
    fn keeps_chosen_kinds_as_lines_and_counts_what_passes_the_cap() {
        let mut none = EventLog::new(&[EventKind::Calls]);
        anomaly(&mut none);
        assert!(none.take().is_empty());

        let mut log = EventLog::new(&[EventKind::Anomalies]);
        anomaly(&mut log);
        let line = String::from_utf8(log.take()).unwrap();
        assert_eq!(
            line,
            "{\"type\":\"anomaly\",\"ts_ns\":1,\"kind\":\"sip_bad_content_length\",\"count\":2}\n"
        );
        log.limit = line.len() * 2;
        for _ in 0..5 {
            anomaly(&mut log);
        }
        assert_eq!(log.take().len(), line.len() * 2);
        assert_eq!(log.dropped(), 3);
    }
}
