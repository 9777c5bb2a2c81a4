//! Media events for trackers: a call's streams starting and ending, every
//! stream's reporting intervals, RTCP report blocks, DTMF digits, and the
//! anomalies counted. Each shard delivers the events of the streams it owns
//! (anomalies: signalling ones from the signalling shard). Intervals are
//! cut at boundaries, never per packet.

use super::*;
use calliper_model::event::{
    Anomaly, DtmfDigit, RtcpBlock, StreamEnded, StreamId, StreamInterval, StreamStarted,
};
use calliper_rtp::dtmf::DtmfEvent;
use calliper_rtp::emodel;

impl StreamKey {
    pub(crate) fn id(&self) -> StreamId {
        StreamId {
            src: self.src,
            src_port: self.sport,
            dst: self.dst,
            dst_port: self.dport,
            ssrc: self.ssrc,
        }
    }
}

/// The call a stream's events name: `Some(None)` for a stream without
/// signalling, `None` when its call is ignored by a rule (no events).
fn event_call(call: Option<&Call>) -> Option<Option<u64>> {
    match call {
        Some(c) if c.ignored => None,
        Some(c) => Some(Some(c.serial)),
        None => Some(None),
    }
}

/// Cuts a stream's current interval and delivers it. `now`: the time of
/// the packet that opens a later interval; None at the stream's end, which
/// the engine's clock `clock` dates.
pub(crate) fn cut_interval(
    events: &events::Events,
    every_ns: i64,
    s: &mut Stream,
    call: Option<&Call>,
    now: Option<i64>,
    clock: i64,
) {
    let figures = s.stats.cut_interval(now, every_ns);
    // Unconfirmed candidates (noise until proven RTP) score nothing.
    if s.probation > 0 || figures.packets == 0 {
        return;
    }
    let desc = call.and_then(|c| s.desc.and_then(|d| c.media.get(d as usize)));
    let delay = emodel::DelayInputs {
        rtt_ms: s.rtcp.rtt_ms(),
        buffer_ms: figures.buffer_delay_ms,
        packet_ms: s.stats.packet_ms(s.last_clock),
    };
    // Scored by the registered name: no allocation on the packet path. An
    // interval is too short to measure burstiness: random loss (BurstR 1).
    let score = canonical_codec(desc, s.stats.payload_type)
        .and_then(|c| emodel::estimate(c, figures.loss_after_buffer_percent, 1.0, &delay).ok());
    if let Some(score) = score.filter(|_| u64::from(figures.expected) >= emodel::MIN_SCORED_PACKETS)
    {
        let worst = s.stats.worst_interval_mos.get_or_insert(f32::INFINITY);
        *worst = worst.min(score.mos as f32);
    }
    if !events.media() {
        return;
    }
    let Some(call_serial) = event_call(call) else {
        return;
    };
    let codec = resolve(desc, s.stats.payload_type).name;
    events.deliver(&Event::Interval(&StreamInterval {
        call: call_serial,
        stream: s.key.id(),
        codec: &codec,
        figures,
        r_factor: score.map(|s| s.r),
        mos: score.map(|s| s.mos),
        mos_scale: score.map(|s| s.scale),
        last: now.is_none(),
        reported_ns: now.unwrap_or(clock),
    }));
}

impl Engine {
    /// A call's stream started (its first packet, or adopted into the call).
    pub(crate) fn stream_started_event(&self, si: Idx, now: i64) {
        if !self.events.media() {
            return;
        }
        let Some(s) = self.streams.get(si) else {
            return;
        };
        let Some(call) = s.call.and_then(|c| self.calls.get(c)) else {
            return;
        };
        if call.ignored {
            return;
        }
        let desc = s.desc.and_then(|d| call.media.get(d as usize));
        let codec = resolve(desc, s.stats.payload_type).name;
        self.events.deliver(&Event::StreamStarted(&StreamStarted {
            ts_ns: now,
            call: call.serial,
            stream: s.key.id(),
            payload_type: s.stats.payload_type,
            codec: &codec,
            direction: s.direction,
        }));
    }

