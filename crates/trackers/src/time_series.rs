//! The probe's time series: the engine's traffic rows ([`Event::Traffic`])
//! with the quality of the streams in each interval folded in, from the
//! streams' interval reports ([`Event::Interval`]).
//!
//! A stream reports an interval when its first packet of a later interval
//! arrives, so the reports of interval k come in during k + 1; the engine
//! delivers row k at the first batch end an interval after k ended. The
//! row takes the reports made (by capture time) before its delivery; one
//! made later — a stream silent for longer, reported when it resumes or
//! ends — is counted as late. Deciding by capture time rather than by
//! arrival keeps the rows of a sharded run equal to one thread's: another
//! shard may deliver a report a little before or after the row.

use calliper_model::{Event, MosScale, Tracker};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Most empty rows kept between two [`TimeSeries::take`] calls (beyond it
/// they are counted in [`TimeSeries::dropped`]). A row with packets is
/// always kept: there are no more of those than packets between two writes.
pub const MAX_TRAFFIC_ROWS: usize = 100_000;
/// Stream reports held for rows not yet delivered (beyond: counted late).
const MAX_HELD: usize = 1_000_000;

/// One stream's report of one interval, as much as the row needs.
#[derive(Debug, Clone, Copy)]
struct Report {
    reported_ns: i64,
    packets: u64,
    expected: u64,
    lost: i64,
    /// MOS of a voice stream (not telephone-event) with packets.
    mos: Option<f64>,
}

#[derive(Default)]
struct Series {
    /// Rows done, to be written.
    ready: Vec<Value>,
    /// Reports held per interval start until its row comes.
    held: BTreeMap<i64, Vec<Report>>,
    held_count: usize,
    /// The start of the newest row gone: reports for it or earlier are late.
    gone: Option<i64>,
    dropped: u64,
    late: u64,
}

impl Series {
    /// Completes a row with the reports made before its release; those made
    /// after (held or still to come) are late, in one thread as in several.
    fn release(&mut self, start: i64, released_ns: i64, mut row: Value) {
        let reports = self.held.remove(&start).unwrap_or_default();
        self.held_count -= reports.len();
        let (mut streams, mut packets, mut expected, mut lost) = (0u64, 0u64, 0u64, 0i64);
        let mut scores = Vec::new();
        for r in &reports {
            if r.reported_ns >= released_ns {
                self.late += 1;
                continue;
            }
            streams += 1;
            packets += r.packets;
            expected += r.expected;
            lost += r.lost;
            scores.extend(r.mos);
        }
        // Summed in one order whatever order the shards delivered them in:
        // floating-point addition is not associative.
        scores.sort_by(f64::total_cmp);
        let mos_count = scores.len();
        let mos_sum: f64 = scores.iter().sum();
        let mos_min = scores.first().copied().unwrap_or(f64::INFINITY);
        if let Value::Object(o) = &mut row {
            o.insert("streams".into(), streams.into());
            o.insert("stream_packets".into(), packets.into());
            o.insert("stream_expected".into(), expected.into());
            o.insert("stream_lost".into(), lost.into());
            let mean = (mos_count > 0).then(|| mos_sum / mos_count as f64);
            o.insert("mos_mean".into(), mean.into());
            o.insert("mos_min".into(), mean.map(|_| mos_min).into());
        }
        self.gone = Some(self.gone.map_or(start, |g| g.max(start)));
        // Reports for intervals before this one can no longer find a row.
        let stale: Vec<i64> = self.held.range(..start).map(|(k, _)| *k).collect();
        for k in stale {
            if let Some(v) = self.held.remove(&k) {
                self.held_count -= v.len();
                self.late += v.len() as u64;
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
        crate::lock(&self.inner)
    }

    /// Takes the rows done since the last call.
    pub fn take(&self) -> Vec<Value> {
        std::mem::take(&mut self.lock().ready)
    }

    /// Empty rows dropped because more than [`MAX_TRAFFIC_ROWS`] waited.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Stream interval reports made after their row was delivered.
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
                self.lock().release(t.start_ns, t.released_ns, row);
            }
            Event::Interval(i) => {
                let mut s = self.lock();
                let start = i.figures.start_ns;
                if s.gone.is_some_and(|g| start <= g) || s.held_count >= MAX_HELD {
                    s.late += 1;
                    return;
                }
                // Narrowband scores only: the row's MOS is on one scale.
                let narrowband = i.mos_scale == Some(MosScale::Narrowband) && i.figures.packets > 0;
                s.held.entry(start).or_default().push(Report {
                    reported_ns: i.reported_ns,
                    packets: i.figures.packets as u64,
                    expected: i.figures.expected as u64,
                    lost: i.figures.lost,
                    mos: i.mos.filter(|_| narrowband),
                });
                s.held_count += 1;
            }
            _ => {}
        }
    }
}
