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
mod bound;
pub mod dedup;
pub mod defrag;
mod fasthash;
pub mod index;
pub mod lru;
pub mod parallel;
pub mod sctp;
pub mod shared;
pub mod tcp;
pub mod websocket;
pub mod workers;

#[cfg(test)]
mod flows;
mod prefetch;

use calliper_rtp::dtmf::DtmfTracker;
use calliper_rtp::{ClockRate, Codec, StreamStats};
use calliper_sip::sdp::{self, Direction};
use calliper_sip::{NameAddr, SipMessage, StartLine};
use calliper_wire::rtp::{looks_like_rtcp, RtpHeader};
use calliper_wire::{Frame, Transport};
pub use counters::{Counters, Sum};
use dedup::Dedup;
use defrag::{DefragConfig, Defragmenter};
use hashbrown::HashMap;
use lru::{Idx, Linked, Links, Slab};
/// The record types live in their own crate, so consumers need not depend
/// on the engine; re-exported here for the engine's callers.
pub use calliper_record::*;
use sctp::Sctp;
use std::net::IpAddr;
use std::sync::Arc;
use tcp::{FlowKey, TcpConfig, TcpReassembler};

const SEC: i64 = 1_000_000_000;
/// Tells SIP from media: by configured port, else (optionally) by its start line.
#[derive(Debug, Clone)]
pub struct SipClassifier {
    /// `sip_ports` as a bitmap: two bit tests per datagram instead of list scans.
    ports: Box<[u64; 1024]>,
    any_port: bool,
}

impl SipClassifier {
    /// From the configured ports and detection switch.
    pub fn new(cfg: &Config) -> SipClassifier {
        let mut ports = Box::new([0u64; 1024]);
        for &p in &cfg.sip_ports {
            ports[p as usize >> 6] |= 1 << (p & 63);
        }
        SipClassifier {
            ports,
            any_port: cfg.sip_any_port,
        }
    }

    /// Either port is a configured SIP port.
    pub fn port(&self, sport: u16, dport: u16) -> bool {
        let bit = |p: u16| self.ports[p as usize >> 6] & (1 << (p & 63)) != 0;
        bit(sport) || bit(dport)
    }

    /// The datagram is SIP.
    pub fn is_sip(&self, sport: u16, dport: u16, payload: &[u8]) -> bool {
        if self.port(sport, dport) {
            // Keep-alives (CRLF) and RTP mistakenly on a SIP port are not SIP.
            return payload.first().is_some_and(|b| b.is_ascii_alphabetic());
        }
        // Cheap first test: RTP starts with 0x80.., SIP with a letter.
        self.any_port
            && payload.first().is_some_and(|b| b.is_ascii_uppercase())
            && calliper_sip::looks_like_sip(payload)
    }
}

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
}

impl<'a> From<calliper_capture::Packet<'a>> for RawPacket<'a> {
    fn from(p: calliper_capture::Packet<'a>) -> Self {
        RawPacket {
            ts_ns: p.ts_ns,
            link_type: p.link_type,
            data: p.data,
        }
    }
}

/// Packets per batch: calls change activity lists and expire only at batch
/// ends (see [`Engine::end_batch`]). Each end is a barrier between shards,
/// so ends are kept rare (at 5 M packets/s, one per 13 ms of capture).
pub const BATCH: u32 = 65536;
/// A batch also ends when capture time has moved this far (ns), so timeouts
/// keep a 100 ms granularity however slow the traffic.
pub const BATCH_NS: i64 = 100_000_000;

/// Decides where batches end: before the packet that would make a batch
/// longer than [`BATCH`] packets or [`BATCH_NS`] of capture time. The reader
/// of a sharded run and a single engine use the same rule, so their batch
/// ends fall on the same packets.
#[derive(Debug, Clone)]
pub struct Batcher {
    packets: u32,
    start_ns: i64,
}

impl Default for Batcher {
    fn default() -> Self {
        Batcher {
            packets: 0,
            start_ns: i64::MIN,
        }
    }
}

impl Batcher {
    /// Called for every packet, in order: true when a batch ends before it.
    pub fn boundary(&mut self, ts_ns: i64) -> bool {
        if self.start_ns == i64::MIN {
            self.start_ns = ts_ns;
        }
        let end = self.packets >= BATCH || ts_ns.saturating_sub(self.start_ns) >= BATCH_NS;
        if end {
            self.packets = 0;
            self.start_ns = ts_ns;
        }
        self.packets += 1;
        end
    }
}

/// Which of `n` shards analyses the media between two endpoints: the pair is
/// ordered and RTP/RTCP ports paired (even/odd), so both directions of a
/// stream and its RTCP land on the same shard.
pub fn media_shard(a: IpAddr, ap: u16, b: IpAddr, bp: u16, n: u64) -> u64 {
    let x = (ip_bits(a) as u64 ^ (ip_bits(a) >> 64) as u64, ap & !1);
    let y = (ip_bits(b) as u64 ^ (ip_bits(b) >> 64) as u64, bp & !1);
    let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
    let mut h = lo.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (lo.1 as u64);
    h = (h ^ hi.0).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ (hi.1 as u64) << 17;
    h = (h ^ (h >> 31)).wrapping_mul(0x94D0_49BB_1331_11EB);
    // Multiply-shift maps the hash onto 0..n without a division (~40 cycles).
    (((h ^ (h >> 29)) as u128 * n.max(1) as u128) >> 64) as u64
}

/// The key in [`Counters::sip_by_kind`] of every method not in
/// [`calliper_sip::METHODS`].
pub const OTHER_METHOD: &str = "other-method";

/// How often media refreshes its call's activity.
const TOUCH_EVERY_NS: i64 = SEC;

/// Tunables. The defaults suit a capture file of an ordinary PBX or trunk.
#[derive(Debug, Clone)]
pub struct Config {
    /// UDP/TCP ports always treated as SIP.
    pub sip_ports: Vec<u16>,
    /// Also recognise SIP on any port by its start line.
    pub sip_any_port: bool,
    /// Report RTP without signalling, found by a heuristic.
    pub rtp_heuristic: bool,
    /// A call with no SIP or media for this long ends (ns).
    pub call_idle_timeout_ns: i64,
    /// After BYE, CANCEL or a final failure, keep a call this long for
    /// late media and retries (ns).
    pub call_grace_ns: i64,
    /// An RTP stream without signalling ends after this much silence (ns).
    pub stream_idle_timeout_ns: i64,
    /// Most calls held at once; beyond it the least recently active is
    /// evicted, unanswered calls first.
    pub max_calls: usize,
    /// Most calls held whose INVITE has had no response at all.
    pub max_unanswered: usize,
    /// An INVITE with no response for this long has failed (ns; Timer B is 32 s).
    pub unanswered_timeout_ns: i64,
    /// Most RTP streams held at once; beyond it new streams are refused.
    pub max_streams: usize,
    /// Most media addresses held at once; beyond it SDP media are refused.
    pub max_media: usize,
    /// Most unconfirmed heuristic RTP candidates; beyond it the oldest is dropped.
    pub max_candidates: usize,
    /// Equal packets within this window are capture duplicates (ns; 0 keeps all).
    pub dedup_window_ns: i64,
    /// IP defragmentation caps.
    pub defrag: DefragConfig,
    /// TCP reassembly caps (signalling only).
    pub tcp: TcpConfig,
    /// Fault injection for tests of failure handling: panic once this many
    /// packets have been offered (in the last shard of a sharded run).
    #[doc(hidden)]
    pub fault_panic_after_packets: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sip_ports: vec![5060, 5080],
            sip_any_port: true,
            rtp_heuristic: true,
            call_idle_timeout_ns: 300 * SEC,
            call_grace_ns: 5 * SEC,
            stream_idle_timeout_ns: 60 * SEC,
            max_calls: 1_000_000,
            max_unanswered: 100_000,
            unanswered_timeout_ns: 32 * SEC,
            max_streams: 2_000_000,
            max_media: 4_000_000,
            max_candidates: 100_000,
            dedup_window_ns: 5_000_000,
            defrag: DefragConfig::default(),
            tcp: TcpConfig::default(),
            fault_panic_after_packets: None,
        }
    }
}

