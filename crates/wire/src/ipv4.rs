//! A checked view of an IPv4 header (RFC 791 §3.1), after smoltcp's wire
//! types: once [`Header::new_checked`] has accepted the bytes, every
//! accessor reads inside them. The decoder and the cRTP compressor both
//! read IPv4 through it; [`crate::emit::Ipv4`] writes it.

use std::net::Ipv4Addr;

/// Why bytes are not an IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv4Error {
    /// Shorter than the fixed header, or than the header length it states.
    Truncated,
    /// Not version 4, or a header length under 20 bytes.
    Malformed,
}

/// The header at the start of a packet.
#[derive(Debug, Clone, Copy)]
pub struct Header<'a> {
    bytes: &'a [u8],
}

impl<'a> Header<'a> {
    /// The header of `packet`, checked: version 4, a header length of at
    /// least 20 bytes, and all of it present.
    #[inline(always)]
    pub fn new_checked(packet: &'a [u8]) -> Result<Header<'a>, Ipv4Error> {
        if packet.len() < 20 {
            return Err(Ipv4Error::Truncated);
        }
        let ihl = usize::from(packet[0] & 0x0F) * 4;
        if packet[0] >> 4 != 4 || ihl < 20 {
            return Err(Ipv4Error::Malformed);
        }
        if packet.len() < ihl {
            return Err(Ipv4Error::Truncated);
        }
        Ok(Header { bytes: &packet[..ihl] })
    }

    fn be16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.bytes[at], self.bytes[at + 1]])
    }

    /// The header's length in bytes, options included.
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        self.bytes.len()
    }

    /// The total length field: header and payload, as the sender said.
    #[inline(always)]
    pub fn total_len(&self) -> u16 {
        self.be16(2)
    }

    /// The identification field.
    #[inline(always)]
    pub fn ident(&self) -> u16 {
        self.be16(4)
    }

    /// More fragments follow this one.
    #[inline(always)]
    pub fn more_fragments(&self) -> bool {
        self.be16(6) & 0x2000 != 0
    }

    /// Where this fragment's payload starts in the whole, in bytes.
    #[inline(always)]
    pub fn fragment_offset(&self) -> u32 {
        u32::from(self.be16(6) & 0x1FFF) * 8
    }

    /// A fragment of a larger datagram (more follow, or not the first).
    #[inline(always)]
    pub fn is_fragment(&self) -> bool {
        self.be16(6) & 0x3FFF != 0
    }

    /// Where the payload ends in a packet of `captured` bytes that starts
    /// with this header: at the total length, cut to what was captured; a
    /// total length of 0 (TSO offload captures) takes what was captured.
    /// None when the total length is shorter than the header.
    #[inline(always)]
    pub fn payload_end(&self, captured: usize) -> Option<usize> {
        match usize::from(self.total_len()) {
            0 => Some(captured),
            total if total < self.header_len() => None,
            total => Some(total.min(captured)),
        }
    }

    /// The protocol carried (`crate::ipproto`).
    #[inline(always)]
    pub fn protocol(&self) -> u8 {
        self.bytes[9]
    }

    /// The checksum field as sent.
    pub fn checksum(&self) -> u16 {
        self.be16(10)
    }

    /// The checksum the header should carry (computed without the field).
    /// A field of 0xFFFF where this gives 0x0000 also sums to zero, but is
    /// not this value.
    pub fn expected_checksum(&self) -> u16 {
        expected_checksum(self.bytes)
    }

    /// The source address.
    #[inline(always)]
    pub fn src(&self) -> Ipv4Addr {
        let b = self.bytes;
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }

    /// The destination address.
    #[inline(always)]
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.bytes;
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }
}

/// The checksum the IPv4 header `header` (at least 12 bytes) should carry,
/// computed over all of it but the checksum field: what a rebuilt header
/// is given, checked or not.
pub fn expected_checksum(header: &[u8]) -> u16 {
    let sum = crate::emit::checksum(&header[..10], 0);
    crate::emit::checksum(&header[12..], u32::from(!sum))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit;

    #[test]
    fn a_built_header_reads_back_and_damage_is_named() {
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let p = emit::Ipv4 { id: 9, frag: 0x2000 | 3, ..emit::Ipv4::new(a, b, 17) }.emit(&[0; 8]);
        let h = Header::new_checked(&p).unwrap();
        assert_eq!((h.src(), h.dst(), h.protocol(), h.ident()), (a, b, 17, 9));
        assert_eq!((h.header_len(), h.total_len()), (20, 28));
        assert_eq!((h.more_fragments(), h.fragment_offset()), (true, 24));
        assert!(h.is_fragment());
        assert_eq!(h.checksum(), h.expected_checksum());
        assert_eq!(Header::new_checked(&p[..19]).err(), Some(Ipv4Error::Truncated));
        let mut v6 = p.clone();
        v6[0] = 0x65;
        assert_eq!(Header::new_checked(&v6).err(), Some(Ipv4Error::Malformed));
        let mut long = p.clone();
        long[0] = 0x4F; // 60-byte header in a 28-byte packet
        assert_eq!(Header::new_checked(&long).err(), Some(Ipv4Error::Truncated));
    }
}
