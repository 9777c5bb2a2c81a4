//! Per-stream RTP analysis.
//!
//! [`StreamStats`] takes one packet at a time (header fields and arrival time)
//! and keeps two views of the stream, both allocation-free and O(1) per packet:
//!
//! * [`SeqTracker`] — RFC 3550 Appendix A.1/A.3 sequence accounting made for a
//!   passive probe: expected, lost, duplicates, out-of-order, sequence resets.
//!   Loss never goes negative: duplicates are recognised by a 128-packet window
//!   and do not count as received, and a sequence reset (a source restarting its
//!   numbering) closes one segment and opens another instead of inflating
//!   `expected`.
//! * [`WiresharkView`] — the arithmetic of Wireshark's RTP stream analysis
//!   (`tshark -z rtp,streams`), the number operators compare with: jitter and
//!   inter-arrival delta in milliseconds, min/mean/max, and Wireshark's own
//!   expected/lost (which goes negative with duplicates and sequence resets).
//!
//! Where the two disagree, Calliper reports the RFC 3550 figures as `lost` and
//! keeps Wireshark's as `wireshark_lost`; see `docs/rtp-analysis.md`.

mod by_time;
pub mod codec;
pub mod dtmf;
pub mod emodel;
pub mod interval;
pub mod playout;
pub mod segments;
mod wireshark;

use by_time::ByTime;
pub use codec::{ClockRate, Codec};
use segments::{Boundary, SegmentJitter};
use wireshark::is_cn;
pub use wireshark::WiresharkView;

/// RFC 3550 A.1: a jump of at least this many sequence numbers is a dropout.
pub const MAX_DROPOUT: u16 = 3000;
/// RFC 3550 A.1: packets at most this far behind are late, not a restart.
pub const MAX_MISORDER: u16 = 100;

/// RFC 3550 A.1/A.3 sequence accounting, extended for passive monitoring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqTracker {
    started: bool,
    max_seq: u16,
    /// Sequence wraps in the current segment (32 bits keep the tracker in
    /// one 80-byte block: a wrap takes 65 536 packets).
    wraps: u32,
    base_seq: u64,
    /// Next sequence number that would confirm a restart (`bad_seq` in A.1).
    bad_seq: Option<u16>,
    /// Which of the last 128 sequence numbers (bit i = max_seq - i) were seen.
    window: u128,
    /// Unique packets received in the current segment.
    segment_received: u64,
    /// Expected and unique-received packets of closed segments.
    closed_expected: u64,
    closed_lost: u64,
    /// Packets seen twice within the window (not counted as received).
    /// These four counters are 32-bit (saturating) to keep stream state small.
    pub duplicates: u32,
    /// Packets that arrived after a higher sequence number.
    pub out_of_order: u32,
    /// Times the source restarted its numbering (confirmed big jumps).
    pub resets: u32,
    /// Packets with an unexplained big jump that were never confirmed by a
    /// following packet (counted in packets, not in the loss arithmetic;
    /// 16 bits, saturating, keep the tracker in 80 bytes).
    pub strays: u16,
    /// Gaps in the numbering (runs of lost packets): with `lost` they give
    /// the burstiness of the loss ([`SeqTracker::burst_ratio`]).
    pub gaps: u32,
    /// Big jumps taken as loss, not as a restart: the packet's timestamp
    /// and arrival agreed with the packets missing ([`StreamStats::update`]).
    /// 16 bits, saturating, like `strays`.
    pub outages: u16,
}

impl SeqTracker {
    /// Accounts one packet's sequence number; a big jump is judged by RFC
    /// 3550 A.1 (a restart once the next packet follows it) unless the
    /// caller, who knows the packet's time, said otherwise ([`Self::outage`],
    /// [`Self::restart`]).
    /// Returns what the number was to the jitter within segments.
    pub fn update(&mut self, seq: u16) -> Boundary {
        if !self.started {
            self.started = true;
            self.start_segment(seq);
            return Boundary::Within;
        }
        let udelta = seq.wrapping_sub(self.max_seq);
        if udelta == 0 {
            self.duplicates = self.duplicates.saturating_add(1);
        } else if udelta < MAX_DROPOUT {
            self.advance(seq, udelta);
        } else if udelta <= u16::MAX - MAX_MISORDER + 1 {
            // A big jump: a restart if the next packet follows it.
            if self.bad_seq == Some(seq) {
                self.close_segment();
                self.resets = self.resets.saturating_add(1);
                self.strays = self.strays.saturating_sub(1); // the packet that announced the restart belongs to the new segment
                self.start_segment(seq.wrapping_sub(1));
                self.update(seq);
                return Boundary::Confirmed;
            } else {
                self.bad_seq = Some(seq.wrapping_add(1));
                self.strays = self.strays.saturating_add(1);
                return Boundary::Stray;
            }
        } else {
            // Behind max_seq by less than MAX_MISORDER: late or duplicate.
            let back = self.max_seq.wrapping_sub(seq) as u32;
            let bit = 1u128 << back;
            if self.window & bit != 0 {
                self.duplicates = self.duplicates.saturating_add(1);
            } else {
                self.window |= bit;
                self.out_of_order = self.out_of_order.saturating_add(1);
                if self.segment_expected() > self.segment_received {
                    self.segment_received += 1;
                }
            }
        }
        Boundary::Within
    }

