//! Jitter-buffer simulation: what a receiver's playout buffer would have
//! made of a stream, as the probe saw it. A packet that arrives after its
//! playout time is lost to the listener even though the network delivered
//! it, so the E-model takes the loss *after* the buffer, and the delay the
//! buffer adds.
//!
//! Three models run side by side, each O(1) per packet without allocation
//! (a handful of float operations in all):
//!
//! * **fixed 50 ms and fixed 200 ms**: playout is anchored at the first
//!   packet of a talkspurt (the stream's first packet, a marker bit, or a
//!   resynchronisation) plus the buffer's size; a packet arriving later than
//!   its playout time is late. A packet more than 1 s late resynchronises
//!   the buffer instead (a sequence or timestamp restart; Asterisk's fixed
//!   buffer resynchronises at the same threshold), and so does a packet
//!   arriving before the anchor (the talkspurt's first packet was delayed).
//! * **adaptive, up to 500 ms**: the playout delay is the spread of the
//!   transit times of the last 10 to 20 s (two 10-s windows: latest less
//!   fastest), at least 20 ms. It grows at once when packets come later,
//!   and shrinks when the late ones are 10 to 20 s past, as adaptive
//!   buffers with time-scale modification do (WebRTC's NetEq). A packet
//!   later than the current delay is lost and raises it. Transit is taken
//!   about its moving average (64 packets), so a sender's clock drift, which
//!   real buffers absorb by playing faster or slower, does not count as
//!   delay.
//!
//! Delays are measured from the *relative transit time*: arrival time less
//! the packet's RTP timestamp in milliseconds, both since the stream's first
//! packet. Its minimum is the fastest path through the network.

/// Sizes of the two fixed buffers, ms.
pub const FIXED_MS: [f32; 2] = [50.0, 200.0];
/// Most delay the adaptive buffer takes, ms.
pub const ADAPTIVE_MAX_MS: f32 = 500.0;
/// The adaptive buffer's least delay, ms (one packet at the usual 20 ms).
pub const ADAPTIVE_MIN_MS: f32 = 20.0;
/// The adaptive buffer remembers the largest delay of the current and the
/// previous window of this length.
const ADAPTIVE_WINDOW_NS: i64 = 10_000_000_000;
/// The packet times a step is taken as, ms: from 2.5 ms up to the 200 ms
/// of audio RFC 3551 §4.2 says a receiver should accept in a packet.
const PACKET_MS_MIN: f32 = 2.5;
const PACKET_MS_MAX: f32 = 200.0;
/// How far the transit's trend moves towards each packet's.
const TREND_GAIN: f32 = 1.0 / 64.0;
/// A packet later than this (or a timestamp jump of this size) starts the
/// buffer again instead of counting as late, ms.
pub const RESYNC_MS: f32 = 1000.0;

/// The buffer models, in the order of [`Playout::models`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    /// Fixed 50 ms.
    Fixed50,
    /// Fixed 200 ms.
    Fixed200,
    /// Adaptive up to 500 ms (the default the record's MOS takes).
    Adaptive,
}

/// One fixed buffer: where its playout is anchored, and what came too late.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Fixed {
    /// Relative transit of the packet playout is anchored to, ms (32-bit
    /// floats keep a stream's state small and are exact to 0.1 ms for a
    /// day of transit).
    anchor_ms: f32,
    late: u32,
}

/// The adaptive buffer: the spread of transit times (about their trend)
/// over the current and the previous window (empty windows hold +inf/-inf).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Adaptive {
    /// Moving average of the transit (about 64 packets): its trend, which
    /// a sender's clock drift moves and jitter barely does.
    trend_ms: f32,
    /// Where the current window began, ns.
    window_start_ns: i64,
    /// Least and greatest relative transit in the current window, ms.
    least_ms: f32,
    most_ms: f32,
    /// The same for the previous window.
    previous_least_ms: f32,
    previous_most_ms: f32,
    /// Sum of the playout delay over packets played, for the mean.
    delay_sum_ms: f64,
    played: u32,
    late: u32,
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive {
            trend_ms: 0.0,
            window_start_ns: 0,
            least_ms: f32::INFINITY,
            most_ms: f32::NEG_INFINITY,
            previous_least_ms: f32::INFINITY,
            previous_most_ms: f32::NEG_INFINITY,
            delay_sum_ms: 0.0,
            played: 0,
            late: 0,
        }
    }
}

