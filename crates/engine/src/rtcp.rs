//! RTCP: receiver reports applied to the streams they describe.

use super::*;

impl Engine {
    /// An RTCP datagram: counted, and applied to its call (by either address).
    pub(crate) fn rtcp_datagram(&mut self, now: i64, flow: &Flow, payload: &[u8]) {
        self.counters.rtcp += 1;
        let entry = self.media_of(flow).map(|e| e.call);
        if let Some(call) = entry {
            // Every shard reads RTCP; the owner of its address pair records it.
            if self.recorder.is_some() && self.shard.is_none_or(|(i, n)| flow.shard(n) == i) {
                self.attribute(call, false);
            }
            self.rtcp_in_call(now, call, flow, payload);
        }
    }

    /// Applies the report blocks and XR VoIP metrics of an RTCP packet from
    /// `sender` to the call's streams they describe: the receivers' own
    /// view of loss, jitter and quality. A block describes one stream: the one with its SSRC that
    /// `sender` receives (a proxied call's legs share SSRCs; the choice
    /// depends on nothing a shard lacks). At most [`MAX_RTCP_BLOCKS`] blocks
    /// per datagram count. SRTCP (the streams' SDP says SRTP) is
    /// encrypted past its first 8 bytes: its reports are not read.
    pub(crate) fn rtcp_in_call(&mut self, now: i64, call: Idx, flow: &Flow, payload: &[u8]) {
        let sender = flow.src;
        if self.signalling_events() {
            if let Some(c) = self.calls.get(call) {
                media_events::rtcp_packet_event(&self.events, now, c, flow, payload);
            }
        }
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        c.rtcp_packets = c.rtcp_packets.saturating_add(1);
        let mut blocks = 0;
        for part in calliper_wire::rtcp::parts(payload) {
            let (report, xr) = match part {
                Ok(calliper_wire::rtcp::Part::Report(r)) => (Some(r), None),
                Ok(calliper_wire::rtcp::Part::VoipMetrics(_, m)) => (None, Some(Part::Xr(m))),
                Err(_) => {
                    self.counters.anomaly("rtcp_malformed");
                    return;
                }
            };
            // An SR names its sender's stream, a block or XR metrics the
            // stream its sender receives: each is one search, counted
            // against the cap.
            let sr =
                report.and_then(|r| r.sender.map(|(ntp, ..)| Part::SenderReport(ntp, r.reporter)));
            let report_blocks = report.into_iter().flat_map(|r| r.blocks().map(Part::Block));
            for part in sr.into_iter().chain(report_blocks).chain(xr) {
                blocks += 1;
                if blocks > MAX_RTCP_BLOCKS {
                    // Every shard reads the same datagram: counted alike.
                    self.counters.anomaly("rtcp_too_many_blocks");
                    return;
                }
                let readable = |si: &Idx, is: &dyn Fn(&StreamKey) -> bool| {
                    self.streams.get(*si).is_some_and(|s| is(&s.key) && !encrypted(c, s))
                };
                match part {
                    Part::SenderReport(ntp, reporter) => {
                        let is = |k: &StreamKey| k.ssrc == reporter && k.src == sender;
                        let si = c.streams.iter().find(|si| readable(si, &is)).copied();
                        if let Some(s) = si.and_then(|si| self.streams.get_mut(si)) {
                            s.rtcp.sender_report(ntp, now);
                        }
                    }
                    Part::Block(block) => {
                        let is = |k: &StreamKey| k.ssrc == block.ssrc && k.dst == sender;
                        let si = c.streams.iter().find(|si| readable(si, &is)).copied();
                        if let Some(s) = si.and_then(|si| self.streams.get_mut(si)) {
                            let figures = s.rtcp.update(&block, s.last_clock, now);
                            media_events::rtcp_event(&self.events, now, c, s, &figures);
                        }
                    }
                    Part::Xr(m) => {
                        let is = |k: &StreamKey| k.ssrc == m.ssrc && k.dst == sender;
                        let si = c.streams.iter().find(|si| readable(si, &is)).copied();
                        if let Some(s) = si.and_then(|si| self.streams.get_mut(si)) {
                            // Boxed: allocated once, for the few streams with XR.
                            let xr = s.rtcp.xr.get_or_insert_with(Box::default);
                            xr.0 = xr.0.saturating_add(1);
                            xr.1 = m;
                        }
                    }
                }
            }
        }
    }
}