    /// `seq` comes `packets` numbers after the highest so far (an outage
    /// the packet's time vouches for, wraps of the numbering included):
    /// the packets between are lost.
    pub fn outage(&mut self, seq: u16, packets: u64) {
        let extended = self.extended_max() + packets;
        debug_assert_eq!(extended as u16, seq);
        self.wraps = u32::try_from(extended >> 16).unwrap_or(u32::MAX);
        self.window = 1;
        self.max_seq = seq;
        self.segment_received += 1;
        self.gaps = self.gaps.saturating_add(1);
        self.outages = self.outages.saturating_add(1);
        self.bad_seq = None;
    }

    /// The source restarted its numbering at `seq` (the packet's time says
    /// so): the current segment closes and a new one starts.
    pub fn restart(&mut self, seq: u16) {
        self.close_segment();
        self.resets = self.resets.saturating_add(1);
        self.start_segment(seq);
    }

    /// In order, possibly with a gap of `udelta - 1` lost packets.
    fn advance(&mut self, seq: u16, udelta: u16) {
        if seq < self.max_seq {
            self.wraps = self.wraps.saturating_add(1);
        }
        // The next number (almost every packet) shifts by a constant: a
        // 128-bit shift by a variable costs several times more.
        self.window = match udelta {
            1 => self.window << 1,
            2..128 => self.window << udelta,
            _ => 0,
        };
        self.window |= 1;
        self.max_seq = seq;
        self.segment_received += 1;
        if udelta > 1 {
            self.gaps = self.gaps.saturating_add(1);
        }
        self.bad_seq = None;
    }

    fn start_segment(&mut self, seq: u16) {
        self.max_seq = seq;
        self.wraps = 0;
        self.base_seq = seq as u64;
        self.bad_seq = None;
        self.window = 1;
        self.segment_received = 1;
    }

    fn close_segment(&mut self) {
        self.closed_expected += self.segment_expected();
        self.closed_lost += self.segment_expected().saturating_sub(self.segment_received);
    }

    fn segment_expected(&self) -> u64 {
        (self.cycles() + self.max_seq as u64 + 1).saturating_sub(self.base_seq)
    }

    /// Packets the sequence numbers say were sent (all segments).
    pub fn expected(&self) -> u64 {
        if !self.started {
            return 0;
        }
        self.closed_expected + self.segment_expected()
    }

    /// Packets never seen (RFC 3550 A.3, without duplicates; never negative).
    pub fn lost(&self) -> u64 {
        if !self.started {
            return 0;
        }
        self.closed_lost + self.segment_expected().saturating_sub(self.segment_received)
    }

    /// Starts a new segment at `seq` without counting the gap or a reset:
    /// a telephone-event-only stream's numbering jumps between events.
    pub fn rebase(&mut self, seq: u16) {
        if self.started {
            self.close_segment();
            self.start_segment(seq);
        } else {
            self.update(seq);
        }
    }

    /// Wraps of the current segment, times 65536 (RFC 3550's `cycles`).
    fn cycles(&self) -> u64 {
        u64::from(self.wraps) << 16
    }

    /// Highest sequence number seen in the current segment.
    pub fn max_seq(&self) -> u16 {
        self.max_seq
    }

    /// G.107's BurstR from the observed loss, as a two-state (Gilbert)
    /// model: p = P(received → lost) = gaps / received, q = P(lost →
    /// received) = gaps / lost, BurstR = 1 / (p + q); 1 for random loss or
    /// none, never below 1. A late packet that fills a gap leaves the gap
    /// counted, which errs towards burstier (a lower MOS).
    pub fn burst_ratio(&self) -> f64 {
        let lost = self.lost() as f64;
        let received = self.expected() as f64 - lost;
        if lost == 0.0 || received <= 0.0 || self.gaps == 0 {
            return 1.0;
        }
        let gaps = f64::from(self.gaps);
        (1.0 / (gaps / received + gaps / lost)).max(1.0)
    }

    /// Extended highest sequence number of the current segment (A.3).
    pub fn extended_max(&self) -> u64 {
        self.cycles() + self.max_seq as u64
    }
}

