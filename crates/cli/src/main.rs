//! `calliper`: the command-line front end.

use anyhow::{bail, Result};
use calliper_capture::files::Inputs;
use calliper_engine::workers::WorkerFailed;
use calliper_engine::Analyzer;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use options::{EngineArgs, Format, OutputArgs};
use run::Outputs;
use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

mod callpcap;
mod clickhouse;
mod crtp;
mod export;
mod files;
mod generate;
mod options;
mod probe;
mod relay;
mod relay_stats;
mod report;
mod run;
mod serve;
mod summary;
mod writer;

#[derive(Parser)]
#[command(
    name = "calliper",
    version,
    about = "VoIP quality probe: every SIP call, its RTP streams and their quality",
    long_about = "Calliper reads packet captures, follows each SIP call (by Call-ID) to its RTP media \
(by the addresses in SDP) and measures every stream: loss, duplicates, reordering, jitter and \
inter-arrival delta as Wireshark computes them, and an E-model MOS estimate.",
    after_help = "Examples:\n  calliper analyze call.pcap\n  calliper analyze --db calls.db day1.pcapng day2.pcapng\n  calliper analyze --format jsonl capture.pcap | jq 'select(.type==\"call\") | .final_status'\n  calliper generate --calls 100 --concurrent 20 --duration 30 -o synth.pcap --truth truth.jsonl\n  calliper relay simulate relay/examples/one-link-5pct.toml --nack-rounds 1"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Analyse pcap/pcapng files: calls, streams, quality.
    #[command(
        long_about = "Analyse pcap or pcapng files (any mix; µs or ns timestamps; Ethernet, VLAN/QinQ, Linux SLL/SLL2, \
raw IP, loopback, PPP; tunnels: GRE, ERSPAN, VXLAN, GTP-U, IP-in-IP, PPPoE, MPLS). Several files are read in the order given as one continuous capture, as a rotated ring \
buffer would be. Calls still open at the end of the input are reported as they stand.\n\n\
A damaged file stops with an error naming the file and byte offset; everything before it is still \
analysed and written, and the exit status is 1.\n\n\
Exit status: 0 all input read; 1 some input damaged (results up to the damage written); 2 usage or \
output error; 3 the analysis itself failed (a bug: the records finished before it are written; \
please report it with the input).",
        after_help = "Examples:\n  calliper analyze call.pcap                              \
# the calls, their streams and the counters, in the terminal\n  \
calliper analyze --db calls.db day1.pcapng day2.pcap    \
# one capture in two files, stored in SQLite (then `calliper serve --db calls.db`)\n  \
calliper analyze --format jsonl -o calls.jsonl cap.pcap  \
# a JSON object per call, stream and alert, and a summary\n  \
calliper analyze --events intervals --format jsonl cap.pcap  \
# also each stream's quality every --interval\n  \
calliper analyze --sip-port 5060,5080,7060 --hep-port 9060 cap.pcap \
# SIP on other ports, and HEP feeds in the capture\n  \
calliper analyze --memory-bound --max-calls 10000        \
# the most memory these caps allow, and which flag bounds what\n  \
calliper analyze --threads 2 big.pcap                    \
# media split across two threads"
    )]
    Analyze(Box<AnalyzeArgs>),
    /// Watch interfaces live, around the clock: calls written as they end.
    #[command(
        long_about = "Capture SIP and RTP live from network interfaces (AF_PACKET TPACKET_V3 ring) and \
analyse them exactly as `analyze` does, writing each call's record when the call ends and making the \
output durable every second. Packets the kernel could not put in the ring are counted and each call \
open meanwhile says so (`capture_dropped`), so probe loss is never mistaken for network loss.\n\n\
SIGTERM or SIGINT: stop, writing every open call (marked ongoing). SIGHUP: reload --rules. \
Needs CAP_NET_RAW (root, or `setcap cap_net_raw+ep` on the binary). Every flag can also be set in \
a TOML file given with --config (keys are the flags' long names).\n\n\
Exit status: 0 stopped by a signal or input ended; 1 some --read input damaged; 2 usage, \
configuration, capture or output error; 3 the analysis itself failed.",
        after_help = "Examples:\n  sudo calliper probe -i eth0 --format jsonl -o /var/lib/calliper/calls.jsonl\n  calliper probe --config /etc/calliper/probe.toml --check-config\n  calliper probe --read capture.pcap --db calls.db"
    )]
    Probe(Box<probe::ProbeArgs>),
    /// Write a synthetic capture of many concurrent calls (for benchmarks and tests).
    Generate(generate::GenerateArgs),
    /// Media relay overlay: hop-by-hop loss recovery within the voice delay budget.
    #[command(subcommand)]
    Relay(relay::RelayCommand),
    /// Figures read back from a database written with --db (KPIs).
    #[command(subcommand)]
    Report(report::ReportCommand),
    /// RTP header compression (cRTP, RFC 2508) on a capture: what a link would save.
    #[command(subcommand)]
    Crtp(crtp::CrtpCommand),
    /// A call's audio (WAV) or its recorded packets (pcap).
    #[command(subcommand)]
    Export(export::ExportCommand),
    /// The web console and JSON API over a database (loopback unless given a token).
    Serve(serve::ServeArgs),
    /// Print the statements that make the ClickHouse tables --clickhouse writes
    /// (for a server a probe never writes to directly, or a user not allowed to create).
    #[command(
        after_help = "Examples:\n  calliper clickhouse-schema | clickhouse-client --multiquery\n  calliper clickhouse-schema --clickhouse-cluster calliper_cluster   # run on every node"
    )]
    ClickhouseSchema(clickhouse::SchemaArgs),
    /// Send what waits in a ClickHouse spool (after an outage) without new input.
    #[command(
        after_help = "Example:\n  CALLIPER_CLICKHOUSE_PASSWORD=... calliper clickhouse-flush --clickhouse http://10.0.0.5:8123 --clickhouse-spool /var/spool/calliper\n\nExit status: 0 the spool is empty; 1 rows still wait (no server answered); 2 usage error, or rows lost or refused."
    )]
    ClickhouseFlush(clickhouse::FlushArgs),
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
    #[command(flatten)]
    out: OutputArgs,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    record: callpcap::RecordArgs,
    /// Progress bar on stderr.
    #[arg(long, value_enum, default_value = "auto")]
    progress: Progress,
    /// Print the most memory an analysis with these caps and threads can
    /// hold, table by table (docs/hostile-input.md), and exit without reading input.
    #[arg(long)]
    memory_bound: bool,
}

