//! `calliper export audio`: one call's voice as a stereo WAV, the caller
//! on the left and the callee on the right. The database written by
//! `analyze --db` says which streams the call had (addresses, ports, SSRC,
//! direction, times); their packets come from a capture, decoded and timed
//! as the listener heard them (`calliper_audio::call`).

use crate::files::{creatable, directory_of, distinct, reader};
use crate::summary::printable;
use anyhow::{bail, Context as _, Result};
use calliper_audio::call::CallAudio;
use calliper_audio::wav;
use calliper_store::StoredCall;
use clap::{Args, Subcommand};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// What to export.
#[derive(Subcommand)]
pub enum ExportCommand {
    /// A call's audio as a stereo WAV (caller left, callee right), decoded as the
    /// listener heard it: packets the jitter buffer would have played late left out, losses
    /// concealed, comfort noise played. G.711 (PCMU, PCMA), G.722 and Opus; other codecs are
    /// named and left silent.
    ///
    /// Examples, after `calliper analyze --db calls.db day.pcap`:
    ///
    /// calliper export audio 1-836@127.0.1.1 --db calls.db --pcap day.pcap -o call.wav
    ///
    /// calliper export audio 1-836@127.0.1.1 --db calls.db --record-dir rec -o - | aplay
    Audio(AudioArgs),
    /// A call's recorded packets (written by `--record`) as a pcap of its own.
    ///
    /// Example, after `calliper analyze --db calls.db --record all --record-dir rec day.pcap`:
    ///
    /// calliper export pcap 1-836@127.0.1.1 --db calls.db --record-dir rec -o call.pcap
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
    /// Capture file to write (created 0600), or - for standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
}

