//! Jitter within restart segments: Wireshark's jitter arithmetic with the
//! artefacts of a sequence restart left out, so a stream's table and its
//! interval charts do not contradict each other.
//!
//! A source that restarts its numbering (after hold, a re-INVITE or a
//! fax switch) usually restarts its timestamps too. Wireshark's jitter
//! then takes the whole timestamp jump as one transit difference: 616 ms
//! of "jitter" on a link with none, decaying over the next packets. The
//! tshark-equal figures keep that (operators compare them with tshark);
//! these figures are those of each segment on its own:
//!
//! - at a restart the jitter starts again at 0, timed from the restart
//!   packet, as tshark would time a capture holding only that segment;
//! - a stray (a big jump the next packet did not confirm) is not timed
//!   at all, and does not move the reference;
//! - a segment whose timestamps start below the stream's first is not
//!   timed, as Wireshark does not time it (its "time sequence").
//!
//! A stream without restarts or strays pays nothing: the figures are the
//! Wireshark ones until the first boundary, and the state is boxed then.

/// Most restart times kept per stream (the count is `SeqTracker::resets`).
pub const RESTART_TIMES: usize = 16;

/// What the sequence accounting made of a packet, for the segment jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// A packet within its segment.
    Within,
    /// A big jump not (yet) confirmed: not timed.
    Stray,
    /// The first packet of a new segment.
    Restart,
    /// The packet that confirmed the stray before it as the first of a new
    /// segment (RFC 3550 A.1): the restart is dated by the stray.
    Confirmed,
}

/// The restart-free jitter of a stream that has had a boundary.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentJitter {
    /// Current jitter within the segment, ms.
    jitter: f64,
    /// Largest over regular packets of all segments, ms.
    pub max_jitter: f64,
    /// Wireshark's running mean over regular packets, ms.
    pub mean_jitter: f64,
    /// Arrival of the segment's last packet in Wireshark's time sequence
    /// (None at a segment's start: its first such packet only sets it).
    time_ns: Option<i64>,
    /// Nominal time (ms from the stream's first timestamp) of its last
    /// timed packet.
    last_nominal_ms: Option<f64>,
    /// Arrival of each restart, ns (the first [`RESTART_TIMES`]).
    pub restarts_ns: Vec<i64>,
    /// Arrival of the last stray: the date of a restart it announces.
    stray_ns: i64,
    /// Its reference, if it was in Wireshark's time sequence: the packet
    /// that confirms it is timed from it (as tshark on the new segment
    /// alone would time it). Any other packet forgets it.
    stray_reference: Option<(i64, Option<f64>)>,
}

/// Extra heap a stream can hold for its segments (the box and its restart
/// times), for the memory bound: any stream can be made to pay it by one
/// stray packet.
pub const HEAP_BYTES: usize = std::mem::size_of::<SegmentJitter>() + RESTART_TIMES * 8;

impl SegmentJitter {
    /// Starts from the Wireshark figures so far (identical until now).
    pub(crate) fn mirror(ws: &crate::WiresharkView) -> Self {
        SegmentJitter {
            jitter: ws.jitter,
            max_jitter: ws.max_jitter,
            mean_jitter: ws.mean_jitter,
            time_ns: Some(ws.time_ns),
            last_nominal_ms: Some(ws.last_nominal_ms),
            restarts_ns: Vec::new(),
            stray_ns: ws.time_ns,
            stray_reference: None,
        }
    }

    /// Notes a stray's time, or a restart's (capped; the count is kept
    /// by the sequence accounting).
    pub(crate) fn note(&mut self, boundary: Boundary, arrival_ns: i64) {
        let at = match boundary {
            Boundary::Within => return,
            Boundary::Stray => {
                self.stray_ns = arrival_ns;
                return;
            }
            Boundary::Restart => arrival_ns,
            Boundary::Confirmed => self.stray_ns,
        };
        if self.restarts_ns.len() < RESTART_TIMES {
            self.restarts_ns.push(at);
        }
    }

    /// Takes one packet: `timed` is whether it is in Wireshark's time
    /// sequence, `nominal_ms` its nominal time when its clock is known
    /// (Wireshark moves the arrival reference on every packet of the time
    /// sequence, the nominal one only on those with a clock).
    pub(crate) fn time(
        &mut self,
        boundary: Boundary,
        timed: bool,
        arrival_ns: i64,
        nominal_ms: Option<f64>,
    ) {
        match boundary {
            Boundary::Stray => {
                self.stray_reference = timed.then_some((arrival_ns, nominal_ms));
                return;
            }
            Boundary::Restart => {
                self.jitter = 0.0;
                self.stray_reference = None;
                (self.time_ns, self.last_nominal_ms) = (None, None);
            }
            Boundary::Confirmed => {
                self.jitter = 0.0;
                let (time_ns, nominal) = self.stray_reference.take().unzip();
                (self.time_ns, self.last_nominal_ms) = (time_ns, nominal.flatten());
            }
            Boundary::Within => self.stray_reference = None,
        }
        if !timed {
            return;
        }
        if let (Some(time_ns), Some(last), Some(now)) =
            (self.time_ns, self.last_nominal_ms, nominal_ms)
        {
            let delta = (arrival_ns - time_ns) as f64 / 1e6;
            let diff = (delta - (now - last)).abs();
            self.jitter = (15.0 * self.jitter + diff) / 16.0;
        }
        self.time_ns = Some(arrival_ns);
        if nominal_ms.is_some() {
            self.last_nominal_ms = nominal_ms;
        }
    }

