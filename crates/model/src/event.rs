//! Events: what the engine sees, as it sees it, for trackers. An event
//! borrows the engine's data for the length of one [`Tracker::event`] call;
//! a tracker copies what it keeps. There is no event per RTP packet.

use crate::{CallRecord, CallState, Side, StreamDirection, StreamRecord};
use calliper_rtp::interval::IntervalFigures;
use serde::Serialize;
use std::net::IpAddr;

/// How a SIP message was carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SipTransport {
    /// One message per datagram.
    Udp,
    /// Framed from a TCP stream.
    Tcp,
    /// An SCTP DATA message.
    Sctp,
    /// A WebSocket message (RFC 7118).
    WebSocket,
}

/// A SIP message seen.
#[derive(Debug, Clone, Copy)]
pub struct SipSeen<'a> {
    /// Capture time, ns since the epoch.
    pub ts_ns: i64,
    /// Sender.
    pub src: (IpAddr, u16),
    /// Receiver.
    pub dst: (IpAddr, u16),
    /// How it was carried.
    pub transport: SipTransport,
    /// Call-ID ("" when missing).
    pub call_id: &'a str,
    /// Method of a request.
    pub method: Option<&'a str>,
    /// Status code of a response.
    pub status: Option<u16>,
    /// CSeq method (what a response answers).
    pub cseq_method: Option<&'a str>,
    /// The call it belongs to ([`CallRecord::serial`]), if any.
    pub call: Option<u64>,
    /// The message as captured, start line to end of body.
    pub bytes: &'a [u8],
    /// It arrived inside HEP (a capture agent's feed), not captured itself.
    pub via_hep: bool,
}

/// A step in a call's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallPhase {
    /// The INVITE was sent.
    Started,
    /// The first provisional response (100–179).
    Trying,
    /// 180 or 183 without a session description.
    Ringing,
    /// 180 or 183 with a session description: media before the answer.
    EarlyMedia,
    /// 2xx to the INVITE.
    Answered,
    /// A re-INVITE or UPDATE offered media send-only or inactive (or to
    /// 0.0.0.0): `by` put the call on hold.
    Held,
    /// A held call offered two-way media again.
    Resumed,
    /// A REFER was accepted (2xx): `by` transferred the call.
    Transferred,
    /// The call's record is written (see `state`, `by`, `reason`).
    Ended,
}

/// A call changed phase.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CallChange<'a> {
    /// When, ns since the epoch.
    pub ts_ns: i64,
    /// The engine's clock when it was sent (at or after `ts_ns`, which an
    /// out-of-order packet can put earlier): what places it among the
    /// records ([`Event::RecordsBefore`]).
    #[serde(skip)]
    pub clock_ns: i64,
    /// The call ([`CallRecord::serial`]).
    pub call: u64,
    /// Its Call-ID.
    pub call_id: &'a str,
    /// The new phase.
    pub phase: CallPhase,
    /// The response that caused it, if one did.
    pub status: Option<u16>,
    /// How the call ended ([`CallPhase::Ended`] only; None when the call
    /// was discarded without a record by the unanswered-INVITE cap).
    pub state: Option<CallState>,
    /// Who ended it (BYE or CANCEL), when known.
    pub by: Option<Side>,
    /// Reason header of the BYE or CANCEL, or the failure's reason phrase.
    pub reason: Option<&'a str>,
    /// The caller's and callee's signalling addresses (trackers key trunks
    /// by them; the event log leaves them out).
    #[serde(skip)]
    pub parties: (IpAddr, IpAddr),
}

/// What a registration transaction came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationOutcome {
    /// 2xx with a non-zero expiry: the contact is bound.
    Registered,
    /// 2xx to a request with expiry 0: the contact is removed.
    Unregistered,
    /// 401 or 407 to a request without credentials: the normal first step.
    Challenged,
    /// 401/407 to a request that carried credentials, or 403: refused.
    AuthFailed,
    /// Any other final failure.
    Failed,
}

