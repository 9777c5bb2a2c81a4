//! pcapng: section headers (either byte order), interface descriptions
//! (link type, timestamp resolution and offset), and the packet blocks.

use super::*;

impl<R: Read> CaptureReader<R> {
    pub(crate) fn next_pcapng(&mut self) -> Result<Step, CaptureError> {
        loop {
            if self.hold && !self.record_buffered() {
                return Ok(Step::Held);
            }
            self.fill(12)?;
            if self.end == self.pos {
                return Ok(Step::End);
            }
            self.need(12, 0)?;
            let offset = self.position();
            let raw_type =
                u32::from_le_bytes(self.buf[self.pos..self.pos + 4].try_into().unwrap_or_default());
            if raw_type == 0x0A0D0D0A {
                self.read_section_header(offset)?;
                continue;
            }
            let Format::Pcapng { endian, .. } = self.format else { unreachable!("pcapng state") };
            let b = &self.buf[self.pos..];
            let btype = endian.u32(&b[0..4]);
            let blen = endian.u32(&b[4..8]) as usize;
            if blen < 12 || !blen.is_multiple_of(4) || blen > MAX_RECORD {
                return Err(CaptureError::Corrupt {
                    offset,
                    reason: format!("pcapng block length {blen} is invalid"),
                });
            }
            self.need(blen, 0)?;
            let block_start = self.pos;
            // The length is repeated at the end of every block: a mismatch
            // means the file is damaged here, and reading on would misframe.
            let trailer = endian.u32(&self.buf[block_start + blen - 4..block_start + blen]);
            if trailer as usize != blen {
                return Err(CaptureError::Corrupt {
                    offset,
                    reason: format!("pcapng block length {blen} but {trailer} at its end"),
                });
            }
            self.pos += blen;
            let body = block_start + 8..block_start + blen - 4;
            match btype {
                1 => self.add_interface(body, endian, offset)?,
                6 | 2 | 3 => {
                    return self.packet_block(btype, body, endian, offset).map(Step::Packet)
                }
                _ => self.skipped_blocks += 1,
            }
        }
    }

    /// An interface description block (its `body`): one more interface of
    /// the section, at most 65 536.
    fn add_interface(
        &mut self,
        body: std::ops::Range<usize>,
        endian: Endian,
        offset: u64,
    ) -> Result<(), CaptureError> {
        let iface = parse_idb(&self.buf[body], endian).ok_or_else(|| CaptureError::Corrupt {
            offset,
            reason: "short interface description block".into(),
        })?;
        if let Format::Pcapng { interfaces, .. } = &mut self.format {
            if interfaces.len() >= 65536 {
                return Err(CaptureError::Corrupt {
                    offset,
                    reason: "more than 65536 interfaces".into(),
                });
            }
            interfaces.push(iface);
        }
        Ok(())
    }

    /// A packet block (enhanced 6, obsolete 2, simple 3; its `body`) as a
    /// record, dated by its interface's resolution and offset.
    fn packet_block(
        &self,
        btype: u32,
        body: std::ops::Range<usize>,
        endian: Endian,
        offset: u64,
    ) -> Result<Rec, CaptureError> {
        let Format::Pcapng { interfaces, .. } = &self.format else { unreachable!("pcapng state") };
        let start = body.start;
        let body = &self.buf[body];
        let snaplen = interfaces.first().map(|i| i.snaplen).unwrap_or(0);
        let short = if btype == 3 { "short simple packet block" } else { "short packet block" };
        let f = packet_fields(btype, body, endian, snaplen)
            .ok_or_else(|| CaptureError::Corrupt { offset, reason: short.into() })?;
        let Some(iface) = interfaces.get(f.if_id as usize).copied() else {
            return Err(CaptureError::Corrupt {
                offset,
                reason: format!("packet names interface {}, which was never described", f.if_id),
            });
        };
        if f.data_off + f.caplen > body.len() {
            return Err(CaptureError::Corrupt {
                offset,
                reason: format!("captured length {} overruns its block", f.caplen),
            });
        }
        let ts_ns = iface
            .resolution
            .ticks_to_ns(f.ts_ticks)
            .saturating_add(iface.offset_s.saturating_mul(1_000_000_000));
        Ok(Rec {
            ts_ns,
            link_type: iface.link_type,
            start: start + f.data_off,
            len: f.caplen,
            orig_len: f.orig,
            file_offset: offset,
        })
    }

