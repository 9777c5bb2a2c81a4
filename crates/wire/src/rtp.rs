//! RTP (RFC 3550 §5.1) and RTCP header views.

/// A checked view of an RTP header. After [`RtpHeader::parse`] succeeds, all
/// fields are within the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpHeader {
    /// Marker bit.
    pub marker: bool,
    /// Payload type (7 bits).
    pub payload_type: u8,
    /// Sequence number.
    pub seq: u16,
    /// Media timestamp.
    pub timestamp: u32,
    /// Synchronisation source.
    pub ssrc: u32,
    /// Bytes of header including CSRCs and extension.
    pub header_len: u16,
    /// Bytes of payload after header, excluding padding.
    pub payload_len: u16,
    /// Padding bytes at the end (P bit), 0 when absent.
    pub padding: u8,
}

/// Why bytes are not an RTP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtpError {
    /// Shorter than the fixed 12-byte header.
    TooShort,
    /// Version is not 2.
    Version,
    /// CSRC list, extension or padding runs past the end.
    BadLength,
}

impl RtpHeader {
    /// Parses the fixed header, CSRC count, extension and padding.
    /// Inline: it runs on every RTP packet, in another crate.
    #[inline]
    pub fn parse(b: &[u8]) -> Result<RtpHeader, RtpError> {
        if b.len() < 12 {
            return Err(RtpError::TooShort);
        }
        if b[0] >> 6 != 2 {
            return Err(RtpError::Version);
        }
        let cc = (b[0] & 0x0F) as usize;
        let mut hl = 12 + 4 * cc;
        if b[0] & 0x10 != 0 {
            if b.len() < hl + 4 {
                return Err(RtpError::BadLength);
            }
            hl += 4 + 4 * u16::from_be_bytes([b[hl + 2], b[hl + 3]]) as usize;
        }
        if b.len() < hl || b.len() > u16::MAX as usize {
            return Err(RtpError::BadLength);
        }
        let padding = if b[0] & 0x20 != 0 { b[b.len() - 1] } else { 0 };
        if hl + padding as usize > b.len() {
            return Err(RtpError::BadLength);
        }
        Ok(RtpHeader {
            marker: b[1] & 0x80 != 0,
            payload_type: b[1] & 0x7F,
            seq: u16::from_be_bytes([b[2], b[3]]),
            timestamp: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            ssrc: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            header_len: hl as u16,
            payload_len: (b.len() - hl - padding as usize) as u16,
            padding,
        })
    }
}

/// True when the datagram looks like RTCP (version 2, packet type 200..=207,
/// a length that fits). RTCP and RTP share a port under RFC 5761, so this is
/// checked before treating a packet as RTP: payload types 72..=76 with the
/// marker bit set collide with RTCP types 200..=204. Inline: it runs on
/// every UDP datagram, in another crate.
#[inline]
pub fn looks_like_rtcp(b: &[u8]) -> bool {
    if b.len() < 8 || b[0] >> 6 != 2 {
        return false;
    }
    if !(200..=207).contains(&b[1]) {
        return false;
    }
    let words = u16::from_be_bytes([b[2], b[3]]) as usize + 1;
    words * 4 <= b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_real_pcma_header() {
        // First bytes of a G.711 A-law packet from sipp_calls.pcap.
        let mut p = vec![0x80, 0x08, 0x00, 0x01, 0x00, 0x00, 0x00, 0xF0, 0xDE, 0xE0, 0xEE, 0x8F];
        p.extend([0xD5u8; 240]);
        let h = RtpHeader::parse(&p).unwrap();
        assert_eq!((h.payload_type, h.seq, h.timestamp, h.ssrc), (8, 1, 240, 0xDEE0EE8F));
        assert_eq!((h.header_len, h.payload_len, h.marker), (12, 240, false));
    }

    #[test]
    fn csrc_extension_padding() {
        let mut p = vec![0xB1, 0x80 | 96, 0, 5, 0, 0, 0, 1, 0, 0, 0, 2];
        p.extend([0, 0, 0, 9]); // one CSRC
        p.extend([0xBE, 0xDE, 0, 1, 1, 2, 3, 4]); // extension of one word
        p.extend([7u8; 10]);
        p.extend([0, 0, 3]); // 3 bytes padding
        let h = RtpHeader::parse(&p).unwrap();
        assert_eq!((h.header_len, h.payload_len, h.padding, h.marker), (24, 10, 3, true));
        // Padding longer than the packet is rejected.
        let n = p.len();
        p[n - 1] = 200;
        assert_eq!(RtpHeader::parse(&p), Err(RtpError::BadLength));
    }

    #[test]
    fn rtcp_detection() {
        let rr = [
            0x81, 201, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0,
        ];
        assert!(looks_like_rtcp(&rr));
        assert!(!looks_like_rtcp(&rr[..20]));
        let rtp = [0x80, 0x08, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(!looks_like_rtcp(&rtp));
    }
}