/// The three buffers of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Playout {
    last_seq: u16,
    last_ts: u32,
    /// The timestamp since the stream's first packet, extended past wraps
    /// (signed: a reordered packet steps back).
    ext_ts: i64,
    origin_ns: i64,
    /// Timestamp step between consecutive packets (the packet time in
    /// timestamp units); 0 until one is seen.
    step: u16,
    /// The clock `ms_per_tick` is for (0: no packet yet): a division per
    /// packet saved.
    hz: u32,
    ms_per_tick: f32,
    fixed: [Fixed; 2],
    adaptive: Adaptive,
}

impl Adaptive {
    /// The fastest transit remembered, ms: delay counts from it.
    #[inline]
    fn base(&self) -> f32 {
        self.least_ms.min(self.previous_least_ms)
    }

    /// The playout delay now, ms: the spread of the transits remembered.
    #[inline]
    fn delay(&self) -> f32 {
        let spread = self.most_ms.max(self.previous_most_ms) - self.base();
        // Nothing remembered yet: the spread is NaN or -inf.
        if spread.is_nan() {
            ADAPTIVE_MIN_MS
        } else {
            spread.clamp(ADAPTIVE_MIN_MS, ADAPTIVE_MAX_MS)
        }
    }

    /// Takes a packet of relative transit `transit_ms` arriving at `now_ns`.
    #[inline]
    fn play(&mut self, transit_ms: f32, now_ns: i64) {
        let mut since = now_ns.saturating_sub(self.window_start_ns);
        if since < 0 {
            // Capture time went back (merged captures, a packet stamped in
            // the future): the window starts again here rather than
            // freezing until time passes that packet.
            self.window_start_ns = now_ns;
            since = 0;
        }
        let restart = !(transit_ms - self.trend_ms).is_finite()
            || (transit_ms - self.trend_ms).abs() > RESYNC_MS + ADAPTIVE_MAX_MS
            || self.played == 0 && self.late == 0;
        if restart {
            self.trend_ms = transit_ms;
        }
        // The packet's place about the trend, then the trend moves.
        let transit_ms = transit_ms - self.trend_ms;
        self.trend_ms += transit_ms * TREND_GAIN;
        // A restart (or the first packet): nothing before it is a guide.
        if restart || since >= 2 * ADAPTIVE_WINDOW_NS {
            *self = Adaptive {
                trend_ms: self.trend_ms,
                window_start_ns: now_ns,
                delay_sum_ms: self.delay_sum_ms,
                played: self.played,
                late: self.late,
                ..Adaptive::default()
            };
        } else if since >= ADAPTIVE_WINDOW_NS {
            self.previous_least_ms = self.least_ms;
            self.previous_most_ms = self.most_ms;
            self.least_ms = f32::INFINITY;
            self.most_ms = f32::NEG_INFINITY;
            self.window_start_ns = now_ns;
        }
        let delay = self.delay();
        if transit_ms - self.base() > delay {
            self.late = self.late.saturating_add(1);
        } else {
            self.delay_sum_ms += f64::from(delay);
            self.played = self.played.saturating_add(1);
        }
        self.least_ms = self.least_ms.min(transit_ms);
        self.most_ms = self.most_ms.max(transit_ms);
    }
}

/// What one model made of a stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BufferOutcome {
    /// Which model.
    pub model: Model,
    /// Packets that arrived too late to be played.
    pub late: u64,
    /// Mean delay the buffer added, ms.
    pub delay_ms: f64,
}

