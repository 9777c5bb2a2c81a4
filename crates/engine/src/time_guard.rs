//! Capture times an analysis can believe. A packet stamped more than a day
//! away from the one before it is believed only when the packet after it
//! agrees (within a day of it): a capture spliced from several days, or a
//! clock set right, then goes on at its new time, and the jump is the
//! anomaly `time_jump`. The packet after is seen when both come in one
//! batch; for the last of a batch it confirms the jump afterwards, so that
//! one packet alone is analysed at the old time.
//!
//! A lone stamp decades off (six such packets in a public capture put its
//! calls in 2092) is the anomaly `time_implausible`: the packet is analysed
//! at the time of the packet before it, so it still counts, but cannot
//! stretch the calls, the time series or the charts, nor expire every open
//! call at once. The first batch's median time is the first reference, so
//! an absurd first packet is judged too.
//!
//! What this cannot tell: a capture of lone packets more than a day apart
//! (a filtered quiet link) is collapsed onto its first believed time, with
//! each packet counted; two packets that agree on a new time are believed.

use crate::{Engine, RawPacket};

/// How far apart two neighbouring packets' times may be without the next
/// packet's agreement: a day.
pub const PLAUSIBLE_STEP_NS: i64 = 86_400_000_000_000;

/// A packet whose time the guard judges (the analysis's, and an export's
/// reading the same capture, so both see the same times).
pub trait Stamped {
    /// The packet's time, ns since the epoch.
    fn ts_ns(&self) -> i64;
    /// Sets the time to analyse it at.
    fn set_ts_ns(&mut self, ts_ns: i64);
}

impl Stamped for RawPacket<'_> {
    #[inline(always)]
    fn ts_ns(&self) -> i64 {
        self.ts_ns
    }
    #[inline(always)]
    fn set_ts_ns(&mut self, ts_ns: i64) {
        self.ts_ns = ts_ns;
    }
}

impl Stamped for calliper_capture::Packet<'_> {
    fn ts_ns(&self) -> i64 {
        self.ts_ns
    }
    fn set_ts_ns(&mut self, ts_ns: i64) {
        self.ts_ns = ts_ns;
    }
}

/// Judges each packet's time against its neighbours'.
#[derive(Debug, Default)]
pub struct TimeGuard {
    /// The time of the last packet believed.
    reference: Option<i64>,
    /// A time that was not believed, waiting for the next packet to agree.
    candidate: Option<i64>,
    /// Packets analysed at the reference time instead of their own.
    pub implausible: u64,
    /// Jumps of more than a day that the next packet agreed with.
    pub jumps: u64,
}

/// What one batch added to the guard's counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    /// Packets not believed ([`TimeGuard::implausible`]).
    pub implausible: u64,
    /// Jumps believed ([`TimeGuard::jumps`]).
    pub jumps: u64,
}

impl Judged {
    /// Each kind of anomaly with its counter name.
    pub fn counts(&self) -> [(&'static str, u64); 2] {
        [("time_implausible", self.implausible), ("time_jump", self.jumps)]
    }
}

impl Engine {
    /// Counts what the time guard found in a reading (its events go out
    /// dated by the reading's first packet, as the packets are handled).
    pub(crate) fn count_time_anomalies(&mut self, judged: Judged) {
        for (kind, n) in judged.counts().into_iter().filter(|c| c.1 > 0) {
            self.counters.count_anomalies(kind, n);
        }
    }
}

impl TimeGuard {
    /// Sets each packet's time to the one to analyse it at.
    #[inline]
    pub fn admit_packets<T: Stamped>(&mut self, batch: &mut [T]) -> Judged {
        let (first, last) = match batch {
            [] => return Judged::default(),
            [f, .., l] => (f.ts_ns(), l.ts_ns()),
            [f] => (f.ts_ns(), f.ts_ns()),
        };
        if self.reference.is_none() {
            self.reference = Some(median(batch));
        }
        let (lo, hi) = batch
            .iter()
            .fold((i64::MAX, i64::MIN), |(lo, hi), p| (lo.min(p.ts_ns()), hi.max(p.ts_ns())));
        if self.admit_span(first, last, lo, hi) {
            return Judged::default();
        }
        let (implausible, jumps) = (self.implausible, self.jumps);
        for i in 0..batch.len() {
            let next = || batch.get(i + 1).map(|p| p.ts_ns());
            let ts = self.admit(batch[i].ts_ns(), next);
            batch[i].set_ts_ns(ts);
        }
        Judged { implausible: self.implausible - implausible, jumps: self.jumps - jumps }
    }

