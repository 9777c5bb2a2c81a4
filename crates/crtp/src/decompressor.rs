//! The decompressor: rebuilds each datagram from its context, or drops it
//! and asks for a refresh (CONTEXT_STATE) when the context cannot be
//! trusted. It never gives back a datagram it had to guess.

use crate::header::{self, get16, put16, View, MAX_HEADER};
use crate::{protocol, Config, Kind};
use std::collections::VecDeque;

/// What the decompressor did, for an operator's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecompressorStats {
    /// Packets given to [`Decompressor::decompress`].
    pub packets: u64,
    /// Datagrams given back.
    pub restored: u64,
    /// Dropped because their context was missing or invalid: the packets
    /// lost to context damage.
    pub context_damaged: u64,
    /// Dropped as malformed.
    pub malformed: u64,
    /// Link sequence gaps that invalidated a context.
    pub sequence_gaps: u64,
    /// Rebuilt datagrams whose UDP checksum was wrong (context damage the
    /// link sequence missed): dropped, and their context invalidated.
    pub checksum_failures: u64,
    /// Packets of other PPP protocols (LCP, say): not this decompressor's.
    pub other_protocols: u64,
    /// Gaps of up to N packets bridged by RFC 3545's "twice" algorithm
    /// (the rebuilt datagram's checksum right).
    pub gaps_bridged: u64,
    /// CONTEXT_STATE packets produced.
    pub context_states: u64,
}

/// Why a packet gave no datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Its context is unknown or invalid (a refresh has been asked for).
    ContextDamaged,
    /// It cannot be read.
    Malformed(&'static str),
    /// Not a packet this decompressor handles (the PPP protocol number).
    Protocol(u16),
}

/// How long an invalid context waits before its refresh is asked again.
const RETRY_NS: u64 = 1_000_000_000;

struct Context {
    header: [u8; MAX_HEADER],
    view: View,
    sequence: u8,
    id_delta: u16,
    timestamp_delta: u32,
    checksum: bool,
    /// RFC 3545's header checksum in place of a UDP checksum (the C flag).
    header_checksum: bool,
    /// The FULL_HEADER's generation, returned in CONTEXT_STATE.
    generation: u8,
    valid: bool,
    /// When a refresh was last asked for (while invalid).
    asked_ns: Option<u64>,
    /// In the decompressor's `pending` list (kept across a refresh, so
    /// the list holds each context at most once).
    listed: bool,
    /// Set up for RTP (COMPRESSED_RTP, COMPRESSED_UDP), not only non-TCP.
    rtp: bool,
}

impl Context {
    fn empty() -> Context {
        Context {
            header: [0; MAX_HEADER],
            view: View { ihl: 0, len: 0 },
            sequence: 0,
            id_delta: 1,
            timestamp_delta: 0,
            checksum: false,
            header_checksum: false,
            generation: 0,
            valid: false,
            asked_ns: None,
            listed: false,
            rtp: false,
        }
    }
}

/// The decompressing end of a link.
pub struct Decompressor {
    config: Config,
    contexts: Vec<Option<Context>>,
    /// Contexts whose refresh is to be asked for, each listed at most
    /// once (their `listed` flag), so it never outgrows the table.
    pending: VecDeque<u32>,
    /// Counters.
    pub stats: DecompressorStats,
}

impl Decompressor {
    /// A decompressor for `config` (checked with [`Config::check`]).
    pub fn new(config: Config) -> Result<Decompressor, String> {
        config.check()?;
        Ok(Decompressor {
            config,
            contexts: (0..config.contexts).map(|_| None).collect(),
            pending: VecDeque::new(),
            stats: DecompressorStats::default(),
        })
    }

