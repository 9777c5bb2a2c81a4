//! `calliper probe`: the engine as a service on live interfaces (or driven
//! from captures by `--read`, through the same loop): records written as
//! calls end and made durable every second, capture loss counted apart from
//! network loss, signals for a clean stop and a rules reload.

pub mod config_file;
mod console;
mod running;
pub(crate) mod signals;
mod source;

use crate::options::{load_rules, EngineArgs, Format, OutputArgs};
use crate::run::Outputs;
use anyhow::{bail, Result};
use calliper_capture::files::Inputs;
use calliper_capture::filter::Filter;
use calliper_capture::live::{Direction, LiveCapture, LiveConfig, LiveStats};
use calliper_engine::{Analyzer, Config};
use running::Running;
use source::{hep_summary, open_hep, open_source, Source, Step};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The environment variable that may hold the console's write token.
const WRITE_TOKEN_ENV: &str = "CALLIPER_WRITE_TOKEN";

/// Options of `calliper probe`. Its input is interfaces, capture files or
/// a HEP collector (named together when none is given).
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).multiple(true).args(["interfaces", "read", "hep_listen"])))]
pub struct ProbeArgs {
    /// Interface to capture on; repeat for several (one ring receives them
    /// all, in the kernel's order).
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    interfaces: Vec<String>,
    /// Drive the probe from these capture files instead of interfaces, through
    /// the same loop (replays and tests); time comes from the packets.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["interfaces", "hep_listen"])]
    read: Vec<PathBuf>,
    /// Collect HEP3 from capture agents (Kamailio's siptrace, heplify,
    /// OpenSIPS, rtpengine --homer) here, alone or beside -i:
    /// `udp:ADDR:PORT` or `tcp:ADDR:PORT`. Their SIP becomes calls as if
    /// captured, with the agents' addresses and times (docs/hep.md).
    /// Anything but loopback needs --hep-listen-key.
    #[arg(long, value_name = "udp|tcp:ADDR:PORT", value_parser = crate::options::hep_listen_address)]
    hep_listen: Option<(calliper_capture::hep_listen::HepTransport, std::net::SocketAddr)>,
    /// With --hep-listen: a file (regular, not a link) whose first line is
    /// the key (chunk 0x000e) every message must carry; others are counted
    /// and dropped, and a TCP connection sending one is closed.
    // With --read, clap skips `requires` (--read conflicts with
    // --hep-listen): the conflict is stated here too.
    #[arg(long, value_name = "FILE", requires = "hep_listen", conflicts_with = "read")]
    hep_listen_key: Option<PathBuf>,
    /// With --hep-listen: how long each message waits for ones its agent
    /// sent before it (Kamailio and OpenSIPS trace from several processes,
    /// so a reply can arrive before its request). Widen it on a loaded host
    /// whose replies show as sip_response_unmatched; at most 2 000 (what
    /// is held counts in the collector's queue, and calls end that much
    /// later).
    #[arg(
        long,
        value_name = "MS",
        requires = "hep_listen",
        conflicts_with = "read",
        default_value_t = calliper_capture::hep_listen::DEFAULT_REORDER.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(0..=calliper_capture::hep_listen::MAX_REORDER.as_millis() as u64)
    )]
    hep_reorder_ms: u64,
    #[command(flatten)]
    out: OutputArgs,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    record: crate::callpcap::RecordArgs,
    /// Bytes per ring block: a power of two, 4096 to 134217728, larger than
    /// the largest packet.
    #[arg(long, default_value_t = LiveConfig::default().block_size, value_name = "BYTES")]
    block_size: u32,
    /// Blocks in the ring (ring memory = block size × count, locked per socket).
    #[arg(long, default_value_t = LiveConfig::default().block_count)]
    block_count: u32,
    /// The kernel hands over a block that is not full after this many ms.
    #[arg(long, default_value_t = LiveConfig::default().block_timeout_ms, value_name = "MS")]
    block_timeout: u32,
    /// Leave the interfaces out of promiscuous mode (see only traffic to this host).
    #[arg(long)]
    no_promiscuous: bool,
    /// Which packets to keep: both, in (received) or out (sent). On a proxy
    /// or router, `out` sees what it forwards after its own filtering, once.
    #[arg(long, value_enum, default_value = "both")]
    direction: DirectionArg,
    /// Keep only packets this tcpdump-language expression accepts, e.g.
    /// `udp port 5060 or udp portrange 10000-20000` (compiled by libpcap;
    /// live, the kernel applies it; with --read, the probe does).
    #[arg(long, value_name = "EXPR")]
    filter: Option<String>,
    /// Serve the web console here (`ADDR:PORT`, `localhost:PORT` or a port
    /// for loopback): the calls open now, pushed as they change, and with
    /// --db the stored calls, as `calliper serve` shows them
    /// (docs/console.md). Anything but loopback needs --token-file or
    /// CALLIPER_TOKEN.
    #[arg(long, value_name = "ADDR:PORT", value_parser = crate::serve::listen_address)]
    http: Option<std::net::SocketAddr>,
    /// With --http: the file holding the token requests must carry (as for
    /// `calliper serve`).
    #[arg(long, value_name = "FILE", requires = "http")]
    token_file: Option<PathBuf>,
    /// With --http: the file holding the token that may add and remove
    /// rules from the console (bearer only; 0600; without it, the
    /// CALLIPER_WRITE_TOKEN environment variable; without either, the
    /// console only reads). Changes last until the rules file is reloaded
    /// or the probe restarts.
    #[arg(long, value_name = "FILE", requires = "http")]
    write_token_file: Option<PathBuf>,
    /// With --read: replay at the capture's own pace (a packet is handed
    /// over when as much time has passed since the first as between them
    /// in the capture), as if it were live.
    #[arg(long, requires = "read")]
    realtime: bool,
    /// Log the probe's state (packets, open calls, capture drops) to stderr
    /// every this many seconds; 0 never.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    status_every: u64,
    /// Read settings from this TOML file: each key is a flag's long name
    /// (`interface = ["eth0"]`, `db = "/var/lib/calliper/calls.db"`,
    /// `max-calls = 200000`, `no-promiscuous = true`); flags given on the
    /// command line win.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the settings (file and flags): print them, open the interfaces
    /// and the rules, and exit without capturing.
    #[arg(long)]
    check_config: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum DirectionArg {
    /// Received and sent packets.
    Both,
    /// Received packets only.
    In,
    /// Sent packets only.
    Out,
}