    /// Whether a batch whose times run from `first` to `last`, all within
    /// `lo..=hi`, is believed whole, as it is when it spans at most a day
    /// and starts within a day of the reference: every packet is then
    /// within a day of the one before it (the common case, checked once).
    #[inline(always)]
    fn admit_span(&mut self, first: i64, last: i64, lo: i64, hi: i64) -> bool {
        let starts_near = self.reference.is_none_or(|r| near(first, r));
        if starts_near && near(lo, hi) {
            self.believe(last);
            true
        } else {
            false
        }
    }

    /// The time to analyse a packet stamped `ts_ns` at; `next` gives the
    /// time of the packet after it, when known (asked only for a jump).
    #[inline(always)]
    pub fn admit(&mut self, ts_ns: i64, next: impl FnOnce() -> Option<i64>) -> i64 {
        match self.reference {
            Some(r) if near(ts_ns, r) => self.believe(ts_ns),
            Some(r) => self.judge(ts_ns, r, next()),
            None => self.believe(ts_ns),
        }
    }

    /// A packet more than a day from the reference `r`.
    #[cold]
    fn judge(&mut self, ts_ns: i64, r: i64, next_ns: Option<i64>) -> i64 {
        let agreed = |t: Option<i64>| t.is_some_and(|t| near(ts_ns, t));
        if agreed(self.candidate) || agreed(next_ns) {
            // Two packets agree: the capture is at a new time.
            self.jumps += 1;
            self.believe(ts_ns)
        } else {
            self.candidate = Some(ts_ns);
            self.implausible += 1;
            r
        }
    }

    #[inline(always)]
    fn believe(&mut self, ts_ns: i64) -> i64 {
        self.reference = Some(ts_ns);
        self.candidate = None;
        ts_ns
    }

    /// Time passing without packets (a live probe's clock): believed.
    pub fn tick(&mut self, now_ns: i64) {
        if self.reference.is_some_and(|r| now_ns > r) {
            self.reference = Some(now_ns);
        }
    }
}

/// The median of a batch's times (at most a read batch: once per input).
fn median<T: Stamped>(batch: &[T]) -> i64 {
    let mut times: Vec<i64> = batch.iter().map(Stamped::ts_ns).collect();
    times.sort_unstable();
    times[(times.len() - 1) / 2]
}

fn near(a: i64, b: i64) -> bool {
    a.abs_diff(b) <= PLAUSIBLE_STEP_NS as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = PLAUSIBLE_STEP_NS;
    const T: i64 = 1_700_000_000_000_000_000;

    #[test]
    fn a_lone_stamp_far_off_is_analysed_at_its_neighbours_time() {
        let mut g = TimeGuard::default();
        assert_eq!(g.admit(T, || None), T);
        assert_eq!(g.admit(T + 1, || None), T + 1);
        assert_eq!(g.admit(T + 70 * 365 * DAY, || None), T + 1, "decades ahead");
        assert_eq!(g.admit(T + 2, || None), T + 2);
        assert_eq!(g.admit(0, || None), T + 2, "back to 1970");
        assert_eq!(g.admit(T + 3, || None), T + 3);
        // Every stamp years from the last (a public capture's six packets).
        for k in 1..5 {
            assert_eq!(g.admit(T + k * 400 * DAY, || None), T + 3);
        }
        assert_eq!(g.implausible, 6);
        // Reordering and gaps within a day are believed.
        assert_eq!(g.admit(T + 3 - DAY / 2, || None), T + 3 - DAY / 2);
        assert_eq!(g.admit(T + DAY / 2, || None), T + DAY / 2);
        assert_eq!(g.implausible, 6);
    }

    /// Packets stamped `times`, as a batch.
    fn batch(times: &[i64]) -> Vec<RawPacket<'static>> {
        times.iter().map(|&ts_ns| RawPacket { ts_ns, ..RawPacket::default() }).collect()
    }

