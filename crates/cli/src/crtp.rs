//! `calliper crtp`: what RTP header compression (cRTP, RFC 2508) would save
//! on a link, shown on a real capture: each IP packet compressed as a PPP
//! link would carry it, written as a pcap of PPP frames that Wireshark
//! reads, and back.

use crate::files::{distinct, reader};
use anyhow::{bail, Context as _, Result};
use calliper_capture::pcap_out::{self, Resolution};
use calliper_capture::{linktype, CaptureReader, Packet};
use calliper_crtp::{protocol, Compressor, Config, Decompressor, Kind};
use clap::{Args, Subcommand};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// pcap's link type for PPP frames (address, control, protocol).
const LINKTYPE_PPP: u32 = calliper_wire::linktype::PPP as u32;

/// The `crtp` subcommands.
#[derive(Subcommand)]
pub enum CrtpCommand {
    /// Compress a capture's IP packets as a cRTP link would: a pcap of PPP frames.
    #[command(
        long_about = "Compress every IP packet of a capture as one PPP link with RTP header compression \
(cRTP, RFC 2508) would carry it, in capture order, and write the link's frames as a pcap (link type PPP) \
that Wireshark and tshark read. IPv4/UDP/RTP packets get a context per flow (addresses, ports, SSRC): \
the first crosses as FULL_HEADER, the rest as COMPRESSED_RTP (2 bytes of header on a steady stream, 4 \
with a UDP checksum), or COMPRESSED_UDP when the RTP header changes in a field that is normally \
constant. Other UDP over IPv4, and IPv6/UDP, cross as COMPRESSED_NON_TCP (IP and UDP headers \
elided); the rest (fragments, TCP, headers whose checksums or lengths would not come back byte for \
byte) as plain IP. Frames that carry no IP are left out and counted.\n\n\
The summary (stderr) gives the header bytes before and after, per kind of packet."
    )]
    Compress(CompressArgs),
    /// Decompress a pcap of PPP frames (as `crtp compress` writes) back to IP packets.
    #[command(
        long_about = "Decompress a pcap of PPP frames carrying cRTP (as `crtp compress` writes) and write \
the IP packets as a raw-IP pcap. A packet whose context is missing or damaged (its link sequence shows a \
gap) is dropped, never guessed, and counted as lost to context damage."
    )]
    Decompress(DecompressArgs),
}

/// `crtp compress` options.
#[derive(Args)]
pub struct CompressArgs {
    /// Capture to read (pcap or pcapng).
    pub input: PathBuf,
    /// pcap of PPP frames to write (created 0600).
    pub output: PathBuf,
    #[command(flatten)]
    pub link: LinkArgs,
}

/// `crtp decompress` options.
#[derive(Args)]
pub struct DecompressArgs {
    /// pcap of PPP frames to read.
    pub input: PathBuf,
    /// Raw-IP pcap to write (created 0600).
    pub output: PathBuf,
    #[command(flatten)]
    pub link: LinkArgs,
}

/// The link's settings. The decompressor reads everything else from the
/// packets themselves; it needs only --contexts at least the compressor's.
#[derive(Args)]
pub struct LinkArgs {
    /// Contexts (flows compressed at once); above 256 context ids take 16 bits. The
    /// decompressor's must be at least the compressor's.
    #[arg(long, default_value_t = Config::default().contexts, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(Config::MAX_CONTEXTS)))]
    pub contexts: u32,
    /// Compress only: a full header at least every N packets of a flow (F_MAX_PERIOD; 0:
    /// never for age).
    #[arg(long, default_value_t = Config::default().max_period, value_name = "N")]
    pub max_period: u32,
    /// Compress only: ... and at least every this many seconds (F_MAX_TIME; 0: never for age).
    #[arg(long, default_value_t = Config::default().max_time_ns as f64 / 1e9, value_name = "SECONDS")]
    pub max_time: f64,
    /// RFC 3545's header checksum on flows without a UDP checksum, so context damage their
    /// 4-bit link sequence misses is caught (2 bytes more per packet).
    #[arg(long)]
    pub header_checksum: bool,
    /// RFC 3545's robust operation: every change crosses in N+1 packets in a row, so the
    /// decompressor bridges up to N losses in a row (checked by the UDP or header checksum:
    /// give --header-checksum too for flows without one). 0-7; 0 is plain RFC 2508.
    #[arg(long, default_value_t = Config::default().repeats, value_name = "N")]
    pub repeats: u8,
}

impl LinkArgs {
    fn config(&self) -> Result<Config> {
        if !(self.max_time == 0.0 || (0.001..=3600.0).contains(&self.max_time)) {
            bail!("--max-time must be 0 (never) or 0.001-3600 seconds, not {}", self.max_time);
        }
        let config = Config {
            contexts: self.contexts,
            max_period: self.max_period,
            max_time_ns: (self.max_time * 1e9) as u64,
            header_checksum: self.header_checksum,
            repeats: self.repeats,
        };
        config.check().map_err(|e| anyhow::anyhow!("--{e}"))?;
        Ok(config)
    }
}

