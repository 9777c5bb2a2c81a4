//! RTCP: receiver reports applied to the streams they describe.

use super::*;

impl Engine {
    /// An RTCP datagram: counted, and applied to its call (by either address).
    pub(crate) fn rtcp_datagram(
        &mut self,
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
            self.rtcp_in_call(call, payload);
        }
    }

    /// Applies the report blocks of an RTCP packet to the call's streams
    /// they describe (matched by SSRC): the receivers' own view of loss and jitter.
    pub(crate) fn rtcp_in_call(&mut self, call: Idx, payload: &[u8]) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        c.rtcp_packets += 1;
        for report in calliper_wire::rtcp::reports(payload) {
            let Ok(report) = report else {
                self.counters.anomaly("rtcp_malformed");
                return;
            };
            for block in report.blocks() {
                for &si in &c.streams {
                    if let Some(s) = self.streams.get_mut(si) {
                        if s.key.ssrc == block.ssrc {
                            s.rtcp.update(&block, s.last_clock);
                        }
                    }
                }
            }
        }
    }
}

impl RtcpView {
    fn update(&mut self, b: &calliper_wire::rtcp::ReportBlock, clock: ClockRate) {
        self.reports += 1;
        self.max_fraction_lost = self.max_fraction_lost.max(b.fraction_lost);
        self.cumulative_lost = b.cumulative_lost as i64;
        if let ClockRate::Hz(hz) = clock {
            let ms = b.jitter as f64 * 1000.0 / hz.max(1) as f64;
            self.max_jitter_ms = self.max_jitter_ms.max(ms);
        }
    }
}

/// A stream as its receiver reports it in RTCP.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RtcpView {
    pub(crate) reports: u32,
    pub(crate) max_fraction_lost: u8,
    pub(crate) cumulative_lost: i64,
    pub(crate) max_jitter_ms: f64,
}
