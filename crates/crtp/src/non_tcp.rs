//! Non-TCP contexts (RFC 2507 §3.3, §6 c and d, as RFC 2508 §3.3.1 uses
//! them): UDP that is not RTP over IPv4 (RTCP, SIP, DNS), and IPv6/UDP
//! with or without RTP. Only the IP and UDP headers are compressed. No
//! field is coded as a difference: a COMPRESSED_NON_TCP packet carries the
//! context id, the context's generation, the 4-bit link sequence (in the
//! data byte, D = 1), then the fields that change freely (the IPv4 ID, the
//! UDP checksum when the flow has one) and the UDP payload. So a lost
//! packet damages nothing; a lost FULL_HEADER that changed the context
//! shows as a generation the decompressor does not have, and its packets
//! are dropped until the next FULL_HEADER, which comes soon: after a
//! change, full headers follow after 1, 2, 4 ... compressed packets, up to
//! F_MAX_PERIOD (RFC 2507's slow start, §3.3.1), and at least every
//! F_MAX_TIME. Under RFC 3545's repeats, a change crosses in N+1 full
//! headers in a row.
//!
//! FULL_HEADER is RFC 2508's, with the context id, generation and sequence
//! in the first two length fields: IPv4's total length or IPv6's payload
//! length, then UDP's length.

use crate::compressor::Context;
use crate::header::{get16, put16, View};
use crate::{Config, Kind};

/// The flow a non-TCP context belongs to: version, addresses, ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct NonTcpKey {
    v6: bool,
    addresses: [u8; 32],
    ports: u32,
}

/// The flow key of a datagram [`crate::header::non_tcp_view`] accepted.
pub(crate) fn key(p: &[u8], v: View) -> NonTcpKey {
    let v6 = p[0] >> 4 == 6;
    let mut addresses = [0; 32];
    if v6 {
        addresses.copy_from_slice(&p[8..40]);
    } else {
        addresses[..8].copy_from_slice(&p[12..20]);
    }
    NonTcpKey { v6, addresses, ports: u32::from_be_bytes(p[v.ihl..v.ihl + 4].try_into().unwrap()) }
}

/// Where the first length field is: IPv4's total length, IPv6's payload
/// length.
pub(crate) fn first_length_at(p: &[u8]) -> usize {
    if p[0] >> 4 == 6 {
        4
    } else {
        2
    }
}

/// Compresses `p` in its non-TCP context (`fresh` when just taken).
#[allow(clippy::too_many_arguments)]
pub(crate) fn compress(
    ctx: &mut Context,
    cid: u32,
    fresh: bool,
    p: &[u8],
    v: View,
    now_ns: u64,
    config: &Config,
    out: &mut Vec<u8>,
) -> Kind {
    // RFC 2507 §3.3.3: a change of context starts a new generation and
    // the slow start; later full headers come as F_PERIOD doubles, or
    // when F_MAX_TIME has passed.
    // Under RFC 3545's repeats a change crosses in N+1 full headers.
    let full = if fresh || ctx.invalid || changes_context(ctx, p, v) {
        ctx.generation = (ctx.generation + 1) & 0x3F;
        ctx.full_period = 1;
        ctx.full_left = config.repeats;
        true
    } else if ctx.full_left > 0 {
        ctx.full_left -= 1;
        true
    } else if ctx.since_full >= ctx.full_period {
        let ceiling = if config.max_period == 0 { u32::MAX } else { config.max_period };
        ctx.full_period = ctx.full_period.saturating_mul(2).min(ceiling);
        true
    } else {
        config.max_time_ns != 0 && now_ns.saturating_sub(ctx.full_at_ns) >= config.max_time_ns
    };
    ctx.sequence = (ctx.sequence + 1) & 0x0F;
    ctx.header[..v.len].copy_from_slice(&p[..v.len]);
    ctx.view = v;
    if full {
        ctx.since_full = 0;
        ctx.full_at_ns = now_ns;
        ctx.invalid = false;
        out.extend_from_slice(p);
        let generation = (ctx.generation as u16) << 8;
        let seq = ctx.sequence as u16;
        let (first, second) = if config.wide() {
            (0xC000 | generation | seq, cid as u16)
        } else {
            (0x4000 | generation | cid as u16, seq)
        };
        put16(out, first_length_at(p), first);
        put16(out, v.ihl + 4, second);
        return Kind::FullHeader;
    }
    ctx.since_full += 1;
    // RFC 2507 §6 c and d; D = 1, the data byte the link sequence.
    let flags = 0x40 | ctx.generation;
    if config.wide() {
        out.extend_from_slice(&[(cid >> 8) as u8, 0x80 | flags, cid as u8]);
    } else {
        out.extend_from_slice(&[cid as u8, flags]);
    }
    out.push(ctx.sequence);
    if p[0] >> 4 == 4 {
        out.extend_from_slice(&p[4..6]);
    }
    if get16(p, v.ihl + 6) != 0 {
        out.extend_from_slice(&p[v.ihl + 6..v.ihl + 8]);
    }
    out.extend_from_slice(&p[v.len..]);
    Kind::CompressedNonTcp
}

/// Whether `p` differs from the context in a field COMPRESSED_NON_TCP does
/// not carry: anything but the lengths, the IPv4 ID and header checksum
/// and the UDP checksum (present or absent being part of the context).
fn changes_context(ctx: &Context, p: &[u8], v: View) -> bool {
    let h = &ctx.header;
    if ctx.view != v {
        return true;
    }
    let ip_same = if p[0] >> 4 == 6 {
        p[..4] == h[..4] && p[6..40] == h[6..40]
    } else {
        p[..2] == h[..2] && p[6..10] == h[6..10] && p[12..v.ihl] == h[12..v.ihl]
    };
    let u = v.ihl;
    !ip_same || p[u..u + 4] != h[u..u + 4] || (get16(p, u + 6) == 0) != (get16(h, u + 6) == 0)
}
