//! The compressor: one context per flow, chosen by (addresses, ports,
//! SSRC). When all are taken, a new flow takes the least recently used
//! one: the contexts sit on a list in order of use, so neither finding nor
//! reusing one scans the table.

use crate::delta;
use crate::header::{self, get16, get32, put16, Key, View, MAX_HEADER};
use crate::non_tcp::{self, NonTcpKey};
use crate::{enhanced, Config, Kind};
use hashbrown::HashMap;

/// What the compressor did, for an operator's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompressorStats {
    /// Packets given to [`Compressor::compress`].
    pub packets: u64,
    /// Sent as plain IP (not IPv4/UDP/RTP, or not safely compressible).
    pub uncompressed: u64,
    /// Sent as FULL_HEADER.
    pub full_headers: u64,
    /// Sent as COMPRESSED_RTP.
    pub compressed_rtp: u64,
    /// Sent as COMPRESSED_UDP.
    pub compressed_udp: u64,
    /// Sent as COMPRESSED_NON_TCP (UDP that is not RTP, and IPv6).
    pub compressed_non_tcp: u64,
    /// IP/UDP/RTP header bytes of the packets that had a context.
    pub header_bytes_in: u64,
    /// Bytes those packets took on the link, less their payload.
    pub header_bytes_out: u64,
    /// Contexts taken from an older flow because all were in use.
    pub contexts_reused: u64,
    /// Contexts the decompressor reported invalid (CONTEXT_STATE).
    pub invalidations: u64,
    /// CONTEXT_STATE packets that could not be read.
    pub bad_context_states: u64,
}

impl CompressorStats {
    /// Counts a packet of `packet_len` bytes (headers `view`) sent as
    /// `kind` in `out_len` bytes.
    fn count(&mut self, kind: Kind, view: View, packet_len: usize, out_len: usize) {
        match kind {
            Kind::Ip => {
                self.uncompressed += 1;
                return;
            }
            Kind::FullHeader => self.full_headers += 1,
            Kind::CompressedRtp => self.compressed_rtp += 1,
            Kind::CompressedUdp => self.compressed_udp += 1,
            Kind::CompressedNonTcp => self.compressed_non_tcp += 1,
        }
        self.header_bytes_in += view.len as u64;
        self.header_bytes_out += (out_len - (packet_len - view.len)) as u64;
    }
}

/// One flow's state, as the decompressor will hold it.
pub(crate) struct Context {
    key: FlowKey,
    /// The headers of the last packet sent (IPv4, UDP, RTP with CSRCs).
    pub(crate) header: [u8; MAX_HEADER],
    pub(crate) view: View,
    /// The 4-bit link sequence of the last packet sent.
    pub(crate) sequence: u8,
    pub(crate) id_delta: u16,
    pub(crate) timestamp_delta: u32,
    pub(crate) since_full: u32,
    pub(crate) full_at_ns: u64,
    pub(crate) invalid: bool,
    /// Packets carry RFC 3545's header checksum (the flow has no UDP checksum).
    header_checksum: bool,
    /// RFC 3545: the generation of the current FULL_HEADER sequence.
    pub(crate) generation: u8,
    /// FULL_HEADERs still to send in the current sequence (N+1 in all).
    pub(crate) full_left: u8,
    /// Packets that must still carry each change (RFC 3545 repeats).
    pub(crate) left: Repeats,
    /// The last timestamp and IPv4 ID steps, so a one-off jump (a new
    /// talkspurt) leaves the deltas alone and a lasting change sets them.
    pub(crate) last_timestamp_step: u32,
    pub(crate) last_id_step: u16,
    /// Non-TCP contexts: compressed packets allowed before the next full
    /// header (RFC 2507's slow start, F_PERIOD).
    pub(crate) full_period: u32,
}

/// What a context compresses: an RTP flow, or a non-TCP one (RFC 2507).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlowKey {
    Rtp(Key),
    NonTcp(NonTcpKey),
}

/// For each field a change of which must cross in N+1 packets, how many
/// packets must still carry it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Repeats {
    pub(crate) id: u8,
    pub(crate) id_delta: u8,
    pub(crate) seq: u8,
    pub(crate) timestamp: u8,
    pub(crate) timestamp_delta: u8,
    pub(crate) payload_type: u8,
    pub(crate) csrcs: u8,
}

/// The compressing end of a link.
pub struct Compressor {
    config: Config,
    flows: HashMap<Key, u32>,
    non_tcp_flows: HashMap<NonTcpKey, u32>,
    contexts: Vec<Option<Context>>,
    /// The contexts in order of use: `recency[i]` = (newer, older)
    /// neighbours of context i; `newest` and `oldest` its ends.
    recency: Vec<(u32, u32)>,
    newest: u32,
    oldest: u32,
    /// Counters.
    pub stats: CompressorStats,
}

