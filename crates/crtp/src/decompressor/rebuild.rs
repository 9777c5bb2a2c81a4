//! Rebuilding a datagram from its context and a compressed packet:
//! COMPRESSED_RTP (RFC 2508 §3.3.2) and COMPRESSED_UDP, plain (§3.3.3) or
//! enhanced (RFC 3545 §2.1), one packet on or several across a bridged gap;
//! and COMPRESSED_NON_TCP (RFC 2507 §6).

use super::{Context, Error};
use crate::delta;
use crate::header::{self, get16, get32, put16, View, MAX_HEADER};
use crate::Config;

/// Reads `n` bytes from `data` at `*at`, moving past them.
fn take<'a>(
    data: &'a [u8],
    at: &mut usize,
    n: usize,
    what: &'static str,
) -> Result<&'a [u8], Error> {
    let bytes = data.get(*at..*at + n).ok_or(Error::Malformed(what))?;
    *at += n;
    Ok(bytes)
}

fn take_delta(data: &[u8], at: &mut usize) -> Result<u32, Error> {
    let rest = data.get(*at..).unwrap_or(&[]);
    let (value, n) = delta::decode(rest).ok_or(Error::Malformed("delta"))?;
    *at += n;
    Ok(value as u32)
}

/// The IPv4 and UDP headers of the context with the new lengths, ID and
/// checksums, into `out`; the RTP header follows from the caller.
fn ip_udp(
    ctx: &Context,
    id: u16,
    checksum: Option<&[u8]>,
    total: usize,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let ihl = ctx.view.ihl;
    if total > u16::MAX as usize {
        return Err(Error::Malformed("datagram too long"));
    }
    out.extend_from_slice(&ctx.header[..ihl + 8]);
    put16(out, 2, total as u16);
    put16(out, 4, id);
    put16(out, ihl + 4, (total - ihl) as u16);
    if let Some(c) = checksum {
        out[ihl + 6..ihl + 8].copy_from_slice(c);
    }
    header::set_ip_checksum(out, ihl);
    Ok(())
}

/// The two bytes after the flags, when the context has them: the UDP
/// checksum (it goes into the datagram), or RFC 3545's header checksum
/// (checked against the rebuilt headers, then dropped).
fn take_checksum<'a>(
    ctx: &Context,
    data: &'a [u8],
    at: &mut usize,
) -> Result<(Option<&'a [u8]>, Option<u16>), Error> {
    if ctx.checksum {
        Ok((Some(take(data, at, 2, "UDP checksum")?), None))
    } else if ctx.header_checksum {
        Ok((None, Some(get16(take(data, at, 2, "header checksum")?, 0))))
    } else {
        Ok((None, None))
    }
}

/// Whether a gap of `missed` packets before this one can be bridged by
/// RFC 3545's "twice" algorithm: robust operation is on, the gap is within
/// N (so its changes reach us in a later repeat), a
/// checksum will vouch for the result, and the packet sets no delta the
/// missed packets may not have shared (COMPRESSED_RTP's S, T, I; a new
/// IPv4 ID step without the absolute ID, which no checksum covers).
pub(super) fn bridgeable(config: &Config, ctx: &Context, missed: u8, rtp: bool, flags: u8) -> bool {
    let predictable = if rtp { flags & 0x70 == 0 } else { flags & 0x50 != 0x10 };
    config.repeats > 0
        && missed <= config.repeats
        && (ctx.checksum || ctx.header_checksum)
        && predictable
}

/// The RTP fields a packet gives or the context predicts.
struct RtpFields<'a> {
    marker: bool,
    payload_type: u8,
    seq: u16,
    timestamp: u32,
    /// The CSRC list the packet carries, or None for the context's.
    csrcs: Option<&'a [u8]>,
}