/// One SDP media description of a call.
#[derive(Debug, Clone)]
struct MediaDesc {
    /// Who receives on this address (the SDP's sender).
    owner: Side,
    rtpmaps: Box<[Rtpmap]>,
}

/// One `a=rtpmap` line, the name kept inline: no allocation per codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rtpmap {
    payload_type: u8,
    name_len: u8,
    /// Encoding name, cut at 15 bytes (the longest registered name,
    /// "telephone-event", just fits).
    name: [u8; 15],
    clock_rate: u32,
}

impl Rtpmap {
    fn new(payload_type: u8, encoding: &str, clock_rate: u32) -> Rtpmap {
        let mut cut = encoding.len().min(15);
        while !encoding.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut name = [0; 15];
        name[..cut].copy_from_slice(&encoding.as_bytes()[..cut]);
        Rtpmap {
            payload_type,
            name_len: cut as u8,
            name,
            clock_rate,
        }
    }

    fn name(&self) -> &str {
        std::str::from_utf8(&self.name[..self.name_len as usize]).unwrap_or("")
    }
}

/// Pushes without the doubling headroom: per-call lists are short and
/// written on the signalling path only, so memory matters more than the
/// occasional reallocation.
fn push_exact<T>(v: &mut Vec<T>, x: T) {
    v.reserve_exact(1);
    v.push(x);
}

#[derive(Debug, Clone)]
struct MediaEntry {
    call: Idx,
    desc: u16,
    /// False for non-RTP media such as T.38 over UDPTL.
    rtp: bool,
    /// Streams sending to or from this address, whatever call they belong to,
    /// so a new description (RTP <-> T.38) reaches them without a scan.
    streams: Vec<Idx>,
}

/// Most SDP media descriptions remembered per call (re-INVITE storms).
const MAX_DESCS_PER_CALL: usize = 64;
/// Most streams per call.
const MAX_STREAMS_PER_CALL: usize = 256;
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

/// A media entry's routing facts, copied out of the table.
#[derive(Debug, Clone, Copy)]
struct MediaRef {
    call: Idx,
    desc: u16,
    rtp: bool,
}

const LIST_ACTIVE: u8 = 0;
const LIST_CLOSING: u8 = 1;
/// Calls whose INVITE no one has answered yet, not even with 100 Trying: a
/// flood of forged INVITEs lands here, is evicted from here first and
/// expires after Timer B (RFC 3261 §17.1.1.2), so it cannot push real calls out.
const LIST_UNANSWERED: u8 = 2;
const LIST_ORPHAN: u8 = 0;
const LIST_CANDIDATE: u8 = 1;
/// Heuristic RTP: packets with continuing sequence numbers before a stream is believed.
const HEURISTIC_CONFIRM: u8 = 3;

struct Call {
    links: Links,
    /// Number of the call in this run (see [`CallRecord::serial`]).
    serial: u64,
    call_id: Box<str>,
    caller_tag: Option<Box<str>>,
    from: Party,
    to: Party,
    caller_ua: Option<String>,
    callee_ua: Option<String>,
    caller: (IpAddr, u16),
    callee: (IpAddr, u16),
    invite_ns: i64,
    first_provisional_ns: Option<i64>,
    ringing_ns: Option<i64>,
    answer_ns: Option<i64>,
    end_ns: Option<i64>,
    final_status: Option<u16>,
    final_reason: Option<String>,
    closing: Option<CallState>,
    hangup_by: Option<Side>,
    hangup_reason: Option<String>,
    cancelled: bool,
    /// Any response to the INVITE seen (moves it off the unanswered list).
    responded: bool,
    sip_messages: u32,
    invites: u32,
    rtcp_packets: u64,
    t38_packets: u64,
    anomalies: u32,
    media: Vec<MediaDesc>,
    media_keys: Vec<(IpAddr, u16)>,
    streams: Vec<Idx>,
}

impl Linked for Call {
    fn links(&mut self) -> &mut Links {
        &mut self.links
    }
}

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
    fn hash(&self, seed: u64) -> u64 {
        let ports = (self.sport as u64) << 48 | (self.dport as u64) << 32 | self.ssrc as u64;
        let (src, dst) = (
            fasthash::ip_word(self.src, seed),
            fasthash::ip_word(self.dst, seed),
        );
        fasthash::hash(seed, [ports, src, dst, 0], &[])
    }
}

fn ip_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u32::from(v) as u128,
        IpAddr::V6(v) => u128::from(v),
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
}

impl Linked for Stream {
    fn links(&mut self) -> &mut Links {
        &mut self.links
    }
}

/// The probe's state.
pub struct Engine {
    cfg: Config,
    calls: Slab<Call>,
    call_ids: HashMap<Box<str>, Idx>,
    media: HashMap<(IpAddr, u16), MediaEntry>,
    streams: Slab<Stream>,
    /// Stream slot by key hash ([`index`]); keys are checked in the streams.
    stream_ids: index::StreamIndex,
    /// Seed of the stream-key hash (a sender cannot aim keys at one slot run).
    key_seed: u64,
    /// The key and hash computed while prefetching for the packet being
    /// handled, so its lookup need not hash again.
    key_hint: Option<(StreamKey, u64)>,
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
}

impl Engine {
    /// A new engine.
    pub fn new(cfg: Config) -> Self {
        Engine {
            calls: Slab::with_capacity(cfg.max_calls),
            streams: Slab::with_capacity(cfg.max_streams),
            call_ids: HashMap::new(),
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
        self.counters.duplicates_removed = self.dedup.as_ref().map_or(0, |d| d.removed);
        self.counters.dedup_overflow = self.dedup.as_ref().map_or(0, |d| d.overflow);
    }

    /// Takes the records finished so far.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Record> {
        self.out.drain(..)
    }

    /// Analyses one captured frame.
    pub fn packet(&mut self, ts_ns: i64, link_type: u16, data: &[u8]) {
        self.packets(&[RawPacket {
            ts_ns,
            link_type,
            data,
        }]);
    }

