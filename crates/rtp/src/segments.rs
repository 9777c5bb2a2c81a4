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
    /// Arrival and nominal time (ms from the stream's first timestamp) of
    /// the last timed packet.
    time_ns: i64,
    last_nominal_ms: f64,
    /// Arrival of each restart, ns (the first [`RESTART_TIMES`]).
    pub restarts_ns: Vec<i64>,
    /// Arrival of the last stray: the date of a restart it announced.
    stray_ns: i64,
    /// Its arrival and nominal time, if it was timed: the reference of
    /// the packet that confirms it (tshark on the new segment alone times
    /// that packet from the stray).
    stray_timed: Option<(i64, f64)>,
}

impl SegmentJitter {
    /// Starts from the Wireshark figures so far (identical until now).
    pub(crate) fn mirror(ws: &crate::WiresharkView) -> Self {
        SegmentJitter {
            jitter: ws.jitter,
            max_jitter: ws.max_jitter,
            mean_jitter: ws.mean_jitter,
            time_ns: ws.time_ns,
            last_nominal_ms: ws.last_nominal_ms,
            restarts_ns: Vec::new(),
            stray_ns: ws.time_ns,
            stray_timed: None,
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

    /// Times one packet in Wireshark's time sequence, with a known clock.
    pub(crate) fn time(&mut self, boundary: Boundary, arrival_ns: i64, nominal_ms: f64) {
        match boundary {
            Boundary::Stray => {
                self.stray_timed = Some((arrival_ns, nominal_ms));
                return;
            }
            Boundary::Restart => self.jitter = 0.0,
            Boundary::Confirmed => {
                self.jitter = 0.0;
                if let Some((time_ns, last_nominal_ms)) = self.stray_timed.take() {
                    (self.time_ns, self.last_nominal_ms) = (time_ns, last_nominal_ms);
                    self.step(arrival_ns, nominal_ms);
                }
            }
            Boundary::Within => self.step(arrival_ns, nominal_ms),
        }
        self.time_ns = arrival_ns;
        self.last_nominal_ms = nominal_ms;
    }

    /// Wireshark's jitter step from the last timed packet.
    fn step(&mut self, arrival_ns: i64, nominal_ms: f64) {
        let delta = (arrival_ns - self.time_ns) as f64 / 1e6;
        let diff = (delta - (nominal_ms - self.last_nominal_ms)).abs();
        self.jitter = (15.0 * self.jitter + diff) / 16.0;
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