/// What an RTCP report says that applies to one stream.
enum Part {
    /// An SR's NTP time and its sender (SSRC): its sender's stream.
    SenderReport(u64, u32),
    /// A report block: the stream its reporter receives.
    Block(calliper_wire::rtcp::ReportBlock),
    /// XR VoIP metrics: the stream its reporter receives.
    Xr(calliper_wire::rtcp::VoipMetrics),
}

impl RtcpView {
    /// Takes one report block; returns its figures for the event.
    fn update(
        &mut self,
        b: &calliper_wire::rtcp::ReportBlock,
        clock: ClockRate,
        now: i64,
    ) -> media_events::ReportBlockFigures {
        self.reports += 1;
        // RFC 3550 §6.4.1's round trip, with the probe's clock on both
        // ends: when the SR was seen to when this report was, less the
        // receiver's hold time. Only the SR the probe saw counts (LSR 0:
        // none received).
        if b.lsr != 0 && b.lsr == self.sr_ntp_middle {
            let rtt_ns = now
                .saturating_sub(self.sr_seen_ns)
                .saturating_sub((i64::from(b.dlsr) * 1_000_000_000) >> 16);
            // A negative or absurd round trip (reordered capture, a stale
            // SR) is not a measurement.
            if (0..=RTT_MAX_NS).contains(&rtt_ns) {
                // A running mean: bounded by the values it takes (past
                // 65 535 reports it moves by 1/65 535 of each).
                self.rtt_count = self.rtt_count.saturating_add(1);
                self.rtt_mean_ms +=
                    (rtt_ns as f32 / 1e6 - self.rtt_mean_ms) / f32::from(self.rtt_count);
            }
        }
        self.max_fraction_lost = self.max_fraction_lost.max(b.fraction_lost);
        self.cumulative_lost = b.cumulative_lost;
        let jitter_ms = match clock {
            ClockRate::Hz(hz) => Some(b.jitter as f64 * 1000.0 / hz.max(1) as f64),
            _ => None,
        };
        if let Some(ms) = jitter_ms {
            self.max_jitter_ms = self.max_jitter_ms.max(ms as f32);
        }
        media_events::ReportBlockFigures {
            fraction_lost: b.fraction_lost,
            cumulative_lost: b.cumulative_lost as i64,
            jitter_ms,
        }
    }
}

/// Report blocks taken from one RTCP datagram (a receiver report holds at
/// most 31; a compound packet a few reports): beyond it they are counted
/// as an anomaly, not applied.
const MAX_RTCP_BLOCKS: usize = 64;

/// The stream's SDP says SRTP.
fn encrypted(c: &Call, s: &Stream) -> bool {
    s.desc.and_then(|d| c.media.get(d as usize)).is_some_and(|d| d.encrypted)
}

/// Longest round trip taken as a measurement (G.114's upper limit on
/// one-way delay is 400 ms; ten times that round trip is surely wrong).
const RTT_MAX_NS: i64 = 4_000_000_000;

impl RtcpView {
    /// The stream's sender sent an SR with this NTP time, seen at `now`.
    fn sender_report(&mut self, ntp: u64, now: i64) {
        self.sr_ntp_middle = (ntp >> 16) as u32;
        self.sr_seen_ns = now;
    }

    /// Mean measured round trip to the receiver, ms.
    pub(crate) fn rtt_ms(&self) -> Option<f64> {
        (self.rtt_count > 0).then_some(f64::from(self.rtt_mean_ms))
    }
}

/// A stream as its receiver reports it in RTCP.
#[derive(Debug, Clone, Default)]
pub(crate) struct RtcpView {
    /// Middle 32 bits of the NTP time of the sender's last SR (0: none,
    /// as LSR 0 means none), and when the probe saw it.
    sr_ntp_middle: u32,
    sr_seen_ns: i64,
    rtt_mean_ms: f32,
    rtt_count: u16,
    pub(crate) reports: u32,
    pub(crate) max_fraction_lost: u8,
    /// RTCP's 24-bit signed count.
    pub(crate) cumulative_lost: i32,
    pub(crate) max_jitter_ms: f32,
    /// XR VoIP metrics blocks received, and the latest.
    pub(crate) xr: Option<Box<(u32, calliper_wire::rtcp::VoipMetrics)>>,
}
