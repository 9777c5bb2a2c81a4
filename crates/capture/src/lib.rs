//! Packet sources: pcap and pcapng files, and (on Linux) a live AF_PACKET
//! ring ([`live`]).
//!
//! [`CaptureReader`] reads either format from any [`std::io::Read`] through one
//! reusable buffer and hands out [`Packet`]s that borrow it, so reading does not
//! copy or allocate per packet. Timestamps are normalised to nanoseconds since the
//! Unix epoch whatever the file's resolution (µs, ns, pcapng `if_tsresol` in
//! powers of ten or two, `if_tsoffset`).
//!
//! Errors carry the byte offset of the record that failed, so an operator can
//! find the damage with a hex editor; packets before that point have already
//! been delivered.

use std::io::{self, Read};

pub use calliper_wire::linktype;
pub use error::CaptureError;

/// One captured frame, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Packet<'a> {
    /// Capture time in nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    /// Link-layer type of `data` (see [`linktype`]).
    pub link_type: u16,
    /// Captured bytes (may be shorter than `orig_len` when a snap length applied).
    pub data: &'a [u8],
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// Byte offset of this record in the file.
    pub file_offset: u64,
}

impl Packet<'_> {
    /// No packet: what arrays of packets are filled with before use.
    pub const EMPTY: Packet<'static> =
        Packet { ts_ns: 0, link_type: 0, data: &[], orig_len: 0, file_offset: 0 };
}

/// Largest record we accept. Real snap lengths are at most 256 KiB; pcapng blocks
/// may carry jumbo frames. Anything larger is corruption, not a packet, and must
/// not make us allocate.
pub const MAX_RECORD: usize = 16 * 1024 * 1024;

const READ_CHUNK: usize = 1 << 20;

/// Byte order of a file or pcapng section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        match self {
            Endian::Little => u16::from_le_bytes(a),
            Endian::Big => u16::from_be_bytes(a),
        }
    }
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            Endian::Little => u32::from_le_bytes(a),
            Endian::Big => u32::from_be_bytes(a),
        }
    }
    fn i64(self, b: &[u8]) -> i64 {
        let a = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        match self {
            Endian::Little => i64::from_le_bytes(a),
            Endian::Big => i64::from_be_bytes(a),
        }
    }
}

/// Timestamp resolution of a source: ticks per second as 10^n or 2^n.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsResolution {
    /// 10^-n seconds per tick.
    Decimal(u8),
    /// 2^-n seconds per tick.
    Binary(u8),
}

impl TsResolution {
    /// Converts a tick count to nanoseconds (saturating on absurd values).
    pub fn ticks_to_ns(self, ticks: u64) -> i64 {
        let ns: u128 = match self {
            TsResolution::Decimal(n) if n <= 9 => ticks as u128 * 10u128.pow(9 - n as u32),
            TsResolution::Decimal(n) => ticks as u128 / 10u128.pow((n as u32 - 9).min(38)),
            TsResolution::Binary(n) => (ticks as u128 * 1_000_000_000) >> n.min(127),
        };
        ns.min(i64::MAX as u128) as i64
    }
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link_type: u16,
    resolution: TsResolution,
    offset_s: i64,
    snaplen: u32,
}

#[derive(Debug)]
enum Format {
    Pcap { endian: Endian, nanos: bool, link_type: u16, record_header: usize },
    Pcapng { endian: Endian, interfaces: Vec<Interface> },
}

/// Which container the file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Classic libpcap.
    Pcap,
    /// pcap next generation.
    Pcapng,
}

/// What a file's first four bytes say it is.
enum Sniffed {
    /// pcap: byte order, nanosecond times, record header length.
    Pcap(Endian, bool, usize),
    Pcapng,
}

/// Whether `first` (a file's first four bytes, or all it has) starts a
/// capture: lets a caller refuse a wrong file before any work.
pub fn check_start(first: &[u8]) -> Result<FileKind, CaptureError> {
    Ok(match sniff(first)? {
        Sniffed::Pcap(..) => FileKind::Pcap,
        Sniffed::Pcapng => FileKind::Pcapng,
    })
}

