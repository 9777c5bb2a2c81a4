//! [`CallDetail`]: what a database keeps to show one call in full — every
//! SIP message (the ladder, with the message text) and every stream's
//! interval reports (the quality charts) — as rows for the store's
//! `sip_messages` and `stream_intervals` tables. Bounded between takes by
//! bytes; what does not fit is counted, never silently lost.

use crate::lock;
use calliper_model::{Event, Tracker};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// Most bytes of rows held between two takes (message text plus a fixed
/// share per row); beyond it rows are dropped and counted.
pub const MAX_DETAIL_BYTES: usize = 64 << 20;
/// Longest message text kept; a longer message is cut and flagged.
pub const MAX_MESSAGE_BYTES: usize = 16 << 10;
/// What a row costs besides its message text.
const ROW_BYTES: usize = 256;

/// The line types of the rows (the store's table kinds).
pub const SIP_MESSAGE: &str = "sip_message";
/// See [`SIP_MESSAGE`].
pub const STREAM_INTERVAL: &str = "stream_interval";

#[derive(Debug, Default)]
struct Backlog {
    rows: Vec<(&'static str, Value)>,
    bytes: usize,
    dropped: u64,
}

/// SIP messages and interval reports as rows, shared like the other
/// trackers: attach a clone, take from the original.
#[derive(Debug, Clone, Default)]
pub struct CallDetail {
    backlog: Arc<Mutex<Backlog>>,
}

impl CallDetail {
    /// An empty backlog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the rows made since the last call, as (line type, row).
    pub fn take(&self) -> Vec<(&'static str, Value)> {
        let mut b = lock(&self.backlog);
        b.bytes = 0;
        std::mem::take(&mut b.rows)
    }

    /// Rows dropped because the backlog was full.
    pub fn dropped(&self) -> u64 {
        lock(&self.backlog).dropped
    }

    fn push(&self, kind: &'static str, cost: usize, row: impl FnOnce() -> Value) {
        let mut b = lock(&self.backlog);
        if b.bytes + cost > MAX_DETAIL_BYTES {
            b.dropped += 1;
            return;
        }
        b.bytes += cost;
        let row = row();
        b.rows.push((kind, row));
    }
}

/// The message as text (invalid UTF-8 replaced), cut at
/// [`MAX_MESSAGE_BYTES`]; true when cut.
fn message_text(bytes: &[u8]) -> (String, bool) {
    let cut = bytes.len() > MAX_MESSAGE_BYTES;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_MESSAGE_BYTES)]);
    (text.into_owned(), cut)
}

impl Tracker for CallDetail {
    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::Sip(m) => {
                let cost = ROW_BYTES + m.bytes.len().min(MAX_MESSAGE_BYTES);
                self.push(SIP_MESSAGE, cost, || {
                    let (message, truncated) = message_text(m.bytes);
                    json!({
                        "ts_ns": m.ts_ns,
                        "call_id": m.call_id,
                        "src": m.src.0, "src_port": m.src.1,
                        "dst": m.dst.0, "dst_port": m.dst.1,
                        "transport": m.transport,
                        "method": m.method,
                        "status": m.status,
                        "cseq_method": m.cseq_method,
                        "message": message,
                        "truncated": truncated,
                    })
                });
            }
            Event::Interval(i) => {
                self.push(STREAM_INTERVAL, ROW_BYTES, || {
                    // The event's own fields (one definition); the store
                    // keeps the columns it names.
                    serde_json::to_value(i).unwrap_or(Value::Null)
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_and_invalid_messages_are_cut_and_flagged() {
        let (t, cut) = message_text(b"INVITE sip:a \xff\r\n");
        assert!(!cut);
        assert!(t.starts_with("INVITE sip:a \u{fffd}"));
        let long = vec![b'a'; MAX_MESSAGE_BYTES + 10];
        let (t, cut) = message_text(&long);
        assert!(cut);
        assert_eq!(t.len(), MAX_MESSAGE_BYTES);
    }

    #[test]
    fn a_full_backlog_counts_what_it_drops() {
        let d = CallDetail::new();
        let per_row = ROW_BYTES + 1000;
        let fits = MAX_DETAIL_BYTES / per_row;
        for _ in 0..fits + 5 {
            d.push(SIP_MESSAGE, per_row, || Value::Null);
        }
        assert_eq!(d.take().len(), fits);
        assert_eq!(d.dropped(), 5);
        // A take frees the room.
        d.push(SIP_MESSAGE, per_row, || Value::Null);
        assert_eq!(d.take().len(), 1);
    }
}
