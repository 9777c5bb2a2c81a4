//! Writing classic pcap: the one definition of its file header and packet
//! record for every tool that writes captures (`generate`, `crtp`, call
//! recordings). Little-endian, as libpcap writes on this machine. And the
//! few pcapng blocks a capture of several link types needs ([`pcapng`]).

/// How finely a file's timestamps are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Microseconds (magic a1b2c3d4): what every reader understands.
    Micros,
    /// Nanoseconds (magic a1b23c4d).
    Nanos,
}

/// The 24-byte file header.
pub fn file_header(link_type: u32, snaplen: u32, resolution: Resolution) -> [u8; 24] {
    let magic: u32 = match resolution {
        Resolution::Micros => 0xA1B2_C3D4,
        Resolution::Nanos => 0xA1B2_3C4D,
    };
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&magic.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // 8..16: time zone and accuracy, zero.
    h[16..20].copy_from_slice(&snaplen.to_le_bytes());
    h[20..24].copy_from_slice(&link_type.to_le_bytes());
    h
}

/// The 16-byte header of a record of `caplen` bytes captured from a packet
/// of `orig_len` (times before 1970 are written as 1970).
pub fn record_header(ts_ns: i64, caplen: u32, orig_len: u32, resolution: Resolution) -> [u8; 16] {
    let ts = ts_ns.max(0);
    let fraction = ts % 1_000_000_000;
    let fraction = match resolution {
        Resolution::Micros => fraction / 1000,
        Resolution::Nanos => fraction,
    };
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
    h[4..8].copy_from_slice(&(fraction as u32).to_le_bytes());
    h[8..12].copy_from_slice(&caplen.to_le_bytes());
    h[12..16].copy_from_slice(&orig_len.max(caplen).to_le_bytes());
    h
}

/// pcapng (little-endian, microsecond timestamps): a section header, its
/// interfaces, and packets naming the interface they came from. Only a
/// pcapng file can hold packets of several link types.
pub mod pcapng {
    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        let padded = body.len().next_multiple_of(4);
        let total = (12 + padded) as u32;
        let mut b = Vec::with_capacity(total as usize);
        b.extend_from_slice(&kind.to_le_bytes());
        b.extend_from_slice(&total.to_le_bytes());
        b.extend_from_slice(body);
        b.resize(8 + padded, 0);
        b.extend_from_slice(&total.to_le_bytes());
        b
    }

    /// The section header block that starts the file.
    pub fn section_header() -> Vec<u8> {
        let mut body = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes());
        block(0x0A0D_0D0A, &body)
    }

    /// An interface description block: interfaces are numbered from 0 in
    /// the order they are written.
    pub fn interface(link_type: u16, snaplen: u32) -> Vec<u8> {
        let mut body = link_type.to_le_bytes().to_vec();
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&snaplen.to_le_bytes());
        block(1, &body)
    }

    /// An enhanced packet block of `data`, captured on `interface`.
    pub fn packet(interface: u32, ts_ns: i64, data: &[u8]) -> Vec<u8> {
        let us = (ts_ns.max(0) / 1000) as u64;
        let mut body = interface.to_le_bytes().to_vec();
        body.extend_from_slice(&((us >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(us as u32).to_le_bytes());
        body.extend_from_slice(&(data.len() as u32).to_le_bytes());
        body.extend_from_slice(&(data.len() as u32).to_le_bytes());
        body.extend_from_slice(data);
        block(6, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CaptureReader;

    /// Packets of two interfaces read back with their link types, times and
    /// data, padding and all.
    #[test]
    fn pcapng_packets_read_back_with_their_interfaces_link_types() {
        let mut file = pcapng::section_header();
        file.extend(pcapng::interface(1, 65535));
        file.extend(pcapng::interface(9, 65535));
        let (a, b) = ([1u8; 61], [2u8; 5]);
        file.extend(pcapng::packet(1, 1_700_000_000_123_456_000, &b));
        file.extend(pcapng::packet(0, 1_700_000_001_000_001_000, &a));
        let mut r = CaptureReader::new(&file[..]).unwrap();
        let batch = r.next_batch(8).unwrap();
        let got: Vec<_> = batch.iter().map(|p| (p.ts_ns, p.link_type, p.data.to_vec())).collect();
        assert_eq!(
            got,
            [
                (1_700_000_000_123_456_000, 9, b.to_vec()),
                (1_700_000_001_000_001_000, 1, a.to_vec())
            ]
        );
    }

    /// What is written reads back through the reader, in both resolutions.
    #[test]
    fn records_read_back_with_their_times_and_lengths() {
        for (resolution, ts) in [
            (Resolution::Nanos, 1_700_000_000_123_456_789i64),
            (Resolution::Micros, 1_700_000_000_123_456_000),
        ] {
            let mut file = file_header(1, 65535, resolution).to_vec();
            let frame = [7u8; 60];
            file.extend_from_slice(&record_header(ts, 60, 1514, resolution));
            file.extend_from_slice(&frame);
            let mut r = CaptureReader::new(&file[..]).unwrap();
            let b = r.next_batch(8).unwrap();
            let p = b.iter().next().unwrap();
            assert_eq!((p.ts_ns, p.link_type, p.data, p.orig_len), (ts, 1, &frame[..], 1514));
        }
    }
}
