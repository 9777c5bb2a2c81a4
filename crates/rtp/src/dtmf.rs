//! RFC 4733 telephone events (DTMF digits) carried in RTP.
//!
//! One event is one RTP timestamp: the sender repeats the packet with a
//! growing duration while the key is held and sends the end packet three
//! times. The digit is recorded on its first packet; its duration is the
//! largest seen for that timestamp.

use serde::Serialize;

/// Events kept per stream; more are counted, not stored.
pub const MAX_EVENTS: usize = 64;

/// One telephone event.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DtmfEvent {
    /// `0`-`9`, `*`, `#`, `A`-`D`, `F` (flash); None for tones and other events.
    pub digit: Option<char>,
    /// The event code (RFC 4733 §3.2, RFC 4734 §2).
    pub code: u8,
    /// The event's name: the digit, `flash`, a tone (`ANS`, `CNG`...) or `other`.
    pub name: &'static str,
    /// Arrival of the first packet, ns since the epoch.
    pub start_ns: i64,
    /// Duration signalled by the sender, ms.
    pub duration_ms: f64,
    /// Volume, dBm0 below zero (0-63).
    pub volume: u8,
    /// An end packet was seen.
    pub ended: bool,
}

/// Follows the telephone events of one stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DtmfTracker {
    last_timestamp: Option<u32>,
    /// Events in order (at most [`MAX_EVENTS`]).
    pub events: Vec<DtmfEvent>,
    /// Events beyond the cap, or packets too short to hold an event.
    pub dropped: u32,
    /// End packets repeated under one sequence number (RFC 4733 sends the
    /// end three times; see [`crate::StreamStats::update_event`]).
    pub end_repeats: u32,
}

/// The name of an event code: RFC 4733 §3.2 (DTMF and flash) and RFC 4734
/// §2.3 (answer and calling tones); `other` for the rest (`code` says which).
pub fn event_name(code: u8) -> &'static str {
    const DTMF: [&str; 17] =
        ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "*", "#", "A", "B", "C", "D", "flash"];
    match code {
        0..=16 => DTMF[usize::from(code)],
        32 => "ANS",
        33 => "/ANS",
        34 => "ANSam",
        35 => "/ANSam",
        36 => "CNG",
        _ => "other",
    }
}

/// The key of a DTMF digit (its name) or flash (`F`); None for other events.
fn digit(code: u8) -> Option<char> {
    match code {
        0..=15 => event_name(code).chars().next(),
        16 => Some('F'),
        _ => None,
    }
}

impl DtmfTracker {
    /// Whether the last event packet had this RTP timestamp (one per event).
    pub fn same_event(&self, timestamp: u32) -> bool {
        self.last_timestamp == Some(timestamp)
    }

    /// Takes one telephone-event packet's payload; `clock_hz` is the event
    /// clock (8000 unless the SDP says otherwise). Returns the event when
    /// this packet is the first to mark its end.
    pub fn update(
        &mut self,
        arrival_ns: i64,
        timestamp: u32,
        payload: &[u8],
        clock_hz: u32,
    ) -> Option<DtmfEvent> {
        let [event, flags, d0, d1, ..] = *payload else {
            self.dropped += 1;
            return None;
        };
        let duration_ms = u16::from_be_bytes([d0, d1]) as f64 * 1000.0 / clock_hz.max(1) as f64;
        let ended = flags & 0x80 != 0;
        if self.last_timestamp == Some(timestamp) {
            let e = self.events.last_mut()?;
            e.duration_ms = e.duration_ms.max(duration_ms);
            let first_end = ended && !e.ended;
            e.ended |= ended;
            return first_end.then_some(*e);
        }
        self.last_timestamp = Some(timestamp);
        if self.events.len() >= MAX_EVENTS {
            self.dropped += 1;
            return None;
        }
        let e = DtmfEvent {
            digit: digit(event),
            code: event,
            name: event_name(event),
            start_ns: arrival_ns,
            duration_ms,
            volume: flags & 0x3F,
            ended,
        };
        self.events.push(e);
        ended.then_some(e)
    }

    /// The digits in order, as typed.
    pub fn digits(&self) -> String {
        self.events.iter().filter_map(|e| e.digit).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_key_is_one_event_with_its_longest_duration() {
        let mut t = DtmfTracker::default();
        // '5' held for 3 packets, then the end packet three times; then '#'.
        for (i, dur) in [160u16, 320, 480].iter().enumerate() {
            let d = dur.to_be_bytes();
            t.update(i as i64, 1000, &[5, 10, d[0], d[1]], 8000);
        }
        for _ in 0..3 {
            t.update(9, 1000, &[5, 0x80 | 10, 0x02, 0x80], 8000);
        }
        t.update(20, 5000, &[11, 0x80 | 7, 0x03, 0x20], 8000);
        t.update(21, 5000, &[11], 8000);
        assert_eq!(t.digits(), "5#");
        assert_eq!(t.events[0].duration_ms, 80.0);
        assert!(t.events[0].ended);
        assert_eq!(t.events[0].volume, 10);
        assert_eq!(t.events[1].duration_ms, 100.0);
        assert_eq!(t.dropped, 1);
    }

    /// A modem's answer tone (RFC 4734 code 32) is named, not a digit.
    #[test]
    fn tones_are_named_not_digits() {
        let mut t = DtmfTracker::default();
        t.update(0, 1000, &[32, 0x80 | 10, 0x03, 0x20], 8000);
        t.update(1, 2000, &[7, 0x80 | 10, 0x03, 0x20], 8000);
        assert_eq!((t.events[0].name, t.events[0].digit, t.events[0].code), ("ANS", None, 32));
        assert_eq!(t.events[1].name, "7");
        assert_eq!(t.digits(), "7");
        assert_eq!(event_name(16), "flash");
        assert_eq!(event_name(200), "other");
    }
}
