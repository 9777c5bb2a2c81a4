//! RTCP compound packets (RFC 3550 §6): sender and receiver reports.
//!
//! [`reports`] walks a compound packet and yields what matters to quality:
//! who reports (SSRC), and each report block's view of a source it receives
//! (fraction lost, cumulative lost, interarrival jitter, round-trip inputs).
//! [`parts`] also yields XR VoIP metrics blocks (RFC 3611 §4.7). Other
//! packet and XR block types (SDES, BYE, APP, feedback) are skipped by length.
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

/// The packets of a compound RTCP packet: (count field, packet type, the
/// whole packet). Stops with an error at the first malformed one.
fn packets(mut b: &[u8]) -> impl Iterator<Item = Result<(usize, u8, &[u8]), RtcpError>> {
    std::iter::from_fn(move || {
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
        Some(Ok((count, kind, pkt)))
    })
}

/// What a compound packet says about streams: reports and XR VoIP metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    /// A sender or receiver report.
    Report(Report<'a>),
    /// An XR VoIP metrics block (RFC 3611 §4.7) and its packet's sender.
    VoipMetrics(u32, VoipMetrics),
}

/// The SR, RR and XR VoIP-metrics parts of a compound RTCP packet, in
/// order. Stops with an error at the first malformed packet.
pub fn parts(b: &[u8]) -> impl Iterator<Item = Result<Part<'_>, RtcpError>> {
    let mut xr: (u32, &[u8]) = (0, &[]);
    let mut packets = packets(b);
    std::iter::from_fn(move || loop {
        // The rest of an XR packet's blocks come first.
        while xr.1.len() >= 4 {
            let words = u16::from_be_bytes([xr.1[2], xr.1[3]]) as usize;
            let len = (words + 1) * 4;
            if len > xr.1.len() {
                xr.1 = &[];
                return Some(Err(RtcpError::Malformed));
            }
            let (block, rest) = xr.1.split_at(len);
            xr.1 = rest;
            if block[0] == 7 && len == 36 {
                return Some(Ok(Part::VoipMetrics(xr.0, VoipMetrics::read(block))));
            }
        }
        let (count, kind, pkt) = match packets.next()? {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let len = pkt.len();
        let be = |i: usize| u32::from_be_bytes([pkt[i], pkt[i + 1], pkt[i + 2], pkt[i + 3]]);
        let (fixed, sender) = match kind {
            200 if len >= 28 => {
                (28, Some((((be(8) as u64) << 32) | be(12) as u64, be(16), be(20), be(24))))
            }
            201 if len >= 8 => (8, None),
            207 if len >= 8 => {
                xr = (be(4), &pkt[8..]);
                continue;
            }
            200 | 201 | 207 => return Some(Err(RtcpError::Malformed)),
            _ => continue,
        };
        let end = (fixed + count * 24).min(len);
        return Some(Ok(Part::Report(Report {
            reporter: be(4),
            sender,
            blocks: &pkt[fixed..end],
        })));
    })
}

/// The SR and RR packets of a compound RTCP packet, in order. Stops with an
/// error at the first malformed packet.
pub fn reports(b: &[u8]) -> impl Iterator<Item = Result<Report<'_>, RtcpError>> {
    parts(b).filter_map(|p| match p {
        Ok(Part::Report(r)) => Some(Ok(r)),
        Ok(Part::VoipMetrics(..)) => None,
        Err(e) => Some(Err(e)),
    })
}

/// An RTCP XR VoIP metrics block (RFC 3611 §4.7), as sent: what the
/// receiving endpoint measured of the stream `ssrc`, after its jitter buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VoipMetrics {
    /// The stream reported on.
    pub ssrc: u32,
    /// Packets lost in the network, /256.
    pub loss_rate: u8,
    /// Packets discarded late or early by the jitter buffer, /256.
    pub discard_rate: u8,
    /// Share of packets lost or discarded within bursts, /256.
    pub burst_density: u8,
    /// The same within gaps, /256.
    pub gap_density: u8,
    /// Mean burst length, ms.
    pub burst_duration_ms: u16,
    /// Mean gap length, ms.
    pub gap_duration_ms: u16,
    /// Round trip between the endpoints, ms.
    pub round_trip_ms: u16,
    /// The endpoint's own delay (buffers, codec), ms.
    pub end_system_delay_ms: u16,
    /// R factor (127: unavailable).
    pub r_factor: u8,
    /// MOS listening quality ×10 (127: unavailable).
    pub mos_lq: u8,
    /// MOS conversational quality ×10 (127: unavailable).
    pub mos_cq: u8,
    /// Receiver configuration (PLC, jitter-buffer kind and rate).
    pub rx_config: u8,
    /// Nominal jitter-buffer delay, ms.
    pub jb_nominal_ms: u16,
    /// Maximum jitter-buffer delay, ms.
    pub jb_maximum_ms: u16,
}

impl VoipMetrics {
    /// Reads a 36-byte block (header included).
    fn read(b: &[u8]) -> VoipMetrics {
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        VoipMetrics {
            ssrc: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            loss_rate: b[8],
            discard_rate: b[9],
            burst_density: b[10],
            gap_density: b[11],
            burst_duration_ms: u16_at(12),
            gap_duration_ms: u16_at(14),
            round_trip_ms: u16_at(16),
            end_system_delay_ms: u16_at(18),
            r_factor: b[24],
            mos_lq: b[26],
            mos_cq: b[27],
            rx_config: b[28],
            jb_nominal_ms: u16_at(30),
            jb_maximum_ms: u16_at(32),
        }
    }
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
        assert_eq!(reports(&p).collect::<Vec<_>>(), vec![Err(RtcpError::Malformed)]);
        // Count claims blocks the length does not hold: only what fits is read.
        let p = [0x9F, 201, 0, 1, 0, 0, 0, 1];
        let r = reports(&p).next().unwrap().unwrap();
        assert_eq!(r.blocks().count(), 0);
    }

    #[test]
    fn xr_voip_metrics_after_another_block_and_a_block_past_the_end() {
        let mut p = vec![0x80, 207, 0, 13];
        p.extend_from_slice(&0x3333_3333u32.to_be_bytes());
        p.extend_from_slice(&[4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2]); // receiver reference time
        let mut v = vec![7, 0, 0, 8];
        v.extend_from_slice(&0x4444_4444u32.to_be_bytes());
        v.extend_from_slice(&[26, 13, 0, 0, 0, 0, 0, 0, 0, 150, 0, 40]);
        v.extend_from_slice(&[0, 0, 0, 0, 90, 127, 41, 38, 0, 0, 0, 60, 0, 120, 0, 0]);
        p.extend_from_slice(&v);
        let all: Vec<_> = parts(&p).collect();
        let [Ok(Part::VoipMetrics(reporter, m))] = all[..] else {
            panic!("{all:?}");
        };
        assert_eq!(reporter, 0x3333_3333);
        assert_eq!((m.ssrc, m.loss_rate, m.discard_rate), (0x4444_4444, 26, 13));
        assert_eq!((m.round_trip_ms, m.end_system_delay_ms), (150, 40));
        assert_eq!((m.r_factor, m.mos_lq, m.mos_cq), (90, 41, 38));
        assert_eq!((m.jb_nominal_ms, m.jb_maximum_ms), (60, 120));
        // A block claiming more words than its packet holds is malformed.
        p[8 + 12 + 3] = 200;
        assert!(parts(&p).any(|r| r.is_err()));
    }
}