impl Compressor {
    /// A compressor for `config` (checked with [`Config::check`]).
    pub fn new(config: Config) -> Result<Compressor, String> {
        config.check()?;
        Ok(Compressor {
            config,
            flows: HashMap::new(),
            non_tcp_flows: HashMap::new(),
            contexts: (0..config.contexts).map(|_| None).collect(),
            // Initially id 0 is the oldest, so ids are taken in order.
            recency: (0..config.contexts).map(|i| (i + 1, i.wrapping_sub(1))).collect(),
            newest: config.contexts - 1,
            oldest: 0,
            stats: CompressorStats::default(),
        })
    }

    /// Compresses the IP datagram `packet` seen at `now_ns` into `out`
    /// (cleared first): the link payload, whose PPP protocol is the
    /// returned kind's [`Kind::protocol`].
    pub fn compress(&mut self, packet: &[u8], now_ns: u64, out: &mut Vec<u8>) -> Kind {
        out.clear();
        self.stats.packets += 1;
        let Some(view) = header::view(packet) else {
            return self.compress_non_tcp(packet, now_ns, out);
        };
        let key = header::key(packet, view);
        let (cid, fresh) = self.context_for(FlowKey::Rtp(key));
        let config = self.config;
        let ctx = self.contexts[cid as usize].as_mut().expect("context_for fills it");
        let restart = fresh || needs_full(ctx, packet, view, now_ns, &config);
        let kind = if restart || ctx.full_left > 0 {
            full_header(ctx, cid, packet, view, now_ns, restart, &config, out);
            Kind::FullHeader
        } else if config.repeats > 0 {
            enhanced::compress(ctx, cid, packet, view, &config, out)
        } else if !compressed_rtp(ctx, cid, packet, view, &config, out) {
            compressed_udp(ctx, cid, packet, view, &config, out);
            Kind::CompressedUdp
        } else {
            Kind::CompressedRtp
        };
        self.stats.count(kind, view, packet.len(), out.len());
        kind
    }

    /// UDP that is not RTP over IPv4, and IPv6/UDP: COMPRESSED_NON_TCP.
    fn compress_non_tcp(&mut self, packet: &[u8], now_ns: u64, out: &mut Vec<u8>) -> Kind {
        let Some(view) = header::non_tcp_view(packet) else {
            out.extend_from_slice(packet);
            self.stats.count(Kind::Ip, View { ihl: 0, len: 0 }, packet.len(), out.len());
            return Kind::Ip;
        };
        let (cid, fresh) = self.context_for(FlowKey::NonTcp(non_tcp::key(packet, view)));
        let config = self.config;
        let ctx = self.contexts[cid as usize].as_mut().expect("context_for fills it");
        let kind = non_tcp::compress(ctx, cid, fresh, packet, view, now_ns, &config, out);
        self.stats.count(kind, view, packet.len(), out.len());
        kind
    }

    /// Reads a CONTEXT_STATE packet from the decompressor: each context it
    /// marks invalid is refreshed with the next FULL_HEADER.
    pub fn context_state(&mut self, payload: &[u8]) {
        let wide = match payload.first() {
            Some(1) => false,
            Some(2) => true,
            _ => {
                self.stats.bad_context_states += 1;
                return;
            }
        };
        let count = payload.get(1).copied().unwrap_or(0) as usize;
        let entry = if wide { 4 } else { 3 };
        if payload.len() != 2 + count * entry {
            self.stats.bad_context_states += 1;
            return;
        }
        for e in payload[2..].chunks_exact(entry) {
            let (cid, flags) =
                if wide { (get16(e, 0) as usize, e[2]) } else { (e[0] as usize, e[1]) };
            if flags & 0x80 != 0 {
                if let Some(Some(ctx)) = self.contexts.get_mut(cid) {
                    ctx.invalid = true;
                    self.stats.invalidations += 1;
                }
            }
        }
    }