    /// A stream leaves the tables: its final interval is cut (and scored,
    /// so the record's worst interval includes it), then its record is made
    /// and its end delivered.
    pub(crate) fn end_stream(
        &self,
        s: &mut Stream,
        call: Option<&Call>,
        desc: Option<&MediaDesc>,
    ) -> StreamRecord {
        cut_interval(&self.events, self.cfg.interval_ns, s, call, None, self.now);
        let record = report::stream_record(s, desc);
        if !self.events.media() || s.probation > 0 {
            return record;
        }
        if let Some(call) = event_call(call) {
            self.events.deliver(&Event::StreamEnded(&StreamEnded { call, record: &record }));
        }
        record
    }

    /// After a packet (`ts_ns`): the events of the anomalies it caused,
    /// dated by it, in one thread as in several (one compare when none).
    pub(crate) fn packet_anomaly_events(&mut self, ts_ns: i64) {
        let total = self.counters.anomaly_total + self.owned.anomaly_total;
        if total != self.events.anomaly_total_seen {
            self.events.anomaly_total_seen = total;
            self.anomaly_events(ts_ns);
        }
    }

    /// Anomalies counted since the last look, by kind, dated `ts_ns` (the
    /// packet that caused them, or the batch end or input end that did;
    /// only with trackers attached).
    pub(crate) fn anomaly_events(&mut self, ts_ns: i64) {
        let signalling = self.signalling_events();
        let seen = &mut self.events.anomalies_seen;
        let mut fresh: Vec<(&'static str, u64)> = Vec::new();
        let maps = [signalling.then_some(&self.counters.anomalies), Some(&self.owned.anomalies)];
        for (which, map) in maps.into_iter().enumerate() {
            let Some(map) = map else { continue };
            let total: u64 = map.values().fold(0, |a, &b| a.saturating_add(b));
            if total == seen[which].0 {
                continue;
            }
            for (&kind, &n) in map {
                let before = seen[which].1.get(kind).copied().unwrap_or(0);
                if n > before {
                    fresh.push((kind, n - before));
                }
            }
            seen[which] = (total, map.clone());
        }
        for (kind, count) in fresh {
            self.events.deliver(&Event::Anomaly(&Anomaly { ts_ns, kind, count }));
        }
    }
}

/// A DTMF digit's end was seen on stream `s` of call `call`.
pub(crate) fn dtmf_event(events: &events::Events, call: &Call, s: &StreamKey, e: &DtmfEvent) {
    if !events.media() || call.ignored {
        return;
    }
    events.deliver(&Event::Dtmf(&DtmfDigit {
        ts_ns: e.start_ns,
        call: call.serial,
        stream: s.id(),
        digit: e.digit,
        code: e.code,
        name: e.name,
        duration_ms: e.duration_ms,
        volume: e.volume,
    }));
}

/// An RTCP report block about stream `s` of call `call`.
pub(crate) fn rtcp_event(
    events: &events::Events,
    now: i64,
    call: &Call,
    s: &Stream,
    b: &ReportBlockFigures,
) {
    if !events.media() || call.ignored {
        return;
    }
    events.deliver(&Event::Rtcp(&RtcpBlock {
        ts_ns: now,
        call: call.serial,
        stream: s.key.id(),
        fraction_lost_percent: b.fraction_lost as f64 * 100.0 / 256.0,
        cumulative_lost: b.cumulative_lost,
        jitter_ms: b.jitter_ms,
    }));
}

/// An RTCP datagram on call `call`'s media (the engine that delivers
/// signalling sends it: every shard reads RTCP).
pub(crate) fn rtcp_packet_event(
    events: &events::Events,
    now: i64,
    call: &Call,
    flow: &Flow,
    bytes: &[u8],
) {
    // SRTCP is encrypted past its first 8 bytes: its reports are not read
    // here either.
    if call.ignored || call.media.iter().any(|d| d.encrypted) {
        return;
    }
    events.deliver(&Event::RtcpPacket(&calliper_model::event::RtcpPacket {
        ts_ns: now,
        call: call.serial,
        call_id: call.text.call_id(),
        src: (flow.src, flow.sport),
        dst: (flow.dst, flow.dport),
        bytes,
    }));
}

/// An RTCP report block's figures as the stream's clock reads them.
pub(crate) struct ReportBlockFigures {
    pub(crate) fraction_lost: u8,
    pub(crate) cumulative_lost: i64,
    pub(crate) jitter_ms: Option<f64>,
}
