//! The probe: from decoded packets to call and stream records.
//!
//! [`Engine::packet`] takes one captured frame and its time. SIP messages
//! update a call table keyed by Call-ID; SDP fills a media table keyed by
//! (address, port) that points at the same call; RTP packets find their stream
//! by (source, destination, SSRC) and, the first time, their call through the
//! media table. Calls and orphan streams sit on activity-ordered lists
//! ([`lru`]) so expiry looks only at list heads. Time comes from the packets,
//! never from the clock, so a file and a live link run the same code and
//! results are deterministic.
//!
//! Every table has a cap; what a cap refuses or evicts is counted in
//! [`Counters`] and nothing is dropped silently.

#[macro_use]
mod counters;
mod agent_reports;
mod analyzer;
mod bound;
mod call_state;
mod call_text;
pub mod dedup;
pub mod defrag;
mod fasthash;
pub mod index;
pub mod lru;
pub mod parallel;
pub mod sctp;
pub mod shared;
pub mod tcp;
pub mod time_guard;
pub mod websocket;
pub mod workers;

pub mod callpcap;
mod config;
mod dialogs;
mod events;
mod expiry;
mod flow;
mod framing;
mod media;
mod media_events;
mod pipeline;
mod prefetch;
mod report;
mod route;
mod rtcp;
mod shard;
mod streams;
mod talkers;
mod traffic;
mod transactions;

// What the modules use of each other (each module does `use super::*`).
use call_text::{CallIds, CallText, Field};
use expiry::Ending;
use media::Rtpmap;
pub(crate) use report::dtmf_digits;
use report::{canonical_codec, resolve};
use rtcp::RtcpView;

pub use analyzer::{Analyzer, EMIT_EVERY, FINISH_GROUP, READ_BATCH};
use calliper_model::event::{CallPhase, SipTransport};
/// The record types live in their own crate, so consumers need not depend
/// on the engine; re-exported here for the engine's callers.
pub use calliper_model::*;
use calliper_rtp::dtmf::DtmfTracker;
use calliper_rtp::{ClockRate, Codec, StreamStats};
use calliper_rules::{Action as RuleAction, RuleTable};
use calliper_sip::sdp::{self, Direction};
use calliper_sip::{NameAddr, SipMessage, StartLine};
use calliper_wire::rtp::{looks_like_rtcp, RtpHeader};
use calliper_wire::{Frame, Transport};
pub use callpcap::{CallTag, PacketSink, RecordingMode, SinkFactory};
pub use config::*;
pub use counters::{Counters, Sum};
use dedup::Dedup;
use defrag::{DefragConfig, Defragmenter};
pub use events::TrackerHub;
use flow::flow;
pub use flow::Flow;
use hashbrown::HashMap;
use lru::{Idx, Links, Slab};
pub use route::{Routed, Router, Routing};
use sctp::Sctp;
use std::net::IpAddr;
use std::num::NonZeroI64;
use std::sync::Arc;
use tcp::{TcpConfig, TcpReassembler};

const SEC: i64 = 1_000_000_000;

/// Packets [`Engine::packets`] pipelines together (its prefetch pipeline
/// drains at the end of each group).
pub const LOOKAHEAD: usize = 64;
/// How far ahead of the packet being handled its index slot is requested.
const INDEX_AHEAD: usize = 16;
/// How far ahead its stream is requested (the slot must have arrived).
const STREAM_AHEAD: usize = 8;

/// A captured frame, as [`Engine::packets`] takes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawPacket<'a> {
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: i64,
    /// Link-layer type (`calliper_capture::linktype`).
    pub link_type: u16,
    /// The captured bytes.
    pub data: &'a [u8],
    /// What the reader of a sharded run decided for it.
    pub routing: Routing,
}

impl<'a> From<calliper_capture::Packet<'a>> for RawPacket<'a> {
    fn from(p: calliper_capture::Packet<'a>) -> Self {
        RawPacket {
            ts_ns: p.ts_ns,
            link_type: p.link_type,
            data: p.data,
            routing: Routing::Unknown,
        }
    }
}

/// The key in [`Counters::sip_by_kind`] of every method not in
/// [`calliper_sip::METHODS`].
pub const OTHER_METHOD: &str = "other-method";

/// How often media refreshes its call's activity.
const TOUCH_EVERY_NS: i64 = SEC;

