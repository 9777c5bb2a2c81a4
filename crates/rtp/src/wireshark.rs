//! Wireshark's RTP stream analysis (`tshark -z rtp,streams`), computed its
//! way so the figures compare directly.

use crate::Packet;

/// The numbers of Wireshark's RTP stream analysis, computed its way
/// (Wireshark 4.0, `ui/tap-rtp-analysis.c`), so they can be compared with
/// `tshark -z rtp,streams` directly. Its quirks are kept on purpose:
///
/// * a packet is "in time sequence" when its timestamp is at or after the
///   stream's first timestamp (within 2^31); others update nothing but the
///   sequence counters;
/// * the mean jitter is a running mean of J over regular packets divided by
///   the count of all packets so far;
/// * marker-bit, comfort-noise and out-of-time-sequence packets are left out
///   of min/mean/max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WiresharkView {
    start_seq: u16,
    stop_seq: u16,
    seq_num: u16,
    seq_cycles: u32,
    under: bool,
    /// Sequence errors (Wireshark's "wrong sequence" count).
    pub sequence_errors: u32,
    pub(crate) first_ts: u32,
    pub(crate) last_nominal_ms: f64,
    /// Arrival of the last in-time-sequence packet, ns.
    pub(crate) time_ns: i64,
    /// Whether the previous packet was comfort noise.
    prev_cn: bool,
    /// Current jitter, ms.
    pub jitter: f64,
    /// Largest jitter over regular packets, ms.
    pub max_jitter: f64,
    /// Wireshark's running mean of jitter, ms.
    pub mean_jitter: f64,
    delta: f64,
    /// Largest inter-arrival delta over regular packets, ms.
    pub max_delta: f64,
    /// Smallest inter-arrival delta over regular packets, ms (infinite
    /// until one is seen: see [`Self::min_delta`]).
    min_delta: f64,
    /// Wireshark's running mean of delta, ms.
    pub mean_delta: f64,
    pub(crate) total: u32,
}

/// Comfort noise (RFC 3389), and its old number.
pub(crate) const PT_CN: u8 = 13;
pub(crate) const PT_CN_OLD: u8 = 19;

/// Comfort noise, by either number.
#[inline(always)]
pub(crate) fn is_cn(pt: u8) -> bool {
    pt == PT_CN || pt == PT_CN_OLD
}

impl WiresharkView {
    pub(crate) fn new(seq: u16, ts: u32, pt: u8, now_ns: i64) -> Self {
        WiresharkView {
            start_seq: seq,
            stop_seq: seq,
            seq_num: seq,
            seq_cycles: 0,
            under: false,
            sequence_errors: 0,
            first_ts: ts,
            last_nominal_ms: 0.0,
            time_ns: now_ns,
            prev_cn: is_cn(pt),
            jitter: 0.0,
            max_jitter: 0.0,
            mean_jitter: 0.0,
            delta: 0.0,
            max_delta: 0.0,
            min_delta: f64::INFINITY,
            mean_delta: 0.0,
            total: 1,
        }
    }

    /// One packet after the first. `clock_hz` is 0 where Wireshark would not
    /// compute jitter (unknown clock, telephone-event). Returns the packet's
    /// inter-arrival delta if it is a regular packet (one the min/mean/max
    /// figures take).
    #[inline]
    pub(crate) fn update(&mut self, h: &Packet, clock_hz: u32) -> Option<f64> {
        let since_first = h.timestamp.wrapping_sub(self.first_ts);
        let in_time_sequence = self.in_time_sequence(h.timestamp);
        let seq = h.seq;
        if in_time_sequence {
            // A wrap: below the first sequence number, or 65535 -> 0 when the stream started at 0.
            let wrapped = seq < self.start_seq || (seq == 0 && self.stop_seq == 65535);
            if wrapped && !self.under {
                self.seq_cycles += 1;
                self.under = true;
            } else if seq > self.start_seq && self.under {
                self.under = false;
            }
        }
        let (cur, last) = (seq as i32, self.seq_num as i32);
        if in_time_sequence && (last + 1 == cur || (last == 65535 && cur == 0)) {
            self.seq_num = seq;
        } else if in_time_sequence && (last + 1 < cur || last - cur > 0xFF00) {
            self.seq_num = seq;
            self.sequence_errors += 1;
        } else if last + 1 > cur {
            self.sequence_errors += 1;
        }
        let cn = is_cn(h.payload_type);
        let follows_cn = self.prev_cn;
        self.prev_cn = cn;

        if in_time_sequence {
            // Divided, not multiplied by 1e-6: correctly rounded, so 34834 µs prints as
            // 34.834 (as Wireshark shows it), not 34.833999999999996.
            self.delta = (h.arrival_ns - self.time_ns) as f64 / 1e6;
            if clock_hz != 0 {
                // Wireshark divides by the clock in kHz as an integer.
                let nominal_ms = Self::nominal_ms(since_first, clock_hz);
                let current_diff = (self.delta - (nominal_ms - self.last_nominal_ms)).abs();
                self.jitter = (15.0 * self.jitter + current_diff) / 16.0;
                self.last_nominal_ms = nominal_ms;
            }
        }
        let regular = !h.marker && !cn && in_time_sequence && !follows_cn;
        if regular {
            if self.delta > self.max_delta {
                self.max_delta = self.delta;
            }
            self.min_delta = self.min_delta.min(self.delta);
            // Wireshark's running means, sharing one division (the divisions
            // were the costliest part of a packet's analysis).
            let n = self.total as f64;
            let inv_n = 1.0 / n;
            self.mean_delta = (self.mean_delta * (n - 1.0) + self.delta) * inv_n;
            if clock_hz != 0 {
                if self.jitter > self.max_jitter {
                    self.max_jitter = self.jitter;
                }
                self.mean_jitter = (self.mean_jitter * (n - 1.0) + self.jitter) * inv_n;
            }
        }
        if in_time_sequence {
            self.time_ns = h.arrival_ns;
        }
        self.stop_seq = seq;
        self.total += 1;
        regular.then_some(self.delta)
    }

    /// Wireshark's "time sequence": a timestamp at or after the stream's
    /// first (within 2^31); only such packets are timed.
    #[inline]
    pub(crate) fn in_time_sequence(&self, timestamp: u32) -> bool {
        timestamp >= self.first_ts && timestamp.wrapping_sub(self.first_ts) < 0x8000_0000
    }

    /// Ms from the stream's first timestamp, `since_first` clock ticks on
    /// (Wireshark divides by the clock in kHz as an integer).
    #[inline]
    pub(crate) fn nominal_ms(since_first: u32, clock_hz: u32) -> f64 {
        since_first as f64 / (clock_hz / 1000).max(1) as f64
    }

    /// Smallest inter-arrival delta over regular packets, ms.
    pub fn min_delta(&self) -> Option<f64> {
        self.min_delta.is_finite().then_some(self.min_delta)
    }

    /// Wireshark's expected packet count.
    pub fn expected(&self) -> i64 {
        self.stop_seq as i64 + self.seq_cycles as i64 * 65536 - self.start_seq as i64 + 1
    }

    /// Wireshark's lost count: expected − received (negative with duplicates).
    pub fn lost(&self) -> i64 {
        self.expected() - self.total as i64
    }
}