/// A REGISTER and its final response (request and response matched by
/// Call-ID and CSeq).
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    /// The response's time, ns since the epoch.
    pub ts_ns: i64,
    /// The engine's clock when it was sent (as [`CallChange::clock_ns`]).
    pub clock_ns: i64,
    /// The request's time.
    pub request_ns: i64,
    /// Address of record: the To URI.
    pub aor: &'a str,
    /// The Contact of the response, else of the request.
    pub contact: Option<&'a str>,
    /// Granted expiry, s: the response's Contact `expires` or Expires
    /// header, else the request's.
    pub expires: Option<u32>,
    /// Final status.
    pub status: u16,
    /// What it came to.
    pub outcome: RegistrationOutcome,
    /// The request's User-Agent.
    pub user_agent: Option<&'a str>,
    /// Call-ID of the transaction.
    pub call_id: &'a str,
    /// CSeq number of the transaction.
    pub cseq: u32,
    /// The registering client (the request's sender).
    pub client: (IpAddr, u16),
    /// The registrar (the request's receiver).
    pub registrar: (IpAddr, u16),
}

/// A stream's addresses and source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StreamId {
    /// Sender.
    pub src: IpAddr,
    /// Sender's port.
    pub src_port: u16,
    /// Receiver.
    pub dst: IpAddr,
    /// Receiver's port.
    pub dst_port: u16,
    /// RTP synchronisation source.
    pub ssrc: u32,
}

/// A call's RTP stream started (its first packet).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StreamStarted<'a> {
    /// First packet, ns since the epoch.
    pub ts_ns: i64,
    /// The call ([`CallRecord::serial`]).
    pub call: u64,
    /// The stream.
    #[serde(flatten)]
    pub stream: StreamId,
    /// Payload type of the first packet.
    pub payload_type: u8,
    /// Its codec, as the call's SDP or the static table names it.
    pub codec: &'a str,
    /// Direction in the call.
    pub direction: StreamDirection,
}

/// One reporting interval of a stream (see `calliper_rtp::interval`): cut
/// when the first packet of a later interval arrives, and at the stream's
/// end (`last`). Intervals without packets are not reported.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StreamInterval<'a> {
    /// The call, or None for a stream without signalling.
    pub call: Option<u64>,
    /// The stream.
    #[serde(flatten)]
    pub stream: StreamId,
    /// Codec of the stream's first packet.
    pub codec: &'a str,
    /// The interval's figures.
    #[serde(flatten)]
    pub figures: IntervalFigures,
    /// E-model R of the interval (its loss and end jitter); None when the
    /// stream is not scored ([`calliper_rtp::emodel::Unscored`]).
    pub r_factor: Option<f64>,
    /// Estimated MOS of the interval, on `mos_scale`.
    pub mos: Option<f64>,
    /// The scale of `r_factor` and `mos`.
    pub mos_scale: Option<calliper_rtp::emodel::Scale>,
    /// The stream ended: this is its final, partial interval.
    pub last: bool,
    /// When the report was made: the time of the packet that opened a
    /// later interval, or of the stream's end.
    pub reported_ns: i64,
}

/// A stream ended (its call ended, or it fell silent): its final figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StreamEnded<'a> {
    /// The call, or None for a stream without signalling.
    pub call: Option<u64>,
    /// The stream's record as it will be written.
    #[serde(flatten)]
    pub record: &'a StreamRecord,
}

/// One RTCP report block about a stream of a call: the receiver's view.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RtcpBlock {
    /// When the report was seen, ns since the epoch.
    pub ts_ns: i64,
    /// The call.
    pub call: u64,
    /// The stream reported on.
    #[serde(flatten)]
    pub stream: StreamId,
    /// Fraction lost since the previous report, percent.
    pub fraction_lost_percent: f64,
    /// Cumulative packets lost (may be negative with duplicates).
    pub cumulative_lost: i64,
    /// Interarrival jitter, ms (None when the stream's clock is unknown).
    pub jitter_ms: Option<f64>,
}

/// An RTCP datagram on a call's media, as captured, for those that pass
/// it on (HEP type 5); the report blocks are [`RtcpBlock`]s.
#[derive(Debug, Clone, Copy)]
pub struct RtcpPacket<'a> {
    /// When it was captured, ns since the epoch.
    pub ts_ns: i64,
    /// The call.
    pub call: u64,
    /// Its Call-ID.
    pub call_id: &'a str,
    /// Sender's address and port.
    pub src: (IpAddr, u16),
    /// Receiver's address and port.
    pub dst: (IpAddr, u16),
    /// The RTCP datagram (compound packets included).
    pub bytes: &'a [u8],
}