/// `export audio` arguments.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["pcap", "record_dir"])))]
pub struct AudioArgs {
    /// The call: its SIP Call-ID or its record id in the database.
    pub call: String,
    /// Database written by `calliper analyze --db` or `calliper probe --db`.
    #[arg(long, value_name = "FILE")]
    pub db: PathBuf,
    /// Capture holding the call's packets (the one the database was written from).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Or the recordings' directory (`--record-dir` of the run): the call's own recording.
    #[arg(long, value_name = "DIR")]
    pub record_dir: Option<PathBuf>,
    /// WAV file to write (created 0600), or - for standard output (to a player).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Most memory the decoding may take, MiB: a call whose streams' stored
    /// spans need more (the timelines and both channels, worked out before
    /// decoding) is refused; raise it for a long call.
    #[arg(long, value_name = "MIB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub max_memory_mib: u64,
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
            "{} does not exist (write one with `calliper analyze CAPTURE --db FILE`)",
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
            calls.iter().map(|c| c.id.to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// An output as said on stderr.
fn shown(path: &Path) -> String {
    if path == Path::new("-") {
        "standard output".into()
    } else {
        path.display().to_string()
    }
}

/// Where an export goes: standard output for `-`, else a new private file.
fn output(path: &Path) -> Result<Box<dyn Write>> {
    if path == Path::new("-") {
        return Ok(Box::new(BufWriter::new(std::io::stdout().lock())));
    }
    let file = calliper_store::create_private(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    Ok(Box::new(BufWriter::new(file)))
}

/// The call's recording under `dir`.
fn recording(dir: &Path, call: &StoredCall) -> Result<PathBuf> {
    if !dir.is_dir() {
        bail!(
            "the recordings' directory {} does not exist (give the run's --record-dir)",
            dir.display()
        );
    }
    let found = calliper_store::callpcap_paths::find(dir, call.invite_ns, &call.call_id);
    match found.as_slice() {
        [] => bail!(
            "no recording of call {} under {} (was it recorded: --record, or a `record` rule? deleted for the budget?)",
            printable(&call.call_id),
            dir.display()
        ),
        [one] => Ok(one.clone()),
        many => bail!(
            "{} recordings of call {} under {} (two runs recorded it): {}; copy the one you want, \
             or give it to `export audio --pcap FILE`",
            many.len(),
            printable(&call.call_id),
            dir.display(),
            many.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Refuses an output that would write over what the export reads (the
/// capture or recording, the database and its journal files) or into the
/// recordings' directory (it could replace another call's recording).
fn safe_output(output: &Path, db: &Path, source: &Path, record_dir: Option<&Path>) -> Result<()> {
    if output == Path::new("-") {
        return Ok(());
    }
    creatable(output)?;
    let refuse = |what: &Path| -> Result<()> {
        distinct(what, output)
            .with_context(|| format!("refusing to write over {}: give another -o", what.display()))
    };
    refuse(source)?;
    for db_file in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(db_file);
        refuse(Path::new(&p))?;
    }
    let parent = directory_of(output);
    if let (Ok(out), Some(Ok(rec))) = (parent.canonicalize(), record_dir.map(Path::canonicalize)) {
        if out.starts_with(&rec) {
            bail!(
                "{} is inside the recordings' directory {}: write elsewhere (it could replace a recording)",
                output.display(),
                rec.display()
            );
        }
    }
    Ok(())
}

/// `export pcap`: the call's recording, copied to a private file.
fn pcap(a: &PcapArgs) -> Result<()> {
    let call = one_call(&a.db, &a.call)?;
    let from = recording(&a.record_dir, &call)?;
    safe_output(&a.output, &a.db, &from, Some(&a.record_dir))?;
    let mut input =
        std::fs::File::open(&from).with_context(|| format!("cannot open {}", from.display()))?;
    let mut out = output(&a.output)?;
    let n = std::io::copy(&mut input, &mut out)
        .and_then(|n| out.flush().map(|_| n))
        .with_context(|| format!("cannot write {}", a.output.display()))?;
    eprintln!(
        "call {}: {n} bytes from {} to {}",
        printable(&call.call_id),
        from.display(),
        shown(&a.output)
    );
    Ok(())
}

fn audio(a: &AudioArgs) -> Result<()> {
    let call = &one_call(&a.db, &a.call)?;
    let source = match (&a.pcap, &a.record_dir) {
        (Some(p), _) => p.clone(),
        (None, Some(dir)) => recording(dir, call)?,
        (None, None) => bail!("give --pcap FILE or --record-dir DIR"),
    };
    safe_output(&a.output, &a.db, &source, a.record_dir.as_deref())?;
    let mut decoding = CallAudio::new(call, |name| printable(name).into_owned());
    if decoding.is_empty() {
        for note in &decoding.notes {
            eprintln!("{note}");
        }
        bail!(
            "call {} has {} streams, none of them to decode here (G.711, G.722 or Opus with a side and valid addresses)",
            printable(&call.call_id),
            call.streams.len()
        );
    }
    let bound = decoding.memory_bound() as u64;
    if bound > a.max_memory_mib << 20 {
        bail!(
            "decoding call {} would take up to {} MiB (its streams' stored spans), over --max-memory-mib {}: \
             give a larger --max-memory-mib if the machine has it",
            printable(&call.call_id),
            bound >> 20,
            a.max_memory_mib
        );
    }
    feed(&source, &mut decoding)?;
    if decoding.matched == 0 {
        bail!(
            "{} holds none of call {}'s RTP packets: {}",
            source.display(),
            printable(&call.call_id),
            no_packets_advice(&decoding, a.record_dir.is_some())
        );
    }
    let mixed = decoding.mix();
    for note in &mixed.notes {
        eprintln!("{note}");
    }
    // Refused before the file is made: a failed write must not leave an
    // emptied file in place of one that was there.
    let frames = mixed.left.len().max(mixed.right.len());
    wav::stereo_size(frames).with_context(|| format!("cannot write {}", a.output.display()))?;
    let mut out = output(&a.output)?;
    wav::write_stereo(&mut out, mixed.rate, &mixed.left, &mixed.right)
        .and_then(|_| out.flush())
        .with_context(|| format!("writing {}", a.output.display()))?;
    eprintln!(
        "wrote {}: call {} (record {}), {:.1} s at {} Hz, caller left, callee right",
        shown(&a.output),
        printable(&call.call_id),
        call.id,
        frames as f64 / f64::from(mixed.rate),
        mixed.rate
    );
    Ok(())
}

/// Hands every packet of `source` to the decoding, with the times the
/// analysis believed (the same guard on the same batches).
fn feed(source: &Path, decoding: &mut CallAudio) -> Result<()> {
    let mut input = reader(source)?;
    let mut times = calliper_engine::time_guard::TimeGuard::default();
    loop {
        let batch = input
            .next_batch(calliper_engine::READ_BATCH)
            .with_context(|| format!("reading {}", source.display()))?;
        if batch.is_empty() {
            return Ok(());
        }
        // Borrowed from the reader's buffer, so one per batch.
        let mut packets: Vec<_> = batch.iter().collect();
        times.admit_packets(&mut packets);
        for p in &packets {
            decoding.packet(p.ts_ns, p.link_type, p.data);
        }
    }
}

/// Why a capture gave none of a call's RTP, and what to give instead.
fn no_packets_advice(decoding: &CallAudio, recorded: bool) -> String {
    if decoding.outside > 0 {
        format!(
            "its {} packets on the call's addresses, ports and SSRCs are outside the call's time \
             (another call's): give the capture the database was written from",
            decoding.outside
        )
    } else if recorded {
        "it was recorded without its media (--record sip?): give --pcap with the capture".into()
    } else {
        "give the capture the database was written from".into()
    }
}