/// Runs a `crtp` subcommand: false when some input could not be read.
pub fn run(command: CrtpCommand) -> Result<bool> {
    match command {
        CrtpCommand::Compress(a) => compress(&a),
        CrtpCommand::Decompress(a) => decompress(&a),
    }
}

fn compress(a: &CompressArgs) -> Result<bool> {
    let config = a.link.config()?;
    let mut compressor = Compressor::new(config).map_err(anyhow::Error::msg)?;
    distinct(&a.input, &a.output)?;
    let mut input = reader(&a.input)?;
    let mut out = Output::new(&a.output, LINKTYPE_PPP);
    let (mut link, mut frame) = (Vec::with_capacity(2048), Vec::with_capacity(2048));
    let (mut not_ip, mut ipv6, mut bytes_in, mut bytes_out) = (0u64, 0u64, 0u64, 0u64);
    let (mut complete, mut first) = (true, true);
    while let Some(p) = next_or_stop(&mut input, &a.input, &mut complete) {
        // Judged by the first packet, before anything is written: a later
        // PPP frame (a pcapng of several links) is read as any other link.
        if std::mem::take(&mut first) && p.link_type as u32 == LINKTYPE_PPP {
            bail!(
                "{} is already a capture of PPP frames: did you mean `calliper crtp decompress`?",
                a.input.display()
            );
        }
        let Some(ip) = calliper_wire::outer_ip(p.link_type, p.data) else {
            not_ip += 1;
            continue;
        };
        let v6 = ip[0] >> 4 == 6;
        ipv6 += v6 as u64;
        let ts = u64::try_from(p.ts_ns).unwrap_or(0);
        let protocol = match compressor.compress(ip, ts, &mut link) {
            Kind::Ip if v6 => protocol::IPV6,
            kind => kind.protocol(&config),
        };
        frame.clear();
        frame.extend_from_slice(&[0xFF, 0x03]);
        frame.extend_from_slice(&protocol.to_be_bytes());
        frame.extend_from_slice(&link);
        out.write(p.ts_ns, &frame)?;
        bytes_in += ip.len() as u64;
        bytes_out += link.len() as u64;
    }
    let written = out.finish(&a.input, !first)?;
    let s = compressor.stats;
    let compressed = s.full_headers + s.compressed_rtp + s.compressed_udp + s.compressed_non_tcp;
    eprintln!(
        "packets       {} IP ({} IPv4, {} IPv6), {} frames without a whole IP packet left out (not IP, or cut short)",
        s.packets,
        s.packets - ipv6,
        ipv6,
        not_ip
    );
    eprintln!(
        "compressed    {compressed}: {} full headers, {} compressed RTP, {} compressed UDP, {} compressed non-TCP; {} left as IP",
        s.full_headers, s.compressed_rtp, s.compressed_udp, s.compressed_non_tcp, s.uncompressed
    );
    if compressed > 0 {
        eprintln!(
            "header bytes  {} before, {} after ({:.2} per compressed packet, from {:.2})",
            s.header_bytes_in,
            s.header_bytes_out,
            s.header_bytes_out as f64 / compressed as f64,
            s.header_bytes_in as f64 / compressed as f64
        );
    }
    if bytes_in > 0 {
        eprintln!(
            "link bytes    {bytes_in} before, {bytes_out} after ({:.1} % saved); contexts {} ({} reused)",
            100.0 * (1.0 - bytes_out as f64 / bytes_in as f64),
            config.contexts,
            s.contexts_reused
        );
    } else {
        eprintln!("link bytes    none: no IP packets in {}", a.input.display());
    }
    Ok(complete && written)
}

/// The next packet, or None at the end. A damaged capture ends the reading
/// where it is damaged, said and noted in `complete`: what came before is
/// written and counted, as `analyze` keeps it (exit status 1).
fn next_or_stop<'a>(
    input: &'a mut CaptureReader<std::fs::File>,
    path: &Path,
    complete: &mut bool,
) -> Option<Packet<'a>> {
    match input.next_packet() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("calliper: reading {}: {e}; the packets before it are kept", path.display());
            *complete = false;
            None
        }
    }
}