/// A DTMF digit (RFC 4733 telephone-event), delivered at its end packet.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DtmfDigit {
    /// The digit's first packet, ns since the epoch.
    pub ts_ns: i64,
    /// The call.
    pub call: u64,
    /// The stream that carried it.
    #[serde(flatten)]
    pub stream: StreamId,
    /// 0-9, *, #, A-D, F (flash); None for tones and other events.
    pub digit: Option<char>,
    /// The event code (RFC 4733, RFC 4734).
    pub code: u8,
    /// The event's name (`5`, `flash`, `ANS`, `CNG`, `other`).
    pub name: &'static str,
    /// Duration the sender signalled, ms.
    pub duration_ms: f64,
    /// Volume, dBm0 below zero.
    pub volume: u8,
}

/// Anomalies counted (malformed or impossible input), by kind: delivered
/// after the group of packets that caused them (at most 64 packets).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Anomaly {
    /// Time of the group's last packet, ns since the epoch.
    pub ts_ns: i64,
    /// The kind, as the summary's `anomalies` counts it.
    pub kind: &'static str,
    /// How many in the group.
    pub count: u64,
}

/// Something the engine saw.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A SIP message.
    Sip(&'a SipSeen<'a>),
    /// A call changed phase.
    Call(&'a CallChange<'a>),
    /// A registration transaction completed.
    Registration(&'a Registration<'a>),
    /// A call's stream started.
    StreamStarted(&'a StreamStarted<'a>),
    /// A stream's reporting interval.
    Interval(&'a StreamInterval<'a>),
    /// A stream ended.
    StreamEnded(&'a StreamEnded<'a>),
    /// An RTCP report block on a call's stream.
    Rtcp(&'a RtcpBlock),
    /// An RTCP datagram on a call's media, as captured (delivered with the
    /// signalling events: once per datagram however many threads).
    RtcpPacket(&'a RtcpPacket<'a>),
    /// A DTMF digit ended.
    Dtmf(&'a DtmfDigit),
    /// Anomalies counted.
    Anomaly(&'a Anomaly),
    /// A call's record, with its streams, is final.
    CallRecord(&'a CallRecord),
    /// A stream without signalling ended.
    OrphanStream(&'a StreamRecord),
    /// The traffic of one reporting interval (the time series).
    Traffic(&'a TrafficInterval<'a>),
    /// Every call record held until before this engine time (its
    /// `held_until_ns`) has been delivered: a tracker ordering live events
    /// among records may judge those older than it.
    RecordsBefore(i64),
}

/// Packets and bytes of one kind of traffic in an interval: network
/// (`ipv4`, `ipv6`, `other`), transport (`udp`, `tcp`, `sctp`, `icmp`,
/// `other`) and application by port and payload (`sip`, `rtp`, `rtcp`,
/// `dns`, `http`, `other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TrafficClass {
    /// Network protocol.
    pub network: &'static str,
    /// Transport protocol.
    pub transport: &'static str,
    /// Application protocol.
    pub application: &'static str,
    /// Packets captured.
    pub packets: u64,
    /// Their captured bytes.
    pub bytes: u64,
}

/// What one reporting interval held, probe-wide: one row of the time
/// series. Intervals align to multiples of their length; quiet intervals
/// between two with packets are reported empty (up to a day's worth).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TrafficInterval<'a> {
    /// Start, ns since the epoch.
    pub start_ns: i64,
    /// End (exclusive), ns.
    pub end_ns: i64,
    /// Packets captured in it (duplicates included).
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Calls open at its end.
    pub calls_open: u64,
    /// Calls that began in it.
    pub calls_started: u64,
    /// Calls whose record was written in it.
    pub calls_ended: u64,
    /// Packets the capture dropped in it (live capture; read about once a second).
    pub capture_dropped: u64,
    /// The packets by protocol, kinds seen only.
    pub protocols: &'a [TrafficClass],
    /// The sources that sent the most bytes, most first (at most 10).
    pub top_talkers: &'a [Talker],
    /// Packets from sources the talker table had no room for (it follows
    /// 256 sources per interval): the top list is exact while this is 0.
    pub talkers_untracked_packets: u64,
    /// When the row was delivered (capture time, a batch end an interval or
    /// more after `end_ns`): stream reports made before it belong to it.
    pub released_ns: i64,
}

/// One source of traffic in an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Talker {
    /// Source address (innermost IP header).
    pub address: std::net::IpAddr,
    /// Packets it sent.
    pub packets: u64,
    /// Their captured bytes.
    pub bytes: u64,
}

/// Receives the engine's events on the packet thread: keep it cheap, and
/// bound what it keeps (count what it drops). A sharded run delivers each
/// event once: signalling from one shard, media from the shard that owns it.
pub trait Tracker: Send {
    /// One event.
    fn event(&mut self, event: &Event<'_>);
}
