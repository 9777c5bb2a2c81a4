//! The probe's time series: the engine's traffic rows ([`Event::Traffic`])
//! with the quality of the streams in each interval folded in, from the
//! streams' interval reports ([`Event::Interval`]).
//!
//! A stream reports an interval when its first packet of a later interval
//! arrives, so the reports of interval k come in during k + 1. A row
//! therefore waits until two later rows have come (in a sharded run the
//! shards may be a batch apart) and then leaves with the reports received;
//! a report for a row already gone (a stream silent for more than an
//! interval, reported at its end) is counted as late.

use calliper_record::{Event, Tracker};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Most empty rows kept between two [`TimeSeries::take`] calls (beyond it
/// they are counted in [`TimeSeries::dropped`]). A row with packets is
/// always kept: there are no more of those than packets between two writes.
pub const MAX_TRAFFIC_ROWS: usize = 100_000;
/// Rows waiting for their streams' reports.
const WAIT: usize = 2;
/// Intervals whose stream reports are being summed at once.
const MAX_OPEN: usize = 64;

/// The streams' figures in one interval.
#[derive(Debug, Clone, Copy)]
struct Quality {
    streams: u64,
    packets: u64,
    expected: u64,
    lost: i64,
    /// Voice streams only (not telephone-event).
    mos_sum: f64,
    mos_count: u64,
    mos_min: f64,
}

impl Default for Quality {
    fn default() -> Self {
        Quality {
            streams: 0,
            packets: 0,
            expected: 0,
            lost: 0,
            mos_sum: 0.0,
            mos_count: 0,
            mos_min: f64::INFINITY,
        }
    }
}

#[derive(Default)]
struct Series {
    /// Rows done, to be written.
    ready: Vec<Value>,
    /// Newest rows, by start, waiting for their streams' reports.
    waiting: VecDeque<(i64, Value)>,
    /// Reports summed per interval start.
    quality: BTreeMap<i64, Quality>,
    /// The start of the newest row gone: reports for it or earlier are late.
    gone: Option<i64>,
    dropped: u64,
    late: u64,
}

impl Series {
    fn release(&mut self, start: i64, mut row: Value) {
        let q = self.quality.remove(&start).unwrap_or_default();
        if let Value::Object(o) = &mut row {
            o.insert("streams".into(), q.streams.into());
            o.insert("stream_packets".into(), q.packets.into());
            o.insert("stream_expected".into(), q.expected.into());
            o.insert("stream_lost".into(), q.lost.into());
            let mean = (q.mos_count > 0).then(|| q.mos_sum / q.mos_count as f64);
            o.insert("mos_mean".into(), mean.into());
            o.insert("mos_min".into(), mean.map(|_| q.mos_min).into());
        }
        self.gone = Some(start);
        // Reports for intervals before this one can no longer find a row.
        let stale: Vec<i64> = self.quality.range(..start).map(|(k, _)| *k).collect();
        for k in stale {
            if let Some(q) = self.quality.remove(&k) {
                self.late += q.streams;
            }
        }
        let empty = row.get("packets").and_then(Value::as_u64) == Some(0);
        if empty && self.ready.len() >= MAX_TRAFFIC_ROWS {
            self.dropped += 1;
        } else {
            self.ready.push(row);
        }
    }
}

/// Keeps the probe's time series for output.
#[derive(Clone, Default)]
pub struct TimeSeries {
    inner: Arc<Mutex<Series>>,
}

impl TimeSeries {
    /// An empty series.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Series> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the rows done since the last call.
    pub fn take(&self) -> Vec<Value> {
        std::mem::take(&mut self.lock().ready)
    }

    /// Takes every row, the waiting ones too (the end of the input).
    pub fn take_all(&self) -> Vec<Value> {
        let mut s = self.lock();
        while let Some((start, row)) = s.waiting.pop_front() {
            s.release(start, row);
        }
        std::mem::take(&mut s.ready)
    }

    /// Empty rows dropped because more than [`MAX_TRAFFIC_ROWS`] waited.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Stream interval reports that came after their row had gone.
    pub fn late(&self) -> u64 {
        self.lock().late
    }
}

impl Tracker for TimeSeries {
    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::Traffic(t) => {
                let Ok(row) = serde_json::to_value(t) else {
                    return;
                };
                let mut s = self.lock();
                s.waiting.push_back((t.start_ns, row));
                while s.waiting.len() > WAIT {
                    if let Some((start, row)) = s.waiting.pop_front() {
                        s.release(start, row);
                    }
                }
            }
            Event::Interval(i) => {
                let mut s = self.lock();
                let start = i.figures.start_ns;
                let open = s.quality.len() < MAX_OPEN || s.quality.contains_key(&start);
                if s.gone.is_some_and(|g| start <= g) || !open {
                    s.late += 1;
                    return;
                }
                let q = s.quality.entry(start).or_default();
                q.streams += 1;
                q.packets += i.figures.packets as u64;
                q.expected += i.figures.expected as u64;
                q.lost += i.figures.lost;
                if i.codec != "telephone-event" && i.figures.packets > 0 {
                    q.mos_sum += i.mos;
                    q.mos_count += 1;
                    q.mos_min = q.mos_min.min(i.mos);
                }
            }
            _ => {}
        }
    }
}