    /// Rebuilds into `out` (cleared first) the datagram a link packet of
    /// PPP protocol `protocol` carried, received at `now_ns`.
    pub fn decompress(
        &mut self,
        protocol: u16,
        payload: &[u8],
        now_ns: u64,
        out: &mut Vec<u8>,
    ) -> Result<Kind, Error> {
        out.clear();
        self.stats.packets += 1;
        let result = match protocol {
            protocol::IPV4 | protocol::IPV6 => {
                out.extend_from_slice(payload);
                Ok(Kind::Ip)
            }
            protocol::FULL_HEADER => self.full_header(payload, out).map(|_| Kind::FullHeader),
            protocol::COMPRESSED_NON_TCP => {
                self.non_tcp(payload, now_ns, out).map(|_| Kind::CompressedNonTcp)
            }
            protocol::COMPRESSED_RTP_8 | protocol::COMPRESSED_RTP_16 => self
                .compressed(payload, protocol == protocol::COMPRESSED_RTP_16, true, now_ns, out)
                .map(|_| Kind::CompressedRtp),
            protocol::COMPRESSED_UDP_8 | protocol::COMPRESSED_UDP_16 => self
                .compressed(payload, protocol == protocol::COMPRESSED_UDP_16, false, now_ns, out)
                .map(|_| Kind::CompressedUdp),
            other => Err(Error::Protocol(other)),
        };
        match result {
            Ok(_) => self.stats.restored += 1,
            Err(Error::ContextDamaged) => self.stats.context_damaged += 1,
            Err(Error::Protocol(_)) => self.stats.other_protocols += 1,
            Err(Error::Malformed(_)) => self.stats.malformed += 1,
        }
        if result.is_err() {
            out.clear();
        }
        result
    }

    /// The CONTEXT_STATE packet (payload of PPP protocol
    /// [`protocol::CONTEXT_STATE`]) asking for every context invalidated
    /// since the last call, or false when none is due.
    pub fn context_state(&mut self, out: &mut Vec<u8>) -> bool {
        out.clear();
        let wide = self.config.wide();
        out.extend_from_slice(&[if wide { 2 } else { 1 }, 0]);
        let mut count = 0u8;
        while count < 255 {
            // Oldest first, so no context waits behind newer ones.
            let Some(cid) = self.pending.pop_front() else {
                break;
            };
            let Some(ctx) = self.contexts[cid as usize].as_mut() else {
                continue;
            };
            ctx.listed = false;
            // A context refreshed meanwhile is no longer asked for.
            if ctx.valid {
                continue;
            }
            if wide {
                out.extend_from_slice(&(cid as u16).to_be_bytes());
            } else {
                out.push(cid as u8);
            }
            out.extend_from_slice(&[0x80 | ctx.sequence, ctx.generation]);
            count += 1;
        }
        if count == 0 {
            out.clear();
            return false;
        }
        out[1] = count;
        self.stats.context_states += 1;
        true
    }

    /// The context id and link sequence of a link packet, when it has them.
    pub fn context_of(protocol: u16, payload: &[u8]) -> Option<(u32, u8)> {
        match protocol {
            protocol::FULL_HEADER => {
                let ihl = (*payload.first()? as usize & 0x0F) * 4;
                let first = get16(payload.get(..4)?, 2);
                let second = get16(payload.get(ihl + 4..ihl + 6)?, 0);
                Some(if first & 0x8000 != 0 {
                    (second as u32, (first & 0x0F) as u8)
                } else {
                    ((first & 0xFF) as u32, (second & 0x0F) as u8)
                })
            }
            protocol::COMPRESSED_RTP_8 | protocol::COMPRESSED_UDP_8 => {
                Some((*payload.first()? as u32, payload.get(1)? & 0x0F))
            }
            protocol::COMPRESSED_RTP_16 | protocol::COMPRESSED_UDP_16 => {
                Some((get16(payload.get(..2)?, 0) as u32, payload.get(2)? & 0x0F))
            }
            _ => None,
        }
    }

