//! The probe's time series: per reporting interval (aligned like stream
//! intervals), packets and bytes by network, transport and application,
//! calls open, started and ended, and capture drops — counted per packet
//! in a fixed array (no allocation, one compare for the boundary) and
//! delivered as [`Event::Traffic`] by the engine that delivers signalling.

use super::*;
use calliper_record::event::{TrafficClass, TrafficInterval};
use calliper_wire::DecodeError;

/// Most empty intervals reported for one gap in the traffic: a day's worth,
/// and never more than 8 640 rows (a day of 10 s intervals) — a capture
/// whose clock jumps by years is not worth a row (or a day file) each.
const MAX_EMPTY: i64 = 8640;
const DAY_NS: i64 = 86_400 * SEC;
const NETWORKS: [&str; 3] = ["ipv4", "ipv6", "other"];
const TRANSPORTS: [&str; 5] = ["udp", "tcp", "sctp", "icmp", "other"];
const APPLICATIONS: [&str; 6] = ["sip", "rtp", "rtcp", "dns", "http", "other"];

/// One interval's counts.
#[derive(Default)]
pub(crate) struct Traffic {
    /// Start of the interval being counted (None before the first packet).
    start_ns: Option<i64>,
    /// Its end: a packet before it needs no boundary arithmetic.
    end_ns: i64,
    counts: [[[(u64, u64); APPLICATIONS.len()]; TRANSPORTS.len()]; NETWORKS.len()],
    packets: u64,
    bytes: u64,
    /// `counters.calls` when the interval began.
    calls_before: u64,
    /// Call records written in the interval.
    pub(crate) calls_ended: u64,
    /// The capture-drop total when the interval began.
    dropped_before: u32,
}

/// Network, transport and application indexes of a decoded packet.
fn classify(decoded: &Result<Frame<'_>, DecodeError>, sip_ports: &[u16]) -> (usize, usize, usize) {
    let Ok(f) = decoded else {
        return (2, 4, 5);
    };
    let net = if f.src.is_ipv4() { 0 } else { 1 };
    let app_of_ports = |s: u16, d: u16| {
        if sip_ports.contains(&s) || sip_ports.contains(&d) {
            Some(0)
        } else if s == 53 || d == 53 {
            Some(3)
        } else if [80, 443, 8080, 8443].iter().any(|&p| p == s || p == d) {
            Some(4)
        } else {
            None
        }
    };
    match f.transport {
        Transport::Udp {
            sport,
            dport,
            payload,
        } => {
            let app = app_of_ports(sport, dport).unwrap_or_else(|| match payload {
                [b0, b1, ..] if b0 >> 6 == 2 && (200..=204).contains(b1) => 2,
                [b0, ..] if b0 >> 6 == 2 && payload.len() >= 12 => 1,
                _ => 5,
            });
            (net, 0, app)
        }
        Transport::Tcp { sport, dport, .. } => (net, 1, app_of_ports(sport, dport).unwrap_or(5)),
        Transport::Fragment { frag, .. } => (net, transport_of(frag.protocol), 5),
        Transport::Other { protocol, .. } => (net, transport_of(protocol), 5),
    }
}

fn transport_of(protocol: u8) -> usize {
    match protocol {
        17 => 0,
        6 => 1,
        132 => 2,
        1 | 58 => 3,
        _ => 4,
    }
}

impl Engine {
    /// Counts one captured packet (before duplicates are removed: this is
    /// what crossed the wire) and ends the interval it leaves behind.
    #[inline]
    pub(crate) fn count_traffic(
        &mut self,
        ts_ns: i64,
        len: usize,
        decoded: &Result<Frame<'_>, DecodeError>,
    ) {
        if !self.signalling_events() {
            return;
        }
        if ts_ns >= self.traffic.end_ns || self.traffic.start_ns.is_none() {
            self.traffic_boundary(ts_ns);
        }
        let (n, t, a) = classify(decoded, &self.cfg.sip_ports);
        let tr = &mut self.traffic;
        let c = &mut tr.counts[n][t][a];
        c.0 += 1;
        c.1 += len as u64;
        tr.packets += 1;
        tr.bytes += len as u64;
    }

    /// Delivers the interval before `now_ns` if `now_ns` has left it.
    pub(crate) fn traffic_boundary(&mut self, now_ns: i64) {
        if !self.signalling_events() {
            return;
        }
        let every = self.cfg.interval_ns.max(1);
        let start = now_ns.div_euclid(every).saturating_mul(every);
        match self.traffic.start_ns {
            None => self.traffic_restart(start),
            Some(s) if start > s => {
                self.traffic_deliver(s, s.saturating_add(every));
                // Quiet intervals are reported empty (a live probe's
                // heartbeat), at most MAX_EMPTY of them for one gap.
                let mut next = s.saturating_add(every);
                for _ in 0..MAX_EMPTY.min(DAY_NS / every) {
                    if next >= start {
                        break;
                    }
                    self.traffic_restart(next);
                    self.traffic_deliver(next, next.saturating_add(every));
                    next = next.saturating_add(every);
                }
                self.traffic_restart(start);
            }
            Some(_) => {}
        }
    }

    /// Delivers the interval being counted (end of input).
    pub(crate) fn traffic_finish(&mut self) {
        if let (true, Some(s)) = (self.signalling_events(), self.traffic.start_ns) {
            self.traffic_deliver(s, s.saturating_add(self.cfg.interval_ns.max(1)));
            self.traffic.start_ns = None;
        }
    }

    fn traffic_restart(&mut self, start: i64) {
        let counts = [[[(0, 0); APPLICATIONS.len()]; TRANSPORTS.len()]; NETWORKS.len()];
        self.traffic = Traffic {
            start_ns: Some(start),
            end_ns: start.saturating_add(self.cfg.interval_ns.max(1)),
            counts,
            calls_before: self.counters.calls,
            dropped_before: self.capture_dropped,
            ..Traffic::default()
        };
    }

    fn traffic_deliver(&mut self, start_ns: i64, end_ns: i64) {
        let tr = &self.traffic;
        let mut protocols = [TrafficClass {
            network: "",
            transport: "",
            application: "",
            packets: 0,
            bytes: 0,
        }; NETWORKS.len() * TRANSPORTS.len() * APPLICATIONS.len()];
        let mut n = 0;
        for (i, net) in tr.counts.iter().enumerate() {
            for (j, tp) in net.iter().enumerate() {
                for (k, &(packets, bytes)) in tp.iter().enumerate() {
                    if packets > 0 {
                        protocols[n] = TrafficClass {
                            network: NETWORKS[i],
                            transport: TRANSPORTS[j],
                            application: APPLICATIONS[k],
                            packets,
                            bytes,
                        };
                        n += 1;
                    }
                }
            }
        }
        let row = TrafficInterval {
            start_ns,
            end_ns,
            packets: tr.packets,
            bytes: tr.bytes,
            calls_open: self.calls.len() as u64,
            calls_started: self.counters.calls - tr.calls_before,
            calls_ended: tr.calls_ended,
            capture_dropped: self.capture_dropped.wrapping_sub(tr.dropped_before) as u64,
            protocols: &protocols[..n],
        };
        self.events.deliver(&Event::Traffic(&row));
    }
}