impl ProbeArgs {
    fn live(&self) -> LiveConfig {
        LiveConfig {
            interfaces: self.interfaces.clone(),
            block_size: self.block_size,
            block_count: self.block_count,
            block_timeout_ms: self.block_timeout,
            promiscuous: !self.no_promiscuous,
            fanout_group: None,
            filter: self.filter.clone(),
            direction: match self.direction {
                DirectionArg::Both => Direction::Both,
                DirectionArg::In => Direction::In,
                DirectionArg::Out => Direction::Out,
            },
        }
    }
}

fn realtime_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Runs the probe until its input ends or a signal stops it. Ok(false)
/// means some input was damaged (files) but results were written.
pub fn run(a: ProbeArgs) -> Result<bool> {
    if a.out.events.is_some() && a.out.format != Format::Jsonl {
        bail!("--events writes JSON lines: use it with --format jsonl");
    }
    // First: a SIGHUP during start-up must not kill the probe.
    signals::install();
    let (mut cfg, write_token) = engine_config(&a)?;
    let rules = cfg.rules.clone();
    let live = a.live();
    if a.check_config {
        return check(&a, &live).map(|_| true);
    }
    crate::refuse_clashing_outputs(&a.read, &a.out)?;
    // Every input opens before anything is written.
    let (mut source, input) = open_source(&a, &live)?;
    // Live capture drops (and counts) what the disk cannot take at once.
    let recorder = a.record.start(&mut cfg, a.read.is_empty())?;
    // Live capture must not wait for the disk; a replay may.
    let mut outputs = Outputs::open(&a.out, true, a.read.is_empty())?;
    let console = start_console(&a, &mut outputs, rules.as_ref(), write_token)?;
    let engine = Analyzer::new(cfg, a.engine.threads as usize, outputs.hub());
    let mut r = Running::new(engine, outputs, console, input);
    log(&format!("event=start input={:?} threads={}", r.input, a.engine.threads));
    let mut clean = true;
    if let Some(e) = capture(&a, &mut r, &mut source, rules.as_ref(), &mut clean)? {
        // The interface went away: write everything, then report.
        finish(r, recorder, rules.as_ref(), None)?;
        return Err(e);
    }
    if signals::stop_requested() {
        log("event=stopping reason=signal");
    }
    if let Some(s) = source.stats()? {
        r.stats = Some(s);
        r.engine.set_capture_dropped(s.dropped);
    }
    if let Some(f) = r.failure.take() {
        // What was finished before the failure is written; open calls are not.
        r.outputs.emit(&mut r.engine, true)?;
        r.outputs.close()?;
        return Err(anyhow::Error::new(f).context(format!(
            "{}: analysis stopped; the records finished before the failure are written",
            r.input
        )));
    }
    let filtered_out = source.filtered_out();
    r.hep = source.hep_stats();
    finish(r, recorder, rules.as_ref(), filtered_out)?;
    Ok(clean)
}

