//! `calliper export audio`: one call's voice as a stereo WAV, the caller
//! on the left and the callee on the right. The database written by
//! `analyze --db` says which streams the call had (addresses, ports, SSRC,
//! direction, times); their packets come from a capture, decoded and timed
//! as the listener heard them (`calliper_audio::timeline`).

use crate::files::{distinct, reader};
use crate::summary::printable;
use anyhow::{bail, Context as _, Result};
use calliper_audio::timeline::{Codec, Timeline, MAX_SECONDS};
use calliper_audio::wav;
use calliper_store::{StoredCall, StoredStream};
use calliper_wire::rtp::{looks_like_rtcp, RtpHeader};
use calliper_wire::Transport;
use clap::{Args, Subcommand};
use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// What to export.
#[derive(Subcommand)]
pub enum ExportCommand {
    /// A call's audio as a stereo WAV (caller left, callee right), decoded as the
    /// listener heard it: packets the jitter buffer would have played late left out, losses
    /// concealed, comfort noise played. G.711 (PCMU, PCMA), G.722 and Opus; other codecs are
    /// named and left silent.
    ///
    /// Example: calliper analyze --db calls.db day.pcap &&
    ///          calliper export audio 1-836@127.0.1.1 --db calls.db --pcap day.pcap -o call.wav
    ///          calliper export audio 1-836@127.0.1.1 --db calls.db --record-dir rec -o call.wav
    Audio(AudioArgs),
    /// A call's recorded packets (written by `--record`) as a pcap of its own.
    ///
    /// Example: calliper analyze --db calls.db --record all --record-dir rec day.pcap &&
    ///          calliper export pcap 1-836@127.0.1.1 --db calls.db --record-dir rec -o call.pcap
    Pcap(PcapArgs),
}

/// `export pcap` arguments.
#[derive(Args)]
pub struct PcapArgs {
    /// The call: its SIP Call-ID or its record id in the database.
    pub call: String,
    /// Database written by `calliper analyze --db` or `calliper probe --db`.
    #[arg(long, value_name = "FILE")]
    pub db: PathBuf,
    /// The recordings' directory (`--record-dir` of the run).
    #[arg(long, value_name = "DIR")]
    pub record_dir: PathBuf,
    /// Capture file to write (created 0600).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
}

/// `export audio` arguments.
#[derive(Args)]
pub struct AudioArgs {
    /// The call: its SIP Call-ID or its record id in the database.
    pub call: String,
    /// Database written by `calliper analyze --db`.
    #[arg(long, value_name = "FILE")]
    pub db: PathBuf,
    /// Capture holding the call's packets (the one the database was written from).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "record_dir",
        conflicts_with = "record_dir"
    )]
    pub pcap: Option<PathBuf>,
    /// Or the recordings' directory (`--record-dir` of the run): the call's own recording.
    #[arg(long, value_name = "DIR")]
    pub record_dir: Option<PathBuf>,
    /// WAV file to write (created 0600).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
}

/// Runs an `export` subcommand.
pub fn run(command: ExportCommand) -> Result<()> {
    match command {
        ExportCommand::Audio(a) => audio(&a),
        ExportCommand::Pcap(a) => pcap(&a),
    }
}

