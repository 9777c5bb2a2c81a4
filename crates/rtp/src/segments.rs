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