/// One SDP media description of a call.
#[derive(Debug, Clone)]
struct MediaDesc {
    /// Who receives on this address (the SDP's sender).
    owner: Side,
    rtpmaps: Box<[Rtpmap]>,
    /// SRTP ([`calliper_sip::sdp::Media::encrypted`]).
    encrypted: bool,
}

/// Pushes without the doubling headroom: per-call lists are short and
/// written on the signalling path only, so memory matters more than the
/// occasional reallocation.
fn push_exact<T>(v: &mut Vec<T>, x: T) {
    v.reserve_exact(1);
    v.push(x);
}

/// A media address's call and SDP description: the table's entry, copied
/// out whole for routing.
#[derive(Debug, Clone, Copy)]
struct MediaEntry {
    call: Idx,
    desc: u16,
    /// False for non-RTP media such as T.38 over UDPTL.
    rtp: bool,
}

/// Most SDP media descriptions remembered per call (re-INVITE storms).
const MAX_DESCS_PER_CALL: usize = 64;
/// Most streams per call.
const MAX_STREAMS_PER_CALL: usize = 256;
/// Most rule labels kept per call (labels are the operator's, so few).
const MAX_LABELS_PER_CALL: usize = 16;
/// Longest Call-ID accepted.
const MAX_CALL_ID: usize = 512;
/// Longest text kept from a SIP header (URI, user, display name, tag, user
/// agent, reason): a call's memory must not grow with header sizes.
const MAX_TEXT: usize = 256;

/// `s` cut to at most [`MAX_TEXT`] bytes, at a character boundary.
fn cut(s: &str) -> &str {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Counters {
    /// [`cut`], counting the cut as an anomaly (for what a call record keeps
    /// verbatim: URIs, users, display names).
    fn cut<'a>(&mut self, s: &'a str) -> &'a str {
        if s.len() > MAX_TEXT {
            self.anomaly("sip_field_truncated");
        }
        cut(s)
    }
}

const LIST_ACTIVE: u8 = 0;
const LIST_CLOSING: u8 = 1;
/// Calls whose INVITE no one has answered yet, not even with 100 Trying: a
/// flood of forged INVITEs lands here, is evicted from here first and
/// expires after Timer B (RFC 3261 §17.1.1.2), so it cannot push real calls out.
const LIST_UNANSWERED: u8 = 2;
/// Calls whose INVITE was challenged (401/407), waiting for the retry.
const LIST_CHALLENGED: u8 = 3;
const LIST_ORPHAN: u8 = 0;
const LIST_CANDIDATE: u8 = 1;
/// Heuristic RTP: packets with continuing sequence numbers before a stream is believed.
const HEURISTIC_CONFIRM: u8 = 3;

struct Call {
    links: Links,
    /// Number of the call in this run (see [`CallRecord::serial`]).
    serial: u64,
    /// Call-ID, caller's tag, parties, user agents and reasons.
    text: CallText,
    caller: (IpAddr, u16),
    callee: (IpAddr, u16),
    invite_ns: i64,
    /// Times that may be unset are `NonZeroI64` (8 bytes, not 16): a
    /// packet stamped exactly at the epoch only loses its mark.
    first_provisional_ns: Option<NonZeroI64>,
    /// RFC 6076 SRD: the INVITE it is measured from (the retry after a
    /// challenge) and its first non-100 response, provisional or final.
    srd_from_ns: i64,
    srd_to_ns: Option<NonZeroI64>,
    /// The SRD ended at a 4xx-6xx final response (RFC 6076 failed SRD).
    srd_failed: bool,
    /// RFC 6076 SDD: the first final response to the call's BYE.
    bye_answer_ns: Option<NonZeroI64>,
    ringing_ns: Option<NonZeroI64>,
    answer_ns: Option<i64>,
    end_ns: Option<i64>,
    final_status: Option<u16>,
    closing: Option<CallState>,
    hangup_by: Option<Side>,
    cancelled: bool,
    /// Any response to the INVITE seen (moves it off the unanswered list).
    responded: bool,
    sip_messages: u32,
    invites: u32,
    /// Saturating 32-bit: a call's own RTCP never reaches 2^32 packets.
    rtcp_packets: u32,
    /// Saturating 32-bit, like `rtcp_packets`.
    t38_packets: u32,
    anomalies: u32,
    media: Vec<MediaDesc>,
    media_keys: Vec<(IpAddr, u16)>,
    streams: Vec<Idx>,
    /// Labels from rules, in the order first applied.
    labels: Box<[Arc<str>]>,
    /// A rule selected the call for payload recording.
    record_payload: bool,
    /// An `ignore` SIP rule matched: follow the call, report nothing.
    ignored: bool,
    /// The latest offer put the call on hold.
    held: bool,
    /// CSeq of the last REFER answered 2xx, plus one (0: none); its
    /// retransmissions are not another transfer.
    refer_cseq: u32,
    /// The requests whose responses the call believes (see `transactions`).
    transactions: transactions::Transactions,
    /// Addresses that took part in the call's INVITE transactions (media
    /// from them is admitted by the NAT rule, `Engine::admits`).
    hops: transactions::Hops,
    /// The engine's capture-drop total when the call began (wrapping: a
    /// call does not outlive 2^32 dropped packets).
    capture_dropped_at_start: u32,
    /// What capture agents reported over HEP of the call's media (boxed:
    /// most calls have none).
    agent_reports: Option<Box<agent_reports::AgentReports>>,
}