    /// Analyses captured frames in order, with the same results as one
    /// [`Engine::packet`] call each, but faster: for each group of
    /// [`LOOKAHEAD`] packets it first decodes them all and starts loading
    /// what their lookups will touch (duplicate filter slot, stream index
    /// slot, then the stream itself), so the cache misses of a group overlap
    /// instead of stalling one packet after another. The prefetches are
    /// hints only: every packet is then handled exactly as alone.
    pub fn packets(&mut self, batch: &[RawPacket<'_>]) {
        if let [one] = batch {
            // No lookahead: skip setting up a group's worth of state.
            return self.group::<1>(std::slice::from_ref(one));
        }
        for group in batch.chunks(LOOKAHEAD) {
            self.group::<LOOKAHEAD>(group);
        }
    }

    /// Handles up to `N` packets.
    fn group<'a, const N: usize>(&mut self, group: &[RawPacket<'a>]) {
        if let Some(n) = self.cfg.fault_panic_after_packets {
            if self.counters.packets >= n && self.shard.is_none_or(|(i, n)| i + 1 == n) {
                panic!("fault injection after {n} packets");
            }
        }
        type Decoded<'a> = Option<Result<Frame<'a>, calliper_wire::DecodeError>>;
        let mut decoded: [Decoded<'a>; N] = [None; N];
        let mut dedup_hash = [None::<u64>; N];
        let mut stream_hash = [None::<(StreamKey, u64)>; N];
        let n = group.len();
        // A rolling pipeline: decoding packet i + INDEX_AHEAD starts the load of
        // its index slot, packet i + STREAM_AHEAD (whose slot has arrived by
        // now) starts the load of its stream, and packet i is handled.
        let decode = |e: &Self,
                      i: usize,
                      decoded: &mut [Decoded<'a>],
                      dh: &mut [Option<u64>],
                      sh: &mut [Option<(StreamKey, u64)>]| {
            let p = &group[i];
            let r = calliper_wire::decode(p.link_type, p.data);
            if let Ok(f) = &r {
                if let Some(d) = &e.dedup {
                    dh[i] = d.hash(f);
                    if let Some(h) = dh[i] {
                        d.prefetch(h);
                    }
                }
                if let Some(k) = e.rtp_key(f) {
                    let h = k.hash(e.key_seed);
                    e.stream_ids.prefetch(h);
                    sh[i] = Some((k, h));
                }
            }
            decoded[i] = Some(r);
        };
        let load_stream = |e: &Self, sh: Option<(StreamKey, u64)>| {
            if let Some(si) = sh.and_then(|(_, h)| e.stream_ids.peek(h)) {
                e.streams.prefetch(si);
            }
        };
        for i in 0..n.min(INDEX_AHEAD) {
            decode(self, i, &mut decoded, &mut dedup_hash, &mut stream_hash);
        }
        for &sh in &stream_hash[..n.min(STREAM_AHEAD)] {
            load_stream(self, sh);
        }
        for (i, p) in group.iter().enumerate() {
            if i + INDEX_AHEAD < n {
                decode(
                    self,
                    i + INDEX_AHEAD,
                    &mut decoded,
                    &mut dedup_hash,
                    &mut stream_hash,
                );
            }
            if i + STREAM_AHEAD < n {
                load_stream(self, stream_hash[i + STREAM_AHEAD]);
            }
            self.counters.packets += 1;
            self.counters.bytes += p.data.len() as u64;
            if !self.external_batches && self.batcher.boundary(p.ts_ns) {
                self.advance_to(p.ts_ns);
                self.end_batch(&[]);
            }
            if p.ts_ns > self.now {
                self.now = p.ts_ns;
            }
            self.key_hint = stream_hash[i];
            match decoded[i] {
                Some(Ok(frame)) => {
                    if let (Some(d), Some(h)) = (self.dedup.as_mut(), dedup_hash[i]) {
                        if d.check(p.ts_ns, h) {
                            continue;
                        }
                    }
                    self.frame(p.ts_ns, &frame)
                }
                Some(Err(calliper_wire::DecodeError::NotIp)) => self.counters.not_ip += 1,
                Some(Err(e)) => self.counters.anomaly(e.name()),
                None => {}
            }
        }
    }

    /// The stream key of a frame this engine would analyse as RTP, read
    /// cheaply (for prefetching; the packet's handling decides for itself).
    fn rtp_key(&self, f: &Frame<'_>) -> Option<StreamKey> {
        let Transport::Udp {
            sport,
            dport,
            payload,
        } = f.transport
        else {
            return None;
        };
        if payload.len() < 12 || payload[0] >> 6 != 2 || looks_like_rtcp(payload) {
            return None;
        }
        if self.sip.is_sip(sport, dport, payload)
            || self
                .shard
                .is_some_and(|(i, n)| media_shard(f.src, sport, f.dst, dport, n) != i)
        {
            return None;
        }
        Some(StreamKey {
            src: f.src,
            dst: f.dst,
            sport,
            dport,
            ssrc: u32::from_be_bytes([payload[8], payload[9], payload[10], payload[11]]),
        })
    }

    /// Ends a batch: applies the media activity seen in it (this engine's and,
    /// when sharded, the other shards'), in time order, then expires what is
    /// idle. Calls therefore change lists only at batch boundaries, the same
    /// way in one thread or in many, which keeps shards' call tables identical.
    pub fn end_batch(&mut self, other_shards: &[(i64, Idx)]) {
        self.pending_touches.extend_from_slice(other_shards);
        self.apply_touches();
        self.expire();
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
        self.shared = Some(caps);
    }

    /// Advances the engine's clock without a packet (shards see only part of
    /// the traffic; the batch end tells them the time).
    pub fn advance_to(&mut self, ts_ns: i64) {
        self.now = self.now.max(ts_ns);
    }

    /// Handles a decoded frame. A fragment goes to reassembly; a datagram it
    /// completes may itself be a fragment of an inner datagram (a tunnel
    /// inside a fragmented packet), so reassembly loops here instead of
    /// calling back into this function: nesting in the input is bounded by
    /// the decoder's depth limit and never grows the stack.
    fn frame(&mut self, now: i64, f: &Frame<'_>) {
        let Transport::Fragment { frag, payload } = f.transport else {
            return self.transport(now, f);
        };
        let mut next = self.fragment(now, f, frag, payload);
        while let Some((d, outer)) = next.take() {
            match calliper_wire::transport_of(&outer, d.protocol, &d.payload) {
                Ok(inner) => match inner.transport {
                    Transport::Fragment { frag, payload } => {
                        next = self.fragment(now, &inner, frag, payload);
                    }
                    _ => self.transport(now, &inner),
                },
                Err(e) => self.counters.anomaly(e.name()),
            }
            self.defrag.recycle(d.payload);
        }
    }

    /// Offers one fragment to reassembly; returns the datagram it completes
    /// and the frame it was found in (addresses, VLAN, nesting depth).
    fn fragment(
        &mut self,
        now: i64,
        f: &Frame<'_>,
        frag: calliper_wire::Fragment,
        payload: &[u8],
    ) -> Option<(defrag::Datagram, Frame<'static>)> {
        self.counters.ip_fragments += 1;
        let d = self.defrag.add(now, f.src, f.dst, frag, payload)?;
        let outer = Frame {
            transport: Transport::Other {
                protocol: d.protocol,
                payload: &[],
            },
            ..*f
        };
        Some((d, outer))
    }

    /// Handles a frame's transport payload (never a fragment).
    fn transport(&mut self, now: i64, f: &Frame<'_>) {
        match f.transport {
            Transport::Udp {
                sport,
                dport,
                payload,
            } => {
                // Signalling is counted by every shard alike (`counters`),
                // media only by the shard that owns its address pair (`owned`).
                if self.sip.is_sip(sport, dport, payload) {
                    self.counters.udp += 1;
                    self.sip_datagram(now, f.src, sport, f.dst, dport, payload);
                } else if looks_like_rtcp(payload) {
                    // Every shard reads RTCP (it is light), each applying it
                    // to the streams it owns: RTCP need not be on RTP's
                    // port + 1 (RFC 3605), so it may hash to another shard.
                    self.counters.udp += 1;
                    self.rtcp_datagram(f.src, sport, f.dst, dport, payload);
                } else if self
                    .shard
                    .is_none_or(|(i, n)| media_shard(f.src, sport, f.dst, dport, n) == i)
                {
                    self.owned.udp += 1;
                    self.media_datagram(now, f.src, sport, f.dst, dport, payload);
                }
            }
            Transport::Tcp {
                sport,
                dport,
                seq,
                flags,
                payload,
            } => {
                self.counters.tcp += 1;
                let key = (f.src, sport, f.dst, dport);
                // Track a direction from its SYN to a SIP port or from its
                // first segment that starts a SIP message.
                let mut ws = false;
                let start = if payload.is_empty() {
                    flags & 0x12 == 0x02 && self.sip.port(sport, dport)
                } else if self.tcp.tracks(&key) {
                    false
                } else {
                    ws = websocket::is_sip_upgrade(payload);
                    ws || self.sip.is_sip(sport, dport, payload)
                };
                if let Some(o) = self.tcp.segment(now, key, seq, flags, payload, start) {
                    if ws {
                        self.tcp.set_tag(o.flow, websocket::TAG_HANDSHAKE);
                    }
                    if self.tcp.tag(o.flow) == 0 {
                        self.sip_stream(now, key, o.flow);
                    } else {
                        self.websocket_stream(now, key, o.flow);
                    }
                    if o.closing {
                        self.tcp.close(o.flow);
                    }
                }
            }
            // Handled by `frame`, which loops over nested reassemblies.
            Transport::Fragment { .. } => {}
            Transport::Other {
                protocol: 132,
                payload,
            } => {
                self.counters.other_ip += 1;
                // Taken out for the length of the call so messages can reach
                // the call table; an empty map, so nothing is allocated.
                let mut sctp = std::mem::take(&mut self.sctp);
                sctp.packet(now, f.src, f.dst, payload, |p, m| {
                    if self.sip.is_sip(p.sport, p.dport, m) {
                        self.sip_datagram(now, f.src, p.sport, f.dst, p.dport, m);
                    }
                });
                self.sctp = sctp;
            }
            Transport::Other { .. } => self.counters.other_ip += 1,
        }
    }

    /// Frames SIP over WebSocket (RFC 7118): skips the HTTP upgrade, then
    /// unmasks each message and reads it as one SIP message.
    fn websocket_stream(&mut self, now: i64, key: FlowKey, flow: lru::Idx) {
        let (mut buf, _) = self.tcp.take_buffer(flow);
        let (src, sport, dst, dport) = key;
        let mut used = 0;
        if self.tcp.tag(flow) == websocket::TAG_HANDSHAKE {
            match memchr::memmem::find(&buf, b"\r\n\r\n") {
                Some(end) => {
                    used = end + 4;
                    self.tcp.set_tag(flow, websocket::TAG_FRAMES);
                }
                None if buf.len() > calliper_sip::MAX_MESSAGE => {
                    self.counters.anomaly("websocket_bad_handshake");
                    used = buf.len();
                }
                None => {}
            }
        }
        let mut message = std::mem::take(&mut self.ws_scratch);
        if self.tcp.tag(flow) == websocket::TAG_FRAMES {
            loop {
                match websocket::frame(&buf[used..]) {
                    Ok(Some(f)) => {
                        used += f.len;
                        // Text or binary, unfragmented: one SIP message.
                        if f.fin && (f.opcode == 1 || f.opcode == 2) {
                            message.clear();
                            f.unmask_into(&buf[used - f.len..used], &mut message);
                            match calliper_sip::parse(&message, false) {
                                Ok(m) => self.sip_message(now, src, sport, dst, dport, &m),
                                Err(e) => self.counters.anomaly(e.name()),
                            }
                        } else if f.opcode < 3 {
                            self.counters.anomaly("websocket_fragmented_message");
                        }
                    }
                    Ok(None) => break,
                    Err(websocket::FrameTooLarge) => {
                        self.counters.anomaly("websocket_frame_too_large");
                        used = buf.len();
                        break;
                    }
                }
            }
        }
        self.ws_scratch = message;
        buf.drain(..used);
        self.tcp.put_buffer(flow, buf);
    }

    /// Frames and handles the SIP messages buffered in a TCP flow.
    fn sip_stream(&mut self, now: i64, key: FlowKey, flow: lru::Idx) {
        if !self.tcp.ready(flow) {
            return;
        }
        let (mut buf, mut resync) = self.tcp.take_buffer(flow);
        let (src, sport, dst, dport) = key;
        let mut used = 0;
        let mut wait = 0;
        loop {
            // CRLF keep-alives (RFC 5626) sit between messages.
            while used < buf.len() && matches!(buf[used], b'\r' | b'\n') {
                used += 1;
            }
            let rest = &buf[used..];
            if rest.is_empty() {
                break;
            }
            if resync && !calliper_sip::looks_like_sip(rest) {
                match find_message_start(rest) {
                    Some(at) => {
                        self.counters.anomaly("sip_tcp_resync");
                        used += at;
                        continue;
                    }
                    None => {
                        // Keep a possible partial start line for the next segment.
                        used = buf.len().saturating_sub(MAX_START_LINE).max(used);
                        break;
                    }
                }
            }
            resync = false;
            match calliper_sip::parse(rest, true) {
                Ok(m) => {
                    let len = m.len.clamp(1, rest.len());
                    self.sip_message(now, src, sport, dst, dport, &m);
                    used += len;
                }
                Err(calliper_sip::SipError::Incomplete { needed }) => {
                    // Parse again only once the rest of it is here (after
                    // the drain below, the message starts the buffer).
                    wait = needed.unwrap_or(0);
                    break;
                }
                Err(e) => {
                    self.counters.anomaly(e.name());
                    resync = true;
                    used += 1;
                }
            }
        }
        buf.drain(..used);
        self.tcp.put_buffer(flow, buf);
        self.tcp.set_wait(flow, wait);
        if resync {
            self.tcp.mark_resync(flow);
        }
    }

    fn sip_datagram(
        &mut self,
        now: i64,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        dport: u16,
        payload: &[u8],
    ) {
        match calliper_sip::parse(payload, false) {
            Ok(m) => {
                if m.body_truncated {
                    self.counters.anomaly("sip_content_length_exceeds_datagram");
                }
                if m.bad_content_length {
                    self.counters.anomaly("sip_bad_content_length");
                }
                self.sip_message(now, src, sport, dst, dport, &m)
            }
            Err(e) => self.counters.anomaly(e.name()),
        }
    }

    fn sip_message(
        &mut self,
        now: i64,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        dport: u16,
        m: &SipMessage<'_>,
    ) {
        self.counters.sip_messages += 1;
        // Keys come from a fixed set (methods by name, others as one key;
        // status codes are 100..=699), so the map stays small whatever the
        // input, and nothing is allocated once a kind has been seen.
        let mut digits = [0u8; 5];
        let kind = match m.start {
            Some(StartLine::Request { method, .. }) => calliper_sip::METHODS
                .iter()
                .find(|&&k| k == method)
                .copied()
                .unwrap_or(OTHER_METHOD),
            Some(StartLine::Response { code, .. }) => decimal(code, &mut digits),
            None => "?",
        };
        match self.counters.sip_by_kind.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.counters.sip_by_kind.insert(kind.to_string(), 1);
            }
        }
        let Some(call_id) = m.call_id.filter(|c| !c.is_empty()) else {
            self.counters.anomaly("sip_missing_call_id");
            return;
        };
        if call_id.len() > MAX_CALL_ID {
            self.counters.anomaly("sip_call_id_too_long");
            return;
        }
        let is_invite = matches!(
            m.start,
            Some(StartLine::Request {
                method: "INVITE",
                ..
            })
        );
        let idx = match self.call_ids.get(call_id) {
            Some(&i) => i,
            None if is_invite => match self.new_call(now, call_id, src, sport, dst, dport, m) {
                Some(i) => i,
                None => return,
            },
            None => {
                self.counters.sip_outside_calls += 1;
                return;
            }
        };
        let sdp_side = self.update_call(idx, now, m);
        if let Some(side) = sdp_side {
            if m.has_sdp() {
                self.apply_sdp(idx, side, m.body);
            }
        }
        self.touch_call(idx, now);
    }

    /// Records activity on a call, keeping it on the list its state belongs to.
    fn touch_call(&mut self, idx: Idx, now: i64) {
        let Some(call) = self.calls.get(idx) else {
            return;
        };
        let list = if call.closing.is_some() {
            LIST_CLOSING
        } else if !call.responded {
            LIST_UNANSWERED
        } else {
            LIST_ACTIVE
        };
        self.calls.touch(idx, list, now);
    }

    #[allow(clippy::too_many_arguments)] // the 5-tuple plus the message; a struct would only rename them
    fn new_call(
        &mut self,
        now: i64,
        call_id: &str,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        dport: u16,
        m: &SipMessage<'_>,
    ) -> Option<Idx> {
        if self.calls.list_len(LIST_UNANSWERED) >= self.cfg.max_unanswered {
            if let Some((oldest, _)) = self.calls.oldest(LIST_UNANSWERED) {
                // A flood: count it, do not write a record per forged INVITE.
                self.counters.unanswered_evicted += 1;
                self.finish_call(oldest, Ending::Discarded);
            }
        }
        if self.calls.is_full() {
            let (oldest, _) = self
                .calls
                .oldest(LIST_UNANSWERED)
                .or_else(|| self.calls.oldest(LIST_CLOSING))
                .or_else(|| self.calls.oldest(LIST_ACTIVE))?;
            self.counters.calls_evicted += 1;
            self.finish_call(oldest, Ending::Evicted);
        }
        let c = &mut self.counters;
        let mut party = |v: Option<&str>| {
            let na = NameAddr::parse(v.unwrap_or(""));
            (
                Party {
                    uri: c.cut(na.uri).to_string(),
                    user: na.user.map(|u| c.cut(u).to_string()),
                    display_name: na.display.map(|d| c.cut(d).to_string()),
                },
                na.tag.map(|t| Box::from(cut(t))),
            )
        };
        let (from, caller_tag) = party(m.from);
        let (to, _) = party(m.to);
        let caller_ua = m.user_agent.map(|u| self.counters.cut(u).to_string());
        let call = Call {
            links: Links::default(),
            // Signalling is counted alike in every shard, so shards agree.
            serial: self.counters.calls + 1,
            call_id: call_id.into(),
            caller_tag,
            from,
            to,
            caller_ua,
            callee_ua: None,
            caller: (src, sport),
            callee: (dst, dport),
            invite_ns: now,
            first_provisional_ns: None,
            ringing_ns: None,
            answer_ns: None,
            end_ns: None,
            final_status: None,
            final_reason: None,
            closing: None,
            hangup_by: None,
            hangup_reason: None,
            cancelled: false,
            responded: false,
            sip_messages: 0,
            invites: 0,
            rtcp_packets: 0,
            t38_packets: 0,
            anomalies: 0,
            media: Vec::new(),
            media_keys: Vec::new(),
            streams: Vec::new(),
        };
        let idx = self.calls.insert(call).ok()?;
        self.call_ids.insert(call_id.into(), idx);
        self.counters.calls += 1;
        Some(idx)
    }

    /// Updates a call from one of its messages; returns the side that sent
    /// the message (whose SDP, if any, describes where that side receives).
    fn update_call(&mut self, idx: Idx, now: i64, m: &SipMessage<'_>) -> Option<Side> {
        let call = self.calls.get_mut(idx)?;
        call.sip_messages += 1;
        let from_tag = m.from.map(|f| NameAddr::parse(f).tag);
        let from_is_caller = match (&call.caller_tag, from_tag.flatten()) {
            (Some(ct), Some(ft)) => **ct == *cut(ft),
            _ => true,
        };
        match m.start? {
            StartLine::Request { method, .. } => {
                let sender = if from_is_caller {
                    Side::Caller
                } else {
                    Side::Callee
                };
                match method {
                    "INVITE" => {
                        call.invites += 1;
                        // A retry after a challenge or failure reopens an unanswered call.
                        if call.answer_ns.is_none() && call.closing.is_some() && !call.cancelled {
                            call.closing = None;
                            call.end_ns = None;
                        }
                    }
                    "BYE" if call.closing.is_none() => {
                        call.closing = Some(if call.answer_ns.is_some() {
                            CallState::Completed
                        } else {
                            CallState::Cancelled
                        });
                        call.end_ns = Some(now);
                        call.hangup_by = Some(sender);
                        call.hangup_reason = m.reason_header.map(|r| cut(r).to_string());
                    }
                    "CANCEL" if call.answer_ns.is_none() => {
                        call.cancelled = true;
                        call.closing = Some(CallState::Cancelled);
                        call.end_ns = Some(now);
                        call.hangup_by = Some(sender);
                        call.hangup_reason = m.reason_header.map(|r| cut(r).to_string());
                    }
                    _ => {}
                }
                Some(sender)
            }
            StartLine::Response { code, reason } => {
                let sender = if from_is_caller {
                    Side::Callee
                } else {
                    Side::Caller
                };
                if m.cseq_method != Some("INVITE") {
                    return Some(sender);
                }
                call.responded = true;
                if sender == Side::Callee && call.callee_ua.is_none() {
                    call.callee_ua = m.server.or(m.user_agent).map(|u| cut(u).to_string());
                }
                if code > 100
                    && call.first_provisional_ns.is_none()
                    && call.answer_ns.is_none()
                    && code < 200
                {
                    call.first_provisional_ns = Some(now);
                }
                if (code == 180 || code == 183) && call.ringing_ns.is_none() {
                    call.ringing_ns = Some(now);
                }
                if code >= 200 && call.answer_ns.is_none() {
                    call.final_status = Some(code);
                    call.final_reason = Some(cut(reason).to_string());
                    if code < 300 {
                        call.answer_ns = Some(now);
                        call.closing = None;
                        call.end_ns = None;
                    } else if call.closing.is_none() || call.cancelled {
                        call.closing = Some(if call.cancelled {
                            CallState::Cancelled
                        } else {
                            CallState::Failed
                        });
                        call.end_ns.get_or_insert(now);
                    }
                }
                Some(sender)
            }
        }
    }

    fn apply_sdp(&mut self, idx: Idx, side: Side, body: &[u8]) {
        let parsed = sdp::parse(body);
        if parsed.bad_lines > 0 {
            if let Some(call) = self.calls.get_mut(idx) {
                call.anomalies += 1;
            }
            self.counters.anomaly("sdp_bad_line");
        }
        for med in &parsed.media {
            let (Some(addr), port) = (med.addr, med.port) else {
                self.counters.anomaly("sdp_media_without_address");
                continue;
            };
            if port == 0 || addr.is_unspecified() && med.direction == Direction::Inactive {
                continue;
            }
            let Some(call) = self.calls.get_mut(idx) else {
                return;
            };
            let rtpmaps: Box<[Rtpmap]> = med
                .rtpmaps
                .iter()
                .map(|r| Rtpmap::new(r.payload_type, r.encoding, r.clock_rate))
                .collect();
            // The same media offered again (session refresh, hold and
            // resume) reuses its description instead of filling the cap.
            let same = |d: &MediaDesc| d.owner == side && d.rtpmaps == rtpmaps;
            let desc = match call.media.iter().position(same) {
                Some(d) => d as u16,
                None if call.media.len() >= MAX_DESCS_PER_CALL => {
                    self.counters.anomaly("sdp_too_many_media_per_call");
                    break;
                }
                None => {
                    push_exact(
                        &mut call.media,
                        MediaDesc {
                            owner: side,
                            rtpmaps,
                        },
                    );
                    (call.media.len() - 1) as u16
                }
            };
            let rtp = med.proto.to_ascii_uppercase().contains("RTP");
            let rtcp = med.rtcp_port.unwrap_or(port.wrapping_add(1));
            for key in [(addr, port), (addr, rtcp)] {
                if let Some(e) = self.media.get_mut(&key) {
                    e.call = idx;
                    e.desc = desc;
                    e.rtp = rtp;
                } else if self.media.len() >= self.cfg.max_media {
                    self.counters.media_refused += 1;
                    continue;
                } else {
                    self.media.insert(
                        key,
                        MediaEntry {
                            call: idx,
                            desc,
                            rtp,
                            streams: Vec::new(),
                        },
                    );
                }
                if !call.media_keys.contains(&key) {
                    push_exact(&mut call.media_keys, key);
                }
            }
            // Streams on this address follow its latest description (RTP <-> T.38),
            // whichever call (or leg through a proxy) they were first seen in.
            if let Some(e) = self.media.get(&(addr, port)) {
                for &si in &e.streams {
                    if let Some(st) = self.streams.get_mut(si) {
                        if (st.key.dst, st.key.dport) == (addr, port)
                            || (st.key.src, st.key.sport) == (addr, port)
                        {
                            st.closed = !rtp;
                        }
                    }
                }
            }
        }
    }

    fn media_datagram(
        &mut self,
        now: i64,
        src: IpAddr,
        sport: u16,
        dst: IpAddr,
        dport: u16,
        payload: &[u8],
    ) {
        let Ok(h) = RtpHeader::parse(payload) else {
            let entry = self
                .media
                .get(&(dst, dport))
                .or_else(|| self.media.get(&(src, sport)))
                .map(|e| (e.call, e.rtp));
            match entry.and_then(|(c, rtp)| if rtp { None } else { self.calls.get_mut(c) }) {
                Some(call) => call.t38_packets += 1,
                None => self.owned.udp_untracked += 1,
            }
            return;
        };
        let key = StreamKey {
            src,
            dst,
            sport,
            dport,
            ssrc: h.ssrc,
        };
        let pkt = calliper_rtp::Packet {
            arrival_ns: now,
            seq: h.seq,
            timestamp: h.timestamp,
            payload_type: h.payload_type,
            marker: h.marker,
            bytes: payload.len() as u32,
        };
        if let Some(si) = self.stream_id(&key) {
            let start = (h.header_len as usize).min(payload.len());
            let end = (start + h.payload_len as usize).min(payload.len());
            self.stream_packet(si, &pkt, &payload[start..end], now);
            return;
        }
        let entry = self.media_entry(&key);
        if let Some((e, by_dst)) = entry {
            if e.rtp {
                self.new_call_stream(key, e, by_dst, &pkt, now);
            } else if let Some(call) = self.calls.get_mut(e.call) {
                call.t38_packets += 1;
            }
        } else if self.cfg.rtp_heuristic {
            self.new_candidate(key, &pkt, now);
        } else {
            self.owned.udp_untracked += 1;
        }
    }

    /// An RTCP datagram: counted, and applied to its call (by either address).
    fn rtcp_datagram(&mut self, src: IpAddr, sport: u16, dst: IpAddr, dport: u16, payload: &[u8]) {
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
    fn rtcp_in_call(&mut self, call: Idx, payload: &[u8]) {
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

    fn stream_packet(&mut self, si: Idx, pkt: &calliper_rtp::Packet, body: &[u8], now: i64) {
        let Some(s) = self.streams.get_mut(si) else {
            return;
        };
        if s.closed {
            if let Some(call) = s.call.and_then(|c| self.calls.get_mut(c)) {
                call.t38_packets += 1;
            }
            return;
        }
        if s.call.is_none() {
            if let Some(list) = self.orphan_packet(si, pkt) {
                self.streams.touch(si, list, now);
            }
            return;
        }
        if pkt.payload_type != s.last_pt {
            s.last_pt = pkt.payload_type;
            s.last_clock = match (s.call, s.desc) {
                (Some(c), Some(d)) => self
                    .calls
                    .get(c)
                    .map_or(Codec::static_clock(pkt.payload_type), |call| {
                        resolve(call.media.get(d as usize), pkt.payload_type).clock
                    }),
                _ => Codec::static_clock(pkt.payload_type),
            };
        }
        s.stats.update(pkt, s.last_clock);
        if let ClockRate::Event(hz) = s.last_clock {
            // Durations are in units of the event's own clock (RFC 4733 §2.3).
            s.dtmf
                .get_or_insert_with(Default::default)
                .update(now, pkt.timestamp, body, hz);
        }
        self.owned.rtp_in_calls += 1;
        // Refreshing the call's place on its activity list touches three
        // other entries (cache misses); once a second is precise enough for
        // timeouts of seconds to minutes, and the record's end time takes the
        // streams' exact last packet.
        if now - s.touched_call_ns >= TOUCH_EVERY_NS {
            s.touched_call_ns = now;
            if let Some(c) = s.call {
                self.pending_touches.push((now, c));
            }
        }
    }

    /// The stream with this key.
    fn stream_id(&mut self, k: &StreamKey) -> Option<Idx> {
        let hash = match self.key_hint.take() {
            Some((hinted, h)) if hinted == *k => h,
            _ => k.hash(self.key_seed),
        };
        let streams = &self.streams;
        self.stream_ids
            .find(hash, |i| streams.get(i).is_some_and(|s| s.key == *k))
    }

    /// A packet of a stream without a call: confirm candidates, adopt the
    /// stream into a call if SDP has since described its address.
    /// Returns the list the stream should be on, or None if it was dropped.
    fn orphan_packet(&mut self, si: Idx, pkt: &calliper_rtp::Packet) -> Option<u8> {
        let s = self.streams.get_mut(si)?;
        if s.probation > 0 {
            let step = pkt.seq.wrapping_sub(s.stats.seq.extended_max() as u16);
            if step > 10 || pkt.payload_type != s.stats.payload_type {
                self.drop_candidate(si);
                self.owned.udp_untracked += 1;
                return None;
            }
            // A repeat (RFC 4733 end packets are sent three times) neither confirms nor refutes.
            if step != 0 {
                s.probation -= 1;
            }
        }
        let clock = Codec::static_clock(pkt.payload_type);
        s.stats.update(pkt, clock);
        let key = s.key;
        let confirmed = s.probation == 0;
        if confirmed {
            let entry = self.media_entry(&key);
            self.owned.rtp_orphan += 1;
            if let Some((e, by_dst)) = entry {
                if self.adopt(si, e, by_dst) {
                    return None;
                }
            }
            return Some(LIST_ORPHAN);
        }
        self.owned.rtp_orphan += 1;
        Some(LIST_CANDIDATE)
    }

    /// The media entry for a stream: by destination (where SDP says the
    /// receiver listens), else by source (symmetric RTP).
    fn media_entry(&self, k: &StreamKey) -> Option<(MediaRef, bool)> {
        let r = |e: &MediaEntry| MediaRef {
            call: e.call,
            desc: e.desc,
            rtp: e.rtp,
        };
        self.media
            .get(&(k.dst, k.dport))
            .map(|e| (r(e), true))
            .or_else(|| self.media.get(&(k.src, k.sport)).map(|e| (r(e), false)))
    }

    /// Registers a stream with the media entries of its two addresses.
    fn register_stream(&mut self, si: Idx, k: &StreamKey) {
        for key in [(k.dst, k.dport), (k.src, k.sport)] {
            if let Some(e) = self.media.get_mut(&key) {
                if e.streams.len() < MAX_STREAMS_PER_CALL {
                    push_exact(&mut e.streams, si);
                }
            }
        }
    }

    /// Stores a new stream, within the stream cap: this engine's own, or in
    /// a sharded run the cap on all shards' streams together, so a sharded
    /// run refuses streams at the same table size as one engine.
    fn insert_stream(&mut self, stream: Stream) -> Option<Idx> {
        if let Some(c) = &self.shared {
            if !c.take_stream(self.cfg.max_streams) {
                return None;
            }
        }
        match self.streams.insert(stream) {
            Ok(si) => Some(si),
            Err(_) => {
                if let Some(c) = &self.shared {
                    c.give_back_stream();
                }
                None
            }
        }
    }

    /// Takes a place for one more stream in call `idx`: fewer than
    /// [`MAX_STREAMS_PER_CALL`] here and, when sharded, in all shards.
    fn admit_call_stream(&self, idx: Idx) -> bool {
        let Some(call) = self.calls.get(idx) else {
            return false;
        };
        call.streams.len() < MAX_STREAMS_PER_CALL
            && self
                .shared
                .as_ref()
                .is_none_or(|c| c.admit_call_stream(idx, call.serial))
    }

    /// Gives back a place [`Self::admit_call_stream`] took.
    fn release_call_stream(&self, idx: Idx) {
        if let (Some(c), Some(call)) = (&self.shared, self.calls.get(idx)) {
            c.release_call_stream(idx, call.serial);
        }
    }

    /// Removes a stream from the tables and the media entries that list it.
    fn remove_stream(&mut self, si: Idx) -> Option<Stream> {
        let s = self.streams.remove(si)?;
        if let Some(c) = &self.shared {
            c.give_back_stream();
        }
        self.stream_ids.remove(s.key.hash(self.key_seed), si);
        for key in [(s.key.dst, s.key.dport), (s.key.src, s.key.sport)] {
            if let Some(e) = self.media.get_mut(&key) {
                e.streams.retain(|&x| x != si);
            }
        }
        Some(s)
    }

    fn direction(owner: Side, by_dst: bool) -> StreamDirection {
        // The media entry's owner receives on that address.
        match (owner, by_dst) {
            (Side::Callee, true) | (Side::Caller, false) => StreamDirection::CallerToCallee,
            (Side::Caller, true) | (Side::Callee, false) => StreamDirection::CalleeToCaller,
        }
    }

    /// Moves an orphan stream into a call. False if the call cannot take it.
    fn adopt(&mut self, si: Idx, e: MediaRef, by_dst: bool) -> bool {
        if !self.admit_call_stream(e.call) {
            return false;
        }
        let Some(call) = self.calls.get_mut(e.call) else {
            return false;
        };
        push_exact(&mut call.streams, si);
        let desc = call.media.get(e.desc as usize);
        let direction = desc.map_or(StreamDirection::Unknown, |d| {
            Self::direction(d.owner, by_dst)
        });
        let Some(s) = self.streams.get_mut(si) else {
            return false;
        };
        s.last_pt = s.stats.payload_type;
        s.last_clock = resolve(desc, s.stats.payload_type).clock;
        s.call = Some(e.call);
        s.desc = Some(e.desc);
        s.direction = direction;
        // Call streams live and die with their call: take it off the orphan lists.
        self.streams.detach(si);
        let key = self.streams.get(si).map(|s| s.key);
        if let Some(key) = key {
            self.register_stream(si, &key);
        }
        self.owned.rtp_orphan -= s_packets(&self.streams, si).min(self.owned.rtp_orphan);
        self.owned.rtp_in_calls += s_packets(&self.streams, si);
        true
    }

    fn new_call_stream(
        &mut self,
        key: StreamKey,
        e: MediaRef,
        by_dst: bool,
        pkt: &calliper_rtp::Packet,
        now: i64,
    ) {
        if !self.admit_call_stream(e.call) {
            self.owned.anomaly("rtp_too_many_streams_per_call");
            return;
        }
        let Some(call) = self.calls.get(e.call) else {
            return;
        };
        let desc = call.media.get(e.desc as usize);
        let codec = resolve(desc, pkt.payload_type);
        let direction = desc.map_or(StreamDirection::Unknown, |d| {
            Self::direction(d.owner, by_dst)
        });
        let stream = Stream {
            links: Links::default(),
            key,
            call: Some(e.call),
            desc: Some(e.desc),
            direction,
            last_pt: pkt.payload_type,
            last_clock: codec.clock,
            stats: StreamStats::new(pkt, codec.clock),
            touched_call_ns: now,
            probation: 0,
            dtmf: None,
            rtcp: RtcpView::default(),
            closed: false,
        };
        let Some(si) = self.insert_stream(stream) else {
            self.release_call_stream(e.call);
            self.owned.streams_refused += 1;
            return;
        };
        if let Some(call) = self.calls.get_mut(e.call) {
            push_exact(&mut call.streams, si);
        }
        self.stream_ids.insert(key.hash(self.key_seed), si);
        self.register_stream(si, &key);
        self.owned.streams += 1;
        self.owned.rtp_in_calls += 1;
        self.pending_touches.push((now, e.call));
    }

    fn new_candidate(&mut self, key: StreamKey, pkt: &calliper_rtp::Packet, now: i64) {
        let own = self.streams.list_len(LIST_CANDIDATE);
        let full = match (&self.shared, self.shard) {
            (Some(c), Some((i, _))) => c.candidates_full(i as usize, own, self.cfg.max_candidates),
            _ => own >= self.cfg.max_candidates,
        };
        if full {
            if let Some((old, _)) = self.streams.oldest(LIST_CANDIDATE) {
                self.drop_candidate(old);
            }
        }
        let codec = Codec::resolve(pkt.payload_type, None);
        let stream = Stream {
            links: Links::default(),
            key,
            call: None,
            desc: None,
            direction: StreamDirection::Unknown,
            last_pt: pkt.payload_type,
            last_clock: codec.clock,
            stats: StreamStats::new(pkt, codec.clock),
            touched_call_ns: now,
            probation: HEURISTIC_CONFIRM - 1,
            dtmf: None,
            rtcp: RtcpView::default(),
            closed: false,
        };
        let Some(si) = self.insert_stream(stream) else {
            self.owned.streams_refused += 1;
            return;
        };
        self.stream_ids.insert(key.hash(self.key_seed), si);
        self.streams.touch(si, LIST_CANDIDATE, now);
        self.owned.rtp_orphan += 1;
    }

    fn drop_candidate(&mut self, si: Idx) {
        if let Some(s) = self.remove_stream(si) {
            self.owned.candidates_rejected += 1;
            self.owned.udp_untracked += s.stats.packets;
            self.owned.rtp_orphan -= s.stats.packets.min(self.owned.rtp_orphan);
        }
    }

    /// Ends whatever has been idle past its timeout, looking only at list heads.
    fn expire(&mut self) {
        let now = self.now;
        let call_lists = [
            (LIST_CLOSING, self.cfg.call_grace_ns),
            (LIST_ACTIVE, self.cfg.call_idle_timeout_ns),
            (LIST_UNANSWERED, self.cfg.unanswered_timeout_ns),
        ];
        for (list, timeout) in call_lists {
            while let Some((i, t)) = self.calls.oldest(list) {
                if now - t < timeout {
                    break;
                }
                self.finish_call(i, Ending::Normal);
            }
        }
        while let Some((i, t)) = self.streams.oldest(LIST_CANDIDATE) {
            if now - t < self.cfg.stream_idle_timeout_ns {
                break;
            }
            self.drop_candidate(i);
        }
        while let Some((i, t)) = self.streams.oldest(LIST_ORPHAN) {
            if now - t < self.cfg.stream_idle_timeout_ns {
                break;
            }
            self.finish_orphan(i);
        }
    }

    fn finish_orphan(&mut self, si: Idx) {
        if let Some(s) = self.remove_stream(si) {
            self.owned.streams += 1;
            self.out
                .push(Record::Stream(Box::new(stream_record(&s, None))));
        }
    }

    fn finish_call(&mut self, idx: Idx, ending: Ending) {
        let Some(call) = self.calls.remove(idx) else {
            return;
        };
        let evicted = ending == Ending::Evicted;
        self.call_ids.remove(&*call.call_id);
        let mut last_activity = call.links.stamp;
        let mut streams = Vec::with_capacity(call.streams.len());
        for &si in &call.streams {
            if let Some(s) = self.remove_stream(si) {
                let desc = s.desc.and_then(|d| call.media.get(d as usize));
                last_activity = last_activity.max(s.stats.last_ns);
                streams.push(stream_record(&s, desc));
            }
        }
        for key in &call.media_keys {
            if self.media.get(key).is_some_and(|e| e.call == idx) {
                self.media.remove(key);
            }
        }
        if ending == Ending::Discarded {
            return;
        }
        streams.sort_by_key(|s| (s.first_ns, s.src_port, s.dst_port, s.ssrc));
        let state = if evicted {
            CallState::Evicted
        } else if let Some(s) = call.closing {
            s
        } else if call.answer_ns.is_some() {
            CallState::Answered
        } else if call.final_status.is_some_and(|c| c >= 300) {
            CallState::Failed
        } else {
            CallState::NoFinalResponse
        };
        let end_ns = call.end_ns.unwrap_or(last_activity.max(call.invite_ns));
        let ms = |a: i64, b: i64| (b - a) as f64 / 1e6;
        let setup_delay_ms = match (call.first_provisional_ns, call.answer_ns, call.final_status) {
            (Some(p), _, _) => Some(ms(call.invite_ns, p)),
            (None, Some(a), _) => Some(ms(call.invite_ns, a)),
            (None, None, Some(_)) => call.end_ns.map(|e| ms(call.invite_ns, e)),
            _ => None,
        };
        self.out.push(Record::Call(Box::new(CallRecord {
            serial: call.serial,
            call_id: call.call_id.into(),
            from: call.from,
            to: call.to,
            caller_user_agent: call.caller_ua,
            callee_user_agent: call.callee_ua,
            caller_ip: call.caller.0,
            caller_port: call.caller.1,
            callee_ip: call.callee.0,
            callee_port: call.callee.1,
            invite_ns: call.invite_ns,
            first_provisional_ns: call.first_provisional_ns,
            ringing_ns: call.ringing_ns,
            answer_ns: call.answer_ns,
            end_ns,
            duration_ms: call.answer_ns.map_or(0.0, |a| ms(a, end_ns).max(0.0)),
            setup_delay_ms,
            final_status: call.final_status,
            final_reason: call.final_reason,
            state,
            hangup_by: call.hangup_by,
            hangup_reason: call.hangup_reason,
            sip_messages: call.sip_messages,
            invites: call.invites,
            rtcp_packets: call.rtcp_packets,
            t38_packets: call.t38_packets,
            anomalies: call.anomalies,
            dtmf_digits: dtmf_digits(&streams),
            streams,
        })));
    }

    /// Ends everything still open (end of input). Calls come out in order of
    /// their first INVITE, then orphan streams in order of their first packet.
    pub fn finish(&mut self) {
        // Other shards may still be analysing: the streams ended here must
        // not free room in the shared stream cap for them.
        self.shared = None;
        self.apply_touches();
        if self.tcp.bytes() > 0 {
            // Signalling cut off by the end of the capture.
            self.counters.anomaly("sip_tcp_incomplete_at_end");
        }
        if !self.defrag.is_empty() {
            self.counters.anomaly("ip_fragments_incomplete_at_end");
        }
        self.sync_counters();
        let mut calls: Vec<(i64, Idx)> = self
            .calls
            .live_indices()
            .into_iter()
            .filter_map(|i| self.calls.get(i).map(|c| (c.invite_ns, i)))
            .collect();
        calls.sort_unstable();
        for (_, i) in calls {
            self.finish_call(i, Ending::Normal);
        }
        let mut orphans: Vec<(i64, Idx, bool)> = self
            .streams
            .live_indices()
            .into_iter()
            .filter_map(|i| {
                self.streams
                    .get(i)
                    .map(|s| (s.stats.first_ns, i, s.probation == 0))
            })
            .collect();
        orphans.sort_unstable();
        for (_, i, confirmed) in orphans {
            if confirmed {
                self.finish_orphan(i);
            } else {
                self.drop_candidate(i);
            }
        }
    }
}

/// A stream as its receiver reports it in RTCP.
#[derive(Debug, Clone, Copy, Default)]
struct RtcpView {
    reports: u32,
    max_fraction_lost: u8,
    cumulative_lost: i64,
    max_jitter_ms: f64,
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

/// `n` in decimal, written into `buf`.
fn decimal(mut n: u16, buf: &mut [u8; 5]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[at..]).unwrap_or("?")
}

/// How a call leaves the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Ended by signalling or timeout: write its record.
    Normal,
    /// Pushed out by the call cap: write its record, marked evicted.
    Evicted,
    /// An unanswered INVITE pushed out by the flood cap: counted only.
    Discarded,
}

