//! RTCP compound packets (RFC 3550 §6): sender and receiver reports.
//!
//! [`reports`] walks a compound packet and yields what matters to quality:
//! who reports (SSRC), and each report block's view of a source it receives
//! (fraction lost, cumulative lost, interarrival jitter, round-trip inputs).
//! Other packet types (SDES, BYE, APP, feedback, XR) are skipped by length.
//! A length that runs past the datagram ends the walk: nothing is read
//! outside the buffer.

/// One report block: a receiver's view of one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportBlock {
    /// The source this block is about.
    pub ssrc: u32,
    /// Fraction lost since the previous report, /256.
    pub fraction_lost: u8,
    /// Cumulative packets lost (24-bit signed; duplicates can make it negative).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    /// Interarrival jitter, timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the NTP time of the last SR received from the source.
    pub lsr: u32,
    /// Delay since that SR, 1/65536 s.
    pub dlsr: u32,
}

/// A sender or receiver report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report<'a> {
    /// Who sends this report.
    pub reporter: u32,
    /// Sender info for an SR: (NTP timestamp, RTP timestamp, packets, octets).
    pub sender: Option<(u64, u32, u32, u32)>,
    blocks: &'a [u8],
}

impl<'a> Report<'a> {
    /// The report blocks.
    pub fn blocks(&self) -> impl Iterator<Item = ReportBlock> + 'a {
        self.blocks.chunks_exact(24).map(|b| {
            let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
            let lost = be(4) & 0x00FF_FFFF;
            ReportBlock {
                ssrc: be(0),
                fraction_lost: b[4],
                // Sign-extend the 24-bit count.
                cumulative_lost: ((lost << 8) as i32) >> 8,
                highest_seq: be(8),
                jitter: be(12),
                lsr: be(16),
                dlsr: be(20),
            }
        })
    }
}

/// Why a compound packet could not be read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtcpError {
    /// Not version 2, or a length past the end of the datagram.
    Malformed,
}

/// The SR and RR packets of a compound RTCP packet, in order. Stops with an
/// error at the first malformed packet.
pub fn reports(mut b: &[u8]) -> impl Iterator<Item = Result<Report<'_>, RtcpError>> {
    std::iter::from_fn(move || loop {
        if b.len() < 4 {
            return None;
        }
        let count = (b[0] & 0x1F) as usize;
        let kind = b[1];
        let len = (u16::from_be_bytes([b[2], b[3]]) as usize + 1) * 4;
        if b[0] >> 6 != 2 || len > b.len() {
            b = &[];
            return Some(Err(RtcpError::Malformed));
        }
        let (pkt, rest) = b.split_at(len);
        b = rest;
        let be = |i: usize| u32::from_be_bytes([pkt[i], pkt[i + 1], pkt[i + 2], pkt[i + 3]]);
        let (fixed, sender) = match kind {
            200 if len >= 28 => (
                28,
                Some((
                    ((be(8) as u64) << 32) | be(12) as u64,
                    be(16),
                    be(20),
                    be(24),
                )),
            ),
            201 if len >= 8 => (8, None),
            200 | 201 => {
                b = &[];
                return Some(Err(RtcpError::Malformed));
            }
            _ => continue,
        };
        let end = (fixed + count * 24).min(len);
        return Some(Ok(Report {
            reporter: be(4),
            sender,
            blocks: &pkt[fixed..end],
        }));
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_report_with_a_block_then_sdes() {
        let mut p = vec![0x81, 200, 0, 12];
        p.extend_from_slice(&0x1111_1111u32.to_be_bytes()); // reporter
        p.extend_from_slice(&[0; 8]); // NTP
        p.extend_from_slice(&160u32.to_be_bytes()); // RTP ts
        p.extend_from_slice(&50u32.to_be_bytes()); // packets
        p.extend_from_slice(&8000u32.to_be_bytes()); // octets
        p.extend_from_slice(&0x2222_2222u32.to_be_bytes());
        p.extend_from_slice(&[13, 0xFF, 0xFF, 0xFE]); // 13/256, cumulative -2
        p.extend_from_slice(&1000u32.to_be_bytes());
        p.extend_from_slice(&80u32.to_be_bytes()); // jitter
        p.extend_from_slice(&[0; 8]);
        p.extend_from_slice(&[0x81, 202, 0, 1, 0, 0, 0, 0]); // SDES
        let all: Vec<_> = reports(&p).collect();
        assert_eq!(all.len(), 1);
        let r = all[0].unwrap();
        assert_eq!(r.reporter, 0x1111_1111);
        assert_eq!(r.sender.unwrap().2, 50);
        let b: Vec<_> = r.blocks().collect();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].ssrc, 0x2222_2222);
        assert_eq!(b[0].fraction_lost, 13);
        assert_eq!(b[0].cumulative_lost, -2);
        assert_eq!(b[0].jitter, 80);
    }

    #[test]
    fn lengths_past_the_end_stop_the_walk() {
        let p = [0x81, 201, 0, 40, 0, 0, 0, 1];
        assert_eq!(
            reports(&p).collect::<Vec<_>>(),
            vec![Err(RtcpError::Malformed)]
        );
        // Count claims blocks the length does not hold: only what fits is read.
        let p = [0x9F, 201, 0, 1, 0, 0, 0, 1];
        let r = reports(&p).next().unwrap().unwrap();
        assert_eq!(r.blocks().count(), 0);
    }
}