    fn read_section_header(&mut self, offset: u64) -> Result<(), CaptureError> {
        self.need(12, 0)?;
        let bom = &self.buf[self.pos + 8..self.pos + 12];
        let endian = match bom {
            [0x4D, 0x3C, 0x2B, 0x1A] => Endian::Little,
            [0x1A, 0x2B, 0x3C, 0x4D] => Endian::Big,
            _ => {
                return Err(CaptureError::Corrupt {
                    offset,
                    reason: "bad pcapng byte-order magic".into(),
                })
            }
        };
        let blen = endian.u32(&self.buf[self.pos + 4..self.pos + 8]) as usize;
        if blen < 28 || !blen.is_multiple_of(4) || blen > MAX_RECORD {
            return Err(CaptureError::Corrupt {
                offset,
                reason: format!("section header length {blen} is invalid"),
            });
        }
        self.need(blen, 0)?;
        self.pos += blen;
        self.format = Format::Pcapng { endian, interfaces: Vec::new() };
        Ok(())
    }
}

/// Parses an Interface Description Block body (after type and length).
fn parse_idb(body: &[u8], e: Endian) -> Option<Interface> {
    if body.len() < 8 {
        return None;
    }
    let mut iface = Interface {
        link_type: e.u16(&body[0..2]),
        resolution: TsResolution::Decimal(6),
        offset_s: 0,
        snaplen: e.u32(&body[4..8]),
    };
    let mut opts = &body[8..];
    while opts.len() >= 4 {
        let code = e.u16(&opts[0..2]);
        let len = e.u16(&opts[2..4]) as usize;
        let padded = (len + 3) & !3;
        if code == 0 || opts.len() < 4 + len {
            break;
        }
        let val = &opts[4..4 + len];
        match (code, len) {
            (9, 1) => {
                let v = val[0];
                iface.resolution = if v & 0x80 != 0 {
                    TsResolution::Binary(v & 0x7F)
                } else {
                    TsResolution::Decimal(v)
                };
            }
            // One 64-bit integer (not two 32-bit halves, as packet times are).
            (14, 8) => iface.offset_s = e.i64(val),
            _ => {}
        }
        opts = opts.get(4 + padded..).unwrap_or(&[]);
    }
    Some(iface)
}

/// A packet block's fields before its data.
struct PacketFields {
    if_id: u32,
    ts_ticks: u64,
    /// Where the data starts in the block's body.
    data_off: usize,
    caplen: usize,
    orig: u32,
}

/// The fields of a packet block's `body` (block type `btype`): None when
/// it is too short for them. A simple packet block (3) names no interface
/// or time: the first interface, at tick 0, its data cut to `snaplen`.
fn packet_fields(btype: u32, body: &[u8], endian: Endian, snaplen: u32) -> Option<PacketFields> {
    if btype == 3 {
        let orig = endian.u32(body.get(0..4)?);
        let mut caplen = (body.len() - 4).min(orig as usize);
        if snaplen != 0 {
            caplen = caplen.min(snaplen as usize);
        }
        return Some(PacketFields { if_id: 0, ts_ticks: 0, data_off: 4, caplen, orig });
    }
    let head = body.get(0..20)?;
    let if_id = if btype == 6 { endian.u32(&head[0..4]) } else { endian.u16(&head[0..2]) as u32 };
    let ts_ticks = ((endian.u32(&head[4..8]) as u64) << 32) | endian.u32(&head[8..12]) as u64;
    Some(PacketFields {
        if_id,
        ts_ticks,
        data_off: 20,
        caplen: endian.u32(&head[12..16]) as usize,
        orig: endian.u32(&head[16..20]),
    })
}