fn sniff(first: &[u8]) -> Result<Sniffed, CaptureError> {
    if first.is_empty() {
        // Said as such: "not a capture (first bytes 00000000)" misleads.
        return Err(CaptureError::Truncated { offset: 0, needed: 4, available: 0 });
    }
    if first.len() < 4 {
        return Err(CaptureError::Truncated {
            offset: 0,
            needed: 4,
            available: first.len() as u64,
        });
    }
    let magic = [first[0], first[1], first[2], first[3]];
    Ok(match u32::from_le_bytes(magic) {
        0xA1B2C3D4 => Sniffed::Pcap(Endian::Little, false, 16),
        0xA1B23C4D => Sniffed::Pcap(Endian::Little, true, 16),
        0xA1B2CD34 => Sniffed::Pcap(Endian::Little, false, 24),
        0xD4C3B2A1 => Sniffed::Pcap(Endian::Big, false, 16),
        0x4D3CB2A1 => Sniffed::Pcap(Endian::Big, true, 16),
        0x34CDB2A1 => Sniffed::Pcap(Endian::Big, false, 24),
        0x0A0D0D0A => Sniffed::Pcapng,
        _ => return Err(CaptureError::NotACapture { magic }),
    })
}

/// Streaming reader for pcap and pcapng.
pub struct CaptureReader<R> {
    src: R,
    buf: Vec<u8>,
    /// Start of unconsumed bytes in `buf`.
    pos: usize,
    /// End of valid bytes in `buf`.
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
    eof: bool,
    format: Format,
    /// Records skipped because they are not packets (pcapng statistics, names...).
    pub skipped_blocks: u64,
    /// While filling a batch: stop before a record that is not wholly
    /// buffered, since reading more would move the records already handed out.
    hold: bool,
    /// Records of the current batch (reused).
    batch: Vec<Rec>,
    /// An error met after the first record of a batch, reported by the next call.
    pending: Option<CaptureError>,
}

/// A record found in the buffer: a packet whose bytes are `buf[start..start + len]`.
#[derive(Debug, Clone, Copy)]
struct Rec {
    ts_ns: i64,
    link_type: u16,
    start: usize,
    len: usize,
    orig_len: u32,
    file_offset: u64,
}

/// What reading one record gave.
enum Step {
    Packet(Rec),
    End,
    /// The next record is not wholly buffered and the reader is holding.
    Held,
}

/// Packets read in one go, all borrowing the reader's buffer.
pub struct Batch<'a> {
    buf: &'a [u8],
    recs: &'a [Rec],
}

impl<'a> Batch<'a> {
    /// Number of packets (0 only at the end of the input).
    pub fn len(&self) -> usize {
        self.recs.len()
    }
    /// True at the end of the input.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }
    /// The packets' capture times in file order (cheaper than `iter`).
    pub fn times(&self) -> impl ExactSizeIterator<Item = i64> + '_ {
        self.recs.iter().map(|r| r.ts_ns)
    }
    /// The packets in file order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Packet<'a>> + '_ {
        let buf = self.buf;
        self.recs.iter().map(move |r| r.packet(buf))
    }
}

impl Rec {
    #[inline]
    fn packet(self, buf: &[u8]) -> Packet<'_> {
        Packet {
            ts_ns: self.ts_ns,
            link_type: self.link_type,
            data: &buf[self.start..self.start + self.len],
            orig_len: self.orig_len,
            file_offset: self.file_offset,
        }
    }
}

impl<R: Read> CaptureReader<R> {
    /// Opens a capture, detecting pcap or pcapng from its first block.
    pub fn new(src: R) -> Result<Self, CaptureError> {
        let mut r = CaptureReader {
            src,
            buf: vec![0; READ_CHUNK],
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            format: Format::Pcap {
                endian: Endian::Little,
                nanos: false,
                link_type: 0,
                record_header: 16,
            },
            skipped_blocks: 0,
            hold: false,
            batch: Vec::new(),
            pending: None,
        };
        r.fill(4)?;
        if let Sniffed::Pcap(endian, nanos, record_header) = sniff(&r.buf[..r.end.min(4)])? {
            r.need(24, 0)?;
            let h = &r.buf[r.pos..r.pos + 24];
            let link_type = (endian.u32(&h[20..24]) & 0xFFFF) as u16;
            r.format = Format::Pcap { endian, nanos, link_type, record_header };
            r.pos += 24;
            Ok(r)
        } else {
            r.format = Format::Pcapng { endian: Endian::Little, interfaces: Vec::new() };
            Ok(r)
        }
    }

