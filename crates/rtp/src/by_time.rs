//! Judging a packet's sequence number by its time: an outage the clock
//! vouches for is loss, a renumbering neither the clock nor the arrival
//! explains is a restart (docs/hostile-input.md, loss truth).

use crate::{playout, ClockRate, Packet, SeqTracker, MAX_DROPOUT, MAX_MISORDER};

/// What a packet's time says of its sequence number.
pub(crate) enum ByTime {
    /// Nothing the numbers do not say (RFC 3550 A.1 decides).
    Numbers,
    /// An outage of this many numbers (the packets between lost).
    Outage(u64),
    /// The source restarted its numbering.
    Restart,
}

/// Judges a packet's sequence number by its time, against the stream's last
/// voice packet (`playout`) and arrival (`last_ns`), at the stream's packet
/// time; one compare for a packet that follows the last.
///
/// - An outage: the numbers say 3 000 packets or more are missing (taken
///   modulo 2^16 as the timestamp says: a 22-minute outage wraps them), the
///   timestamp agrees (from 0.9 to twice as many: a sender silent for part
///   of the time advances its clock only) and so does the arrival gap
///   (within a factor of two). The packets count as lost, however long the
///   outage.
/// - A restart: a jump forward of more than 100 numbers that neither the
///   arrival gap (more than twice the packets it could hold, and 10) nor
///   the timestamp (half to twice as many) explains, or a number behind the
///   highest with a timestamp ahead of it. A source renumbering does not
///   make packets lost; a burst lost behind a late packet stays loss.
///
/// Unknown packet time or clock: no judgement.
pub(crate) fn judge(
    seq: &SeqTracker,
    playout: &playout::Playout,
    last_ns: i64,
    p: &Packet,
    clock: ClockRate,
) -> ByTime {
    let jump = p.seq.wrapping_sub(seq.max_seq());
    if jump == 1 || !seq.started {
        return ByTime::Numbers;
    }
    let (ClockRate::Hz(hz @ 1..), step @ 1..) = (clock, playout.step()) else {
        return ByTime::Numbers;
    };
    let (last_seq, last_ts) = playout.last();
    // Comfort noise or events may follow the last voice packet: the
    // timestamp is read from the voice packet, the numbers from the highest.
    let after_voice = seq.max_seq().wrapping_sub(last_seq);
    if after_voice >= MAX_MISORDER {
        return ByTime::Numbers;
    }
    let step = f64::from(step);
    let by_timestamp =
        f64::from(p.timestamp.wrapping_sub(last_ts) as i32) / step - f64::from(after_voice);
    let by_arrival = (p.arrival_ns - last_ns).max(0) as f64 * f64::from(hz) / 1e9 / step;
    // The count the numbers allow (modulo 2^16) nearest the timestamp's.
    let wraps = ((by_timestamp - f64::from(jump)) / 65536.0).round().max(0.0);
    let packets = f64::from(jump) + wraps * 65536.0;
    let agrees = |n: f64, x: f64, low: f64| (n * low..=n * 2.0).contains(&x);
    if packets >= f64::from(MAX_DROPOUT)
        && agrees(packets, by_timestamp, 0.9)
        && agrees(packets, by_arrival, 0.5)
    {
        return ByTime::Outage(packets as u64);
    }
    // A restart: neither the clock nor the arrival explains the jump.
    let forward = jump > MAX_MISORDER && jump < MAX_DROPOUT;
    let unexplained =
        f64::from(jump) > 2.0 * by_arrival + 10.0 && !agrees(f64::from(jump), by_timestamp, 0.5);
    let behind_but_newer = jump > u16::MAX - MAX_MISORDER && by_timestamp >= 2.0;
    if forward && unexplained || behind_but_newer {
        return ByTime::Restart;
    }
    ByTime::Numbers
}