    /// The context of `key`, and whether it is new (a FULL_HEADER is due).
    fn context_for(&mut self, key: FlowKey) -> (u32, bool) {
        let known = match &key {
            FlowKey::Rtp(k) => self.flows.get(k),
            FlowKey::NonTcp(k) => self.non_tcp_flows.get(k),
        };
        if let Some(&cid) = known {
            self.touch(cid);
            return (cid, false);
        }
        let cid = self.oldest;
        self.touch(cid);
        let slot = &mut self.contexts[cid as usize];
        // A reused id keeps its link sequence running: were the new flow's
        // FULL_HEADER lost, its next packet must show a gap, not fit the
        // old flow's context.
        let (mut sequence, mut generation) = (15, 0);
        if let Some(old) = slot.take() {
            match old.key {
                FlowKey::Rtp(k) => self.flows.remove(&k),
                FlowKey::NonTcp(k) => self.non_tcp_flows.remove(&k),
            };
            self.stats.contexts_reused += 1;
            sequence = old.sequence;
            // And its generation: the new flow's FULL_HEADERs start a new one.
            generation = old.generation;
        }
        *slot = Some(Context {
            key,
            header: [0; MAX_HEADER],
            view: View { ihl: 0, len: 0 },
            sequence,
            id_delta: 1,
            timestamp_delta: 0,
            since_full: 0,
            full_at_ns: 0,
            invalid: true,
            header_checksum: false,
            generation,
            full_left: 0,
            left: Repeats::default(),
            last_timestamp_step: 0,
            last_id_step: 0,
            full_period: 1,
        });
        match key {
            FlowKey::Rtp(k) => self.flows.insert(k, cid),
            FlowKey::NonTcp(k) => self.non_tcp_flows.insert(k, cid),
        };
        (cid, true)
    }
}

impl Compressor {
    /// Moves context `cid` to the newest end of the recency list.
    fn touch(&mut self, cid: u32) {
        if cid == self.newest {
            return;
        }
        let (newer, older) = self.recency[cid as usize];
        self.recency[newer as usize].1 = older;
        if cid == self.oldest {
            self.oldest = newer;
        } else {
            self.recency[older as usize].0 = newer;
        }
        self.recency[cid as usize] = (u32::MAX, self.newest);
        self.recency[self.newest as usize].0 = cid;
        self.newest = cid;
    }
}

/// Whether the decompressor's copy must be replaced whole: invalid or old,
/// or a change in the IPv4 or UDP fields that compressed packets never carry.
fn needs_full(ctx: &Context, p: &[u8], v: View, now_ns: u64, config: &Config) -> bool {
    let h = &ctx.header;
    let old = ctx.view;
    let ihl = v.ihl;
    ctx.invalid
        || (config.max_period != 0 && ctx.since_full >= config.max_period)
        || (config.max_time_ns != 0 && now_ns.saturating_sub(ctx.full_at_ns) >= config.max_time_ns)
        || old.ihl != ihl
        // Version to TOS; flags, fragment, TTL, protocol; addresses and options.
        || p[..2] != h[..2]
        || p[6..10] != h[6..10]
        || p[12..ihl] != h[12..ihl]
        // A UDP checksum present or absent for the whole context.
        || (get16(p, ihl + 6) == 0) != (get16(h, ihl + 6) == 0)
        // Enhanced COMPRESSED_UDP carries no RTP version, padding or extension bit.
        || (config.repeats > 0 && p[v.rtp()] & 0xF0 != h[old.rtp()] & 0xF0)
}

/// Sends the datagram whole, the context id and link sequence in its IPv4
/// total length and UDP length (RFC 2508 §3.3.1). `restart` begins a
/// sequence: one FULL_HEADER in plain RFC 2508 (generation 0 for IPv4),
/// N+1 under RFC 3545, which marks each sequence with a new generation so
/// the decompressor counts N from one sequence only.
#[allow(clippy::too_many_arguments)]
fn full_header(
    ctx: &mut Context,
    cid: u32,
    p: &[u8],
    v: View,
    now_ns: u64,
    restart: bool,
    config: &Config,
    out: &mut Vec<u8>,
) {
    // Each FULL_HEADER resets the deltas at the decompressor.
    ctx.id_delta = 1;
    ctx.timestamp_delta = 0;
    if restart {
        if config.repeats > 0 {
            ctx.generation = (ctx.generation + 1) & 0x3F;
        }
        ctx.full_left = config.repeats + 1;
        ctx.left = Repeats::default();
    } else {
        // A repeat: a decompressor that lost it predicts from an earlier
        // one, so what changed since must be repeated after it as well.
        enhanced::note_changes(ctx, p, v, config.repeats + 1, false);
        enhanced::sent(ctx);
    }
    ctx.full_left -= 1;
    ctx.sequence = (ctx.sequence + 1) & 0x0F;
    out.extend_from_slice(p);
    ctx.header_checksum = config.header_checksum && get16(p, v.ihl + 6) == 0;
    if ctx.header_checksum {
        // RFC 3545 §2.2: the FULL_HEADER carries the checksum too.
        put16(out, v.ihl + 6, header::header_checksum(p, v));
    }
    // The sequence, with RFC 3545's C flag beside it.
    let seq = ctx.sequence as u16 | (ctx.header_checksum as u16) << 4;
    let generation = (ctx.generation as u16) << 8;
    let (first, second) = if config.wide() {
        (0xC000 | generation | seq, cid as u16)
    } else {
        (0x4000 | generation | cid as u16, seq)
    };
    put16(out, 2, first);
    put16(out, v.ihl + 4, second);
    remember(ctx, p, v);
    ctx.since_full = 0;
    ctx.full_at_ns = now_ns;
    ctx.invalid = false;
    ctx.last_timestamp_step = 0;
    ctx.last_id_step = 0;
}

