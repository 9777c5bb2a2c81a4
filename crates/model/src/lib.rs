//! What the probe reports: call records and stream records. A crate of its
//! own so the store, the console and other consumers depend on these types
//! and not on the engine that makes them.

pub mod agent;
pub mod alert;
pub mod event;
pub mod kpi;
pub mod stored;
pub mod text;

pub use calliper_rtp::emodel::{Scale as MosScale, Unscored};
pub use event::{Event, Tracker};

use calliper_rtp::emodel;
use serde::Serialize;
use std::net::IpAddr;

/// A party of a call, from the From or To header.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Party {
    /// Full URI.
    pub uri: String,
    /// User part of the URI.
    pub user: Option<String>,
    /// Display name.
    pub display_name: Option<String>,
}

/// Which side sent something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The party that sent the first INVITE.
    Caller,
    /// The other party.
    Callee,
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    /// Answered and ended by BYE.
    Completed,
    /// Answered, no BYE seen before timeout or end of input.
    Answered,
    /// Final failure response (3xx–6xx).
    Failed,
    /// Cancelled before answer.
    Cancelled,
    /// Never got a final response.
    NoFinalResponse,
    /// Removed early because the call table was full.
    Evicted,
}

impl CallState {
    /// The state in words, for reports (the console's WORDS say the same).
    pub fn words(self) -> &'static str {
        match self {
            CallState::Completed => "completed",
            CallState::Answered => "answered, no BYE seen",
            CallState::Failed => "failed",
            CallState::Cancelled => "cancelled",
            CallState::NoFinalResponse => "no final response",
            CallState::Evicted => "evicted (call table full)",
        }
    }
}

/// Direction of a stream relative to the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamDirection {
    /// Media from caller to callee.
    CallerToCallee,
    /// Media from callee to caller.
    CalleeToCaller,
    /// Not tied to a call side.
    Unknown,
}