/// The one call `call` names in the database `db` (a Call-ID shared by
/// several records must be given as a record id).
fn one_call(db: &Path, call: &str) -> Result<StoredCall> {
    if !db.exists() {
        bail!(
            "{} does not exist (write one with `calliper analyze --db FILE`)",
            db.display()
        );
    }
    let conn = calliper_store::open_read_only(db)
        .with_context(|| format!("cannot open {}", db.display()))?;
    let mut calls = calliper_store::find_calls(&conn, call)
        .with_context(|| format!("cannot read {}", db.display()))?;
    match calls.len() {
        0 => bail!("no call {} in {}", printable(call), db.display()),
        1 => Ok(calls.remove(0)),
        n => bail!(
            "{n} records have Call-ID {}: give a record id ({})",
            printable(call),
            calls
                .iter()
                .map(|c| c.id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The call's recording under `dir`.
fn recording(dir: &Path, call: &StoredCall) -> Result<PathBuf> {
    let found = calliper_store::recordings::find(dir, call.invite_ns, &call.call_id);
    match found.as_slice() {
        [] => bail!(
            "no recording of call {} under {} (was it recorded: --record, or a `record` rule? deleted for the budget?)",
            printable(&call.call_id),
            dir.display()
        ),
        [one] => Ok(one.clone()),
        many => bail!(
            "{} recordings of call {} under {}: {}",
            many.len(),
            printable(&call.call_id),
            dir.display(),
            many.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// `export pcap`: the call's recording, copied to a private file.
fn pcap(a: &PcapArgs) -> Result<()> {
    let call = one_call(&a.db, &a.call)?;
    let from = recording(&a.record_dir, &call)?;
    distinct(&from, &a.output)?;
    for db_file in ["", "-wal", "-shm", "-journal"] {
        let mut p = a.db.clone().into_os_string();
        p.push(db_file);
        distinct(Path::new(&p), &a.output)?;
    }
    // Never into the recordings (it could replace another call's).
    let parent = a
        .output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let (Ok(out), Ok(rec)) = (parent.canonicalize(), a.record_dir.canonicalize()) {
        if out.starts_with(&rec) {
            bail!(
                "{} is inside the recordings' directory {}: write elsewhere",
                a.output.display(),
                a.record_dir.display()
            );
        }
    }
    let mut input =
        std::fs::File::open(&from).with_context(|| format!("cannot open {}", from.display()))?;
    let mut out = calliper_store::create_private(&a.output)
        .with_context(|| format!("cannot create {}", a.output.display()))?;
    let n = std::io::copy(&mut input, &mut out)
        .with_context(|| format!("cannot write {}", a.output.display()))?;
    eprintln!(
        "call {}: {n} bytes from {} to {}",
        printable(&call.call_id),
        from.display(),
        a.output.display()
    );
    Ok(())
}

/// Most streams of one call decoded at once: each timeline may hold up to
/// its stored span of audio, and a database can claim any number.
const MAX_DECODED: usize = 32;

/// The flow of a stream: addresses, ports, SSRC.
type Key = (IpAddr, u16, IpAddr, u16, u32);

/// One stream being decoded: its direction (true: caller to callee), its
/// timeline and a name for the summary.
struct Decoding {
    caller: bool,
    timeline: Timeline,
    name: String,
    /// When its first packet arrived.
    first_ns: Option<i64>,
}

fn key(s: &StoredStream) -> Option<Key> {
    Some((
        s.src.parse().ok()?,
        s.src_port,
        s.dst.parse().ok()?,
        s.dst_port,
        s.ssrc,
    ))
}

fn audio(a: &AudioArgs) -> Result<()> {
    let call = &one_call(&a.db, &a.call)?;
    let source = match (&a.pcap, &a.record_dir) {
        (Some(p), _) => p.clone(),
        (None, Some(dir)) => recording(dir, call)?,
        (None, None) => bail!("give --pcap FILE or --record-dir DIR"),
    };
    distinct(&source, &a.output)?;
    distinct(&a.db, &a.output)?;
    let (mut timelines, index) = timelines(call);
    if timelines.is_empty() {
        bail!(
            "call {} has {} streams, none of them to decode here (G.711 or G.722 with a side and valid addresses)",
            printable(&call.call_id),
            call.streams.len()
        );
    }
    let mut input = reader(&source)?;
    let mut matched = 0u64;
    while let Some(p) = input
        .next_packet()
        .with_context(|| format!("reading {}", source.display()))?
    {
        let Ok(frame) = calliper_wire::decode(p.link_type, p.data) else {
            continue;
        };
        let Transport::Udp {
            sport,
            dport,
            payload,
        } = frame.transport
        else {
            continue;
        };
        let Ok(rtp) = RtpHeader::parse(payload) else {
            continue;
        };
        if looks_like_rtcp(payload) {
            continue;
        }
        let Some(&i) = index.get(&(frame.src, sport, frame.dst, dport, rtp.ssrc)) else {
            continue;
        };
        matched += 1;
        let d = &mut timelines[i];
        d.first_ns.get_or_insert(p.ts_ns);
        let start = rtp.header_len as usize;
        let voice = &payload[start..start + rtp.payload_len as usize];
        d.timeline.push(
            p.ts_ns,
            rtp.seq,
            rtp.timestamp,
            rtp.marker,
            rtp.payload_type,
            voice,
        );
    }
    if matched == 0 {
        bail!(
            "{} holds none of call {}'s RTP packets: give the capture the database was written from",
            source.display(),
            printable(&call.call_id)
        );
    }
    write_wav(a, call, timelines)
}

/// A timeline for each stream with a decodable codec, by direction (true:
/// caller to callee), and the flow of each stream. Every stream left out
/// is named, with why.
fn timelines(call: &StoredCall) -> (Vec<Decoding>, HashMap<Key, usize>) {
    let mut out = Vec::new();
    let mut index = HashMap::new();
    for s in &call.streams {
        let name = printable(&format!(
            "{}:{} -> {}:{} ssrc {:#010x}",
            s.src, s.src_port, s.dst, s.dst_port, s.ssrc
        ))
        .into_owned();
        let codec = s.codec.as_deref().and_then(Codec::from_name);
        let usable = match (codec.zip(s.payload_type), key(s), side(&s.direction)) {
            _ if out.len() >= MAX_DECODED => Err("more streams than are decoded for one call (32)"),
            (Some(codec), Some(k), Some(caller)) if !index.contains_key(&k) => {
                Ok((codec, k, caller))
            }
            (None, ..)
                if s.codec
                    .as_deref()
                    .is_some_and(|c| c.eq_ignore_ascii_case("telephone-event")) =>
            {
                Err("DTMF events on their own SSRC are not marked yet")
            }
            (None, ..) => Err("a codec not decoded here (G.711, G.722, Opus are): silent"),
            (_, None, _) => Err("addresses that do not parse"),
            (_, _, None) => Err("no side of the call (direction unknown)"),
            _ => Err("a second record of the same flow"),
        };
        let ((codec, pt), k, caller) = match usable {
            Ok(stream) => stream,
            Err(why) => {
                eprintln!("stream {name}: left out: {why}");
                continue;
            }
        };
        index.insert(k, out.len());
        out.push(Decoding {
            caller,
            // Room for the stream's span as stored, and some slack.
            timeline: Timeline::new(codec, pt, Some(101))
                .limit_seconds(((s.last_ns - s.first_ns).max(0) / 1_000_000_000) as u64 + 10),
            name,
            first_ns: None,
        });
    }
    (out, index)
}

fn side(direction: &str) -> Option<bool> {
    match direction {
        "caller_to_callee" => Some(true),
        "callee_to_caller" => Some(false),
        _ => None,
    }
}

/// Mixes each direction's timelines into its channel, placed by their
/// first packet's arrival after the earliest, and writes the WAV. The
/// channels are bounded like the timelines: the call's streams' stored
/// span and some slack, at most [`MAX_SECONDS`]; what lies beyond is cut
/// and said.
fn write_wav(a: &AudioArgs, call: &StoredCall, timelines: Vec<Decoding>) -> Result<()> {
    let start = timelines
        .iter()
        .filter_map(|d| d.first_ns)
        .min()
        .unwrap_or(0);
    let rate = timelines
        .iter()
        .map(|t| t.timeline.rate())
        .max()
        .unwrap_or(8000);
    let span_ns = call
        .streams
        .iter()
        .map(|s| s.last_ns)
        .max()
        .unwrap_or(0)
        .saturating_sub(call.streams.iter().map(|s| s.first_ns).min().unwrap_or(0));
    let seconds = (span_ns.max(0) / 1_000_000_000 + 10).min(MAX_SECONDS as i64) as usize;
    let limit = seconds * rate as usize;
    let (mut left, mut right) = (Vec::<i16>::new(), Vec::<i16>::new());
    for Decoding {
        caller,
        timeline,
        name,
        first_ns,
    } in timelines
    {
        let Some(first) = first_ns else {
            eprintln!("stream {name}: no packets in the capture");
            continue;
        };
        let dtmf = timeline.dtmf.len();
        let (samples, own_rate, s) = timeline.finish();
        eprintln!(
            "stream {name}: {} packets played, {} late for the jitter buffer, {} ms concealed, {} ms silent, {} comfort noise, {} DTMF events, {} timestamp resyncs, {} out of range, {} of another payload type",
            s.played,
            s.late,
            s.concealed_samples * 1000 / u64::from(own_rate),
            s.silent_samples * 1000 / u64::from(own_rate),
            s.comfort_noise,
            dtmf,
            s.resyncs,
            s.out_of_range,
            s.other_payload
        );
        let up = (rate / own_rate) as usize;
        let offset = ((first - start).max(0) as u128 * u128::from(rate) / 1_000_000_000)
            .min(limit as u128) as usize;
        let channel = if caller { &mut left } else { &mut right };
        let end = (offset + samples.len() * up).min(limit);
        if offset + samples.len() * up > limit {
            eprintln!(
                "stream {name}: cut at {seconds} s, the call's stored span and 10 s (it starts {:.1} s in)",
                offset as f64 / f64::from(rate)
            );
        }
        if channel.len() < end {
            channel.resize(end, 0);
        }
        for (at, x) in channel[offset..end]
            .iter_mut()
            .zip(samples.iter().flat_map(|&x| std::iter::repeat_n(x, up)))
        {
            *at = at.saturating_add(x);
        }
    }
    // Refused before the file is made: a failed write must not leave an
    // emptied file in place of one that was there.
    wav::stereo_size(left.len().max(right.len()))
        .with_context(|| format!("cannot write {}", a.output.display()))?;
    let file = calliper_store::create_private(&a.output)
        .with_context(|| format!("cannot create {}", a.output.display()))?;
    let mut out = BufWriter::new(file);
    wav::write_stereo(&mut out, rate, &left, &right)
        .and_then(|_| out.flush())
        .with_context(|| format!("writing {}", a.output.display()))?;
    eprintln!(
        "wrote {}: call {} (record {}), {:.1} s at {} Hz, caller left, callee right",
        a.output.display(),
        printable(&call.call_id),
        call.id,
        left.len().max(right.len()) as f64 / f64::from(rate),
        rate
    );
    Ok(())
}