/// The command line, with a negative number taken as an option's value:
/// `--threads -1` is then refused as out of range, where clap would have
/// advised `-- -1` (which makes it a file name).
fn command_line() -> clap::Command {
    fn negatives_are_values(c: clap::Command) -> clap::Command {
        c.mut_args(|a| {
            let option = a.get_long().is_some() || a.get_short().is_some();
            let takes = option && a.get_action().takes_values();
            a.allow_negative_numbers(takes)
        })
        .mut_subcommands(negatives_are_values)
    }
    negatives_are_values(Cli::command())
}

fn main() -> ExitCode {
    let argv = match probe::config_file::expand(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("calliper: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let with_config =
        argv.iter().any(|a| a == "--config" || a.to_string_lossy().starts_with("--config="));
    let parsed = command_line().try_get_matches_from(argv);
    let cli = match parsed.and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            if !e.use_stderr() {
                return ExitCode::SUCCESS;
            }
            if with_config {
                eprintln!("note: the configuration file's settings are given as these flags (its keys are their long names)");
            }
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Analyze(a) => analyze(*a),
        Command::Probe(p) => probe::run(*p),
        Command::Generate(g) => generate::run(g).map(|_| true),
        Command::Relay(r) => relay::run(r).map(|_| true),
        Command::Report(r) => report::run(r).map(|_| true),
        Command::Crtp(c) => crtp::run(c),
        Command::Export(e) => export::run(e).map(|_| true),
        Command::Serve(s) => serve::run(s).map(|_| true),
        Command::ClickhouseSchema(s) => clickhouse::print_schema(&s).map(|_| true),
        Command::ClickhouseFlush(f) => clickhouse::flush(&f),
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

/// Runs an analysis. Ok(false) means some input was damaged but results were written.
fn analyze(a: AnalyzeArgs) -> Result<bool> {
    if a.out.events.is_some() && a.out.format != Format::Jsonl {
        bail!("--events writes JSON lines: use it with --format jsonl");
    }
    let mut cfg = a.engine.config()?;
    let rules = cfg.rules.clone();
    let threads = a.engine.threads as usize;
    if a.memory_bound {
        print_memory_bound(&cfg, threads);
        return Ok(true);
    }
    let mut inputs = Inputs::open(&a.files)?;
    refuse_clashing_outputs(&a.files, &a.out)?;
    if let Some(db) = &a.out.db {
        warn_if_analysed_before(db, &input_names(&a.files));
    }
    let recorder = a.record.start(&mut cfg, false)?;
    let mut outputs = Outputs::open(&a.out, false, false)?;
    let bar = progress_bar(a.progress, inputs.total_bytes());
    let mut engine = Analyzer::for_files(cfg, threads, outputs.hub(), &inputs);
    // A failure of the analysis itself (a panic): the input it was reading and why.
    let read = read_all(&mut inputs, &mut engine, &mut outputs, &bar)?;
    let (clean, mut failure) = match read {
        Ok(clean) => (clean, None),
        Err(failed) => (inputs.clean(), Some(failed)),
    };
    if failure.is_none() {
        // The calls still open are written a group at a time, not held all at once.
        let mut written = Ok(());
        let finished = engine.finish_in_groups(calliper_engine::FINISH_GROUP, |records| {
            if written.is_ok() {
                written = outputs.emit_records(records.collect(), false);
            }
        });
        written?;
        if let Err(f) = finished {
            failure = Some((input_names(&a.files), f));
        }
    }
    outputs.emit(&mut engine, false)?;
    bar.finish_and_clear();

    let counters = engine.counters().clone();
    // Its sinks go with it: the recorder can then write the last packets.
    drop(engine);
    let mut extra = serde_json::Map::new();
    if let Some(r) = recorder {
        extra.insert("recording".into(), callpcap::summary(&r.finish()));
    }
    let calls_written = outputs.calls_written;
    outputs.finish(&counters, rules.as_ref(), &input_names(&a.files), extra)?;
    if let Some(db) = &a.out.db {
        say_stored(db, calls_written);
    }
    if let Some((input, f)) = failure {
        return Err(anyhow::Error::new(f).context(format!(
            "{input}: analysis stopped; the records finished before the failure are written"
        )));
    }
    Ok(clean)
}

/// Says so when the database already holds an analysis of inputs named as
/// these are (the names as given: the same file named otherwise is not
/// recognised): their calls would be stored twice (and show twice in the
/// console).
fn warn_if_analysed_before(db: &std::path::Path, input: &str) {
    let Ok(conn) = calliper_store::open_read_only(db) else {
        return; // a new database, or one `Outputs::open` will explain
    };
    if let Ok(n @ 1..) = calliper_store::runs_of(&conn, input) {
        eprintln!(
            "calliper: warning: {} already holds {} of inputs named {input}: if they are these, their calls will be stored again, \
             and show twice in searches, KPIs and the console; use a new database to keep them once",
            db.display(),
            if n == 1 { "an analysis".to_string() } else { format!("{n} analyses") }
        );
    }
}

/// `--memory-bound`: the most memory the analysis can take, by part.
fn print_memory_bound(cfg: &calliper_engine::Config, threads: usize) {
    let bound = cfg.memory_bound_threads(threads);
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let each = if threads > 1 {
        format!(", each engine row times --threads {threads}")
    } else {
        String::new()
    };
    println!(
        "The most heap this analysis can hold, if hostile input fills every table with its \
         largest entries{each}:"
    );
    println!("{:<30} {:>12}  bounded by", "part", "MiB");
    for p in &bound.parts {
        println!("{:<30} {:>12.1}  {}", p.what, mib(p.bytes), p.bounded_by);
    }
    println!("{:<30} {:>12.1}", "total", mib(bound.total()));
    println!("Real traffic takes far less (docs/hostile-input.md, Memory bound).");
}

/// A bar over the inputs' bytes, on a terminal (or when asked).
fn progress_bar(progress: Progress, total_bytes: u64) -> ProgressBar {
    let show = match progress {
        Progress::Always => true,
        Progress::Never => false,
        Progress::Auto => io::stderr().is_terminal(),
    };
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::with_draw_target(Some(total_bytes), ProgressDrawTarget::stderr());
    b.set_style(
        ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} {wide_bar} {binary_bytes_per_sec} eta {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}

/// Reads every input through the analyser, writing what it finishes as it
/// goes: whether every input read cleanly, or the failure of the analysis
/// itself, with the input it was reading.
fn read_all(
    inputs: &mut Inputs,
    engine: &mut Analyzer,
    outputs: &mut Outputs,
    bar: &ProgressBar,
) -> Result<Result<bool, (String, WorkerFailed)>> {
    let mut say = |m: &str| bar.suspend(|| eprintln!("{m}"));
    let mut step = |engine: &mut Analyzer, position: u64| -> Result<()> {
        bar.set_position(position);
        if let Some(open) = engine.active_calls() {
            bar.set_message(format!("{open} calls open"));
        }
        outputs.emit(engine, false)
    };
    engine.read_files(inputs, &mut say, &mut step)
}

/// Tells how many calls went into the database, and what it now holds
/// when earlier runs are in it too.
fn say_stored(db: &std::path::Path, calls_written: u64) {
    let held = calliper_store::open_read_only(db)
        .and_then(|c| calliper_store::totals(&c))
        .ok()
        .filter(|(_, runs)| *runs > 1);
    let calls = |n: u64| crate::summary::counted(n, "call");
    match held {
        Some((held, runs)) => eprintln!(
            "calliper: stored {} in {}, added to what it held: it now has {} from {runs} runs (a new file keeps runs apart)",
            calls(calls_written),
            db.display(),
            calls(held.max(0) as u64)
        ),
        None => eprintln!("calliper: stored {} in {}", calls(calls_written), db.display()),
    }
}

/// Refuses outputs that name an input (writing the report over a capture
/// would destroy it before it is read), a report and a database in one
/// file, and a report written over a database (`-o` meant as `--db`).
pub(crate) fn refuse_clashing_outputs(inputs: &[PathBuf], o: &OutputArgs) -> Result<()> {
    for out in o.output.iter().chain(&o.db) {
        if inputs.iter().any(|f| same_file(f, out)) {
            bail!("{} is also an input: refusing to overwrite it", out.display());
        }
    }
    let report = o.output.as_ref().filter(|p| p.as_path() != std::path::Path::new("-"));
    if let Some(report) = report {
        // The database's own file and SQLite's files beside it.
        let mut db_files = o.db.iter().flat_map(|db| {
            ["", "-wal", "-shm", "-journal"].map(|end| {
                let mut name = db.clone().into_os_string();
                name.push(end);
                PathBuf::from(name)
            })
        });
        if let Some(db) = db_files.find(|f| files::same_path(f, report)) {
            bail!(
                "-o names {}, a file of the database (--db): give the report its own",
                db.display()
            );
        }
        let at = files::resolved(files::directory_of(report));
        if o.db_dir.as_ref().is_some_and(|dir| at.is_some() && files::resolved(dir) == at) {
            bail!(
                "-o {} is in the --db-dir directory, which holds the day databases: write the report elsewhere",
                report.display()
            );
        }
        if calliper_store::is_sqlite_database(report) {
            bail!(
                "{} is a SQLite database: -o would write the report over it (to store calls in it, use --db)",
                report.display()
            );
        }
    }
    Ok(())
}

use calliper_store::files::same_file;

/// The inputs' names, as one string for messages and the `runs` table.
pub(crate) fn input_names(files: &[PathBuf]) -> String {
    files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" ")
}