/// RFC 3550 A.8 interarrival jitter in timestamp units, integer form.
/// `state` is the jitter scaled by 16; the reported value is `state >> 4`.
pub fn rfc3550_jitter_step(state: u32, transit_delta: i64) -> u32 {
    let d = transit_delta.unsigned_abs().min(u32::MAX as u64) as u32;
    state.wrapping_add(d).wrapping_sub((state + 8) >> 4)
}

/// RFC 3550 A.3 fraction lost for one reporting interval, in 1/256.
pub fn fraction_lost(expected_interval: u64, received_interval: u64) -> u8 {
    let lost = expected_interval as i64 - received_interval as i64;
    if expected_interval == 0 || lost <= 0 {
        0
    } else {
        ((lost << 8) / expected_interval as i64).min(255) as u8
    }
}

/// What the analyser needs from one RTP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// Arrival time, ns since the epoch.
    pub arrival_ns: i64,
    /// Sequence number.
    pub seq: u16,
    /// RTP timestamp.
    pub timestamp: u32,
    /// Payload type.
    pub payload_type: u8,
    /// Marker bit.
    pub marker: bool,
    /// Bytes of the RTP packet (header and payload).
    pub bytes: u32,
}

/// Statistics of one RTP stream (one source, destination and SSRC).
#[derive(Debug, Clone, PartialEq)]
pub struct StreamStats {
    /// Packets seen.
    pub packets: u64,
    /// RTP bytes seen (headers and payload).
    pub bytes: u64,
    /// First and last arrival, ns.
    pub first_ns: i64,
    /// Last arrival, ns.
    pub last_ns: i64,
    /// Payload type of the first packet.
    pub payload_type: u8,
    /// Packets of the RFC 4733 telephone-event type (not in jitter);
    /// 32 bits, saturating, pay for the `segments` pointer.
    pub event_packets: u32,
    /// RFC 3550 sequence accounting.
    pub seq: SeqTracker,
    /// Wireshark-compatible timing figures.
    pub ws: WiresharkView,
    /// What receivers' jitter buffers would have made of the stream.
    pub playout: playout::Playout,
    /// Worst MOS of the stream's intervals so far (those of at least 50
    /// expected packets); kept by the caller, which knows the codec.
    pub worst_interval_mos: Option<f32>,
    /// Where the current reporting interval began ([`interval`]).
    interval: interval::IntervalMark,
    /// Jitter within restart segments, from the stream's first restart or
    /// stray on (boxed: most streams never have one).
    pub segments: Segments,
}

impl StreamStats {
    /// Starts a stream at its first packet.
    pub fn new(p: &Packet, clock: ClockRate) -> Self {
        let mut seq = SeqTracker::default();
        seq.update(p.seq);
        let mut s = StreamStats {
            packets: 1,
            bytes: p.bytes as u64,
            first_ns: p.arrival_ns,
            last_ns: p.arrival_ns,
            payload_type: p.payload_type,
            event_packets: matches!(clock, ClockRate::Event(_)) as u32,
            seq,
            ws: WiresharkView::new(p.seq, p.timestamp, p.payload_type, p.arrival_ns),
            playout: playout::Playout::default(),
            worst_interval_mos: None,
            interval: interval::IntervalMark::default(),
            segments: None,
        };
        s.play(p, clock, false);
        s
    }

    /// Accounts one telephone-event packet: `end` is its E bit,
    /// `same_event` whether the previous event packet had its timestamp
    /// (the stream's [`dtmf::DtmfTracker`] knows). In a stream of events
    /// only, loss is judged within an event: the numbering may jump between
    /// events (a sender numbering events and audio together but sending
    /// them apart), which is not loss. Returns true for a repeat of the end
    /// packet under the same number (RFC 4733 §2.5.1.4), which is neither a
    /// duplicate nor new.
    pub fn update_event(&mut self, p: &Packet, clock_hz: u32, end: bool, same_event: bool) -> bool {
        let events_only = u64::from(self.event_packets) == self.packets;
        // A repeat is counted as a packet, not in the sequence accounting.
        let repeat = end && same_event && p.seq == self.seq.max_seq();
        let boundary = if !repeat && events_only && !same_event {
            self.seq.rebase(p.seq);
            Boundary::Within
        } else if !repeat {
            self.seq.update(p.seq)
        } else {
            Boundary::Within
        };
        let clock = ClockRate::Event(clock_hz);
        if boundary == Boundary::Within && self.segments.is_none() {
            self.account(p, clock, |ws, _, p, hz| ws.update(p, hz));
        } else {
            self.account(p, clock, |ws, seg, p, hz| account_segments(ws, seg, p, hz, boundary));
        }
        repeat
    }