    /// The container format.
    pub fn kind(&self) -> FileKind {
        match self.format {
            Format::Pcap { .. } => FileKind::Pcap,
            Format::Pcapng { .. } => FileKind::Pcapng,
        }
    }

    /// Bytes of the file consumed so far (for progress reporting).
    pub fn position(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Reads until at least `n` bytes are buffered past `pos`, or EOF.
    /// Makes `n` bytes available from `pos` if the input has them. The check
    /// is inlined into every record read; the refill is not.
    #[inline]
    fn fill(&mut self, n: usize) -> Result<(), CaptureError> {
        if self.end - self.pos >= n {
            return Ok(());
        }
        self.refill(n)
    }

    #[cold]
    fn refill(&mut self, n: usize) -> Result<(), CaptureError> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.buf.len() < n {
            self.buf.resize(n.next_power_of_two(), 0);
        }
        while self.end < n && !self.eof {
            let got = match self.src.read(&mut self.buf[self.end..]) {
                Ok(g) => g,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if got == 0 {
                self.eof = true;
            }
            self.end += got;
        }
        Ok(())
    }

    /// Like `fill`, but a short read is a truncation of the record at `pos`.
    #[inline]
    fn need(&mut self, n: usize, _record: usize) -> Result<(), CaptureError> {
        self.fill(n)?;
        let avail = self.end - self.pos;
        if avail < n {
            return Err(CaptureError::Truncated {
                offset: self.position(),
                needed: n as u64,
                available: avail as u64,
            });
        }
        Ok(())
    }

    /// Returns the next packet, `None` at a clean end of file.
    #[allow(clippy::should_implement_trait)] // lending iterator: the packet borrows the reader
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, CaptureError> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        self.hold = false;
        match self.next_record()? {
            Step::Packet(r) => Ok(Some(r.packet(&self.buf))),
            Step::End | Step::Held => Ok(None),
        }
    }

