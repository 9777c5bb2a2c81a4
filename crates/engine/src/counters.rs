//! Counters: one definition per counter, for every use.
//!
//! Each counters struct is declared through [`counters!`], which derives
//! what every consumer needs from the one field list: summing (shards of a
//! run, [`Sum`]), serialising (the JSON summary line and the database's
//! `runs` row) and, through serialisation, the terminal summary. A new
//! counter is a new field and nothing else.

use crate::defrag::DefragCounters;
use crate::sctp::SctpCounters;
use crate::tcp::TcpCounters;
use std::collections::BTreeMap;

/// Adds another value of the same counters into this one.
pub trait Sum {
    /// `self += other`, saturating.
    fn add(&mut self, other: &Self);
}

impl Sum for u64 {
    fn add(&mut self, other: &Self) {
        *self = self.saturating_add(*other);
    }
}

impl<K: Ord + Clone> Sum for BTreeMap<K, u64> {
    fn add(&mut self, other: &Self) {
        for (k, v) in other {
            match self.get_mut(k) {
                Some(n) => n.add(v),
                None => {
                    self.insert(k.clone(), *v);
                }
            }
        }
    }
}

/// Declares a counters struct and derives [`Sum`] and serialisation for it.
macro_rules! counters {
    ($(#[$meta:meta])* pub struct $name:ident {
        $($(#[$fmeta:meta])* pub $field:ident: $ty:ty,)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $crate::counters::Sum for $name {
            fn add(&mut self, other: &Self) {
                $($crate::counters::Sum::add(&mut self.$field, &other.$field);)*
            }
        }
    };
}

counters! {
    /// What the engine saw and what it refused, for the summary and metrics.
    pub struct Counters {
        /// Frames offered.
        pub packets: u64,
        /// Bytes of frames offered (captured length).
        pub bytes: u64,
        /// UDP datagrams.
        pub udp: u64,
        /// TCP segments.
        pub tcp: u64,
        /// IP packets of other protocols.
        pub other_ip: u64,
        /// Frames that are not IP (ARP, LLDP, ...).
        pub not_ip: u64,
        /// `not_ip` by what the frames carry (`arp`, `llc`, `pppoe_discovery`,
        /// `ppp_control`, `ppp_compressed`, `pptp_ack`, `other_ethertype`...).
        pub not_ip_by_type: BTreeMap<&'static str, u64>,
        /// IP fragments offered to reassembly.
        pub ip_fragments: u64,
        /// Packets dropped as capture duplicates (Linux `any`, SPAN of both sides).
        pub duplicates_removed: u64,
        /// Packets the duplicate filter remembered only by forgetting one still
        /// within its window (traffic too dense for the window: a copy may be missed).
        pub dedup_overflow: u64,
        /// IP defragmentation.
        pub defrag: DefragCounters,
        /// TCP reassembly of signalling.
        pub tcp_reassembly: TcpCounters,
        /// SCTP DATA chunks joined into messages.
        pub sctp: SctpCounters,
        /// SIP messages parsed.
        pub sip_messages: u64,
        /// SIP messages by method (those in [`calliper_sip::METHODS`], the
        /// rest as [`crate::OTHER_METHOD`]) or status code: at most 615 keys.
        pub sip_by_kind: BTreeMap<String, u64>,
        /// HEP3 datagrams read (`Config::hep_port`); malformed ones are
        /// anomalies (`hep_*`).
        pub hep: u64,
        /// HEP3 datagrams whose payload was not read: neither SIP nor an
        /// RTCP or quality report.
        pub hep_unread: u64,
        /// RTCP report blocks and quality reports from HEP kept in their
        /// call (`agent_reports`).
        pub hep_reports: u64,
        /// HEP RTCP and quality reports whose correlation id names no open
        /// call (before its INVITE, after its end, or never seen here).
        pub hep_reports_uncorrelated: u64,
        /// SIP messages whose Call-ID matches no call and that start none.
        pub sip_outside_calls: u64,
        /// RTP packets analysed in calls.
        pub rtp_in_calls: u64,
        /// RTP packets analysed in streams without signalling.
        pub rtp_orphan: u64,
        /// RTCP packets.
        pub rtcp: u64,
        /// UDP datagrams that were neither SIP nor RTP/RTCP we track.
        pub udp_untracked: u64,
        /// RTP packets sent to (or from) a call's SDP address by a source
        /// the SDP does not name, refused while another source held that
        /// address (`docs/hostile-input.md`, foreign media); also in
        /// `udp_untracked`.
        pub rtp_foreign: u64,
        /// Calls started.
        pub calls: u64,
        /// Calls evicted because the call table was full.
        pub calls_evicted: u64,
        /// Unanswered calls evicted because too many INVITEs had no response.
        pub unanswered_evicted: u64,
        /// Calls waiting for the retry of a challenged INVITE, dropped
        /// without a record to make room when the call table was full.
        pub challenged_evicted: u64,
        /// RTP streams started (in calls and orphan).
        pub streams: u64,
        /// Streams refused because the stream table was full.
        pub streams_refused: u64,
        /// SDP media refused because the media table was full.
        pub media_refused: u64,
        /// Heuristic RTP candidates never confirmed (noise that looked like RTP).
        pub candidates_rejected: u64,
        /// REGISTER transactions completed (final response seen).
        pub registrations: u64,
        /// REGISTERs given up without a final response (timeout or table full).
        pub registers_given_up: u64,
        /// Packets dropped by an `ignore` rule before any state was made.
        pub rule_ignored_packets: u64,
        /// Calls an `ignore` SIP rule matched: followed (so their media is
        /// not taken for unknown streams) but not reported.
        pub rule_ignored_calls: u64,
        /// Frames held for recording until their message was whole, given
        /// up to keep within the hold's caps or age: those messages are
        /// recorded in part (the recorder's `partial`).
        pub record_frames_dropped: u64,
        /// Calls whose message came in a frame that carried messages of more
        /// than 32 calls: that frame is not in their recordings.
        pub record_calls_missed: u64,
        /// Anomalies: malformed or impossible input, by kind.
        pub anomalies: BTreeMap<&'static str, u64>,
        /// Anomalies of every kind together: one compare per packet tells
        /// whether one was counted (its event is dated by that packet).
        #[serde(skip)]
        pub anomaly_total: u64,
    }
}

impl Counters {
    /// A frame that is not IP; compressed or encrypted PPP, and PPP with
    /// compressed headers (cRTP), are also anomalies, since the calls they
    /// may carry cannot be seen.
    pub(crate) fn not_ip(&mut self, kind: &'static str) {
        self.not_ip += 1;
        *self.not_ip_by_type.entry(kind).or_default() += 1;
        if matches!(kind, "ppp_compressed" | "ppp_header_compressed") {
            self.anomaly(kind);
        }
    }

    /// Counts one anomaly of this kind (kinds are names in the code, so the
    /// map's size is bounded by the code, not the input).
    pub(crate) fn anomaly(&mut self, kind: &'static str) {
        self.count_anomalies(kind, 1);
    }

    /// Counts `n` anomalies of this kind.
    pub(crate) fn count_anomalies(&mut self, kind: &'static str, n: u64) {
        *self.anomalies.entry(kind).or_default() += n;
        self.anomaly_total += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_adds_every_field_and_nested_map() {
        let mut a = Counters { packets: 3, ..Default::default() };
        a.defrag.fragments = 1;
        a.anomalies.insert("x", 1);
        let mut b = a.clone();
        b.sctp.partial_expired = 7;
        b.sip_by_kind.insert("INVITE".into(), 2);
        b.anomalies.insert("y", u64::MAX);
        a.add(&b);
        assert_eq!(a.packets, 6);
        assert_eq!(a.defrag.fragments, 2);
        assert_eq!(a.sctp.partial_expired, 7);
        assert_eq!(a.sip_by_kind["INVITE"], 2);
        assert_eq!((a.anomalies["x"], a.anomalies["y"]), (2, u64::MAX));
        a.add(&b);
        assert_eq!(a.anomalies["y"], u64::MAX, "saturates");
    }
}