/// The engine's configuration from the options, and the console's write
/// token (read only when the console runs).
fn engine_config(a: &ProbeArgs) -> Result<(Config, Option<String>)> {
    let mut cfg = a.engine.config()?;
    if let Some((_, address)) = a.hep_listen {
        // The engine reads HEP on the port the collector's frames go to.
        match cfg.hep_port {
            None => cfg.hep_port = Some(address.port()),
            Some(p) if p == address.port() => {}
            Some(p) => bail!(
                "--hep-port {p} differs from the --hep-listen port {}: give one port (or leave --hep-port out)",
                address.port()
            ),
        }
    }
    let write_token = match a.http {
        Some(_) => crate::serve::token_from(a.write_token_file.as_ref(), WRITE_TOKEN_ENV)?,
        None => None,
    };
    if a.http.is_some() && cfg.rules.is_none() {
        // The console shows the table (empty), and a write token can fill it.
        cfg.rules = Some(calliper_rules::Rules::new());
    }
    Ok((cfg, write_token))
}

/// Reads and analyses until the input ends, a signal stops the probe or
/// the analysis fails (`r.failure`). Ok(Some(error)): the input failed
/// (the interface went away); Err: the outputs did.
fn capture(
    a: &ProbeArgs,
    r: &mut Running,
    source: &mut Source,
    rules: Option<&calliper_rules::Rules>,
    clean: &mut bool,
) -> Result<Option<anyhow::Error>> {
    // Due at once: the console's health page has a first report at start.
    let mut last_flush = Instant::now() - Duration::from_secs(1);
    let mut last_status = Instant::now();
    // A block may hold packets up to its timeout old, and the HEP collector
    // holds messages up to twice its reorder window: idle time passes only
    // up to there, so no call expires before its last packets are read.
    let mut lag_ns = 2 * a.block_timeout as i64 * 1_000_000;
    if a.hep_listen.is_some() {
        lag_ns = lag_ns.max(2 * a.hep_reorder_ms as i64 * 1_000_000);
    }
    while !signals::stop_requested() {
        if signals::take_reload() {
            reload(a, rules);
        }
        let step = match source.next(&mut |b| r.packets(b), clean) {
            Ok(s) => s,
            Err(e) => {
                // The interface failed; what the HEP collector holds is whole.
                source.drain(&mut |b| r.packets(b));
                return Ok(Some(e));
            }
        };
        if r.failure.is_some() || matches!(step, Step::End) {
            break;
        }
        r.emit_when_due()?;
        if last_flush.elapsed() >= Duration::from_secs(1) {
            last_flush = Instant::now();
            r.each_second(source, a, lag_ns)?;
            if r.failure.is_some() {
                break;
            }
        }
        if a.status_every > 0 && last_status.elapsed() >= Duration::from_secs(a.status_every) {
            last_status = Instant::now();
            r.log_status();
        }
    }
    if r.failure.is_none() {
        source.drain(&mut |b| r.packets(b));
    }
    Ok(None)
}

/// `--http`: starts the console on the probe's live calls, health and
/// rules; the health page to publish to and the live calls to tick.
fn start_console(
    a: &ProbeArgs,
    outputs: &mut Outputs,
    rules: Option<&calliper_rules::Rules>,
    write_token: Option<String>,
) -> Result<Option<running::Console>> {
    let Some(listen) = a.http else {
        return Ok(None);
    };
    let live = calliper_console::LiveCalls::new();
    outputs.add_tracker(Box::new(live.clone()));
    let h = calliper_console::ProbeHealth::new();
    let writable = write_token.is_some();
    let addr = console::start(calliper_console::Config {
        listen,
        db: a.out.db.clone(),
        clickhouse: None,
        live: Some(live.clone()),
        health: Some(h.clone()),
        token: crate::serve::token(a.token_file.as_ref())?,
        rules: rules.cloned(),
        write_token,
        recordings: a.record.record_dir.clone(),
    })?;
    log(&format!("event=console address=http://{addr}/ rules_writable={writable}"));
    Ok(Some(running::Console { health: h, live }))
}

