//! The probe's time series: per reporting interval (aligned like stream
//! intervals), packets and bytes by network, transport and application,
//! calls open, started and ended, and capture drops — counted per packet
//! in a fixed array (no allocation, one compare for the boundary) and
//! delivered as [`Event::Traffic`] by the engine that delivers signalling.

use super::*;
use crate::talkers::Talkers;
use calliper_model::event::{Talker, TrafficClass, TrafficInterval};
use calliper_wire::DecodeError;

/// Quiet intervals (no packets, no call ended, no drops) reported one by
/// one in a run of them (a live probe's heartbeat); the rest of the run is
/// one row spanning it, delivered when traffic resumes or the input ends.
/// So a capture yields at most this many rows, plus two, per packet,
/// whatever its clock does, and any thread count yields the same rows.
pub(crate) const MAX_QUIET_ROWS: u32 = 30;

const NETWORKS: [&str; 3] = ["ipv4", "ipv6", "other"];
const TRANSPORTS: [&str; 5] = ["udp", "tcp", "sctp", "icmp", "other"];
const APPLICATIONS: [&str; 6] = ["sip", "rtp", "rtcp", "dns", "http", "other"];

/// One interval's counts.
pub(crate) struct Traffic {
    /// Start of the interval being counted (None before the first packet).
    start_ns: Option<i64>,
    /// Its end: a packet before it needs no boundary arithmetic.
    end_ns: i64,
    /// Packets and bytes by class ([`class_index`]).
    counts: [(u64, u64); CLASSES],
    /// `counters.calls` when the interval began.
    calls_before: u64,
    /// Call records written in the interval.
    pub(crate) calls_ended: u64,
    /// The capture-drop total when the interval began.
    dropped_before: u32,
    /// The interval's sources.
    talkers: Talkers,
    /// The run of quiet intervals this one may continue (kept across intervals).
    quiet: QuietRun,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            start_ns: None,
            end_ns: 0,
            counts: [(0, 0); CLASSES],
            calls_before: 0,
            calls_ended: 0,
            dropped_before: 0,
            talkers: Talkers::default(),
            quiet: QuietRun::default(),
        }
    }
}

/// Quiet intervals in a row: how many were reported one by one, and where
/// the merged rest began.
#[derive(Default, Clone, Copy)]
struct QuietRun {
    rows: u32,
    merged_from: Option<i64>,
}

impl Traffic {
    #[inline(always)]
    fn add(&mut self, class: usize, len: usize) {
        let c = &mut self.counts[class];
        c.0 += 1;
        c.1 += len as u64;
    }

    /// Packets and bytes of every class: summed once an interval, not
    /// kept per packet.
    fn totals(&self) -> (u64, u64) {
        self.counts.iter().fold((0, 0), |(p, b), c| (p + c.0, b + c.1))
    }
}

/// Classes counted: every network, transport and application.
const CLASSES: usize = NETWORKS.len() * TRANSPORTS.len() * APPLICATIONS.len();
// A class travels as a byte in `Routing::Counted`.
const _: () = assert!(CLASSES <= 256);

/// Where a class is counted.
#[inline(always)]
fn class_index(network: usize, transport: usize, application: usize) -> usize {
    (network * TRANSPORTS.len() + transport) * APPLICATIONS.len() + application
}

/// The traffic class of a decoded packet ([`class_index`]).
#[inline(always)]
pub(crate) fn class_of(f: &Frame<'_>, sip: &SipClassifier) -> u8 {
    let (n, t, a) = classify(f, sip);
    class_index(n, t, a) as u8
}

/// Network, transport and application indexes of a decoded packet.
#[inline(always)]
fn classify(f: &Frame<'_>, sip: &SipClassifier) -> (usize, usize, usize) {
    let net = if f.src.is_ipv4() { 0 } else { 1 };
    match f.transport {
        Transport::Udp { sport, dport, payload } => {
            let app = app_of_ports(sip, sport, dport).unwrap_or_else(|| app_of_payload(payload));
            (net, 0, app)
        }
        Transport::Tcp { sport, dport, .. } => {
            (net, 1, app_of_ports(sip, sport, dport).unwrap_or(5))
        }
        Transport::Fragment { frag, .. } => (net, transport_of(frag.protocol), 5),
        Transport::Other { protocol, .. } => (net, transport_of(protocol), 5),
    }
}