/// A SIP start line is shorter than this; resynchronisation keeps this many
/// trailing bytes in case one is cut in two.
const MAX_START_LINE: usize = 1024;

/// Offset of the next line that starts a SIP message, after the first byte.
fn find_message_start(buf: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', buf)
        .map(|i| i + 1)
        .find(|&i| i < buf.len() && calliper_sip::looks_like_sip(&buf[i..]))
}

/// Digits of all streams of a call in order of arrival.
pub(crate) fn dtmf_digits(streams: &[StreamRecord]) -> String {
    let mut events: Vec<(i64, char)> = streams
        .iter()
        .flat_map(|s| s.dtmf.iter().map(|e| (e.start_ns, e.digit)))
        .collect();
    events.sort_unstable();
    events.into_iter().map(|e| e.1).collect()
}

fn s_packets(streams: &Slab<Stream>, si: Idx) -> u64 {
    streams.get(si).map_or(0, |s| s.stats.packets)
}

/// Resolves a payload type through a media description's rtpmaps, else the static table.
fn resolve(desc: Option<&MediaDesc>, pt: u8) -> Codec {
    let map = desc.and_then(|d| d.rtpmaps.iter().find(|r| r.payload_type == pt));
    Codec::resolve(pt, map.map(|r| (r.name(), r.clock_rate)))
}

