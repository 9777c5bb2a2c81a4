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
/// Entries held for rows not yet delivered: interval starts with sums
/// waiting, and sums of reports made an interval or more after theirs ended,
/// one per time they were made (beyond: counted late). With its share of a
/// half-empty B-tree node an entry takes at most about 370 bytes (an
/// interval) or 160 (a time's sums).
const MAX_HELD: usize = 500_000;
/// MOS is summed in units of 2^-52 (finer than an f64's step at 1.0) as
/// integers: exact, so the sum is the same whatever order the shards
/// delivered the reports in (floating-point addition is not associative),
/// and no report need be kept to sort them.
const MOS_UNIT: f64 = (1u64 << 52) as f64;

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

/// What a row takes from its reports; adding them up in any order gives
/// the same sums.
#[derive(Debug, Clone, Copy)]
struct Sums {
    streams: u64,
    packets: u64,
    expected: u64,
    lost: i64,
    mos_count: u64,
    mos_units: u128,
    mos_min: f64,
}

impl Default for Sums {
    fn default() -> Self {
        Sums {
            streams: 0,
            packets: 0,
            expected: 0,
            lost: 0,
            mos_count: 0,
            mos_units: 0,
            mos_min: f64::INFINITY,
        }
    }
}

impl Sums {
    fn add(&mut self, r: &Report) {
        // `as` saturates: a negative or NaN score adds 0.
        let mos_units = r.mos.map_or(0, |mos| (mos * MOS_UNIT).round() as u128);
        self.merge(&Sums {
            streams: 1,
            packets: r.packets,
            expected: r.expected,
            lost: r.lost,
            mos_count: r.mos.is_some() as u64,
            mos_units,
            mos_min: r.mos.unwrap_or(f64::INFINITY),
        });
    }

    fn merge(&mut self, o: &Sums) {
        self.streams += o.streams;
        self.packets = self.packets.saturating_add(o.packets);
        self.expected = self.expected.saturating_add(o.expected);
        self.lost = self.lost.saturating_add(o.lost);
        self.mos_count += o.mos_count;
        self.mos_units = self.mos_units.saturating_add(o.mos_units);
        self.mos_min = self.mos_min.min(o.mos_min);
    }

    fn write(&self, row: &mut Value) {
        if let Value::Object(o) = row {
            o.insert("streams".into(), self.streams.into());
            o.insert("stream_packets".into(), self.packets.into());
            o.insert("stream_expected".into(), self.expected.into());
            o.insert("stream_lost".into(), self.lost.into());
            let mean = (self.mos_count > 0)
                .then(|| self.mos_units as f64 / MOS_UNIT / self.mos_count as f64);
            o.insert("mos_mean".into(), mean.into());
            o.insert("mos_min".into(), mean.map(|_| self.mos_min).into());
        }
    }
}

/// The reports of one interval until its row comes. A row is released at
/// a batch end an interval or more after its interval ended, so a report
/// made before `start + 2 × interval` counts whenever it comes, and is only
/// summed. The one release that can come earlier is the end of the input's,
/// at the newest packet's time, when no report is newer: those made at that
/// very time are summed apart. Reports made later are summed by the time
/// they were made (the streams open at the end of the input all report at
/// its last packet), in a map so that the entries do not depend on the
/// order shards deliver them in.
#[derive(Debug, Default)]
struct Interval {
    early: Sums,
    newest_ns: i64,
    at_newest: Sums,
    later: BTreeMap<i64, Sums>,
}

impl Interval {
    fn add_early(&mut self, r: &Report) {
        if self.early.streams + self.at_newest.streams == 0 || r.reported_ns > self.newest_ns {
            let newest = std::mem::take(&mut self.at_newest);
            self.early.merge(&newest);
            self.newest_ns = r.reported_ns;
        }
        if r.reported_ns == self.newest_ns {
            self.at_newest.add(r);
        } else {
            self.early.add(r);
        }
    }

    /// Reports made from `released_ns` on are late ([`Series::late`]).
    fn close(self, released_ns: i64, late: &mut u64) -> Sums {
        let mut sums = self.early;
        if self.newest_ns < released_ns {
            sums.merge(&self.at_newest);
        } else {
            *late += self.at_newest.streams;
        }
        for (reported_ns, later) in &self.later {
            if *reported_ns < released_ns {
                sums.merge(later);
            } else {
                *late += later.streams;
            }
        }
        sums
    }

