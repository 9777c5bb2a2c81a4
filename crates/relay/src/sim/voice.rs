//! What a simulated stream sends: opaque bytes, or the IPv4/UDP/RTP
//! datagram of a voice packet, so that links compressing RTP headers have
//! real headers to compress.

/// Writes stream `stream`'s packet `k` into `out`: `voice` bytes of
/// payload, alone or (`rtp`) in an IPv4/UDP/RTP datagram whose sequence
/// number, timestamp (8 kHz, `interval_ns` apart) and IPv4 ID step by one
/// packet each time; no UDP checksum, as cRTP's G.729 figures assume.
pub(crate) fn payload(
    rtp: bool,
    stream: usize,
    k: u64,
    interval_ns: i64,
    voice: usize,
    out: &mut Vec<u8>,
) {
    out.clear();
    if !rtp {
        out.resize(voice, 0x55);
        return;
    }
    let total = 20 + 8 + 12 + voice;
    let s = stream as u32;
    let mut ip = [0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 1, 1];
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&(k as u16).to_be_bytes());
    ip[14..16].copy_from_slice(&(s as u16).to_be_bytes());
    calliper_crtp::set_ip_checksum(&mut ip, 20);
    out.extend_from_slice(&ip);
    let port = 10_000 + 2 * (s % 20_000) as u16;
    out.extend_from_slice(&port.to_be_bytes());
    out.extend_from_slice(&port.to_be_bytes());
    out.extend_from_slice(&((8 + 12 + voice) as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    let samples = (interval_ns / 125_000) as u32;
    out.extend_from_slice(&[0x80, 18]);
    out.extend_from_slice(&(k as u16).to_be_bytes());
    out.extend_from_slice(&(k as u32).wrapping_mul(samples).to_be_bytes());
    out.extend_from_slice(&(0x5EED_0000 | s).to_be_bytes());
    out.resize(total, 0x55);
}