/// The second bytes that class a version-2 payload as RTCP (SR to APP).
const RTCP_TYPES: std::ops::RangeInclusive<u8> = 200..=204;

/// The application of a UDP payload on no port named: RTCP, RTP or other.
#[inline(always)]
fn app_of_payload(payload: &[u8]) -> usize {
    match payload {
        [b0, b1, ..] if b0 >> 6 == 2 && RTCP_TYPES.contains(b1) => 2,
        [b0, ..] if b0 >> 6 == 2 && payload.len() >= 12 => 1,
        _ => 5,
    }
}

/// What a stream needs to count its packets' traffic without classifying
/// them again: its classes (its ports and addresses decide all but the
/// RTCP shape test) and its source's talker slot.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StreamTraffic {
    /// The class of its packets, and of those of RTCP's shape (RTP can
    /// look so: payload types 72-76 with the marker set).
    classes: [u8; 2],
    talker: crate::talkers::Remembered,
}

impl StreamTraffic {
    /// For the stream of `key`: what [`class_of`] says of its packets,
    /// which all passed [`Engine::rtp_key`]'s tests (version 2, 12 bytes).
    pub(crate) fn new(sip: &SipClassifier, key: &StreamKey) -> StreamTraffic {
        let net = if key.src.is_ipv4() { 0 } else { 1 };
        let class = |app| {
            let app = app_of_ports(sip, key.sport, key.dport).unwrap_or(app);
            class_index(net, 0, app) as u8
        };
        StreamTraffic { classes: [class(1), class(2)], talker: Default::default() }
    }
}

/// [`class_of`] of UDP over IPv4 the skim read ([`calliper_wire::skim_udp4`]).
#[inline]
pub(crate) fn class_of_udp4(sip: &SipClassifier, sport: u16, dport: u16, payload: &[u8]) -> u8 {
    let app = app_of_ports(sip, sport, dport).unwrap_or_else(|| app_of_payload(payload));
    class_index(0, 0, app) as u8
}

