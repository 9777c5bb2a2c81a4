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
                1 => {
                    let iface = parse_idb(&self.buf[body], endian).ok_or_else(|| {
                        CaptureError::Corrupt {
                            offset,
                            reason: "short interface description block".into(),
                        }
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
                }
                6 | 2 | 3 => {
                    let Format::Pcapng { interfaces, .. } = &self.format else {
                        unreachable!("pcapng state")
                    };
                    let body = &self.buf[body.clone()];
                    let (if_id, ts_ticks, data_off, caplen, orig) = match btype {
                        6 | 2 => {
                            if body.len() < 20 {
                                return Err(CaptureError::Corrupt {
                                    offset,
                                    reason: "short packet block".into(),
                                });
                            }
                            let if_id = if btype == 6 {
                                endian.u32(&body[0..4])
                            } else {
                                endian.u16(&body[0..2]) as u32
                            };
                            let ts = ((endian.u32(&body[4..8]) as u64) << 32)
                                | endian.u32(&body[8..12]) as u64;
                            (
                                if_id,
                                ts,
                                20usize,
                                endian.u32(&body[12..16]) as usize,
                                endian.u32(&body[16..20]),
                            )
                        }
                        _ => {
                            if body.len() < 4 {
                                return Err(CaptureError::Corrupt {
                                    offset,
                                    reason: "short simple packet block".into(),
                                });
                            }
                            let orig = endian.u32(&body[0..4]);
                            let snap = interfaces.first().map(|i| i.snaplen).unwrap_or(0);
                            let mut cap = (body.len() - 4).min(orig as usize);
                            if snap != 0 {
                                cap = cap.min(snap as usize);
                            }
                            (0, 0, 4, cap, orig)
                        }
                    };
                    let Some(iface) = interfaces.get(if_id as usize).copied() else {
                        return Err(CaptureError::Corrupt {
                            offset,
                            reason: format!(
                                "packet names interface {if_id}, which was never described"
                            ),
                        });
                    };
                    if data_off + caplen > body.len() {
                        return Err(CaptureError::Corrupt {
                            offset,
                            reason: format!("captured length {caplen} overruns its block"),
                        });
                    }
                    let ts_ns = iface
                        .resolution
                        .ticks_to_ns(ts_ticks)
                        .saturating_add(iface.offset_s.saturating_mul(1_000_000_000));
                    let start = block_start + 8 + data_off;
                    return Ok(Step::Packet(Rec {
                        ts_ns,
                        link_type: iface.link_type,
                        start,
                        len: caplen,
                        orig_len: orig,
                        file_offset: offset,
                    }));
                }
                _ => self.skipped_blocks += 1,
            }
        }
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
