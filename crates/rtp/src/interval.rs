//! Reporting intervals: a stream's figures over fixed intervals (every N
//! seconds, aligned to multiples of N since the epoch, so all streams'
//! intervals line up), cut from the running totals at a boundary. The
//! packet path pays one comparison and the interval's largest delta.

use crate::StreamStats;
use serde::Serialize;

/// The running totals where the current interval began. They are kept in
/// 32 bits: an interval's share is their wrapping difference, exact while
/// an interval holds fewer than 2^31 packets.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IntervalMark {
    /// Where the current interval ends (exclusive), ns.
    pub end_ns: i64,
    /// Interval accounting has started (see [`StreamStats::start_intervals`]).
    started: bool,
    packets: u32,
    expected: u32,
    lost: u32,
    duplicates: u32,
    /// Packets the adaptive jitter buffer found late.
    late: u32,
    /// Largest regular inter-arrival delta in the interval, ms.
    pub(crate) max_delta_ms: f32,
}

/// One interval of one stream (RFC 3550 A.3 interval arithmetic: `lost`
/// is expected − received and is negative when late packets of an earlier
/// interval arrive in this one).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IntervalFigures {
    /// Start of the interval, ns since the epoch.
    pub start_ns: i64,
    /// End of the interval (exclusive; the stream's last packet for its
    /// final, partial interval).
    pub end_ns: i64,
    /// Packets received, duplicates included.
    pub packets: u32,
    /// Packets the sequence numbers say were sent in it.
    pub expected: u32,
    /// Expected − received (unique).
    pub lost: i64,
    /// Loss, percent of expected (0 when nothing was lost on balance).
    pub loss_percent: f64,
    /// Packets seen twice.
    pub duplicates: u32,
    /// Packets the adaptive jitter buffer found too late to play.
    pub late: u32,
    /// Loss after the adaptive jitter buffer (lost and late), percent of
    /// expected: what the interval's MOS takes.
    pub loss_after_buffer_percent: f64,
    /// The adaptive jitter buffer's delay at the interval's end, ms.
    pub buffer_delay_ms: f64,
    /// Jitter at the interval's end, ms (Wireshark's arithmetic).
    pub jitter_ms: f64,
    /// Largest inter-arrival delta among the interval's regular packets, ms.
    pub max_delta_ms: f64,
}

/// The start of the interval of length `every_ns` that holds `ts_ns`
/// (saturating at the ends of time: a capture may carry any timestamp).
pub fn interval_start(ts_ns: i64, every_ns: i64) -> i64 {
    let every = every_ns.max(1);
    ts_ns.div_euclid(every).checked_mul(every).unwrap_or(i64::MIN)
}

/// The end of that interval (exclusive, saturating).
fn interval_end(ts_ns: i64, every_ns: i64) -> i64 {
    let every = every_ns.max(1);
    (ts_ns.div_euclid(every) + 1).checked_mul(every).unwrap_or(i64::MAX)
}

impl StreamStats {
    /// Starts interval accounting at the stream's first packet.
    pub fn start_intervals(&mut self, every_ns: i64) {
        // Zero totals: the first packet is the first interval's.
        self.interval = IntervalMark {
            end_ns: interval_end(self.first_ns, every_ns),
            started: true,
            ..IntervalMark::default()
        };
    }

    /// True when a packet at `now_ns` belongs to a later interval than the
    /// current one: cut it first. (An interval ending at the end of time
    /// takes every later packet.)
    #[inline]
    pub fn interval_due(&self, now_ns: i64) -> bool {
        now_ns >= self.interval.end_ns && self.interval.started && self.interval.end_ns < i64::MAX
    }

    /// The current interval's figures; a new interval starts, the one
    /// holding `now_ns`. For a stream's final interval pass `None`: its end
    /// is the last packet.
    pub fn cut_interval(&mut self, now_ns: Option<i64>, every_ns: i64) -> IntervalFigures {
        let m = self.interval;
        let start_ns = m.end_ns.saturating_sub(every_ns.max(1));
        let end_ns = if now_ns.is_some() {
            m.end_ns
        } else {
            self.last_ns.saturating_add(1).max(start_ns).min(m.end_ns)
        };
        let expected = (self.seq.expected() as u32).wrapping_sub(m.expected);
        let lost = (self.seq.lost() as u32).wrapping_sub(m.lost) as i32 as i64;
        let late = self.playout.adaptive_late().wrapping_sub(m.late);
        let percent = |n: i64| {
            if expected == 0 || n <= 0 {
                0.0
            } else {
                (n as f64 * 100.0 / expected as f64).min(100.0)
            }
        };
        let f = IntervalFigures {
            start_ns,
            end_ns,
            packets: (self.packets as u32).wrapping_sub(m.packets),
            expected,
            lost,
            loss_percent: percent(lost),
            duplicates: self.seq.duplicates.wrapping_sub(m.duplicates),
            late,
            loss_after_buffer_percent: percent(lost.max(0) + i64::from(late)),
            buffer_delay_ms: self.playout.adaptive_delay_ms(),
            jitter_ms: self.ws.jitter,
            max_delta_ms: m.max_delta_ms as f64,
        };
        if let Some(now) = now_ns {
            self.interval =
                IntervalMark { end_ns: interval_end(now, every_ns), ..self.interval_mark_now() };
        }
        f
    }

    fn interval_mark_now(&self) -> IntervalMark {
        IntervalMark {
            end_ns: self.interval.end_ns,
            started: self.interval.started,
            packets: self.packets as u32,
            expected: self.seq.expected() as u32,
            lost: self.seq.lost() as u32,
            duplicates: self.seq.duplicates,
            late: self.playout.adaptive_late(),
            max_delta_ms: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClockRate, Packet};

    fn packet(t: i64, seq: u16) -> Packet {
        Packet {
            arrival_ns: t,
            seq,
            timestamp: seq as u32 * 160,
            payload_type: 0,
            marker: false,
            bytes: 172,
        }
    }

    /// Timestamps anywhere in i64 (pcapng saturates, offsets go negative):
    /// intervals stay ordered, add up, and nothing overflows.
    #[test]
    fn intervals_hold_at_the_ends_of_time_and_across_zero() {
        let every = 10_000_000_000;
        for base in [i64::MAX - 5, i64::MIN, -5_000_000_000, -1, 0] {
            let mut s = StreamStats::new(&packet(base, 0), ClockRate::Hz(8000));
            s.start_intervals(every);
            let mut cut = vec![];
            for i in 1..200u16 {
                let t = base.saturating_add(i as i64 * 100_000_000);
                if s.interval_due(t) {
                    cut.push(s.cut_interval(Some(t), every));
                }
                s.update(&packet(t, i), ClockRate::Hz(8000));
            }
            cut.push(s.cut_interval(None, every));
            assert!(cut.len() <= 3, "{base}: {} intervals", cut.len());
            assert!(cut.iter().all(|f| f.start_ns <= f.end_ns), "{base}: {cut:?}");
            assert!(cut.windows(2).all(|w| w[0].end_ns <= w[1].start_ns), "{base}: {cut:?}");
            assert_eq!(cut.iter().map(|f| f.packets as u64).sum::<u64>(), s.packets, "{base}");
        }
    }
}