/// Rebuilds the datagram from the context, `id`, `rtp`'s fields and the
/// payload `rest`, into `out`; the context takes the new header's length.
fn rebuild(
    ctx: &mut Context,
    id: u16,
    checksum: Option<&[u8]>,
    rtp: RtpFields<'_>,
    rest: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let old = ctx.view;
    let hr = old.rtp();
    let len = hr + 12 + rtp.csrcs.map_or(old.len - hr - 12, <[u8]>::len);
    if len > MAX_HEADER {
        return Err(Error::Malformed("RTP header too long"));
    }
    ip_udp(ctx, id, checksum, len + rest.len(), out)?;
    let h = &ctx.header;
    out.push(h[hr] & 0xF0 | ((len - hr - 12) / 4) as u8);
    out.push(rtp.payload_type & 0x7F | (rtp.marker as u8) << 7);
    out.extend_from_slice(&rtp.seq.to_be_bytes());
    out.extend_from_slice(&rtp.timestamp.to_be_bytes());
    out.extend_from_slice(&h[hr + 8..hr + 12]);
    out.extend_from_slice(rtp.csrcs.unwrap_or(&h[hr + 12..old.len]));
    out.extend_from_slice(rest);
    ctx.view = View { ihl: old.ihl, len };
    Ok(())
}

/// Rebuilds a COMPRESSED_RTP datagram, `steps` packets after the context's
/// last (more than one when a gap is bridged); the header checksum to
/// check, if any.
pub(super) fn rebuild_rtp(
    ctx: &mut Context,
    flags: u8,
    data: &[u8],
    steps: u8,
    out: &mut Vec<u8>,
) -> Result<Option<u16>, Error> {
    let mut at = 0;
    let (checksum, header_checksum) = take_checksum(ctx, data, &mut at)?;
    let (bits, cc) = if flags & 0xF0 == 0xF0 {
        let b = take(data, &mut at, 1, "extended flags")?[0];
        (b & 0xF0, Some((b & 0x0F) as usize))
    } else {
        (flags & 0xF0, None)
    };
    let (m, s, t, i) = (bits & 0x80 != 0, bits & 0x40 != 0, bits & 0x20 != 0, bits & 0x10 != 0);
    let id_delta = if i { take_delta(data, &mut at)? as u16 } else { ctx.id_delta };
    let seq_delta = if s { take_delta(data, &mut at)? as u16 } else { steps as u16 };
    let ts_delta = if t { take_delta(data, &mut at)? } else { ctx.timestamp_delta };
    let csrcs = cc.map(|n| take(data, &mut at, 4 * n, "CSRC list")).transpose()?;
    let (h, hr) = (&ctx.header, ctx.view.rtp());
    let fields = RtpFields {
        marker: m,
        payload_type: h[hr + 1],
        seq: get16(h, hr + 2).wrapping_add(seq_delta),
        timestamp: get32(h, hr + 4).wrapping_add(ts_delta.wrapping_mul(steps as u32)),
        csrcs,
    };
    let id = get16(h, 4).wrapping_add(id_delta.wrapping_mul(steps as u16));
    rebuild(ctx, id, checksum, fields, &data[at..], out)?;
    ctx.id_delta = id_delta;
    ctx.timestamp_delta = ts_delta;
    Ok(header_checksum)
}