/// Ends the analysis (open calls written as ongoing) and the outputs.
fn finish(
    r: Running,
    recorder: Option<calliper_callpcap::Recorder>,
    rules: Option<&calliper_rules::Rules>,
    filtered_out: Option<u64>,
) -> Result<()> {
    let Running { mut engine, mut outputs, input, stats, hep, .. } = r;
    let failed = engine.finish().err();
    outputs.emit(&mut engine, false)?;
    let counters = engine.counters().clone();
    // Its sinks go with it: the recorder can then write the last packets.
    drop(engine);
    let mut extra = serde_json::Map::new();
    if let Some(r) = recorder {
        extra.insert("recording".into(), crate::callpcap::summary(&r.finish()));
    }
    if let Some(s) = stats {
        extra.insert(
            "capture".into(),
            serde_json::json!({
                "received": s.received,
                "dropped": s.dropped,
                "ring_full": s.ring_full,
            }),
        );
    }
    if let Some(n) = filtered_out {
        extra.insert("filtered_out".into(), n.into());
    }
    if let Some((h, ring_skipped)) = hep {
        extra.insert("hep_listen".into(), hep_summary(&h, ring_skipped));
        hep_warnings(&h);
    }
    let written = outputs.calls_written;
    outputs.finish(&counters, rules, &input, extra)?;
    let filtered = filtered_out.map_or(String::new(), |n| format!(" filtered_out={n}"));
    log(&format!("event=stopped calls_written={written}{filtered}{}", drops(stats)));
    if let Some(f) = failed {
        return Err(anyhow::Error::new(f).context(format!("{input}: analysis stopped")));
    }
    Ok(())
}

/// What the HEP collector refused, said in words at the end (the text
/// summary does not list the collector's counts).
fn hep_warnings(h: &calliper_capture::hep_listen::HepListenStats) {
    let said = [
        (h.dropped, "were dropped: the analysis could not keep up"),
        (
            h.unauthenticated,
            "lacked the --hep-listen-key key (a TCP connection is closed at its first)",
        ),
        (h.malformed, "were not HEP3 (or a TCP stream stopped being HEP3)"),
        (h.too_long, "were too long for one datagram"),
    ];
    for (n, why) in said.iter().filter(|(n, _)| *n > 0) {
        eprintln!("calliper probe: warning: {n} HEP messages {why}");
    }
    let refused = h.connections_refused + h.connections_timed_out;
    if refused > 0 {
        eprintln!(
            "calliper probe: warning: {refused} HEP connections refused or closed (too many, or too slow)"
        );
    }
    log(&format!(
        "event=hep_listen_stopped received={} dropped={} unauthenticated={} malformed={}",
        h.received, h.dropped, h.unauthenticated, h.malformed
    ));
}

/// The capture's drop counts for a log line (nothing for files).
fn drops(stats: Option<LiveStats>) -> String {
    stats.map_or(String::new(), |s| {
        format!(
            " kernel_received={} kernel_dropped={} ring_full={}",
            s.received, s.dropped, s.ring_full
        )
    })
}

/// Replaces the rules with their file's current content (SIGHUP).
fn reload(a: &ProbeArgs, rules: Option<&calliper_rules::Rules>) {
    match (&a.engine.rules, rules) {
        (Some(path), Some(rules)) => match calliper_rules::reload_file(path, rules) {
            Ok(n) => log(&format!("event=rules_reloaded rules={n}")),
            Err(e) => log(&format!("event=rules_reload_failed error={:?}", e.to_string())),
        },
        _ => log("event=reload_ignored reason=\"no --rules file\""),
    }
}

/// `--check-config`: prints the settings, tries what can fail at start.
fn check(a: &ProbeArgs, live: &LiveConfig) -> Result<()> {
    let argv = config_file::expand(std::env::args_os().collect())?;
    print!("{}", config_file::effective(&argv)?);
    if let Some(path) = &a.engine.rules {
        load_rules(path)?;
    }
    Inputs::open(&a.read)?;
    if let Some(expr) = &a.filter {
        Filter::new(expr)?;
    }
    if let Some(d) = a.out.db_dir.as_ref().filter(|d| d.exists() && !d.is_dir()) {
        bail!("--db-dir {} is not a directory", d.display());
    }
    // Where output goes must exist (the service would otherwise restart in a loop).
    let parents = a.out.output.iter().chain(&a.out.db).chain(&a.out.db_dir);
    for p in parents {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(d) = dir.filter(|d| !d.is_dir()) {
            let why = if d.exists() {
                "is not a directory"
            } else {
                "does not exist (under systemd, StateDirectory= creates it)"
            };
            bail!("{} cannot be written: {} {why}", p.display(), d.display());
        }
    }
    // Some input is given: clap requires one of the three.
    if a.read.is_empty() {
        if !a.interfaces.is_empty() {
            LiveCapture::open(live)?;
        }
        if let Some(l) = a.hep_listen {
            open_hep(a, l)?;
        }
    }
    // On stderr: the settings on stdout read back as a configuration file.
    eprintln!("calliper: configuration OK");
    Ok(())
}

/// One structured log line on stderr (`key=value`, logfmt).
fn log(fields: &str) {
    eprintln!("calliper probe: time={} {fields}", calliper_store::rfc3339(realtime_ns()));
}