    /// Returns up to `max` packets at once, all borrowing the buffer, so the
    /// caller can look ahead (prefetch) without copying; empty at a clean end
    /// of file. A batch ends early where the buffer does, so a batch is never
    /// a reason to read more. An error after the first packet is returned by
    /// the next call, after the packets before it.
    pub fn next_batch(&mut self, max: usize) -> Result<Batch<'_>, CaptureError> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        self.batch.clear();
        self.hold = false;
        while self.batch.len() < max {
            // The common case first: whole, well-formed pcap records.
            self.take_buffered(max);
            if self.batch.len() >= max {
                break;
            }
            match self.next_record() {
                Ok(Step::Packet(r)) => self.batch.push(r),
                Ok(Step::End | Step::Held) => break,
                Err(e) if self.batch.is_empty() => return Err(e),
                Err(e) => {
                    self.pending = Some(e);
                    break;
                }
            }
            self.hold = true;
        }
        self.hold = false;
        Ok(Batch { buf: &self.buf, recs: &self.batch })
    }

    /// The batch the last [`CaptureReader::next_batch`] returned, again (so
    /// a caller can decide what to do with the reader before borrowing it).
    pub fn last_batch(&self) -> Batch<'_> {
        Batch { buf: &self.buf, recs: &self.batch }
    }

    fn next_record(&mut self) -> Result<Step, CaptureError> {
        match self.format {
            Format::Pcap { .. } => self.next_pcap(),
            Format::Pcapng { .. } => self.next_pcapng(),
        }
    }

    /// True when the record at `pos` is wholly in the buffer (or is so
    /// damaged that reading it gives an error without reading more).
    fn record_buffered(&self) -> bool {
        let avail = &self.buf[self.pos..self.end];
        match self.format {
            Format::Pcap { endian, record_header, .. } => {
                avail.len() >= record_header && {
                    let incl = endian.u32(&avail[8..12]) as usize;
                    incl > MAX_RECORD || avail.len() >= record_header + incl
                }
            }
            Format::Pcapng { endian, .. } => {
                avail.len() >= 12 && {
                    let raw = u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]);
                    let blen = endian.u32(&avail[4..8]) as usize;
                    // A section header's length is in its own byte order: read it unheld.
                    raw != 0x0A0D0D0A && (blen > MAX_RECORD || avail.len() >= blen)
                }
            }
        }
    }

    /// The pcap record at `pos` when it is wholly buffered and within
    /// [`MAX_RECORD`], read straight from the buffer; else None. Always
    /// inlined: once it was not, and reading cost 20 more instructions a
    /// packet (benches/budget.sh).
    #[inline(always)]
    fn buffered_pcap(&mut self) -> Option<Rec> {
        let Format::Pcap { endian, nanos, link_type, record_header } = self.format else {
            return None;
        };
        let layout = (link_type, record_header);
        match (endian, nanos) {
            (Endian::Little, false) => self.pcap_record::<false, false>(layout),
            (Endian::Little, true) => self.pcap_record::<false, true>(layout),
            (Endian::Big, false) => self.pcap_record::<true, false>(layout),
            (Endian::Big, true) => self.pcap_record::<true, true>(layout),
        }
    }

    /// Takes whole buffered pcap records into the batch until it holds
    /// `max` or the next is not wholly buffered: [`Self::buffered_pcap`]
    /// in a loop, the byte order and time unit chosen once.
    fn take_buffered(&mut self, max: usize) {
        let Format::Pcap { endian, nanos, link_type, record_header } = self.format else {
            return;
        };
        let layout = (link_type, record_header);
        match (endian, nanos) {
            (Endian::Little, false) => self.take_as::<false, false>(max, layout),
            (Endian::Little, true) => self.take_as::<false, true>(max, layout),
            (Endian::Big, false) => self.take_as::<true, false>(max, layout),
            (Endian::Big, true) => self.take_as::<true, true>(max, layout),
        }
    }

    #[inline(always)]
    fn take_as<const BIG: bool, const NANOS: bool>(&mut self, max: usize, layout: (u16, usize)) {
        while self.batch.len() < max {
            let Some(r) = self.pcap_record::<BIG, NANOS>(layout) else {
                return;
            };
            self.batch.push(r);
            self.hold = true;
        }
    }

    /// The pcap record at `pos`, in this byte order (big-endian when `BIG`)
    /// and time unit (nanoseconds when `NANOS`), fixed at compile time: a
    /// match on them for every field cost 16 instructions a packet.
    #[inline(always)]
    fn pcap_record<const BIG: bool, const NANOS: bool>(
        &mut self,
        (link_type, record_header): (u16, usize),
    ) -> Option<Rec> {
        let avail = &self.buf[self.pos..self.end];
        let h = avail.get(..record_header)?;
        let word = |i: usize| {
            let a = [h[i], h[i + 1], h[i + 2], h[i + 3]];
            if BIG {
                u32::from_be_bytes(a)
            } else {
                u32::from_le_bytes(a)
            }
        };
        let incl = word(8) as usize;
        if incl > MAX_RECORD || avail.len() < record_header + incl {
            return None;
        }
        let (sec, frac) = (word(0) as i64, word(4) as i64);
        let offset = self.position();
        let start = self.pos + record_header;
        self.pos = start + incl;
        Some(Rec {
            ts_ns: sec * 1_000_000_000 + if NANOS { frac } else { frac * 1000 },
            link_type,
            start,
            len: incl,
            orig_len: word(12),
            file_offset: offset,
        })
    }

    fn next_pcap(&mut self) -> Result<Step, CaptureError> {
        let Format::Pcap { endian, record_header, .. } = self.format else {
            unreachable!("pcap reader state")
        };
        if let Some(r) = self.buffered_pcap() {
            return Ok(Step::Packet(r));
        }
        // A record not yet wholly buffered (or damaged) is read in, or refused.
        if !self.record_buffered() {
            if self.hold {
                return Ok(Step::Held);
            }
            self.fill(record_header)?;
            if self.end == self.pos {
                return Ok(Step::End);
            }
            self.need(record_header, 0)?;
            let incl = endian.u32(&self.buf[self.pos + 8..self.pos + 12]) as usize;
            if incl <= MAX_RECORD {
                self.need(record_header + incl, 0)?;
            }
        }
        if let Some(r) = self.buffered_pcap() {
            return Ok(Step::Packet(r));
        }
        let incl = endian.u32(&self.buf[self.pos + 8..self.pos + 12]);
        Err(CaptureError::Corrupt {
            offset: self.position(),
            reason: format!("record length {incl} exceeds the {MAX_RECORD}-byte limit"),
        })
    }
}

mod error;
pub mod files;
pub mod filter;
pub mod hep_listen;
#[cfg(target_os = "linux")]
pub mod live;
pub mod pcap_out;
mod pcapng;

#[cfg(test)]
mod tests;