impl Playout {
    /// Takes one voice packet (not a duplicate, not comfort noise or an
    /// event) timed by a clock of `hz`.
    #[inline(always)]
    pub fn update(&mut self, arrival_ns: i64, seq: u16, ts: u32, marker: bool, hz: u32) {
        if self.hz == 0 {
            *self = Playout {
                last_seq: seq,
                last_ts: ts,
                origin_ns: arrival_ns,
                hz: hz.max(1),
                ms_per_tick: 1000.0 / hz.max(1) as f32,
                ..Playout::default()
            };
            self.adaptive.play(0.0, arrival_ns);
            return;
        }
        let ts_delta = ts.wrapping_sub(self.last_ts) as i32;
        if hz != self.hz && hz != 0 {
            self.hz = hz;
            self.ms_per_tick = 1000.0 / hz.max(1) as f32;
        }
        // The packet time: a step of consecutive packets that speech
        // packets can have (a silence without a marker bit, or a jump, is
        // not one).
        // A step equal to the one kept changes nothing (most packets).
        if ts_delta != i32::from(self.step) && seq == self.last_seq.wrapping_add(1) && !marker {
            let step_ms = ts_delta as f32 * self.ms_per_tick;
            if let (Ok(step), true) =
                (u16::try_from(ts_delta), (PACKET_MS_MIN..=PACKET_MS_MAX).contains(&step_ms))
            {
                self.step = step;
            }
        }
        self.ext_ts += i64::from(ts_delta);
        self.last_ts = ts;
        self.last_seq = seq;
        let transit = (arrival_ns.saturating_sub(self.origin_ns) as f64 * 1e-6
            - self.ext_ts as f64 * f64::from(self.ms_per_tick)) as f32;
        for (fixed, size) in self.fixed.iter_mut().zip(FIXED_MS) {
            let late_by = transit - fixed.anchor_ms - size;
            if marker || late_by > RESYNC_MS || transit < fixed.anchor_ms - RESYNC_MS {
                fixed.anchor_ms = transit;
            } else if late_by > 0.0 {
                fixed.late = fixed.late.saturating_add(1);
            } else if transit < fixed.anchor_ms {
                fixed.anchor_ms = transit;
            }
        }
        self.adaptive.play(transit, arrival_ns);
    }

    /// The timestamp step between consecutive packets, in ticks (0 until
    /// two consecutive packets were seen).
    pub fn step(&self) -> u32 {
        u32::from(self.step)
    }

    /// Sequence number and timestamp of the last packet played.
    pub fn last(&self) -> (u16, u32) {
        (self.last_seq, self.last_ts)
    }

    /// Packets the adaptive buffer found late so far (the interval
    /// reports take differences of it).
    pub fn adaptive_late(&self) -> u32 {
        self.adaptive.late
    }

    /// The adaptive buffer's delay now, ms.
    pub fn adaptive_delay_ms(&self) -> f64 {
        f64::from(self.adaptive.delay())
    }