/// Quality figures of one RTP stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamRecord {
    /// Source address.
    pub src: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dst_port: u16,
    /// Synchronisation source.
    pub ssrc: u32,
    /// Direction relative to the call.
    pub direction: StreamDirection,
    /// Payload type of the first packet.
    pub payload_type: u8,
    /// Codec name (from `a=rtpmap` or the static table).
    pub codec: String,
    /// First packet, ns since the epoch.
    pub first_ns: i64,
    /// Last packet, ns since the epoch.
    pub last_ns: i64,
    /// Packets seen (all, including duplicates).
    pub packets: u64,
    /// RTP bytes (header and payload).
    pub bytes: u64,
    /// Packets the sequence numbers account for (RFC 3550 A.3, per segment).
    pub expected: u64,
    /// Packets never seen (never negative; duplicates excluded).
    pub lost: u64,
    /// `lost` as a percentage of `expected`.
    pub loss_percent: f64,
    /// Duplicated packets.
    pub duplicates: u64,
    /// Packets that arrived after a later one.
    pub out_of_order: u64,
    /// Sequence restarts by the source: big jumps in the numbering whose
    /// timestamps or arrival disagreed with a loss (RFC 3550 A.1 then
    /// decides); the packets skipped are not lost.
    pub seq_resets: u64,
    /// Big jumps counted as loss (outages): the timestamps and the arrival
    /// gap agreed with the packets missing; those packets are in `lost`.
    pub seq_outages: u64,
    /// RFC 4733 telephone-event packets.
    pub event_packets: u64,
    /// Repeats of a telephone event's end packet under one sequence number
    /// (RFC 4733 sends the end three times): in `packets`, not in
    /// `expected`, and not duplicates.
    pub event_end_repeats: u64,
    /// Mean jitter, ms (Wireshark's definition).
    pub mean_jitter_ms: f64,
    /// Maximum jitter, ms.
    pub max_jitter_ms: f64,
    /// Mean jitter within restart segments, ms: Wireshark's arithmetic with
    /// each restart's timestamp jump left out (`calliper_rtp::segments`);
    /// absent for a stream that never restarted nor strayed (the figures
    /// are then `mean_jitter_ms` and `max_jitter_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_mean_jitter_ms: Option<f64>,
    /// Maximum jitter within restart segments, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_max_jitter_ms: Option<f64>,
    /// When the source restarted its numbering, ns since the epoch (the
    /// first 16; `seq_resets` counts them all).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restarts_ns: Vec<i64>,
    /// Minimum inter-arrival delta, ms.
    pub min_delta_ms: Option<f64>,
    /// Mean inter-arrival delta, ms.
    pub mean_delta_ms: f64,
    /// Maximum inter-arrival delta, ms.
    pub max_delta_ms: f64,
    /// Wireshark's expected count (its sequence-cycle arithmetic).
    pub wireshark_expected: i64,
    /// Wireshark's lost count (negative with duplicates or restarts).
    pub wireshark_lost: i64,
    /// G.107's BurstR of the loss (1 random, higher when losses come in
    /// runs), from the gaps in the numbering; it lowers the MOS.
    pub burst_ratio: f64,
    /// E-model rating factor after the adaptive jitter buffer (the
    /// `jitter_buffers` entry `adaptive`), on the scale `mos_scale` names;
    /// None with `unscored`.
    pub r_factor: Option<f64>,
    /// Estimated MOS from `r_factor`; None with `unscored`.
    pub mos: Option<f64>,
    /// Narrowband (G.107) or wideband (G.107.1): never compare across.
    pub mos_scale: Option<emodel::Scale>,
    /// Why there is no MOS (not voice, no codec value, too short).
    pub unscored: Option<emodel::Unscored>,
    /// Lowest MOS of the stream's 10-s intervals (of at least 50 expected
    /// packets), on `mos_scale`: the number to sort by.
    pub worst_interval_mos: Option<f64>,
    /// Speech per packet, ms (the timestamp step of consecutive packets).
    pub packet_ms: Option<f64>,
    /// Round trip from the probe to this stream's receiver and back, ms:
    /// from the sender's RTCP SR as the probe saw it and the receiver's
    /// report about it (DLSR taken off), so no endpoint's clock is
    /// trusted. Mean over the reports.
    pub rtt_ms: Option<f64>,
    /// One-way delay the MOS takes, ms (adaptive buffer).
    pub delay_ms: Option<f64>,
    /// What `delay_ms` adds up: `rtt/2`, when RTCP gave a round trip,
    /// then the jitter buffer, the packet time and the codec's look-ahead.
    pub delay_inputs: Option<&'static str>,
    /// What each simulated jitter buffer made of the stream.
    pub jitter_buffers: Vec<BufferScore>,
    /// SRTP by its SDP (a secure profile or `a=crypto`): headers are clear,
    /// so the figures and the MOS stand, but its RTCP is encrypted and not
    /// read, and its payload cannot be played.
    pub encrypted: bool,
    /// RFC 4733 telephone events (DTMF digits) in this direction.
    pub dtmf: Vec<calliper_rtp::dtmf::DtmfEvent>,
    /// RTCP report blocks about this stream from its receiver.
    pub rtcp_reports: u32,
    /// Largest fraction lost the receiver reported, percent.
    pub rtcp_max_fraction_lost: f64,
    /// Cumulative loss in the receiver's last report.
    pub rtcp_cumulative_lost: i64,
    /// Largest interarrival jitter the receiver reported, ms.
    pub rtcp_max_jitter_ms: f64,
    /// The receiver's own RTCP XR VoIP metrics about this stream, if it sent any.
    pub rtcp_xr: Option<XrVoip>,
}

/// A receiver's RTCP XR VoIP metrics (RFC 3611 §4.7) about a stream: the
/// latest block, as the endpoint measured it after its jitter buffer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct XrVoip {
    /// Blocks received.
    pub reports: u32,
    /// Packets lost in the network, percent.
    pub loss_percent: f64,
    /// Packets its jitter buffer discarded, percent.
    pub discard_percent: f64,
    /// Lost or discarded within bursts, percent.
    pub burst_density_percent: f64,
    /// Lost or discarded within gaps, percent.
    pub gap_density_percent: f64,
    /// Round trip between the endpoints, ms.
    pub round_trip_ms: u16,
    /// The endpoint's own delay, ms.
    pub end_system_delay_ms: u16,
    /// Its R factor (none when it sent 127, unavailable).
    pub r_factor: Option<u8>,
    /// Its listening-quality MOS.
    pub mos_lq: Option<f64>,
    /// Its conversational-quality MOS.
    pub mos_cq: Option<f64>,
    /// Nominal jitter-buffer delay, ms.
    pub jb_nominal_ms: u16,
    /// Maximum jitter-buffer delay, ms.
    pub jb_maximum_ms: u16,
}

