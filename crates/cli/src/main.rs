//! `calliper`: the command-line front end.

use anyhow::{bail, Context, Result};
use calliper_capture::CaptureReader;
use calliper_engine::workers::{guard, WorkerFailed};
use calliper_engine::{Config, Engine, RawPacket, Record};
use calliper_store::{JsonLines, Sink, Sqlite};
use calliper_trackers::{EventKind, EventLog};
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

mod generate;
mod relay;
mod summary;

#[derive(Parser)]
#[command(
    name = "calliper",
    version,
    about = "VoIP quality probe: every SIP call, its RTP streams and their quality",
    long_about = "Calliper reads packet captures, follows each SIP call (by Call-ID) to its RTP media \
(by the addresses in SDP) and measures every stream: loss, duplicates, reordering, jitter and \
inter-arrival delta as Wireshark computes them, and an E-model MOS estimate.",
    after_help = "Examples:\n  calliper analyze call.pcap\n  calliper analyze --db calls.db day1.pcapng day2.pcapng\n  calliper analyze --format jsonl capture.pcap | jq 'select(.type==\"call\") | .final_status'\n  calliper generate --calls 1000 --concurrent 100 --loss 2 -o synth.pcap --truth truth.jsonl\n  calliper relay simulate relay/examples/one-link-5pct.toml --nack-rounds 1"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Analyse pcap/pcapng files: calls, streams, quality.
    #[command(
        long_about = "Analyse pcap or pcapng files (any mix; µs or ns timestamps; Ethernet, VLAN/QinQ, Linux SLL/SLL2, \
raw IP, loopback). Several files are read in the order given as one continuous capture, as a rotated ring \
buffer would be. Calls still open at the end of the input are reported as they stand.\n\n\
A damaged file stops with an error naming the file and byte offset; everything before it is still \
analysed and written, and the exit status is 1.\n\n\
Exit status: 0 all input read; 1 some input damaged (results up to the damage written); 2 usage or \
output error; 3 the analysis itself failed (a bug: the records finished before it are written; \
please report it with the input)."
    )]
    Analyze(AnalyzeArgs),
    /// Write a synthetic capture of many concurrent calls (for benchmarks and tests).
    Generate(generate::GenerateArgs),
    /// Media relay overlay: hop-by-hop loss recovery within the voice delay budget.
    #[command(subcommand)]
    Relay(relay::RelayCommand),
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Format {
    /// Human-readable summary of calls, streams and anomalies.
    Text,
    /// One JSON object per line: {"type":"call",...}, {"type":"stream",...}, {"type":"registration",...}, then {"type":"user",...} per address of record and {"type":"summary",...}.
    Jsonl,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Progress {
    /// Show a progress bar when stderr is a terminal.
    Auto,
    /// Always show it.
    Always,
    /// Never show it.
    Never,
}

#[derive(clap::Args)]
struct AnalyzeArgs {
    /// Capture files (pcap or pcapng).
    #[arg(required_unless_present = "memory_bound")]
    files: Vec<PathBuf>,
    /// Output format on stdout (or --output).
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Write the --format output to this file instead of stdout.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Also store calls and streams in this SQLite database (created if missing).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Ports always treated as SIP (repeat or comma-separate). SIP on other ports is found by its start line.
    #[arg(long = "sip-port", value_delimiter = ',', default_values_t = [5060u16, 5080])]
    sip_ports: Vec<u16>,
    /// Only treat the --sip-port ports as SIP.
    #[arg(long)]
    no_sip_detection: bool,
    /// Do not report RTP streams that no SDP describes.
    #[arg(long)]
    no_rtp_heuristic: bool,
    /// End a call after this many seconds without SIP or media.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS", value_parser = positive_seconds)]
    call_timeout: f64,
    /// Keep a call this many seconds after BYE/CANCEL/failure, for late media and retries.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS", value_parser = nonnegative_seconds)]
    call_grace: f64,
    /// End a stream without signalling after this many seconds of silence.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS", value_parser = positive_seconds)]
    stream_timeout: f64,
    /// Most calls held at once (the least recently active is evicted beyond it).
    #[arg(long, default_value_t = Config::default().max_calls)]
    max_calls: usize,
    /// Most RTP streams held at once (new streams are refused beyond it).
    #[arg(long, default_value_t = Config::default().max_streams)]
    max_streams: usize,
    /// Most SDP media addresses held at once (new ones are refused beyond it).
    #[arg(long, default_value_t = Config::default().max_media)]
    max_media: usize,
    /// Most calls whose INVITE has had no response at all (an INVITE flood
    /// evicts only its own kind beyond it).
    #[arg(long, default_value_t = Config::default().max_unanswered)]
    max_unanswered: usize,
    /// End a call whose INVITE had no response at all after this many seconds (Timer B).
    #[arg(long, default_value_t = 32.0, value_name = "SECONDS", value_parser = positive_seconds)]
    unanswered_timeout: f64,
    /// Drop a packet equal to one seen this many milliseconds before (a capture
    /// on Linux `any` or a SPAN of both directions shows each packet twice); 0 keeps all.
    #[arg(long, default_value_t = 5.0, value_name = "MS")]
    dedup_window: f64,
    /// Progress bar on stderr.
    #[arg(long, value_enum, default_value = "auto")]
    progress: Progress,
    /// Analysis threads. Above 1, every shard decodes every packet and analyses
    /// the media of its share of addresses; the results are identical to one
    /// thread. Decoding is repeated per shard, so extra threads pay only where
    /// stream analysis dominates: on a 2-vCPU machine 2 threads were slower
    /// than 1 (BENCHMARKS.md).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// Rules from this TOML file: ignore, label or select for recording
    /// traffic by exact flow, network and port ranges, or SIP fields
    /// (docs/rules.md). Each rule's hits are reported at the end.
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// Also write the engine's events as JSON lines (needs --format jsonl):
    /// a comma-separated list of calls (phases: started, trying, ringing,
    /// early media, answered, held, resumed, transferred, ended), streams
    /// (started, ended), intervals (each stream's packets, loss, jitter, max
    /// delta and MOS per --interval), rtcp (report blocks), dtmf (digits),
    /// anomalies; or `all`.
    #[arg(long, value_name = "KINDS", value_parser = event_kinds)]
    events: Option<EventKinds>,
    /// Length of a stream's reporting interval, at least 1 s (intervals
    /// align to multiples of it, so all streams' intervals line up).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS", value_parser = positive_seconds)]
    interval: f64,
    /// Print the most memory an analysis with these caps and threads can
    /// hold, table by table (docs/hostile-input.md), and exit without reading input.
    #[arg(long)]
    memory_bound: bool,
}

/// Packets read from a capture at once (several prefetch groups of
/// [`calliper_engine::LOOKAHEAD`]).
const READ_BATCH: usize = 64;

/// One engine, or shards on several threads: the same records either way.
enum Analyzer {
    Single(Box<Engine>),
    Sharded(Box<calliper_engine::parallel::Parallel>),
}

impl Analyzer {
    /// Analyses packets; an error means the analysis itself failed (a bug)
    /// and cannot go on, though what it finished can still be drained.
    fn packets(&mut self, batch: &[RawPacket<'_>]) -> Result<(), WorkerFailed> {
        match self {
            Analyzer::Single(e) => guard(0, None, || e.packets(batch)),
            Analyzer::Sharded(s) => batch
                .iter()
                .try_for_each(|p| s.packet(p.ts_ns, p.link_type, p.data)),
        }
    }
    fn drain(&mut self) -> std::vec::Drain<'_, Record> {
        match self {
            Analyzer::Single(e) => e.drain(),
            Analyzer::Sharded(p) => p.drain(),
        }
    }
    fn finish(&mut self) -> Result<(), WorkerFailed> {
        match self {
            Analyzer::Single(e) => guard(0, None, || e.finish()),
            Analyzer::Sharded(p) => p.finish(),
        }
    }
    fn counters(&mut self) -> &calliper_engine::Counters {
        match self {
            Analyzer::Single(e) => e.counters(),
            Analyzer::Sharded(p) => p.counters(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Analyze(a) => analyze(a),
        Command::Generate(g) => generate::run(g).map(|_| true),
        Command::Relay(r) => relay::run(r).map(|_| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) if e.downcast_ref::<WorkerFailed>().is_some() => {
            eprintln!("calliper: error: {e:#}");
            ExitCode::from(3)
        }
        // The reader went away (`| head`): not an error worth a message.
        Err(e) if closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("calliper: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// True when the error comes from writing to a closed pipe.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(io::ErrorKind::BrokenPipe))
            || matches!(
                c.downcast_ref::<calliper_store::StoreError>(),
                Some(calliper_store::StoreError::Io(io)) if io.kind() == io::ErrorKind::BrokenPipe
            )
            || matches!(
                c.downcast_ref::<calliper_store::StoreError>(),
                Some(calliper_store::StoreError::Json(j)) if j.io_error_kind() == Some(io::ErrorKind::BrokenPipe)
            )
    })
}

fn seconds(s: f64) -> i64 {
    (s * 1e9) as i64
}

/// Longest timeout accepted (ten years): far beyond any use, and its
/// nanoseconds fit in an i64.
const MAX_SECONDS: f64 = 315_576_000.0;

/// A duration in seconds, 0 allowed: finite and at most [`MAX_SECONDS`]
/// (NaN or infinity would make every call expire at once or never).
fn nonnegative_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(0.0..=MAX_SECONDS).contains(&v) {
        return Err(format!("`{s}` must be between 0 and {MAX_SECONDS} seconds"));
    }
    Ok(v)
}

/// A duration in seconds above 0 (see [`nonnegative_seconds`]).
fn positive_seconds(s: &str) -> Result<f64, String> {
    match nonnegative_seconds(s)? {
        v if v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` must be more than 0 seconds")),
    }
}

/// Event kinds chosen with `--events`.
#[derive(Clone)]
struct EventKinds(Vec<EventKind>);

fn event_kinds(s: &str) -> Result<EventKinds, String> {
    if s == "all" {
        return Ok(EventKinds(EventKind::ALL.to_vec()));
    }
    let names = || EventKind::ALL.map(EventKind::name).join(", ");
    s.split(',')
        .map(|n| {
            EventKind::from_name(n.trim())
                .ok_or_else(|| format!("`{n}` is not an event kind (one of {}, or all)", names()))
        })
        .collect::<Result<_, _>>()
        .map(EventKinds)
}

/// Runs an analysis. Ok(false) means some input was damaged but results were written.
fn analyze(a: AnalyzeArgs) -> Result<bool> {
    if !(0.0..=1000.0).contains(&a.dedup_window) {
        bail!("--dedup-window must be between 0 and 1000 ms");
    }
    if a.interval < 1.0 {
        bail!("--interval must be at least 1 second");
    }
    if a.events.is_some() && a.format != Format::Jsonl {
        bail!("--events writes JSON lines: use it with --format jsonl");
    }
    let mut cfg = Config {
        sip_ports: a.sip_ports.clone(),
        sip_any_port: !a.no_sip_detection,
        rtp_heuristic: !a.no_rtp_heuristic,
        call_idle_timeout_ns: seconds(a.call_timeout),
        call_grace_ns: seconds(a.call_grace),
        stream_idle_timeout_ns: seconds(a.stream_timeout),
        max_calls: a.max_calls,
        max_streams: a.max_streams,
        max_media: a.max_media,
        max_unanswered: a.max_unanswered,
        unanswered_timeout_ns: seconds(a.unanswered_timeout),
        dedup_window_ns: (a.dedup_window * 1e6) as i64,
        interval_ns: seconds(a.interval),
        // Tests of failure handling only (docs/hostile-input.md).
        fault_panic_after_packets: std::env::var("CALLIPER_FAULT_PANIC_AFTER_PACKETS")
            .ok()
            .and_then(|v| v.parse().ok()),
        ..Config::default()
    };
    if let Some(path) = &a.rules {
        let rules = calliper_rules::Rules::new();
        if calliper_rules::load_file(path, &rules)? == 0 {
            eprintln!(
                "calliper: warning: {} has no [[rule]]: everything is tracked",
                path.display()
            );
        }
        cfg.rules = Some(rules);
    }
    let rules = cfg.rules.clone();
    if a.memory_bound {
        let bound = cfg.memory_bound_threads(a.threads as usize);
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        for (what, bytes) in &bound.parts {
            println!("{what:<30} {:>12.1} MiB", mib(*bytes));
        }
        println!("{:<30} {:>12.1} MiB", "total", mib(bound.total()));
        return Ok(true);
    }
    // Open every input first so a typo fails before any work.
    let mut inputs = Vec::new();
    let mut total_bytes = 0;
    for path in &a.files {
        let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let meta = f
            .metadata()
            .with_context(|| format!("cannot read {}", path.display()))?;
        if meta.is_dir() {
            bail!("{} is a directory, not a capture file", path.display());
        }
        total_bytes += meta.len();
        inputs.push((path.clone(), f));
    }
    // Writing the report over a capture would destroy it before it is read.
    for out in a.output.iter().chain(&a.db) {
        if a.files.iter().any(|f| same_file(f, out)) {
            bail!(
                "{} is also an input: refusing to overwrite it",
                out.display()
            );
        }
    }
    let out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(BufWriter::new(
            calliper_store::create_private(p)
                .with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(BufWriter::new(io::stdout().lock())),
    };
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    let mut text = None;
    match a.format {
        Format::Jsonl => sinks.push(Box::new(JsonLines::new(out))),
        Format::Text => text = Some(summary::TextReport::new(out)),
    }
    if let Some(db) = &a.db {
        sinks.push(Box::new(Sqlite::open(db).with_context(|| {
            format!("cannot open database {}", db.display())
        })?));
    }

    let show = match a.progress {
        Progress::Always => true,
        Progress::Never => false,
        Progress::Auto => io::stderr().is_terminal(),
    };
    let bar = if show {
        let b = ProgressBar::with_draw_target(Some(total_bytes), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} {wide_bar} {binary_bytes_per_sec} eta {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        ProgressBar::hidden()
    };

    // Trackers: registrations per user and each registration transaction.
    let users = calliper_trackers::UserTracker::new();
    let registrations = calliper_trackers::RegistrationLog::new();
    let event_log = EventLog::new(a.events.as_ref().map_or(&[], |k| &k.0));
    let hub: calliper_engine::TrackerHub = std::sync::Arc::new(std::sync::Mutex::new(vec![
        Box::new(users.clone()),
        Box::new(registrations.clone()),
        Box::new(event_log.clone()),
    ]));
    let mut engine = if a.threads > 1 {
        Analyzer::Sharded(Box::new(calliper_engine::parallel::Parallel::new(
            cfg,
            a.threads as usize,
            Some(hub),
        )))
    } else {
        let mut e = Engine::new(cfg);
        e.set_trackers(hub, true, true);
        Analyzer::Single(Box::new(e))
    };
    let mut clean = true;
    // A failure of the analysis itself (a panic): the input it was reading and why.
    let mut failure: Option<(String, WorkerFailed)> = None;
    let mut done_bytes = 0u64;
    let mut calls_written = 0u64;
    // The latest capture time of the files read so far.
    let mut files_end = i64::MIN;
    let mut emit = |engine: &mut Analyzer,
                    text: &mut Option<summary::TextReport<Box<dyn Write>>>,
                    sinks: &mut Vec<Box<dyn Sink>>|
     -> Result<()> {
        for r in engine.drain() {
            calls_written += matches!(r, Record::Call(_)) as u64;
            for s in sinks.iter_mut() {
                s.write(&r)?;
            }
            if let Some(t) = text.as_mut() {
                t.record(&r);
            }
        }
        for r in registrations.take() {
            let v = serde_json::to_value(&r)?;
            for s in sinks.iter_mut() {
                s.write_tracked("registration", &v)?;
            }
        }
        let lines = event_log.take();
        if !lines.is_empty() {
            for s in sinks.iter_mut() {
                s.write_json_lines(&lines)?;
            }
        }
        Ok(())
    };
    for (path, file) in inputs {
        let name = path.display().to_string();
        let mut reader = match CaptureReader::new(file) {
            Ok(r) => r,
            Err(e) => {
                bar.suspend(|| eprintln!("calliper: {name}: {e}"));
                clean = false;
                continue;
            }
        };
        let mut n = 0u64;
        let mut file_end = i64::MIN;
        loop {
            match reader.next_batch(READ_BATCH) {
                Ok(b) if b.is_empty() => break,
                Ok(b) => {
                    let mut raw = [RawPacket::default(); READ_BATCH];
                    for (r, p) in raw.iter_mut().zip(b.iter()) {
                        *r = p.into();
                    }
                    let first = raw[0].ts_ns;
                    if n == 0 && first < files_end {
                        bar.suspend(|| {
                            eprintln!(
                                "calliper: warning: {name} starts {:.3} s before the previous file ended: \
                                 files are read as one capture in the order given, so give them in time order",
                                (files_end - first) as f64 / 1e9
                            )
                        });
                    }
                    file_end = raw[..b.len()].iter().fold(file_end, |m, p| m.max(p.ts_ns));
                    if let Err(f) = engine.packets(&raw[..b.len()]) {
                        failure = Some((name.clone(), f));
                        break;
                    }
                    let before = n;
                    n += b.len() as u64;
                    if n / 65536 != before / 65536 {
                        bar.set_position(done_bytes + reader.position());
                        if let Analyzer::Single(e) = &engine {
                            bar.set_message(format!("{} calls open", e.active_calls()));
                        }
                    }
                    if n / 4096 != before / 4096 {
                        emit(&mut engine, &mut text, &mut sinks)?;
                    }
                }
                Err(e) => {
                    bar.suspend(|| {
                        eprintln!("calliper: {name}: {e}; results up to this point are kept")
                    });
                    clean = false;
                    break;
                }
            }
        }
        done_bytes += reader.position();
        files_end = files_end.max(file_end);
        emit(&mut engine, &mut text, &mut sinks)?;
        if failure.is_some() {
            break;
        }
    }
    if failure.is_none() {
        if let Err(f) = engine.finish() {
            failure = Some((input_names(&a.files), f));
        }
    }
    emit(&mut engine, &mut text, &mut sinks)?;
    bar.finish_and_clear();

    let counters = engine.counters().clone();
    let mut summary = summary::counters_json(&counters);
    let rule_list = rules.as_ref().map(|r| r.list()).unwrap_or_default();
    if let (Some(_), serde_json::Value::Object(o)) = (&rules, &mut summary) {
        o.insert("rules".into(), serde_json::to_value(&rule_list)?);
    }
    let events_dropped = event_log.dropped();
    if events_dropped > 0 {
        eprintln!(
            "calliper: warning: {events_dropped} events dropped (more than {} MiB of them between two writes)",
            calliper_trackers::MAX_BACKLOG_BYTES >> 20
        );
        if let serde_json::Value::Object(o) = &mut summary {
            o.insert("events_dropped".into(), events_dropped.into());
        }
    }
    let input = input_names(&a.files);
    let users = users.users();
    for u in users.users.values() {
        let v = serde_json::to_value(u)?;
        for s in sinks.iter_mut() {
            s.write_tracked("user", &v)?;
        }
    }
    for s in sinks.iter_mut() {
        s.finish(&input, &summary)?;
    }
    if let Some(t) = text.as_mut() {
        t.users(&users)?;
        t.finish(&counters, &rule_list)?;
    } else {
        summary::print_counters(&mut io::stderr().lock(), &counters)?;
        summary::print_rules(&mut io::stderr().lock(), &rule_list)?;
    }
    if let Some(db) = &a.db {
        eprintln!("calliper: stored {calls_written} calls in {}", db.display());
    }
    if let Some((input, f)) = failure {
        return Err(anyhow::Error::new(f).context(format!(
            "{input}: analysis stopped; the records finished before the failure are written"
        )));
    }
    Ok(clean)
}

/// True when both paths name one existing file.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The inputs' names, as one string for messages and the `runs` table.
fn input_names(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}