/// Writes the context id and the flag byte `flags` (with the link sequence).
pub(crate) fn start(ctx: &mut Context, cid: u32, flags: u8, config: &Config, out: &mut Vec<u8>) {
    ctx.sequence = (ctx.sequence + 1) & 0x0F;
    if config.wide() {
        out.extend_from_slice(&(cid as u16).to_be_bytes());
    } else {
        out.push(cid as u8);
    }
    out.push(flags | ctx.sequence);
}

/// COMPRESSED_RTP (RFC 2508 §3.3.2), or false (nothing written) when the
/// RTP header changed in a field it cannot carry.
fn compressed_rtp(
    ctx: &mut Context,
    cid: u32,
    p: &[u8],
    v: View,
    config: &Config,
    out: &mut Vec<u8>,
) -> bool {
    let (h, old) = (&ctx.header, ctx.view);
    let (r, hr) = (v.rtp(), old.rtp());
    // Version, padding, extension and payload type must stay.
    if p[r] & 0xF0 != h[hr] & 0xF0 || p[r + 1] & 0x7F != h[hr + 1] & 0x7F {
        return false;
    }
    let (id_delta, i) = id_change(ctx, p);
    let seq_delta = get16(p, r + 2).wrapping_sub(get16(h, hr + 2));
    let ts_delta = get32(p, r + 4).wrapping_sub(get32(h, hr + 4));
    let s = seq_delta != 1;
    let t = ts_delta != ctx.timestamp_delta;
    if t && delta::len(ts_delta as i32) == 0 {
        return false;
    }
    let m = p[r + 1] & 0x80 != 0;
    let csrcs_changed = p[r] & 0x0F != h[hr] & 0x0F || p[r + 12..v.len] != h[hr + 12..old.len];
    let bits = (m as u8) << 7 | (s as u8) << 6 | (t as u8) << 5 | (i as u8) << 4;
    let extended = csrcs_changed || bits == 0xF0;
    start(ctx, cid, if extended { 0xF0 } else { bits }, config, out);
    checksum(ctx, p, v, out);
    if extended {
        out.push(bits | (p[r] & 0x0F));
    }
    if i {
        send_id_delta(ctx, id_delta, out);
    }
    if s {
        delta::encode(seq_delta as i32, out);
    }
    if t {
        delta::encode(ts_delta as i32, out);
        ctx.timestamp_delta = ts_delta;
    }
    if extended {
        out.extend_from_slice(&p[r + 12..v.len]);
    }
    out.extend_from_slice(&p[v.len..]);
    remember(ctx, p, v);
    ctx.since_full += 1;
    true
}

/// COMPRESSED_UDP (RFC 2508 §3.3.3): IPv4 and UDP compressed, the RTP
/// header sent whole; the timestamp delta starts again from 0.
fn compressed_udp(
    ctx: &mut Context,
    cid: u32,
    p: &[u8],
    v: View,
    config: &Config,
    out: &mut Vec<u8>,
) {
    let (id_delta, i) = id_change(ctx, p);
    start(ctx, cid, (i as u8) << 4, config, out);
    checksum(ctx, p, v, out);
    if i {
        send_id_delta(ctx, id_delta, out);
    }
    out.extend_from_slice(&p[v.rtp()..]);
    remember(ctx, p, v);
    ctx.timestamp_delta = 0;
    ctx.since_full += 1;
}

/// The IPv4 ID's step since the last packet, and whether it differs from
/// the step the context expects (the I flag).
fn id_change(ctx: &Context, p: &[u8]) -> (u16, bool) {
    let step = get16(p, 4).wrapping_sub(get16(&ctx.header, 4));
    (step, step != ctx.id_delta)
}

/// Sends the new IPv4 ID step, which both ends then expect.
fn send_id_delta(ctx: &mut Context, step: u16, out: &mut Vec<u8>) {
    delta::encode(step as i32, out);
    ctx.id_delta = step;
}

/// The UDP checksum when the flow has one, else the header checksum when
/// the context carries it.
pub(crate) fn checksum(ctx: &Context, p: &[u8], v: View, out: &mut Vec<u8>) {
    if get16(p, v.ihl + 6) != 0 {
        out.extend_from_slice(&p[v.ihl + 6..v.ihl + 8]);
    } else if ctx.header_checksum {
        out.extend_from_slice(&header::header_checksum(p, v).to_be_bytes());
    }
}

pub(crate) fn remember(ctx: &mut Context, p: &[u8], v: View) {
    ctx.header[..v.len].copy_from_slice(&p[..v.len]);
    ctx.view = v;
}