/// The application named by either port, if any.
#[inline(always)]
fn app_of_ports(sip: &SipClassifier, s: u16, d: u16) -> Option<usize> {
    if sip.port(s, d) {
        Some(0)
    } else if s.min(d) > 8443 {
        // Above every port named below (most media): one compare.
        None
    } else if s == 53 || d == 53 {
        Some(3)
    } else if [80, 443, 8080, 8443].iter().any(|&p| p == s || p == d) {
        Some(4)
    } else {
        None
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
    #[inline(always)]
    pub(crate) fn count_traffic(
        &mut self,
        ts_ns: i64,
        len: usize,
        decoded: &Result<Frame<'_>, DecodeError>,
    ) {
        if !self.signalling_events() {
            return;
        }
        match decoded {
            Ok(f) => {
                let class = class_of(f, &self.sip);
                self.count_class(ts_ns, len, class, f.src)
            }
            Err(_) => self.count_undecoded(ts_ns, len),
        }
    }

    /// [`Engine::count_traffic`] for a packet of stream `si` (its `payload`),
    /// counted by what the stream remembers: the same counts, cheaper.
    #[inline(always)]
    pub(crate) fn count_stream_traffic(&mut self, ts_ns: i64, len: usize, si: Idx, f: &Frame<'_>) {
        if !self.signalling_events() {
            return;
        }
        self.traffic_enter(ts_ns);
        let (Some(s), Some((_, _, payload))) = (self.streams.get_mut(si), f.udp()) else {
            return self.count_class(ts_ns, len, class_of(f, &self.sip), f.src);
        };
        let rtcp_shaped = payload.get(1).is_some_and(|b| RTCP_TYPES.contains(b));
        let class = s.traffic.classes[rtcp_shaped as usize];
        self.traffic.talkers.add_remembered(&mut s.traffic.talker, f.src, len as u64);
        self.traffic.add(class as usize, len);
    }

    /// Counts a packet another shard analyses, from what the reader learnt
    /// of it ([`crate::Routing::Counted`]): the same count as
    /// [`Engine::count_traffic`] on its decoded frame.
    #[inline]
    pub(crate) fn count_routed(&mut self, ts_ns: i64, len: usize, class: u8, src: IpAddr) {
        if self.signalling_events() {
            self.count_class(ts_ns, len, class, src);
        }
    }

    #[inline(always)]
    fn count_class(&mut self, ts_ns: i64, len: usize, class: u8, src: IpAddr) {
        self.traffic_enter(ts_ns);
        self.traffic.talkers.add(src, len as u64);
        self.traffic.add(class as usize, len);
    }

    fn count_undecoded(&mut self, ts_ns: i64, len: usize) {
        self.traffic_enter(ts_ns);
        self.traffic.add(class_index(2, 4, 5), len);
    }

    #[inline(always)]
    fn traffic_enter(&mut self, ts_ns: i64) {
        if ts_ns >= self.traffic.end_ns || self.traffic.start_ns.is_none() {
            self.traffic_boundary(ts_ns);
        }
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
                self.traffic_close(s, every);
                // The quiet intervals between, one by one while the run
                // is short, then merged (`MAX_QUIET_ROWS`).
                let mut next = s.saturating_add(every);
                while next < start {
                    if self.traffic.quiet.rows >= MAX_QUIET_ROWS {
                        self.traffic.quiet.merged_from.get_or_insert(next);
                        break;
                    }
                    self.traffic_restart(next);
                    self.traffic_close(next, every);
                    next = next.saturating_add(every);
                }
                self.traffic_restart(start);
            }
            Some(_) => {}
        }
    }

    /// Ends the interval starting at `s`: its row, unless it is quiet and
    /// its run is merged; a busy interval first ends the merged run.
    fn traffic_close(&mut self, s: i64, every: i64) {
        let tr = &mut self.traffic;
        let quiet =
            tr.totals().0 == 0 && tr.calls_ended == 0 && self.capture_dropped == tr.dropped_before;
        if quiet {
            if tr.quiet.merged_from.is_some() {
                return;
            }
            if tr.quiet.rows >= MAX_QUIET_ROWS {
                tr.quiet.merged_from = Some(s);
                return;
            }
            tr.quiet.rows += 1;
        } else {
            tr.quiet.rows = 0;
            if let Some(from) = tr.quiet.merged_from.take() {
                self.traffic_deliver_quiet(from, s);
            }
        }
        self.traffic_deliver(s, s.saturating_add(every));
    }

    /// Delivers every row, the interval being counted too (end of input).
    pub(crate) fn traffic_finish(&mut self) {
        if let (true, Some(s)) = (self.signalling_events(), self.traffic.start_ns) {
            let every = self.cfg.interval_ns.max(1);
            self.traffic_close(s, every);
            if let Some(from) = self.traffic.quiet.merged_from.take() {
                self.traffic_deliver_quiet(from, s.saturating_add(every));
            }
            self.traffic.start_ns = None;
        }
        self.traffic_release(true);
    }

    /// One row for the merged quiet intervals from `from` to `to`.
    fn traffic_deliver_quiet(&mut self, from: i64, to: i64) {
        self.traffic_rows.push_back(Row {
            start_ns: from,
            end_ns: to,
            packets: 0,
            bytes: 0,
            calls_open: self.calls.len() as u64,
            calls_started: 0,
            calls_ended: 0,
            capture_dropped: 0,
            protocols: Vec::new(),
            top_talkers: Vec::new(),
            talkers_untracked_packets: 0,
        });
    }

    fn traffic_restart(&mut self, start: i64) {
        let counts = [(0, 0); CLASSES];
        // The talker table is kept, emptied, and the quiet run goes on.
        let quiet = self.traffic.quiet;
        let mut talkers = std::mem::take(&mut self.traffic.talkers);
        talkers.clear();
        self.traffic = Traffic {
            talkers,
            quiet,
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
        let mut protocols =
            [TrafficClass { network: "", transport: "", application: "", packets: 0, bytes: 0 };
                CLASSES];
        let mut n = 0;
        for (i, network) in NETWORKS.iter().enumerate() {
            for (j, transport) in TRANSPORTS.iter().enumerate() {
                for (k, application) in APPLICATIONS.iter().enumerate() {
                    let (packets, bytes) = tr.counts[class_index(i, j, k)];
                    if packets > 0 {
                        protocols[n] =
                            TrafficClass { network, transport, application, packets, bytes };
                        n += 1;
                    }
                }
            }
        }
        let (top, talkers) = tr.talkers.top();
        let (packets, bytes) = tr.totals();
        let row = Row {
            start_ns,
            end_ns,
            packets,
            bytes,
            calls_open: self.calls.len() as u64,
            calls_started: self.counters.calls - tr.calls_before,
            calls_ended: tr.calls_ended,
            capture_dropped: self.capture_dropped.wrapping_sub(tr.dropped_before) as u64,
            protocols: protocols[..n].to_vec(),
            top_talkers: top[..talkers].to_vec(),
            talkers_untracked_packets: tr.talkers.untracked,
        };
        self.traffic_rows.push_back(row);
    }

    /// Whether [`Engine::traffic_release`] would deliver a row now.
    pub(crate) fn rows_due(&self) -> bool {
        let every = self.cfg.interval_ns.max(1);
        self.traffic_rows.front().is_some_and(|r| r.end_ns.saturating_add(every) <= self.now)
    }

    /// Delivers the rows whose interval ended an interval or more before
    /// now (`all`: every row, at the end of the input). Called at batch
    /// ends, when every shard has handled every packet before it: the
    /// streams' reports of an interval, cut at their next packets, have
    /// all been delivered by then, in one thread as in several.
    pub(crate) fn traffic_release(&mut self, all: bool) {
        let every = self.cfg.interval_ns.max(1);
        // At the end of the input every report has been made, the streams'
        // last ones (their calls ended at the end) at this very clock: the
        // rows are released after them, so they are not taken as late.
        let released_ns = if all { self.now.saturating_add(1) } else { self.now };
        while let Some(r) = self.traffic_rows.front() {
            if !all && r.end_ns.saturating_add(every) > self.now {
                return;
            }
            let Some(r) = self.traffic_rows.pop_front() else {
                return;
            };
            let row = TrafficInterval {
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                packets: r.packets,
                bytes: r.bytes,
                calls_open: r.calls_open,
                calls_started: r.calls_started,
                calls_ended: r.calls_ended,
                capture_dropped: r.capture_dropped,
                protocols: &r.protocols,
                top_talkers: &r.top_talkers,
                talkers_untracked_packets: r.talkers_untracked_packets,
                released_ns,
            };
            self.events.deliver(&Event::Traffic(&row));
        }
    }
}