fn stream_record(s: &Stream, desc: Option<&MediaDesc>) -> StreamRecord {
    let st = &s.stats;
    let expected = st.seq.expected();
    let lost = st.seq.lost();
    let mut r = StreamRecord {
        src: s.key.src,
        src_port: s.key.sport,
        dst: s.key.dst,
        dst_port: s.key.dport,
        ssrc: s.key.ssrc,
        direction: s.direction,
        payload_type: st.payload_type,
        codec: resolve(desc, st.payload_type).name,
        first_ns: st.first_ns,
        last_ns: st.last_ns,
        packets: st.packets,
        bytes: st.bytes,
        expected,
        lost,
        loss_percent: if expected == 0 {
            0.0
        } else {
            lost as f64 * 100.0 / expected as f64
        },
        duplicates: st.seq.duplicates,
        out_of_order: st.seq.out_of_order,
        seq_resets: st.seq.resets,
        event_packets: st.event_packets,
        mean_jitter_ms: st.ws.mean_jitter,
        max_jitter_ms: st.ws.max_jitter,
        min_delta_ms: st.ws.min_delta,
        mean_delta_ms: st.ws.mean_delta,
        max_delta_ms: st.ws.max_delta,
        wireshark_expected: st.ws.expected(),
        wireshark_lost: st.ws.lost(),
        r_factor: 0.0,
        mos: 0.0,
        dtmf: s.dtmf.as_ref().map_or(Vec::new(), |d| d.events.clone()),
        rtcp_reports: s.rtcp.reports,
        rtcp_max_fraction_lost: s.rtcp.max_fraction_lost as f64 * 100.0 / 256.0,
        rtcp_cumulative_lost: s.rtcp.cumulative_lost,
        rtcp_max_jitter_ms: s.rtcp.max_jitter_ms,
    };
    r.estimate_quality();
    r
}