/// Rebuilds a COMPRESSED_UDP datagram, `steps` packets after the context's
/// last; the header checksum to check, if any. RFC 3545 §2.1's flags are
/// read (RFC 2508's packets leave them zero): I (absolute IPv4 ID), dT (a
/// timestamp delta), and F, an extension byte that replaces the RTP header
/// with the fields that changed.
pub(super) fn rebuild_udp(
    ctx: &mut Context,
    flags: u8,
    data: &[u8],
    steps: u8,
    out: &mut Vec<u8>,
) -> Result<Option<u16>, Error> {
    let mut at = 0;
    let extension =
        if flags & 0x80 != 0 { take(data, &mut at, 1, "extended flags")?[0] } else { 0 };
    let count = if extension & 0x08 != 0 {
        Some((take(data, &mut at, 1, "CSRC count")?[0] & 0x0F) as usize)
    } else {
        None
    };
    let (checksum, header_checksum) = take_checksum(ctx, data, &mut at)?;
    let id_delta = if flags & 0x10 != 0 { take_delta(data, &mut at)? as u16 } else { ctx.id_delta };
    let ts_delta = if flags & 0x20 != 0 { Some(take_delta(data, &mut at)?) } else { None };
    let id = if flags & 0x40 != 0 {
        get16(take(data, &mut at, 2, "IPv4 ID")?, 0)
    } else {
        get16(&ctx.header, 4).wrapping_add(id_delta.wrapping_mul(steps as u16))
    };
    if flags & 0x80 == 0 {
        // The RTP header whole; with dT absent the delta is reset (RFC 2508).
        whole_rtp(ctx, id, checksum, &data[at..], out)?;
        ctx.id_delta = id_delta;
        ctx.timestamp_delta = ts_delta.unwrap_or(0);
        return Ok(header_checksum);
    }
    // F = 1: absent fields keep to the context, deltas included (RFC 3545).
    let dt = ts_delta.unwrap_or(ctx.timestamp_delta);
    let (h, hr) = (&ctx.header, ctx.view.rtp());
    let seq = if extension & 0x40 != 0 {
        get16(take(data, &mut at, 2, "RTP sequence")?, 0)
    } else {
        get16(h, hr + 2).wrapping_add(steps as u16)
    };
    let timestamp = if extension & 0x20 != 0 {
        get32(take(data, &mut at, 4, "RTP timestamp")?, 0)
    } else {
        get32(h, hr + 4).wrapping_add(dt.wrapping_mul(steps as u32))
    };
    let payload_type =
        if extension & 0x10 != 0 { take(data, &mut at, 1, "payload type")?[0] } else { h[hr + 1] };
    let csrcs = count.map(|n| take(data, &mut at, 4 * n, "CSRC list")).transpose()?;
    let fields = RtpFields { marker: extension & 0x80 != 0, payload_type, seq, timestamp, csrcs };
    rebuild(ctx, id, checksum, fields, &data[at..], out)?;
    ctx.id_delta = id_delta;
    ctx.timestamp_delta = dt;
    Ok(header_checksum)
}

/// COMPRESSED_UDP carrying the RTP header whole.
fn whole_rtp(
    ctx: &mut Context,
    id: u16,
    checksum: Option<&[u8]>,
    rtp: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let ihl = ctx.view.ihl;
    if rtp.len() < 12 || rtp[0] >> 6 != 2 {
        return Err(Error::Malformed("compressed UDP: no RTP header"));
    }
    let len = ihl + 8 + 12 + 4 * (rtp[0] & 0x0F) as usize;
    if len > MAX_HEADER || len > ihl + 8 + rtp.len() {
        return Err(Error::Malformed("compressed UDP: RTP header too long"));
    }
    ip_udp(ctx, id, checksum, ihl + 8 + rtp.len(), out)?;
    out.extend_from_slice(rtp);
    ctx.view = View { ihl, len };
    Ok(())
}

/// Rebuilds a COMPRESSED_NON_TCP datagram from its RANDOM fields (the IPv4
/// ID; the UDP checksum when the flow has one) and payload `data`.
pub(super) fn rebuild_non_tcp(ctx: &Context, data: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
    let ihl = ctx.view.ihl;
    let v4 = ctx.header[0] >> 4 == 4;
    let mut at = 0;
    let id = if v4 { Some(take(data, &mut at, 2, "non-TCP: IPv4 ID")?) } else { None };
    let checksum =
        if ctx.checksum { Some(take(data, &mut at, 2, "non-TCP: UDP checksum")?) } else { None };
    let total = ihl + 8 + data.len() - at;
    let length = if v4 { total } else { total - 40 };
    if length > u16::MAX as usize {
        return Err(Error::Malformed("non-TCP: datagram too long"));
    }
    out.extend_from_slice(&ctx.header[..ihl + 8]);
    if let Some(id) = id {
        put16(out, 2, length as u16);
        out[4..6].copy_from_slice(id);
        header::set_ip_checksum(out, ihl);
    } else {
        put16(out, 4, length as u16);
    }
    put16(out, ihl + 4, (total - ihl) as u16);
    if let Some(c) = checksum {
        out[ihl + 6..ihl + 8].copy_from_slice(c);
    }
    out.extend_from_slice(&data[at..]);
    Ok(())
}