fn decompress(a: &DecompressArgs) -> Result<bool> {
    let config = a.link.config()?;
    let mut decompressor = Decompressor::new(config).map_err(anyhow::Error::msg)?;
    distinct(&a.input, &a.output)?;
    let mut input = reader(&a.input)?;
    let mut out = Output::new(&a.output, linktype::RAW as u32);
    let mut ip = Vec::with_capacity(2048);
    let (mut not_ppp, mut other_links, mut context_states) = (0u64, 0u64, 0u64);
    let (mut complete, mut first) = (true, true);
    while let Some(p) = next_or_stop(&mut input, &a.input, &mut complete) {
        // Judged by the first packet, before anything is written; later
        // frames of another link (a pcapng of several) are counted.
        if p.link_type as u32 != LINKTYPE_PPP {
            if first {
                bail!(
                    "{} is not a capture of PPP frames (link type {}, not 9)",
                    a.input.display(),
                    p.link_type
                );
            }
            other_links += 1;
            continue;
        }
        first = false;
        let Some((protocol, payload)) = ppp(p.data) else {
            not_ppp += 1;
            continue;
        };
        if protocol == protocol::CONTEXT_STATE {
            context_states += 1;
            continue;
        }
        let ts = u64::try_from(p.ts_ns).unwrap_or(0);
        if decompressor.decompress(protocol, payload, ts, &mut ip).is_ok() {
            out.write(p.ts_ns, &ip)?;
        }
    }
    let written = out.finish(&a.input, !first)?;
    let s = decompressor.stats;
    eprintln!(
        "packets       {} restored of {}; {} lost to context damage ({} link sequence gaps, {} bad checksums), {} gaps bridged (RFC 3545), {} malformed, {} other PPP protocols",
        s.restored,
        s.packets,
        s.context_damaged,
        s.sequence_gaps,
        s.checksum_failures,
        s.gaps_bridged,
        s.malformed,
        s.other_protocols
    );
    eprintln!(
        "skipped       {not_ppp} frames too short for PPP, {other_links} of another link type, {context_states} CONTEXT_STATE"
    );
    if s.malformed > 0 {
        eprintln!(
            "calliper: {} packets could not be read: a context id beyond --contexts {} (give the compressor's), or a damaged capture",
            s.malformed, config.contexts
        );
    }
    Ok(complete && written && s.malformed == 0)
}

/// A PPP frame's protocol and payload: address and control (FF 03) when
/// present, then a 2-byte protocol, or 1 byte when compressed (odd).
fn ppp(frame: &[u8]) -> Option<(u16, &[u8])> {
    let rest = frame.strip_prefix(&[0xFF, 0x03]).unwrap_or(frame);
    let first = *rest.first()?;
    if first & 1 == 1 {
        return Some((first as u16, &rest[1..]));
    }
    Some((u16::from_be_bytes([first, *rest.get(1)?]), &rest[2..]))
}

/// The output file, created only when the first packet is written (or at
/// the end, once a packet was read), so input found wrong at its first
/// packet, or with none to judge it by, leaves it untouched.
struct Output<'a> {
    path: &'a Path,
    link_type: u32,
    writer: Option<PcapWriter>,
}

impl<'a> Output<'a> {
    fn new(path: &'a Path, link_type: u32) -> Output<'a> {
        Output { path, link_type, writer: None }
    }

    fn write(&mut self, ts_ns: i64, frame: &[u8]) -> Result<()> {
        if self.writer.is_none() {
            self.writer = Some(PcapWriter::create(self.path, self.link_type)?);
        }
        self.writer.as_mut().expect("just created").write(ts_ns, frame)
    }

    /// Ends the file; `read_any`: a packet of `input` was read (else the
    /// direction was never judged, and an existing file is not replaced).
    /// False when nothing was written, so the exit status says so (a script
    /// must not go on with an older file of that name).
    fn finish(self, input: &Path, read_any: bool) -> Result<bool> {
        match self.writer {
            Some(w) => w.finish().map(|()| true),
            None if read_any => {
                PcapWriter::create(self.path, self.link_type)?.finish().map(|()| true)
            }
            None => {
                eprintln!(
                    "calliper: no packet read from {}: {} not written",
                    input.display(),
                    self.path.display()
                );
                Ok(false)
            }
        }
    }
}

/// A nanosecond pcap file, created 0600.
struct PcapWriter {
    out: BufWriter<std::fs::File>,
    path: PathBuf,
}

impl PcapWriter {
    fn create(path: &Path, link_type: u32) -> Result<PcapWriter> {
        let file = calliper_store::create_private(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&pcap_out::file_header(link_type, 65535, Resolution::Nanos))?;
        Ok(PcapWriter { out, path: path.to_path_buf() })
    }

    fn write(&mut self, ts_ns: i64, frame: &[u8]) -> Result<()> {
        let len = frame.len() as u32;
        let record = pcap_out::record_header(ts_ns, len, len, Resolution::Nanos);
        self.out.write_all(&record)?;
        self.out.write_all(frame).with_context(|| format!("writing {}", self.path.display()))
    }

    fn finish(mut self) -> Result<()> {
        self.out.flush().with_context(|| format!("writing {}", self.path.display()))
    }
}