    /// Accounts one more packet. `clock` tells how this packet's payload type
    /// is timed (from the static table or the call's `a=rtpmap`).
    #[inline]
    pub fn update(&mut self, p: &Packet, clock: ClockRate) {
        let duplicates = self.seq.duplicates;
        // The next number (almost every packet): what the time judgement
        // and the sequence accounting would both decide, without them.
        let next = self.seq.started && p.seq == self.seq.max_seq.wrapping_add(1);
        let boundary = if next {
            self.seq.advance(p.seq, 1);
            Boundary::Within
        } else {
            self.judged_update(p, clock)
        };
        self.play(p, clock, self.seq.duplicates != duplicates);
        if boundary == Boundary::Within && self.segments.is_none() {
            self.account(p, clock, |ws, _, p, hz| ws.update(p, hz));
        } else {
            self.account(p, clock, |ws, seg, p, hz| account_segments(ws, seg, p, hz, boundary));
        }
    }

    /// The sequence accounting of a packet that is not the next number,
    /// as the packet's time judges it ([`by_time::judge`]).
    fn judged_update(&mut self, p: &Packet, clock: ClockRate) -> Boundary {
        match by_time::judge(&self.seq, &self.playout, self.last_ns, p, clock) {
            ByTime::Numbers => self.seq.update(p.seq),
            ByTime::Outage(packets) => {
                self.seq.outage(p.seq, packets);
                Boundary::Within
            }
            ByTime::Restart => {
                self.seq.restart(p.seq);
                Boundary::Restart
            }
        }
    }

    /// Speech per packet, ms: the timestamp step of consecutive packets
    /// under the clock of `clock`.
    pub fn packet_ms(&self, clock: ClockRate) -> Option<f64> {
        match (self.playout.step(), clock) {
            (step @ 1.., ClockRate::Hz(hz @ 1..)) => Some(f64::from(step) * 1000.0 / f64::from(hz)),
            _ => None,
        }
    }

    /// Gives a voice packet to the jitter-buffer simulation: not a
    /// duplicate (a buffer plays a packet once), not comfort noise (it
    /// marks silence, and its loss is not speech lost), nor an event.
    #[inline]
    fn play(&mut self, p: &Packet, clock: ClockRate, duplicate: bool) {
        let cn = is_cn(p.payload_type);
        if let (ClockRate::Hz(hz), false, false) = (clock, duplicate, cn) {
            self.playout.update(p.arrival_ns, p.seq, p.timestamp, p.marker, hz);
        }
    }

    /// Everything but the sequence accounting; `time` times the packet
    /// (Wireshark's figures, and the segments' once a stream has them).
    #[inline(always)]
    fn account(
        &mut self,
        p: &Packet,
        clock: ClockRate,
        time: impl FnOnce(&mut WiresharkView, &mut Segments, &Packet, u32) -> Option<f64>,
    ) {
        self.packets += 1;
        self.bytes += p.bytes as u64;
        self.last_ns = self.last_ns.max(p.arrival_ns);
        let hz = match clock {
            ClockRate::Hz(hz) => hz,
            ClockRate::Event(_) => {
                self.event_packets = self.event_packets.saturating_add(1);
                0
            }
            ClockRate::Unknown => 0,
        };
        if let Some(delta) = time(&mut self.ws, &mut self.segments, p, hz) {
            let d = delta as f32;
            if d > self.interval.max_delta_ms {
                self.interval.max_delta_ms = d;
            }
        }
    }
}

/// A stream's jitter within restart segments, from its first boundary on.
type Segments = Option<Box<SegmentJitter>>;

/// [`WiresharkView::update`] with the jitter within restart segments
/// alongside: for a stream from its first restart or stray on (cold: most
/// streams never get here).
#[cold]
#[inline(never)]
fn account_segments(
    ws: &mut WiresharkView,
    seg: &mut Segments,
    p: &Packet,
    hz: u32,
    boundary: Boundary,
) -> Option<f64> {
    let seg = seg.get_or_insert_with(|| Box::new(SegmentJitter::mirror(ws)));
    seg.note(boundary, p.arrival_ns);
    let timed = ws.in_time_sequence(p.timestamp);
    let nominal =
        (hz != 0).then(|| WiresharkView::nominal_ms(p.timestamp.wrapping_sub(ws.first_ts), hz));
    let n = ws.total as f64;
    let regular = ws.update(p, hz);
    seg.time(boundary, timed, p.arrival_ns, nominal);
    if regular.is_some() && hz != 0 {
        seg.account(n, 1.0 / n);
    }
    regular
}

#[cfg(test)]
mod tests;
