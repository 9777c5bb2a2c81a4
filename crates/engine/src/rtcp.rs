//! RTCP: receiver reports applied to the streams they describe.

use super::*;

impl Engine {
    /// An RTCP datagram: counted, and applied to its call (by either address).
    pub(crate) fn rtcp_datagram(
        &mut self,
        now: i64,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        dport: u16,
        payload: &[u8],
    ) {
        self.counters.rtcp += 1;
        let entry = self
            .media
            .get(&(dst, dport))
            .or_else(|| self.media.get(&(src, sport)))
            .map(|e| e.call);
        if let Some(call) = entry {
            self.rtcp_in_call(now, call, src, payload);
        }
    }

    /// Applies the report blocks of an RTCP packet from `sender` to the
    /// call's streams they describe: the receivers' own view of loss and
    /// jitter. A block describes one stream: the one with its SSRC that
    /// `sender` receives (a proxied call's legs share SSRCs; the choice
    /// depends on nothing a shard lacks). At most [`MAX_RTCP_BLOCKS`] blocks
    /// per datagram count.
    pub(crate) fn rtcp_in_call(&mut self, now: i64, call: Idx, sender: IpAddr, payload: &[u8]) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        c.rtcp_packets = c.rtcp_packets.saturating_add(1);
        let mut blocks = 0;
        for report in calliper_wire::rtcp::reports(payload) {
            let Ok(report) = report else {
                self.counters.anomaly("rtcp_malformed");
                return;
            };
            for block in report.blocks() {
                blocks += 1;
                if blocks > MAX_RTCP_BLOCKS {
                    // Every shard reads the same datagram: counted alike.
                    self.counters.anomaly("rtcp_too_many_blocks");
                    return;
                }
                let streams = &self.streams;
                let Some(si) = c.streams.iter().copied().find(|&si| {
                    streams
                        .get(si)
                        .is_some_and(|s| s.key.ssrc == block.ssrc && s.key.dst == sender)
                }) else {
                    continue;
                };
                if let Some(s) = self.streams.get_mut(si) {
                    let figures = s.rtcp.update(&block, s.last_clock);
                    media_events::rtcp_event(&self.events, now, c, s, &figures);
                }
            }
        }
    }
}

impl RtcpView {
    /// Takes one report block; returns its figures for the event.
    fn update(
        &mut self,
        b: &calliper_wire::rtcp::ReportBlock,
        clock: ClockRate,
    ) -> media_events::ReportBlockFigures {
        self.reports += 1;
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

/// A stream as its receiver reports it in RTCP.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RtcpView {
    pub(crate) reports: u32,
    pub(crate) max_fraction_lost: u8,
    /// RTCP's 24-bit signed count.
    pub(crate) cumulative_lost: i32,
    pub(crate) max_jitter_ms: f32,
}