    /// Whether a report made at `reported_ns` needs an entry of its own in
    /// `later` (no report of that time is there yet).
    fn later_needs_entry(&self, reported_ns: i64) -> bool {
        !self.later.contains_key(&reported_ns)
    }

    fn add_later(&mut self, r: &Report) {
        self.later.entry(r.reported_ns).or_default().add(r);
    }

    /// Entries it holds against [`MAX_HELD`]: itself and its later sums.
    fn held(&self) -> usize {
        1 + self.later.len()
    }
}

#[derive(Default)]
struct Series {
    /// Rows done, to be written.
    ready: Vec<Value>,
    /// Reports per interval start until its row comes.
    held: BTreeMap<i64, Interval>,
    held_count: usize,
    /// The reporting interval, learnt from the first report of a whole one.
    every_ns: Option<i64>,
    /// The start of the newest row gone: reports for it or earlier are late.
    gone: Option<i64>,
    dropped: u64,
    late: u64,
}

impl Series {
    /// Completes a row with the reports made before its release; those made
    /// after (held or still to come) are late, in one thread as in several.
    fn release(&mut self, start: i64, released_ns: i64, mut row: Value) {
        let sums = match self.held.remove(&start) {
            Some(i) => {
                self.held_count -= i.held();
                i.close(released_ns, &mut self.late)
            }
            None => Sums::default(),
        };
        sums.write(&mut row);
        self.gone = Some(self.gone.map_or(start, |g| g.max(start)));
        // Reports for intervals before this one can no longer find a row.
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() >= start {
                break;
            }
            let i = entry.remove();
            self.held_count -= i.held();
            let later: u64 = i.later.values().map(|s| s.streams).sum();
            self.late += i.early.streams + i.at_newest.streams + later;
        }
        let empty = row.get("packets").and_then(Value::as_u64) == Some(0);
        if empty && self.ready.len() >= MAX_TRAFFIC_ROWS {
            self.dropped += 1;
        } else {
            self.ready.push(row);
        }
    }

    /// Holds a stream's report of the interval from `start` (`whole`: not
    /// its stream's last, partial one, which ends at `end`).
    fn report(&mut self, start: i64, end: i64, whole: bool, r: Report) {
        if self.gone.is_some_and(|g| start <= g) {
            self.late += 1;
            return;
        }
        if whole && self.every_ns.is_none() && end > start {
            self.every_ns = Some(end - start);
        }
        let early = self
            .every_ns
            .is_some_and(|every| r.reported_ns < start.saturating_add(every.saturating_mul(2)));
        let held = self.held.get(&start);
        let is_new = held.is_none();
        let new_later = !early && held.is_none_or(|i| i.later_needs_entry(r.reported_ns));
        let adds = usize::from(is_new) + usize::from(new_later);
        if self.held_count + adds > MAX_HELD {
            self.late += 1;
            return;
        }
        let interval = self.held.entry(start).or_default();
        self.held_count += adds;
        if early {
            interval.add_early(&r);
        } else {
            interval.add_later(&r);
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
                // Narrowband scores only: the row's MOS is on one scale.
                let narrowband = i.mos_scale == Some(MosScale::Narrowband) && i.figures.packets > 0;
                let report = Report {
                    reported_ns: i.reported_ns,
                    packets: i.figures.packets as u64,
                    expected: i.figures.expected as u64,
                    lost: i.figures.lost,
                    mos: i.mos.filter(|_| narrowband),
                };
                let f = &i.figures;
                self.lock().report(f.start_ns, f.end_ns, !i.last, report);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: i64 = 10_000;

    /// The rule as first written: every report held, then filtered and
    /// summed in sorted order at the release.
    #[derive(Default)]
    struct Reference {
        held: BTreeMap<i64, Vec<Report>>,
        gone: Option<i64>,
        late: u64,
    }

    impl Reference {
        fn report(&mut self, start: i64, r: Report) {
            if self.gone.is_some_and(|g| start <= g) {
                self.late += 1;
            } else {
                self.held.entry(start).or_default().push(r);
            }
        }

        fn release(
            &mut self,
            start: i64,
            released_ns: i64,
        ) -> (u64, u64, u64, i64, Option<f64>, f64) {
            let reports = self.held.remove(&start).unwrap_or_default();
            let (mut streams, mut packets, mut expected, mut lost) = (0, 0, 0, 0);
            let mut scores = Vec::new();
            for r in reports {
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
            scores.sort_by(f64::total_cmp);
            let mean =
                (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64);
            self.gone = Some(self.gone.map_or(start, |g| g.max(start)));
            let stale: Vec<i64> = self.held.range(..start).map(|(k, _)| *k).collect();
            for k in stale {
                self.late += self.held.remove(&k).map_or(0, |v| v.len() as u64);
            }
            (
                streams,
                packets,
                expected,
                lost,
                mean,
                scores.first().copied().unwrap_or(f64::INFINITY),
            )
        }
    }

    /// A small deterministic generator (no dependency).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    fn row(start: i64) -> Value {
        serde_json::json!({ "start_ns": start, "packets": 1 })
    }

    /// Interval k's reports come during k + 1 (some later, some at the
    /// release's own time), delivered in a shuffled order as shards would;
    /// row k is released at a batch end an interval or more after k ended,
    /// and the end of the input releases the rest at the newest time.
    fn scenario(seed: u64) -> (Vec<Value>, Vec<Value>, u64, u64) {
        let mut g = Lcg(seed);
        let (mut s, mut reference) = (Series::default(), Reference::default());
        let (mut rows, mut expected_rows) = (Vec::new(), Vec::new());
        let intervals = 2 + g.next(5) as i64;
        let mut pending: Vec<(i64, i64, bool, Report)> = Vec::new();
        let mut newest = 0;
        for k in 0..intervals {
            let start = k * EVERY;
            for _ in 0..g.next(40) {
                let reported_ns = match g.next(6) {
                    0 => start + EVERY + 3 * EVERY / 2 + g.next(EVERY as u64) as i64,
                    1 => start + 2 * EVERY,
                    _ => start + EVERY + g.next(EVERY as u64) as i64,
                };
                let mos = match g.next(4) {
                    0 => None,
                    _ => Some(1.0 + g.next(3_500_000) as f64 / 1e6),
                };
                let r = Report {
                    reported_ns,
                    packets: g.next(500),
                    expected: g.next(500),
                    lost: g.next(20) as i64 - 5,
                    mos,
                };
                newest = newest.max(reported_ns);
                pending.push((start, start + EVERY - g.next(2) as i64, g.next(5) != 0, r));
            }
        }
        pending.sort_by_key(|p| p.3.reported_ns);
        let mut released = 0;
        let mut at = 0;
        while released < intervals {
            let start = released * EVERY;
            let released_ns = start + 2 * EVERY + g.next(EVERY as u64) as i64;
            // What comes before the release, shuffled within the batch.
            let mut batch: Vec<_> = Vec::new();
            while at < pending.len()
                && pending[at].3.reported_ns <= released_ns + g.next(EVERY as u64 / 2) as i64
            {
                batch.push(pending[at]);
                at += 1;
            }
            for i in (1..batch.len()).rev() {
                batch.swap(i, g.next(i as u64 + 1) as usize);
            }
            for (st, end, whole, r) in batch {
                let end = if whole { st + EVERY } else { end };
                s.report(st, end, whole, r);
                reference.report(st, r);
            }
            let last = released == intervals - 1;
            let released_ns = if last { newest } else { released_ns };
            s.release(start, released_ns, row(start));
            let (streams, packets, exp, lost, mean, min) = reference.release(start, released_ns);
            let mut want = row(start);
            if let Value::Object(o) = &mut want {
                o.insert("streams".into(), streams.into());
                o.insert("stream_packets".into(), packets.into());
                o.insert("stream_expected".into(), exp.into());
                o.insert("stream_lost".into(), lost.into());
                o.insert("mos_mean".into(), mean.into());
                o.insert("mos_min".into(), mean.map(|_| min).into());
            }
            expected_rows.push(want);
            released += 1;
        }
        for (st, end, whole, r) in &pending[at..] {
            s.report(*st, *end, *whole, *r);
            reference.report(*st, *r);
        }
        rows.append(&mut s.ready);
        (rows, expected_rows, s.late, reference.late)
    }

    #[test]
    fn sums_give_the_rows_holding_every_report_gave() {
        for seed in 0..300 {
            let (rows, want, late, want_late) = scenario(seed);
            assert_eq!(late, want_late, "seed {seed}");
            assert_eq!(rows.len(), want.len());
            for (r, w) in rows.iter().zip(&want) {
                for field in
                    ["streams", "stream_packets", "stream_expected", "stream_lost", "mos_min"]
                {
                    assert_eq!(r[field], w[field], "seed {seed} {field}: {r} against {w}");
                }
                match (r["mos_mean"].as_f64(), w["mos_mean"].as_f64()) {
                    (Some(a), Some(b)) => {
                        assert!((a - b).abs() < 1e-9, "seed {seed}: {a} against {b}")
                    }
                    (a, b) => assert_eq!(a, b, "seed {seed}"),
                }
            }
        }
    }

    #[test]
    fn the_order_reports_come_in_does_not_change_a_row() {
        let reports: Vec<Report> = (0..50)
            .map(|i| Report {
                reported_ns: EVERY + 10 * i,
                packets: 50,
                expected: 51,
                lost: 1,
                mos: Some(1.0 + (i as f64).sqrt() / 3.0),
            })
            .collect();
        let mut rows = Vec::new();
        for order in [false, true] {
            let mut s = Series::default();
            let mut list = reports.clone();
            if order {
                list.reverse();
            }
            for r in list {
                s.report(0, EVERY, true, r);
            }
            s.release(0, 2 * EVERY, row(0));
            rows.push(s.ready.remove(0).to_string());
        }
        assert_eq!(rows[0], rows[1]);
    }

    #[test]
    fn reports_made_at_the_release_or_after_are_late() {
        let mut s = Series::default();
        let r = |reported_ns| Report { reported_ns, packets: 1, expected: 1, lost: 0, mos: None };
        // Summed (made within the next interval), the newest apart.
        s.report(0, EVERY, true, r(EVERY + 1));
        s.report(0, EVERY, true, r(EVERY + 5));
        s.report(0, EVERY, true, r(EVERY + 5));
        // Kept one by one (made two intervals on).
        s.report(0, EVERY / 2, false, r(2 * EVERY + 7));
        // The end of the input at the newest time: what was made then is late.
        s.release(0, 2 * EVERY + 7, row(0));
        assert_eq!(s.ready[0]["streams"], 3);
        assert_eq!(s.late, 1);
        assert_eq!(s.held_count, 0);
        // A report for a row gone is late too.
        s.report(0, EVERY, true, r(EVERY + 2));
        assert_eq!(s.late, 2);
        let mut s = Series::default();
        s.report(0, EVERY, true, r(EVERY + 5));
        s.report(0, EVERY, true, r(EVERY + 5));
        s.release(0, EVERY + 5, row(0));
        assert_eq!((s.ready[0]["streams"].as_u64(), s.late), (Some(0), 2));
    }

    /// Reports whose interval length is not yet known (no stream has
    /// finished a whole one) are held as later ones; those made at one time,
    /// as every open stream's at the end of the input, share one entry, and
    /// past the cap a new time's reports are late.
    #[test]
    fn later_reports_of_one_time_share_an_entry_up_to_the_cap() {
        let r = |reported_ns| Report { reported_ns, packets: 2, expected: 3, lost: 1, mos: None };
        let mut s = Series::default();
        for _ in 0..100_000 {
            s.report(0, EVERY / 2, false, r(EVERY / 2));
        }
        assert_eq!(s.held_count, 2, "the interval and one sum");
        s.release(0, EVERY / 2 + 1, row(0));
        assert_eq!(s.ready[0]["streams"], 100_000);
        assert_eq!(s.ready[0]["stream_lost"], 100_000);
        assert_eq!((s.late, s.held_count), (0, 0));
        // Whatever order they come in (shards interleave them).
        let mut s = Series::default();
        for i in 0..1000 {
            s.report(0, EVERY / 2, false, r(EVERY / 2 + i % 2));
        }
        assert_eq!(s.held_count, 3, "the interval and one sum per time");
        let mut s = Series::default();
        for t in 0..MAX_HELD as i64 + 10 {
            s.report(0, EVERY / 2, false, r(t));
        }
        assert_eq!(s.held_count, MAX_HELD);
        assert_eq!(s.late, 11, "the interval's own entry and 10 times past the cap");
        s.report(0, EVERY / 2, false, r(MAX_HELD as i64 - 2));
        assert_eq!(s.late, 11, "the newest time's sum still takes reports");
    }
}