    #[test]
    fn an_absurd_first_packet_is_judged_by_its_batch() {
        for first in [0, T + 70 * 365 * DAY, i64::MIN, i64::MAX] {
            let mut g = TimeGuard::default();
            let mut b = batch(&[first, T, T + 1, T + 2]);
            let judged = g.admit_packets(&mut b);
            assert_eq!(judged, Judged { implausible: 1, jumps: 0 }, "{first}");
            assert!((T..=T + 2).contains(&b[0].ts_ns), "{first}: at the batch's median");
            assert_eq!(b[1..].iter().map(|p| p.ts_ns).collect::<Vec<_>>(), [T, T + 1, T + 2]);
        }
        // A batch within a day is believed whole, and counts nothing.
        let mut g = TimeGuard::default();
        let mut b = batch(&[T, T + DAY / 2, T + 1]);
        assert_eq!(g.admit_packets(&mut b), Judged::default());
        assert_eq!(b.iter().map(|p| p.ts_ns).collect::<Vec<_>>(), [T, T + DAY / 2, T + 1]);
        // A jump the next packet agrees with is believed and counted.
        let mut b = batch(&[T + 2, T + 900 * DAY, T + 900 * DAY + 1]);
        assert_eq!(g.admit_packets(&mut b), Judged { implausible: 0, jumps: 1 });
    }

    #[test]
    fn a_jump_two_packets_agree_on_is_believed() {
        let mut g = TimeGuard::default();
        g.admit(T, || None);
        let later = T + 3650 * DAY;
        assert_eq!(g.admit(later, || None), T, "not yet believed");
        assert_eq!(g.admit(later + 5, || None), later + 5, "the next agrees");
        assert_eq!(g.admit(later + 9, || None), later + 9);
        // Backwards too (files given out of order).
        assert_eq!(g.admit(T, || None), later + 9);
        assert_eq!(g.admit(T + 1, || None), T + 1);
        assert_eq!(g.admit(T + 2, || None), T + 2);
        assert_eq!(g.implausible, 2);
        // The packet after, when known, agrees at once.
        assert_eq!(g.admit(later + DAY * 3, || Some(later + DAY * 3 + 1)), later + DAY * 3);
        assert_eq!(g.admit(T + 10, || Some(T + 11 + 400 * DAY)), later + DAY * 3);
        assert_eq!(g.implausible, 3);
        let stamped =
            [T + 12, T + 13, T + 13 + 400 * DAY, T + 14, T + 900 * DAY, T + 900 * DAY + 1];
        let times: Vec<i64> = (0..stamped.len())
            .map(|i| g.admit(stamped[i], || stamped.get(i + 1).copied()))
            .collect();
        assert_eq!(times, [T + 12, T + 13, T + 13, T + 14, T + 900 * DAY, T + 900 * DAY + 1]);
        assert_eq!(g.implausible, 4);
        // A batch within a day of its reference and spanning less is
        // believed whole; one that is not is left to each packet's turn.
        assert!(g.admit_span(T + 900 * DAY + 2, T + 900 * DAY + 5, T + 900 * DAY, T + 901 * DAY));
        assert!(!g.admit_span(T + 900 * DAY + 6, T + 900 * DAY + 7, T, T + 900 * DAY + 7));
        assert!(!g.admit_span(T + 902 * DAY, T + 902 * DAY, T + 902 * DAY, T + 902 * DAY));
        assert_eq!(g.implausible, 4);
        // A live probe's ticks move the reference on a quiet link.
        g.tick(T + 903 * DAY);
        assert_eq!(g.admit(T + 903 * DAY + 1, || None), T + 903 * DAY + 1);
        assert_eq!(g.implausible, 4);
    }
}
