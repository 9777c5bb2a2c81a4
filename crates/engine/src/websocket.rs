//! WebSocket framing (RFC 6455) for SIP over WebSocket (RFC 7118).

/// Flow tag: the HTTP upgrade has not been skipped yet.
pub const TAG_HANDSHAKE: u8 = 1;
/// Flow tag: WebSocket frames follow.
pub const TAG_FRAMES: u8 = 2;
/// Largest frame read; a SIP message is far smaller.
pub const MAX_FRAME: u64 = 1 << 20;

/// True for the first bytes of an HTTP upgrade (request or 101 answer)
/// negotiating the `sip` subprotocol.
pub fn is_sip_upgrade(p: &[u8]) -> bool {
    let head = &p[..p.len().min(4096)];
    let starts = head.starts_with(b"GET ") || head.starts_with(b"HTTP/1.1 101");
    starts && contains_ci(head, b"sec-websocket-protocol: sip")
}

/// True when `p` starts with an unfragmented text or binary frame whose
/// payload starts a SIP message: a connection picked up after its upgrade
/// (a probe started later, a call's own recording).
pub fn starts_sip_frame(p: &[u8]) -> bool {
    // FIN, no reserved bits, text or binary.
    if p.len() < 2 || p[0] & 0xF0 != 0x80 || !matches!(p[0] & 0x0F, 1 | 2) {
        return false;
    }
    let mut header = match p[1] & 0x7F {
        126 => 4,
        127 => 10,
        _ => 2,
    };
    let mut key = [0u8; 4];
    if p[1] & 0x80 != 0 {
        let Some(k) = p.get(header..header + 4) else {
            return false;
        };
        key.copy_from_slice(k);
        header += 4;
    }
    let Some(body) = p.get(header..) else {
        return false;
    };
    // A start line is shorter than this (framing's MAX_START_LINE).
    let mut head = [0u8; 1024];
    let n = body.len().min(head.len());
    for (i, (h, b)) in head.iter_mut().zip(body).enumerate() {
        *h = b ^ key[i % 4];
    }
    calliper_sip::looks_like_sip(&head[..n])
}

fn contains_ci(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

/// One frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Last frame of a message.
    pub fin: bool,
    /// 0 continuation, 1 text, 2 binary, 8 close, 9 ping, 10 pong.
    pub opcode: u8,
    /// Masking key, if masked (client to server).
    pub mask: Option<[u8; 4]>,
    /// Header bytes.
    pub header: usize,
    /// Header and payload bytes.
    pub len: usize,
}

impl Frame {
    /// Appends the unmasked payload of `bytes` (the whole frame) to `out`.
    pub fn unmask_into(&self, bytes: &[u8], out: &mut Vec<u8>) {
        let payload = &bytes[self.header..self.len];
        match self.mask {
            Some(k) => out.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4])),
            None => out.extend_from_slice(payload),
        }
    }
}

/// A frame longer than [`MAX_FRAME`]: not SIP, or an attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTooLarge;

/// Reads the frame at the start of `b`: Ok(None) when more bytes are
/// needed, Err for a frame too large to be SIP.
pub fn frame(b: &[u8]) -> Result<Option<Frame>, FrameTooLarge> {
    if b.len() < 2 {
        return Ok(None);
    }
    let fin = b[0] & 0x80 != 0;
    let opcode = b[0] & 0x0F;
    let masked = b[1] & 0x80 != 0;
    let (len, mut header) = match b[1] & 0x7F {
        126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as u64, 4),
        127 if b.len() >= 10 => {
            (u64::from_be_bytes([b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9]]), 10)
        }
        126 | 127 => return Ok(None),
        n => (n as u64, 2),
    };
    if len > MAX_FRAME {
        return Err(FrameTooLarge);
    }
    let mask = if masked {
        let Some(k) = b.get(header..header + 4) else {
            return Ok(None);
        };
        header += 4;
        Some([k[0], k[1], k[2], k[3]])
    } else {
        None
    };
    let total = header + len as usize;
    if b.len() < total {
        return Ok(None);
    }
    Ok(Some(Frame { fin, opcode, mask, header, len: total }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_text_frame_unmasks() {
        let key = [1, 2, 3, 4];
        let text = b"OPTIONS sip:x SIP/2.0\r\n\r\n";
        let mut f = vec![0x81, 0x80 | text.len() as u8];
        f.extend_from_slice(&key);
        f.extend(text.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        let h = frame(&f).unwrap().unwrap();
        assert!(h.fin);
        assert_eq!(h.opcode, 1);
        let mut out = vec![];
        h.unmask_into(&f, &mut out);
        assert_eq!(out, text);
        for cut in 0..f.len() {
            assert_eq!(frame(&f[..cut]), Ok(None));
        }
        let huge = [0x82, 127, 0xFF, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(frame(&huge), Err(FrameTooLarge));
    }

    #[test]
    fn a_sip_frame_is_recognised_without_its_upgrade() {
        let sip = b"INVITE sip:b@example.com SIP/2.0\r\nVia: x\r\n\r\n";
        let key = [7u8, 1, 200, 33];
        let mut masked = vec![0x81, 0x80 | sip.len() as u8];
        masked.extend_from_slice(&key);
        masked.extend(sip.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        assert!(starts_sip_frame(&masked));
        let mut plain = vec![0x81, sip.len() as u8];
        plain.extend_from_slice(sip);
        assert!(starts_sip_frame(&plain));
        plain[0] = 0x01; // not FIN: a fragmented message
        assert!(!starts_sip_frame(&plain));
        assert!(!starts_sip_frame(&masked[..5]), "cut in the mask");
        assert!(!starts_sip_frame(b"\x81\x05hello"));
        assert!(!starts_sip_frame(sip), "plain SIP is not a frame");
    }

    #[test]
    fn upgrade_is_recognised() {
        assert!(is_sip_upgrade(
            b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: sip\r\n\r\n"
        ));
        assert!(!is_sip_upgrade(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"));
    }
}