crate::lru::entry!(Call);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StreamKey {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    ssrc: u32,
}

impl StreamKey {
    /// The key's hash under `seed`, as the stream index stores it.
    #[inline]
    fn hash(&self, seed: u64) -> u64 {
        let ports = (self.sport as u64) << 48 | (self.dport as u64) << 32 | self.ssrc as u64;
        let (src, dst) = (fasthash::ip_word(self.src, seed), fasthash::ip_word(self.dst, seed));
        fasthash::hash(seed, [ports, src, dst, 0], &[])
    }
}

struct Stream {
    links: Links,
    key: StreamKey,
    call: Option<Idx>,
    desc: Option<u16>,
    direction: StreamDirection,
    last_pt: u8,
    /// When this stream last refreshed its call's activity (see TOUCH_EVERY_NS).
    touched_call_ns: i64,
    last_clock: ClockRate,
    stats: StreamStats,
    /// Heuristic candidates: continuing packets still needed (0 = confirmed).
    probation: u8,
    /// RFC 4733 events (DTMF digits); boxed, as most streams carry none.
    dtmf: Option<Box<DtmfTracker>>,
    /// What the receiver of this stream says about it in RTCP.
    rtcp: RtcpView,
    /// SDP moved this address to non-RTP media (T.38): packets no longer count as RTP.
    closed: bool,
    /// Its packets' traffic class and talker slot (in padding: no cost).
    traffic: traffic::StreamTraffic,
}

crate::lru::entry!(Stream);

/// A packet found to be this engine's RTP before it is handled
/// ([`Engine`]'s `key_hint`).
#[derive(Debug, Clone, Copy)]
struct KeyHint {
    /// The stream with its key, if any.
    stream: Option<Idx>,
}