    /// Whether a link packet follows its context's last packet directly (a
    /// valid context, the next link sequence), or needs no context at all:
    /// then no lost packet before it can be of its flow (short of 16), and
    /// a link may hand it over before such losses are repaired.
    pub fn in_step(&self, protocol: u16, payload: &[u8]) -> bool {
        if matches!(protocol, protocol::IPV4 | protocol::IPV6) {
            return true;
        }
        let Some((cid, sequence)) = Self::context_of(protocol, payload) else {
            return false;
        };
        self.contexts
            .get(cid as usize)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.valid && sequence == (c.sequence + 1) & 0x0F)
    }

    /// Entries in the refresh list (tests).
    #[cfg(test)]
    pub(crate) fn listed(&self) -> usize {
        self.pending.len()
    }

    fn full_header(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        // The first length field: IPv4's total length, IPv6's payload length.
        let (ihl, first_at, udp) = match payload.first().map(|b| b >> 4) {
            Some(4) if payload.len() >= 20 => {
                (((payload[0] & 0x0F) as usize) * 4, 2, payload[9] == 17)
            }
            Some(6) if payload.len() >= 40 => (40, 4, payload[6] == 17),
            _ => return Err(Error::Malformed("full header: not IPv4 or IPv6")),
        };
        if ihl < 20 || payload.len() < ihl + 8 || !udp {
            return Err(Error::Malformed("full header: not UDP"));
        }
        let first = get16(payload, first_at);
        let second = get16(payload, ihl + 4);
        if first & 0x4000 == 0 {
            return Err(Error::Malformed("full header: no sequence"));
        }
        // Either id width is read (RFC 2507 §5.1 makes them equivalent).
        let wide = first & 0x8000 != 0;
        // Beside the sequence, RFC 3545's C flag: a header checksum follows.
        let (cid, sequence, flag_c, zeros) = if wide {
            let c = first & 0x10 != 0;
            (second as usize, (first & 0x0F) as u8, c, first & 0x00E0)
        } else {
            let c = second & 0x10 != 0;
            ((first & 0xFF) as usize, (second & 0x0F) as u8, c, second & 0xFFE0)
        };
        if zeros != 0 {
            return Err(Error::Malformed("full header: bits that must be zero are not"));
        }
        if cid >= self.contexts.len() {
            return Err(Error::Malformed("full header: context id out of range"));
        }
        let length = payload.len() - if first_at == 4 { 40 } else { 0 };
        if length > u16::MAX as usize {
            return Err(Error::Malformed("full header: longer than its length field"));
        }
        out.extend_from_slice(payload);
        put16(out, first_at, length as u16);
        put16(out, ihl + 4, (payload.len() - ihl) as u16);
        // An IPv4 datagram whose payload starts like RTP can be an RTP
        // context; anything else is a non-TCP one (IP and UDP headers).
        let rtp = (first_at == 2 && out.len() >= ihl + 8 + 12 && out[ihl + 8] >> 6 == 2)
            .then(|| ihl + 8 + 12 + 4 * (out[ihl + 8] & 0x0F) as usize)
            .filter(|&len| len <= out.len() && len <= MAX_HEADER);
        let view = View { ihl, len: rtp.unwrap_or(ihl + 8) };
        if flag_c {
            if rtp.is_none() {
                return Err(Error::Malformed("full header: header checksum without RTP"));
            }
            let sum = get16(out, ihl + 6);
            put16(out, ihl + 6, 0);
            if header::header_checksum(out, view) != sum {
                return Err(Error::Malformed("full header: wrong header checksum"));
            }
        }
        let mut ctx = Context {
            view,
            sequence,
            header_checksum: flag_c,
            checksum: get16(out, ihl + 6) != 0,
            generation: ((first >> 8) & 0x3F) as u8,
            valid: true,
            listed: self.contexts[cid].as_ref().is_some_and(|c| c.listed),
            rtp: rtp.is_some(),
            ..Context::empty()
        };
        ctx.header[..view.len].copy_from_slice(&out[..view.len]);
        self.contexts[cid] = Some(ctx);
        Ok(())
    }

    /// COMPRESSED_NON_TCP (RFC 2507 §6 c, d): nothing coded as a
    /// difference, so only a context of another generation drops it.
    fn non_tcp(&mut self, payload: &[u8], now_ns: u64, out: &mut Vec<u8>) -> Result<(), Error> {
        let wide = payload.get(1).ok_or(Error::Malformed("non-TCP: context id"))? & 0x80 != 0;
        let (cid, flags, at) = if wide {
            let lsb = *payload.get(2).ok_or(Error::Malformed("non-TCP: context id"))?;
            ((payload[0] as usize) << 8 | lsb as usize, payload[1], 3)
        } else {
            (payload[0] as usize, payload[1], 2)
        };
        let (sequence, at) = if flags & 0x40 != 0 {
            let data = *payload.get(at).ok_or(Error::Malformed("non-TCP: data"))?;
            (Some(data & 0x0F), at + 1)
        } else {
            (None, at)
        };
        let Some(slot) = self.contexts.get_mut(cid) else {
            return Err(Error::Malformed("non-TCP: context id out of range"));
        };
        let ctx = slot.get_or_insert_with(Context::empty);
        if ctx.valid && ctx.generation == flags & 0x3F {
            rebuild_non_tcp(ctx, &payload[at..], out)?;
            if !ctx.checksum || header::udp_checksum_ok(out, ctx.view.ihl) {
                ctx.sequence = sequence.unwrap_or(ctx.sequence);
                return Ok(());
            }
            self.stats.checksum_failures += 1;
            ctx.valid = false;
        }
        self.ask_refresh(cid, now_ns);
        Err(Error::ContextDamaged)
    }

    /// COMPRESSED_RTP (`rtp`) or COMPRESSED_UDP.
    fn compressed(
        &mut self,
        payload: &[u8],
        wide: bool,
        rtp: bool,
        now_ns: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let id_len = if wide { 2 } else { 1 };
        if payload.len() < id_len + 1 {
            return Err(Error::Malformed("compressed: context id"));
        }
        let cid = if wide { get16(payload, 0) as usize } else { payload[0] as usize };
        let flags = payload[id_len];
        let Some(slot) = self.contexts.get_mut(cid) else {
            return Err(Error::Malformed("compressed: context id out of range"));
        };
        // A context never set up (its FULL_HEADER lost) is asked for too.
        let ctx = slot.get_or_insert_with(Context::empty);
        // A non-TCP context here: the RTP flow's FULL_HEADER that took the
        // context id back was lost.
        if !ctx.rtp {
            ctx.valid = false;
        }
        let sequence = flags & 0x0F;
        let missed = sequence.wrapping_sub(ctx.sequence).wrapping_sub(1) & 0x0F;
        if ctx.valid && missed > 0 && !bridgeable(&self.config, ctx, missed, rtp, flags) {
            ctx.valid = false;
            self.stats.sequence_gaps += 1;
        }
        if ctx.valid {
            let rest = &payload[id_len + 1..];
            let steps = missed + 1;
            let restored = if rtp {
                rebuild_rtp(ctx, flags, rest, steps, out)
            } else {
                rebuild_udp(ctx, flags, rest, steps, out)
            };
            let header_checksum = restored?;
            // RFC 2508 §3.3.5 recommends checking the UDP checksum, when
            // there is one, to catch damage the 4-bit sequence misses (16
            // packets of one context lost): checked on every packet, as is
            // RFC 3545's header checksum.
            let right = match header_checksum {
                Some(sum) => header::header_checksum(out, ctx.view) == sum,
                None => !ctx.checksum || header::udp_checksum_ok(out, ctx.view.ihl),
            };
            if right {
                self.stats.gaps_bridged += (missed > 0) as u64;
                ctx.sequence = sequence;
                let v = ctx.view;
                ctx.header[..v.len].copy_from_slice(&out[..v.len]);
                return Ok(());
            }
            ctx.valid = false;
            self.stats.checksum_failures += 1;
        }
        self.ask_refresh(cid, now_ns);
        Err(Error::ContextDamaged)
    }

    /// Lists context `cid` for CONTEXT_STATE, at most once a second.
    fn ask_refresh(&mut self, cid: usize, now_ns: u64) {
        let Some(ctx) = self.contexts[cid].as_mut() else {
            return;
        };
        if !ctx.listed && ctx.asked_ns.is_none_or(|t| now_ns < t || now_ns - t >= RETRY_NS) {
            ctx.asked_ns = Some(now_ns);
            ctx.listed = true;
            self.pending.push_back(cid as u32);
        }
    }
}

mod rebuild;
use rebuild::{bridgeable, rebuild_non_tcp, rebuild_rtp, rebuild_udp};