/// A finished interval waiting for its release ([`Engine::traffic_release`]).
pub(crate) struct Row {
    start_ns: i64,
    end_ns: i64,
    packets: u64,
    bytes: u64,
    calls_open: u64,
    calls_started: u64,
    calls_ended: u64,
    capture_dropped: u64,
    protocols: Vec<TrafficClass>,
    top_talkers: Vec<Talker>,
    talkers_untracked_packets: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use calliper_wire::Transport;

    /// What a stream remembers of its class is what each of its packets
    /// would be classified as: by its ports when they name an application,
    /// else by the packet's shape, RTP with the marker on payload types
    /// 72-76 looking like RTCP.
    #[test]
    fn a_stream_classes_its_packets_as_class_of_would() {
        let sip = SipClassifier::new(&Config::default());
        let addresses: [(IpAddr, IpAddr); 2] = [
            ([10, 0, 0, 1].into(), [10, 0, 0, 2].into()),
            ("2001:db8::1".parse().unwrap(), "2001:db8::2".parse().unwrap()),
        ];
        for (src, dst) in addresses {
            for (sport, dport) in [(5060, 40000), (40000, 53), (8080, 9000), (40000, 40002)] {
                for b1 in [0u8, 8, 72, 0x80 | 72, 0x80 | 76, 0x80 | 77, 0xE0] {
                    let payload = [0x80, b1, 0, 1, 0, 0, 0, 160, 0, 0, 0, 7, 0xAB, 0xCD];
                    let f = Frame {
                        src,
                        dst,
                        vlan: None,
                        tunnels: 0,
                        depth: 0,
                        ip_id: None,
                        transport: Transport::Udp { sport, dport, payload: &payload },
                    };
                    let key = StreamKey { src, dst, sport, dport, ssrc: 7 };
                    let st = StreamTraffic::new(&sip, &key);
                    let rtcp_shaped = RTCP_TYPES.contains(&b1);
                    assert_eq!(
                        st.classes[rtcp_shaped as usize],
                        class_of(&f, &sip),
                        "{src} {sport} -> {dport}, second byte {b1}"
                    );
                }
            }
        }
    }
}