/// The probe's state.
pub struct Engine {
    cfg: Config,
    calls: Slab<Call>,
    call_ids: CallIds,
    media: HashMap<(IpAddr, u16), MediaEntry>,
    streams: Slab<Stream>,
    /// Stream slot by key hash ([`index`]); keys are checked in the streams.
    stream_ids: index::StreamIndex,
    /// Seed of the stream-key hash (a sender cannot aim keys at one slot run).
    key_seed: u64,
    /// The stream of the packet being handled, looked up (by the key hash
    /// computed while prefetching) when its traffic was counted, so the
    /// stream's own lookup need not look again. Set
    /// for every packet (None unless `rtp_key` found it to be this engine's
    /// RTP), and read only by that packet's own lookup: `transport` sends a
    /// packet with a hint straight to `media_datagram`, whose key is built
    /// from the same frame by the same rule, and no stream is added or
    /// removed in between.
    key_hint: Option<KeyHint>,
    out: Vec<Record>,
    now: i64,
    dedup: Option<Dedup>,
    defrag: Defragmenter,
    tcp: TcpReassembler,
    sctp: Sctp,
    /// Tells SIP datagrams from media.
    sip: SipClassifier,
    /// Unmasked WebSocket message, reused.
    ws_scratch: Vec<u8>,
    /// Media activity of calls in this batch, applied at its end.
    pending_touches: Vec<(i64, Idx)>,
    /// Where batches end (when the engine ends its own batches).
    batcher: Batcher,
    /// Batches are ended by the caller (sharded runs).
    external_batches: bool,
    /// (index, count) when this engine is one shard of several.
    shard: Option<(u64, u64)>,
    /// Caps shared with the other shards of a sharded run ([`shared`]).
    shared: Option<Arc<shared::SharedCaps>>,
    /// What every shard of a run counts alike: packets, decoding,
    /// reassembly, signalling, calls (those of reassembly are copied in by
    /// `sync_counters`).
    counters: Counters,
    /// What only this shard counts: the media of the address pairs it owns.
    /// A run's counters are one shard's `counters` plus every shard's
    /// `owned` ([`Engine::shard_counters`]); for a single engine, both.
    owned: Counters,
    /// `counters` plus `owned`, as [`Engine::counters`] returns them.
    total: Counters,
    /// This engine's copy of the run's rules.
    rules: RuleTable,
    /// The `label` or `record` action of the packet being handled, for the
    /// call its SIP message or stream belongs to.
    packet_rule: Option<RuleAction>,
    /// Trackers and open registrations ([`events`]).
    events: events::Events,
    /// How the SIP message being handled was carried (set by its framing).
    sip_transport: SipTransport,
    /// The SIP message being handled arrived inside HEP (`SipSeen::via_hep`).
    sip_via_hep: bool,
    /// A compressed HEP payload, inflated (reused).
    hep_inflated: Vec<u8>,
    /// The time of the last HEP message: none is taken earlier, so an
    /// agent's stamps cannot reorder a call (see `framing::hep_datagram`).
    hep_floor_ns: i64,
    /// Packets the capture dropped so far (low 32 bits), as of the last batch end.
    capture_dropped: u32,
    /// The total reported since, applied at the next batch end (so shards agree).
    capture_dropped_next: u64,
    /// The time series' current interval ([`traffic`]).
    traffic: traffic::Traffic,
    /// Finished intervals waiting for their streams' reports.
    traffic_rows: std::collections::VecDeque<traffic::Row>,
    /// Duplicates of media this shard owns, removed (counted as `owned`:
    /// only the owner filters them).
    owned_duplicates: u64,
    /// Where recorded calls' packets go, and what waits for them ([`callpcap`]).
    recorder: Option<Box<callpcap::Hook>>,
}

impl Engine {
    /// A new engine.
    pub fn new(cfg: Config) -> Self {
        Engine {
            calls: Slab::with_capacity(cfg.max_calls),
            streams: Slab::with_capacity(cfg.max_streams),
            call_ids: CallIds::default(),
            media: HashMap::new(),
            stream_ids: index::StreamIndex::default(),
            key_seed: fasthash::seed(),
            key_hint: None,
            out: Vec::new(),
            now: i64::MIN,
            dedup: (cfg.dedup_window_ns > 0).then(|| Dedup::new(cfg.dedup_window_ns)),
            defrag: Defragmenter::new(cfg.defrag.clone()),
            tcp: TcpReassembler::new(cfg.tcp.clone()),
            sctp: Sctp::default(),
            sip: SipClassifier::new(&cfg),
            ws_scratch: Vec::new(),
            pending_touches: Vec::with_capacity(BATCH as usize),
            batcher: Batcher::default(),
            external_batches: false,
            shard: None,
            shared: None,
            counters: Counters::default(),
            owned: Counters::default(),
            total: Counters::default(),
            rules: cfg.rules.as_ref().map_or_else(RuleTable::empty, |r| r.table()),
            packet_rule: None,
            events: events::Events::default(),
            sip_transport: SipTransport::Udp,
            sip_via_hep: false,
            hep_inflated: Vec::new(),
            hep_floor_ns: i64::MIN,
            capture_dropped: 0,
            capture_dropped_next: 0,
            traffic: traffic::Traffic::default(),
            traffic_rows: std::collections::VecDeque::new(),
            owned_duplicates: 0,
            recorder: cfg.record_sink.as_ref().map(|f| callpcap::Hook::new((f.0)())),
            cfg,
        }
    }

    /// Calls currently tracked.
    pub fn active_calls(&self) -> usize {
        self.calls.len()
    }

    /// All counters, up to date.
    pub fn counters(&mut self) -> &Counters {
        self.sync_counters();
        self.total.clone_from(&self.counters);
        self.total.add(&self.owned);
        &self.total
    }

    /// The counters every shard counts alike, and those only this shard
    /// counts (see the fields' docs): a sharded run adds one shard's first
    /// and every shard's second.
    pub fn shard_counters(&mut self) -> (&Counters, &Counters) {
        self.sync_counters();
        (&self.counters, &self.owned)
    }