    /// Takes the current jitter into the max and the running mean, as
    /// Wireshark does for a regular packet (`n` packets so far).
    pub(crate) fn account(&mut self, n: f64, inv_n: f64) {
        if self.jitter > self.max_jitter {
            self.max_jitter = self.jitter;
        }
        self.mean_jitter = (self.mean_jitter * (n - 1.0) + self.jitter) * inv_n;
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::{pkt, steady_50};
    use crate::{ClockRate, StreamStats};

    /// Jitter within restart segments: a steady stream keeps the Wireshark
    /// figures (and no state); a stray packet with a wild timestamp, and a
    /// restart with new numbers and timestamps, move the Wireshark jitter by
    /// hundreds of ms but leave the segment jitter at the link's (zero here).
    #[test]
    fn segment_jitter_leaves_out_restarts_and_strays() {
        let clock = ClockRate::Hz(8000);
        let steady = |n: u16, s: &mut StreamStats, from_ms: f64, seq: u16, ts: u32| {
            for i in 0..n {
                let p = pkt(from_ms + f64::from(i) * 20.0, seq + i, ts + u32::from(i) * 160);
                s.update(&p, clock);
            }
        };
        let mut s = StreamStats::new(&pkt(0.0, 100, 1000), clock);
        steady(99, &mut s, 20.0, 101, 1160);
        assert!(s.segments.is_none());
        // A stray 30 000 numbers on, its timestamp 10 s away, then the stream goes on.
        s.update(&pkt(2000.0, 30_000, 1000 + 80_000 * 10), clock);
        steady(50, &mut s, 2000.0, 200, 1000 + 100 * 160);
        assert_eq!((s.seq.strays, s.seq.resets), (1, 0));
        assert!(s.ws.max_jitter > 100.0, "{}", s.ws.max_jitter);
        assert_eq!(s.segments.as_deref().unwrap().max_jitter, 0.0);
        // A restart: numbers and timestamps start again elsewhere, 20 ms on.
        steady(100, &mut s, 3000.0, 40_000, 5_000_000);
        assert_eq!(s.seq.resets, 1);
        assert!(s.ws.max_jitter > 100.0);
        let seg = s.segments.as_deref().unwrap();
        assert_eq!((seg.max_jitter, seg.mean_jitter), (0.0, 0.0));
        assert_eq!(seg.restarts_ns, vec![3_000_000_000]);
    }

    /// From the attacker review: a renumbering announced and confirmed by
    /// telephone-event packets is a restart of the segments too; and a stray
    /// long before a restart whose first packet is out of Wireshark's time
    /// sequence leaves no stale reference behind.
    #[test]
    fn segment_restarts_carried_by_events_and_stale_strays() {
        let clock = ClockRate::Hz(8000);
        let mut s = steady_50(1000, clock);
        // Two events renumber the stream (30 000 on), then audio follows with new timestamps.
        let ev = |s: &mut StreamStats, ms: f64, seq: u16| {
            let mut p = pkt(ms, seq, 9_000_000);
            p.payload_type = 101;
            s.update_event(&p, 8000, false, true);
        };
        ev(&mut s, 1000.0, 30_000);
        ev(&mut s, 1020.0, 30_001);
        for i in 0..50u16 {
            s.update(
                &pkt(1040.0 + f64::from(i) * 20.0, 30_002 + i, 9_000_000 + u32::from(i) * 160),
                clock,
            );
        }
        assert_eq!(s.seq.resets, 1);
        let seg = s.segments.as_deref().expect("segments after an event-carried restart");
        assert_eq!(seg.restarts_ns, vec![1_000_000_000]);
        assert!(
            seg.max_jitter < 1.0 && s.ws.max_jitter > 100.0,
            "{} {}",
            seg.max_jitter,
            s.ws.max_jitter
        );

        // A stray at 2 s that nothing confirms; later a restart whose first
        // packet's timestamp is below the stream's first, confirmed by the next.
        let mut s = StreamStats::new(&pkt(0.0, 100, 100_000), clock);
        let at = |i: u32| pkt(f64::from(i) * 20.0, 100 + i as u16, 100_000 + 160 * i);
        for i in 1..100 {
            s.update(&at(i), clock);
        }
        s.update(&pkt(1990.0, 40_000, 900_000), clock);
        for i in 100..250 {
            s.update(&at(i), clock);
        }
        s.update(&pkt(5000.0, 20_000, 50), clock);
        for i in 1..50u32 {
            s.update(
                &pkt(5000.0 + 20.0 * f64::from(i), 20_000 + i as u16, 200_000 + 160 * i),
                clock,
            );
        }
        assert_eq!((s.seq.strays, s.seq.resets), (1, 1));
        assert!(s.ws.max_jitter > 100.0);
        let seg = s.segments.as_deref().unwrap();
        assert!(seg.max_jitter < 1.0, "stale stray reference: {}", seg.max_jitter);
    }
}