/// One jitter-buffer model's view of a stream
/// ([`calliper_rtp::playout`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BufferScore {
    /// Which buffer.
    pub model: calliper_rtp::playout::Model,
    /// Packets that came too late for it.
    pub late: u64,
    /// Loss after the buffer (lost and late), percent of expected.
    pub loss_percent: f64,
    /// Mean delay the buffer added, ms.
    pub buffer_ms: f64,
    /// E-model R with this buffer; None with the stream's `unscored`.
    pub r_factor: Option<f64>,
    /// Estimated MOS with this buffer.
    pub mos: Option<f64>,
}

impl StreamRecord {
    /// Scores the stream under each jitter buffer in `buffers` (its
    /// outcomes), and takes the adaptive one's as the stream's MOS. Loss
    /// is after the buffer, with the burst ratio of the network's loss;
    /// delay per [`emodel::one_way_delay_ms`].
    pub fn estimate_quality(&mut self, buffers: &[calliper_rtp::playout::BufferOutcome]) {
        use calliper_rtp::playout::Model;
        self.delay_inputs = Some(if self.rtt_ms.is_some() {
            "rtt/2+buffer+packet+lookahead"
        } else {
            "buffer+packet+lookahead"
        });
        self.jitter_buffers.clear();
        let too_short = self.packets < emodel::MIN_SCORED_PACKETS;
        for b in buffers {
            let lost = self.lost + b.late;
            let loss_percent = if self.expected == 0 {
                0.0
            } else {
                (lost as f64 * 100.0 / self.expected as f64).min(100.0)
            };
            let delay = emodel::DelayInputs {
                rtt_ms: self.rtt_ms,
                buffer_ms: b.delay_ms,
                packet_ms: self.packet_ms,
            };
            let score = if too_short {
                emodel::codec_model(&self.codec).and(Err(emodel::Unscored::TooShort))
            } else {
                emodel::estimate(&self.codec, loss_percent, self.burst_ratio, &delay)
            };
            if b.model == Model::Adaptive {
                self.r_factor = score.ok().map(|s| s.r);
                self.mos = score.ok().map(|s| s.mos);
                self.mos_scale = score.ok().map(|s| s.scale);
                self.unscored = score.err();
                self.delay_ms = emodel::codec_model(&self.codec)
                    .ok()
                    .map(|m| emodel::one_way_delay_ms(&m, &delay));
            }
            self.jitter_buffers.push(BufferScore {
                model: b.model,
                late: b.late,
                loss_percent,
                buffer_ms: b.delay_ms,
                r_factor: score.ok().map(|s| s.r),
                mos: score.ok().map(|s| s.mos),
            });
        }
        if self.unscored.is_some() {
            self.worst_interval_mos = None;
        }
    }
}