    /// Each model's outcome.
    pub fn models(&self) -> [BufferOutcome; 3] {
        let a = &self.adaptive;
        let fixed = |i: usize, model| BufferOutcome {
            model,
            late: u64::from(self.fixed[i].late),
            delay_ms: f64::from(FIXED_MS[i]),
        };
        [
            fixed(0, Model::Fixed50),
            fixed(1, Model::Fixed200),
            BufferOutcome {
                model: Model::Adaptive,
                late: u64::from(a.late),
                delay_ms: if a.played == 0 {
                    f64::from(a.delay())
                } else {
                    a.delay_sum_ms / f64::from(a.played)
                },
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// Feeds packets 20 ms apart (160 ticks at 8 kHz) with the given extra
    /// network delay each, ms.
    fn run(delays: &[f64]) -> Playout {
        let mut p = Playout::default();
        for (i, d) in delays.iter().enumerate() {
            let arrival = 1_000 * MS + i as i64 * 20 * MS + (d * 1e6) as i64;
            p.update(arrival, i as u16, i as u32 * 160, false, 8000);
        }
        p
    }

    fn late(p: &Playout) -> [u64; 3] {
        p.models().map(|m| m.late)
    }

    #[test]
    fn a_steady_stream_loses_nothing_and_the_adaptive_delay_is_least() {
        let p = run(&[0.0; 3000]);
        assert_eq!(late(&p), [0, 0, 0]);
        assert_eq!(p.step(), 160);
        assert_eq!(p.models()[2].delay_ms, f64::from(ADAPTIVE_MIN_MS));
    }

    /// One spike raises the adaptive delay for 10 to 20 s, then it shrinks.
    #[test]
    fn the_adaptive_delay_shrinks_after_a_spike() {
        let mut delays = vec![0.0; 1500];
        delays[10] = 150.0;
        let p = run(&delays);
        assert_eq!(late(&p), [1, 0, 1]);
        assert_eq!(p.adaptive_delay_ms(), f64::from(ADAPTIVE_MIN_MS));
        let mean = p.models()[2].delay_ms;
        // 150 ms for 10-20 s of the 30 s, 20 ms for the rest.
        assert!(mean > 80.0 && mean < 120.0, "{mean}");
    }

    #[test]
    fn packets_later_than_the_buffer_are_lost_to_it() {
        // Every 10th packet 120 ms late: beyond 50 ms, within 200 ms; the
        // adaptive buffer loses the first and grows to cover the rest.
        let delays: Vec<f64> = (0..1000).map(|i| if i % 10 == 5 { 120.0 } else { 0.0 }).collect();
        let p = run(&delays);
        assert_eq!(late(&p), [100, 0, 1]);
        // The spikes' 120 ms, and the trend's own wobble (each spike
        // moves it 1.7 ms).
        let adaptive = p.models()[2].delay_ms;
        assert!(adaptive > 110.0 && adaptive <= 135.0, "{adaptive}");
    }

    #[test]
    fn the_adaptive_buffer_stops_at_500_ms() {
        let delays: Vec<f64> = (0..200).map(|i| if i % 2 == 1 { 700.0 } else { 0.0 }).collect();
        let p = run(&delays);
        let [f50, f200, adaptive] = p.models();
        assert_eq!((f50.late, f200.late, adaptive.late), (100, 100, 100));
        assert!(adaptive.delay_ms <= f64::from(ADAPTIVE_MAX_MS));
    }

    /// A sender whose clock runs 0.1 % fast (packets come 1 ms earlier
    /// each second): the adaptive delay stays near the drift of its
    /// windows, not the drift of the whole stream (60 ms after a minute).
    #[test]
    fn the_adaptive_buffer_follows_clock_drift() {
        let delays: Vec<f64> = (0..3000).map(|i| 60.0 - i as f64 * 0.02).collect();
        let p = run(&delays);
        assert_eq!(late(&p), [0, 0, 0]);
        let mean = p.models()[2].delay_ms;
        assert!(mean <= 40.0, "{mean}");
    }

    /// The packet time is a plausible step: neither a silence without a
    /// marker bit nor a final timestamp jump replaces it.
    #[test]
    fn the_packet_time_ignores_silences_and_jumps() {
        let mut p = Playout::default();
        for i in 0..100u32 {
            let ts = if i >= 50 { i * 160 + 24_000 } else { i * 160 };
            p.update(i as i64 * 20 * MS, i as u16, ts, false, 8000);
        }
        p.update(100 * 20 * MS, 100, 99 * 160 + 24_000 + 65_535, false, 8000);
        assert_eq!(p.step(), 160);
    }

    /// A packet stamped in the future does not freeze the adaptive
    /// buffer's windows: a spike is forgotten 10-20 s later all the same.
    #[test]
    fn capture_time_going_back_does_not_freeze_the_windows() {
        let mut with_future = Playout::default();
        let mut plain = Playout::default();
        for i in 0..3000i64 {
            let spike = if i == 10 { 300 } else { 0 };
            let t = (i * 20 + spike) * MS;
            if i == 20 {
                with_future.update(t + 50_000 * MS, 2520, 2520 * 160, false, 8000);
            }
            with_future.update(t, i as u16, i as u32 * 160, false, 8000);
            plain.update(t, i as u16, i as u32 * 160, false, 8000);
        }
        let (a, b) = (with_future.models()[2].delay_ms, plain.models()[2].delay_ms);
        assert!(a < b + 20.0, "{a} against {b}");
    }

    /// A sender that restarts its timestamps: the buffers start again
    /// rather than calling every later packet late.
    #[test]
    fn a_timestamp_restart_resynchronises() {
        let mut p = Playout::default();
        for i in 0..400u32 {
            let ts = if i < 200 { i * 160 } else { 9_000_000 + i * 160 };
            p.update(i as i64 * 20 * MS, i as u16, ts, false, 8000);
        }
        assert_eq!(late(&p), [0, 0, 0]);
    }

    /// A marker bit (a talkspurt after silence) re-anchors fixed buffers:
    /// the silence moved the sender's clock on, not the network.
    #[test]
    fn a_talkspurt_reanchors_fixed_buffers() {
        let mut p = Playout::default();
        for i in 0..100u32 {
            // After packet 50, packets arrive 80 ms later than before for
            // good (a route change during silence).
            let shift = if i >= 50 { 80 } else { 0 };
            p.update((i as i64 * 20 + shift) * MS, i as u16, i * 160, i == 50, 8000);
        }
        assert_eq!(late(&p)[0], 0);
    }
}