    fn sync_counters(&mut self) {
        self.counters.defrag = self.defrag.counters.clone();
        self.counters.tcp_reassembly = self.tcp.counters.clone();
        self.counters.sctp = self.sctp.counters.clone();
        self.counters.record_frames_dropped =
            self.recorder.as_ref().map_or(0, |r| r.held_dropped());
        self.counters.record_calls_missed = self.recorder.as_ref().map_or(0, |r| r.calls_missed());
        let removed = self.dedup.as_ref().map_or(0, |d| d.removed);
        self.counters.duplicates_removed = removed - self.owned_duplicates;
        self.owned.duplicates_removed = self.owned_duplicates;
        self.counters.dedup_overflow = self.dedup.as_ref().map_or(0, |d| d.overflow);
    }

    /// Takes the records finished so far (delivering them to the trackers
    /// first, when this engine delivers records).
    pub fn drain(&mut self) -> std::vec::Drain<'_, Record> {
        self.record_events();
        self.out.drain(..)
    }

    /// Ends a batch: applies the media activity seen in it (this engine's and,
    /// when sharded, the other shards'), in time order, then expires what is
    /// idle. Calls therefore change lists only at batch boundaries, the same
    /// way in one thread or in many, which keeps shards' call tables identical.
    pub fn end_batch(&mut self, other_shards: &[(i64, Idx)]) {
        // Rule changes reach a quiet engine too (packets usually bring them).
        self.rules.sync();
        if let Some(r) = self.recorder.as_mut() {
            r.flush();
        }
        self.capture_dropped = self.capture_dropped_next as u32;
        self.pending_touches.extend_from_slice(other_shards);
        self.apply_touches();
        self.expire();
        if !self.external_batches {
            self.traffic_release(false);
        }
    }

    /// A shard's rows of the time series due at this batch end, released
    /// once every shard has ended the batch ([`Engine::end_batch`]): the
    /// streams' reports its expiry made are in, as in one thread.
    pub fn release_rows(&mut self) {
        self.traffic_release(false);
    }

    /// Applies the batch's media activity in time order (never moving a
    /// call's activity back) and empties the list, keeping its allocation.
    fn apply_touches(&mut self) {
        let mut touches = std::mem::take(&mut self.pending_touches);
        touches.sort_unstable();
        for &(t, idx) in &touches {
            if self.calls.get(idx).is_some_and(|c| t > c.links.stamp) {
                self.touch_call(idx, t);
            }
        }
        touches.clear();
        self.pending_touches = touches;
    }

    /// Media activity of this batch, for the other shards: (time, call).
    pub fn batch_touches(&self) -> &[(i64, Idx)] {
        &self.pending_touches
    }

    /// Makes this engine one of `count` shards: it analyses only the media
    /// whose address pair hashes to `index`, and leaves batch boundaries to
    /// the caller ([`Engine::end_batch`] with the other shards' touches).
    /// `caps` are the stream, candidate and per-call caps of all shards together.
    pub fn set_shard(&mut self, index: u64, count: u64, caps: Arc<shared::SharedCaps>) {
        self.shard = Some((index, count));
        self.external_batches = true;
        // Every shard sees every packet: one counts the rules' hits.
        self.rules.count_hits(index == 0);
        self.shared = Some(caps);
    }

    /// Advances the engine's clock without a packet (shards see only part of
    /// the traffic; the batch end tells them the time).
    pub fn advance_to(&mut self, ts_ns: i64) {
        self.now = self.now.max(ts_ns);
        self.traffic_boundary(self.now);
    }

    /// The capture's total of dropped packets (kernel ring full) so far.
    /// Calls open while it grows say how much in their record
    /// ([`CallRecord::capture_dropped`]); it takes effect at the next batch end.
    pub fn set_capture_dropped(&mut self, total: u64) {
        self.capture_dropped_next = total;
    }

    /// Lets time pass without packets (a quiet live link): when capture
    /// time `now_ns` ends a batch, what is idle expires. A caller that ends
    /// batches itself (a shard) ignores this.
    pub fn tick(&mut self, now_ns: i64) {
        if !self.external_batches && self.batcher.due(now_ns) {
            self.advance_to(now_ns);
            self.end_batch(&[]);
        }
    }
}
