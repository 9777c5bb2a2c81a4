//! RFC 3545's robust operation, compressor side (§2.1, §2.3): every change
//! crosses the link in N+1 packets in a row, so that whichever of them
//! arrives puts the decompressor's context back in step, and a gap of up
//! to N packets is bridged by applying the deltas once per packet missed
//! (the "twice" algorithm), checked by the UDP or header checksum.
//!
//! A change to a field the deltas predict (IPv4 ID, RTP sequence number,
//! timestamp), to the payload type or to the CSRC list is sent as an
//! absolute value in the enhanced COMPRESSED_UDP (flag F = 1), in this and
//! the next N packets of the context; a change of a delta likewise. Packets
//! with nothing to repeat go as COMPRESSED_RTP with no S, T or I flag, so
//! the decompressor can predict every one it misses. A one-off jump (a
//! talkspurt's new timestamp) leaves the deltas alone; a step seen twice in
//! a row becomes the new delta (RFC 3545 §2.3.1's examples).

use crate::compressor::{checksum, remember, start, Context};
use crate::delta;
use crate::header::{get16, get32, View};
use crate::{Config, Kind};

/// Compresses `p` (its context is valid and in step) as COMPRESSED_RTP or
/// enhanced COMPRESSED_UDP.
pub(crate) fn compress(
    ctx: &mut Context,
    cid: u32,
    p: &[u8],
    v: View,
    config: &Config,
    out: &mut Vec<u8>,
) -> Kind {
    note_changes(ctx, p, v, config.repeats + 1, true);
    let r = v.rtp();
    let marker = p[r + 1] & 0x80;
    let left = ctx.left;
    let kind = if [
        left.id,
        left.id_delta,
        left.seq,
        left.timestamp,
        left.timestamp_delta,
        left.payload_type,
        left.csrcs,
    ] == [0; 7]
    {
        start(ctx, cid, marker, config, out);
        checksum(ctx, p, v, out);
        Kind::CompressedRtp
    } else {
        // With the sequence number or timestamp whole, a checksum would
        // not see a context 16 packets behind (its 4-bit link sequence come
        // round): only the IPv4 ID, which no checksum covers, would come
        // out wrong. So the ID goes whole with them.
        let id = left.id > 0 || left.seq > 0 || left.timestamp > 0;
        let flags = 0x80
            | bit(id, 0x40)
            | bit(left.timestamp_delta > 0, 0x20)
            | bit(left.id_delta > 0, 0x10);
        start(ctx, cid, flags, config, out);
        out.push(
            marker
                | bit(left.seq > 0, 0x40)
                | bit(left.timestamp > 0, 0x20)
                | bit(left.payload_type > 0, 0x10)
                | bit(left.csrcs > 0, 0x08),
        );
        if left.csrcs > 0 {
            out.push(p[r] & 0x0F);
        }
        checksum(ctx, p, v, out);
        if left.id_delta > 0 {
            delta::encode(ctx.id_delta as i32, out);
        }
        if left.timestamp_delta > 0 {
            delta::encode(ctx.timestamp_delta as i32, out);
        }
        if id {
            out.extend_from_slice(&p[4..6]);
        }
        if left.seq > 0 {
            out.extend_from_slice(&p[r + 2..r + 4]);
        }
        if left.timestamp > 0 {
            out.extend_from_slice(&p[r + 4..r + 8]);
        }
        if left.payload_type > 0 {
            out.push(p[r + 1] & 0x7F);
        }
        if left.csrcs > 0 {
            out.extend_from_slice(&p[r + 12..v.len]);
        }
        Kind::CompressedUdp
    };
    out.extend_from_slice(&p[v.len..]);
    remember(ctx, p, v);
    ctx.since_full += 1;
    sent(ctx);
    kind
}

fn bit(on: bool, mask: u8) -> u8 {
    if on {
        mask
    } else {
        0
    }
}

/// One more packet has carried each pending change.
pub(crate) fn sent(ctx: &mut Context) {
    let l = &mut ctx.left;
    for n in [
        &mut l.id,
        &mut l.id_delta,
        &mut l.seq,
        &mut l.timestamp,
        &mut l.timestamp_delta,
        &mut l.payload_type,
        &mut l.csrcs,
    ] {
        *n = n.saturating_sub(1);
    }
}

/// Compares `p` with what the context predicts and marks each field that
/// differs to be sent in `n` packets; and each delta that changes, when
/// the packet can carry deltas (`adopt`; a FULL_HEADER resets them).
pub(crate) fn note_changes(ctx: &mut Context, p: &[u8], v: View, n: u8, adopt: bool) {
    let (h, old) = (&ctx.header, ctx.view);
    let (r, hr) = (v.rtp(), old.rtp());
    let id_step = get16(p, 4).wrapping_sub(get16(h, 4));
    let seq_step = get16(p, r + 2).wrapping_sub(get16(h, hr + 2));
    let timestamp_step = get32(p, r + 4).wrapping_sub(get32(h, hr + 4));
    let payload_type_changed = p[r + 1] & 0x7F != h[hr + 1] & 0x7F;
    let csrcs_changed = p[r] & 0x0F != h[hr] & 0x0F || p[r + 12..v.len] != h[hr + 12..old.len];
    let left = &mut ctx.left;
    if id_step != ctx.id_delta {
        left.id = n;
        if adopt && id_step == ctx.last_id_step {
            ctx.id_delta = id_step;
            left.id_delta = n;
        }
    }
    if timestamp_step != ctx.timestamp_delta {
        left.timestamp = n;
        let lasting = timestamp_step == ctx.last_timestamp_step || ctx.timestamp_delta == 0;
        if adopt && lasting && delta::len(timestamp_step as i32) > 0 {
            ctx.timestamp_delta = timestamp_step;
            left.timestamp_delta = n;
        }
    }
    if seq_step != 1 {
        left.seq = n;
    }
    if payload_type_changed {
        left.payload_type = n;
    }
    if csrcs_changed {
        left.csrcs = n;
    }
    ctx.last_id_step = id_step;
    ctx.last_timestamp_step = timestamp_step;
}