/// One call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    /// The call's number in this run (1 for the first call started): tells
    /// apart calls that share a Call-ID and start time (a sharded run
    /// merges its shards' versions of a call by it).
    #[serde(skip)]
    pub serial: u64,
    /// SIP Call-ID.
    pub call_id: String,
    /// Caller (From of the first INVITE).
    pub from: Party,
    /// Callee (To of the first INVITE).
    pub to: Party,
    /// Caller's User-Agent.
    pub caller_user_agent: Option<String>,
    /// Callee's User-Agent or Server header.
    pub callee_user_agent: Option<String>,
    /// Caller's signalling address.
    pub caller_ip: IpAddr,
    /// Caller's signalling port.
    pub caller_port: u16,
    /// Callee's signalling address.
    pub callee_ip: IpAddr,
    /// Callee's signalling port.
    pub callee_port: u16,
    /// First INVITE, ns since the epoch.
    pub invite_ns: i64,
    /// First provisional response (100 Trying included), ns.
    pub first_provisional_ns: Option<i64>,
    /// First 180 or 183, ns.
    pub ringing_ns: Option<i64>,
    /// 2xx to the INVITE, ns.
    pub answer_ns: Option<i64>,
    /// BYE, CANCEL or final failure; else the last activity, ns.
    pub end_ns: i64,
    /// Answer to end, ms (0 when not answered).
    pub duration_ms: f64,
    /// RFC 6076 session request delay (SRD), ms: from the INVITE (after a
    /// 401/407 challenge, its retry) to the first response other than 100,
    /// provisional or final; none when no such response came.
    pub setup_delay_ms: Option<f64>,
    /// The SRD ended at a 4xx-6xx final response (RFC 6076's failed
    /// session setup SRD), not at a provisional or 2xx one.
    pub setup_delay_to_failure: bool,
    /// RFC 6076 session disconnect delay (SDD), ms: from the BYE that ended
    /// the call to its first final response; none when no answer was seen.
    pub disconnect_delay_ms: Option<f64>,
    /// Final response code to the INVITE.
    pub final_status: Option<u16>,
    /// Reason phrase of that response.
    pub final_reason: Option<String>,
    /// How the call ended.
    pub state: CallState,
    /// Who sent BYE or CANCEL.
    pub hangup_by: Option<Side>,
    /// Reason header of the BYE or CANCEL.
    pub hangup_reason: Option<String>,
    /// SIP messages seen.
    pub sip_messages: u32,
    /// INVITEs (initial, challenged retries and re-INVITEs).
    pub invites: u32,
    /// RTCP packets seen on the call's media ports.
    pub rtcp_packets: u64,
    /// Non-RTP media packets (T.38 over UDPTL) on the call's media ports.
    pub t38_packets: u64,
    /// Malformed SIP or SDP seen on this call.
    pub anomalies: u32,
    /// DTMF digits sent in the call, in order of arrival, both directions.
    pub dtmf_digits: String,
    /// Lowest MOS of the call's streams, on `mos_scale` ([`Self::summarise_quality`]).
    pub worst_mos: Option<f64>,
    /// Lowest interval MOS of the call's streams, on `mos_scale`.
    pub worst_interval_mos: Option<f64>,
    /// The scale of the call's worst figures: narrowband when any stream
    /// is scored on it, else wideband.
    pub mos_scale: Option<emodel::Scale>,
    /// Labels put on the call by rules (`label` action), in the order first applied.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// A rule selected the call for payload recording (`record` action).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub record_payload: bool,
    /// Packets the probe itself lost (capture ring full) while this call
    /// was open, read about once a second: when above 0, the call's loss
    /// figures may include packets the network delivered.
    pub capture_dropped: u64,
    /// The call was still open (no BYE, CANCEL or final failure yet) when
    /// the input ended or the probe stopped: the record is the call as it stood.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ongoing: bool,
    /// Until when the probe held the call open: when it expired idle, was
    /// evicted, or the input ended (at least `end_ns`). A call answered and
    /// never hung up lived this long, not just to its last message, so the
    /// alerts judge its media over this (`no_rtp`). Not stored.
    #[serde(skip)]
    pub held_until_ns: i64,
    /// Media streams.
    pub streams: Vec<StreamRecord>,
    /// What capture agents reported of the call's media over HEP (RTCP and
    /// quality reports), for media the probe may not see itself.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agent_reports: Vec<agent::AgentReport>,
}

impl CallRecord {
    /// The call's worst stream and interval MOS, from its streams' records.
    /// Scales are not mixed: narrowband streams count when there are any.
    pub fn summarise_quality(&mut self) {
        let scale = [emodel::Scale::Narrowband, emodel::Scale::Wideband]
            .into_iter()
            .find(|&scale| self.streams.iter().any(|s| s.mos_scale == Some(scale)));
        let on_scale =
            || self.streams.iter().filter(move |s| scale.is_some() && s.mos_scale == scale);
        let least = |it: &mut dyn Iterator<Item = f64>| it.reduce(f64::min);
        self.worst_mos = least(&mut on_scale().filter_map(|s| s.mos));
        self.worst_interval_mos = least(&mut on_scale().filter_map(|s| s.worst_interval_mos));
        self.mos_scale = scale;
    }
}

/// Output of the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A finished call with its streams.
    Call(Box<CallRecord>),
    /// An RTP stream without signalling.
    Stream(Box<StreamRecord>),
}
