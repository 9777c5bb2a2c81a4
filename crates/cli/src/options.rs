//! Options shared by `analyze` and `probe`: what to write and how the
//! engine analyses. One definition each, so both commands (and the probe's
//! configuration file, whose keys are these flags' long names) agree.

use anyhow::{bail, Result};
use calliper_engine::Config;
use calliper_trackers::{AlertConfig, EventKind, KpiConfig};
use calliper_wire::hep::HepTransport;
use clap::ValueEnum;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum Format {
    /// Human-readable summary of calls, streams and anomalies.
    Text,
    /// One JSON object per line: {"type":"call",...}, {"type":"stream",...}, {"type":"registration",...}, {"type":"traffic",...} per --interval (the time series), {"type":"kpi",...} per --kpi-interval and dimension, {"type":"alert",...} per threshold crossed, then {"type":"user",...} per address of record and {"type":"summary",...}.
    Jsonl,
}

/// Where results go.
#[derive(clap::Args, Debug)]
pub struct OutputArgs {
    /// Output format on stdout (or --output).
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write the --format output to this file instead of stdout (`-`: stdout; `probe` appends to it, so a restart keeps what was written).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Also store everything in this SQLite database (created if missing, added to if not): calls, streams, SIP messages, interval reports, registrations, users, alerts, KPIs, the time series.
    #[arg(long, conflicts_with = "db_dir")]
    pub db: Option<PathBuf>,
    /// Store in one SQLite database per day (UTC) in this directory,
    /// `calliper-YYYY-MM-DD.db`, each record in the day of its time.
    #[arg(long, value_name = "DIR")]
    pub db_dir: Option<PathBuf>,
    /// With --db-dir: keep this many most recent days, at least 2 (older ones
    /// are deleted when a new day begins; yesterday stays for calls that span midnight).
    #[arg(long, value_name = "DAYS", requires = "db_dir", value_parser = clap::value_parser!(u32).range(2..))]
    pub keep_days: Option<u32>,
    /// With --db-dir: delete the oldest days while the databases take more
    /// than this many MiB (today and yesterday are kept whatever their size).
    #[arg(long, value_name = "MIB", requires = "db_dir")]
    pub max_db_mib: Option<u64>,
    /// Also write the engine's events as JSON lines (needs --format jsonl):
    /// a comma-separated list of calls (phases: started, trying, ringing,
    /// early media, answered, held, resumed, transferred, ended), streams
    /// (started, ended), intervals (each stream's packets, loss, jitter, max
    /// delta and MOS per --interval), rtcp (report blocks), dtmf (digits),
    /// anomalies; or `all`.
    #[arg(long, value_name = "KINDS", value_parser = event_kinds)]
    pub events: Option<EventKinds>,
    /// With --db, --db-dir or --clickhouse: do not store each SIP message (the console's
    /// ladder, up to 16 KiB of text each) and each stream's interval reports
    /// (its quality charts); the calls and streams are stored all the same.
    #[arg(long)]
    pub no_call_detail: bool,
    /// Also send each SIP message, the calls' RTCP and each stream's quality
    /// as HEP3 to a collector (Homer, heplify-server, `sngrep -L`):
    /// `udp:HOST:PORT` or `tcp:HOST:PORT`. A bounded queue and a thread send them; what a slow
    /// collector cannot take is counted (`hep_dropped`), never waited for
    /// (docs/hep.md).
    #[arg(long, value_name = "udp|tcp:HOST:PORT", value_parser = hep_collector)]
    pub hep: Option<(HepTransport, SocketAddr)>,
    /// With --hep: the capture agent id each message carries.
    #[arg(long, value_name = "ID", default_value_t = 0, requires = "hep")]
    pub hep_id: u32,
    /// With --hep: a file holding the collector's authentication key (its
    /// first line; a regular file, not a link; keep it 0600).
    #[arg(long, value_name = "FILE", requires = "hep")]
    pub hep_key: Option<PathBuf>,
    #[command(flatten)]
    pub clickhouse: crate::clickhouse::ClickHouseArgs,
    #[command(flatten)]
    pub kpi: KpiArgs,
    #[command(flatten)]
    pub alerts: AlertArgs,
}

/// When alerts (`{"type":"alert",...}` rows, the `alerts` table) are
/// raised: docs/alerts.md. `off` turns a check off.
#[derive(clap::Args, Debug)]
pub struct AlertArgs {
    /// Alert on a call whose worst stream MOS is below this.
    #[arg(long, default_value_t = Threshold(AlertConfig::default().mos_below), value_name = "MOS|off", value_parser = mos)]
    pub alert_mos_below: Threshold,
    /// Alert on a call with a scored stream losing more than this percentage.
    #[arg(long, default_value_t = Threshold(AlertConfig::default().loss_above), value_name = "PERCENT|off", value_parser = percent)]
    pub alert_loss_above: Threshold,
    /// Alert on one-way audio or no RTP in calls answered at least this long.
    #[arg(long, default_value_t = Threshold(AlertConfig::default().media_after_ns.map(|ns| ns as f64 / 1e9)), value_name = "SECONDS|off", value_parser = threshold)]
    pub alert_media_after: Threshold,
    /// Alert when a trunk's ASR over --alert-asr-window falls below this percentage.
    #[arg(long, default_value_t = Threshold(AlertConfig::default().asr_below), value_name = "PERCENT|off", value_parser = percent)]
    pub alert_asr_below: Threshold,
    /// The ASR window, whole minutes in seconds (60 to 3600).
    #[arg(long, default_value_t = (AlertConfig::default().asr_window_ns / 1_000_000_000) as u32, value_name = "SECONDS", value_parser = asr_window)]
    pub alert_asr_window: u32,
    /// Fewest attempts in the window before a trunk's ASR is judged.
    #[arg(long, default_value_t = AlertConfig::default().asr_min_attempts, value_name = "N")]
    pub alert_asr_min_attempts: u64,
    /// Alert on a source with this many refused REGISTERs or INVITEs (401,
    /// 403, 404, 407, 484) in a minute: scanning or password guessing.
    #[arg(long, default_value_t = Threshold(AlertConfig::default().scan_failures.map(f64::from)), value_name = "N|off", value_parser = count)]
    pub alert_scan_failures: Threshold,
    /// Alert on a source whose User-Agent contains one of these
    /// (comma-separated, case-insensitive); `off` for none. Default: the
    /// known scanners (friendly-scanner, sipvicious, sipcli, ...).
    #[arg(long, value_name = "LIST|off", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub alert_scanner_agents: Option<String>,
}

/// A threshold, or `off`.
#[derive(Debug, Clone, Copy)]
pub struct Threshold(pub Option<f64>);

/// As the command line takes it (`off` for none), for the defaults in `--help`.
impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => f.write_str("off"),
        }
    }
}

fn threshold(s: &str) -> Result<Threshold, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(Threshold(None));
    }
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Threshold(Some(v))),
        _ => Err(format!("`{s}` is not a number of at least 0, or off")),
    }
}

/// A percentage (0 to 100), or `off`.
fn percent(s: &str) -> Result<Threshold, String> {
    match threshold(s)? {
        Threshold(Some(v)) if v > 100.0 => Err(format!("`{s}` is more than 100 %")),
        t => Ok(t),
    }
}

/// A MOS (1 to 5, the scale's ends), or `off`.
fn mos(s: &str) -> Result<Threshold, String> {
    match threshold(s) {
        Ok(t) if t.0.is_none_or(|v| (1.0..=5.0).contains(&v)) => Ok(t),
        _ => Err(format!("`{s}` is not a MOS (1 to 5), or off")),
    }
}

/// A table's size: at least 1 (a call table of none would drop every call
/// uncounted).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("`{s}` is not a whole number of at least 1")),
    }
}

/// A whole number of at least 1, or `off`.
fn count(s: &str) -> Result<Threshold, String> {
    match threshold(s)? {
        Threshold(Some(v)) if v < 1.0 || v.fract() != 0.0 || v > f64::from(u32::MAX) => {
            Err(format!("`{s}` is not a whole number of at least 1, or off"))
        }
        t => Ok(t),
    }
}

/// Whole minutes, in seconds, from 60 to 3600.
fn asr_window(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(v) if (60..=3600).contains(&v) && v % 60 == 0 => Ok(v),
        _ => Err(format!("`{s}` is not whole minutes in seconds from 60 to 3600")),
    }
}

impl AlertArgs {
    /// The alert tracker's configuration (trunks named as for the KPIs).
    pub fn config(&self, trunks: &[calliper_trackers::Trunk]) -> calliper_trackers::AlertConfig {
        let agents = match self.alert_scanner_agents.as_deref() {
            None => calliper_trackers::SCANNER_AGENTS.iter().map(|a| a.to_string()).collect(),
            Some("off") => Vec::new(),
            Some(list) => list
                .split(',')
                .map(|a| a.trim().to_ascii_lowercase())
                .filter(|a| !a.is_empty())
                .collect(),
        };
        calliper_trackers::AlertConfig {
            mos_below: self.alert_mos_below.0,
            loss_above: self.alert_loss_above.0,
            media_after_ns: self.alert_media_after.0.map(|s| (s * 1e9) as i64),
            asr_below: self.alert_asr_below.0,
            asr_window_ns: i64::from(self.alert_asr_window) * 1_000_000_000,
            asr_min_attempts: self.alert_asr_min_attempts,
            scan_failures: self.alert_scan_failures.0.map(|n| n.min(u32::MAX as f64) as u32),
            scanner_agents: agents,
            trunks: trunks.to_vec(),
        }
    }
}

/// How the service KPIs (`{"type":"kpi",...}` rows, the `kpi` table,
/// `calliper report kpi`) are kept: docs/kpi.md.
#[derive(clap::Args, Debug)]
pub struct KpiArgs {
    /// Length of a KPI interval, whole seconds (1 to 86400); a call counts
    /// in the interval of its INVITE.
    #[arg(long, default_value_t = (KpiConfig::default().interval_ns / 1_000_000_000) as u32, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub kpi_interval: u32,
    /// Most keys per KPI dimension (trunk, domains, user agent) and interval;
    /// the rest count under the key `other`.
    #[arg(long, default_value_t = KpiConfig::default().max_keys as u32, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub kpi_keys: u32,
    /// A named trunk for the KPIs' trunk dimension: calls to or from these
    /// addresses (repeat for more trunks); other calls are keyed by their
    /// signalling address pair `caller>callee`.
    #[arg(long = "trunk", value_name = "NAME=ADDR[,ADDR...]", value_parser = calliper_trackers::Trunk::parse)]
    pub trunks: Vec<calliper_trackers::Trunk>,
    /// Final responses that count toward NER besides answers (E.411 busy,
    /// no answer, rejection); `CODE@ringing` counts only after 180/183.
    #[arg(long, default_value_t = KpiConfig::default().ner, value_name = "CODES", value_parser = calliper_trackers::NerCodes::parse)]
    pub ner_codes: calliper_trackers::NerCodes,
}

impl KpiArgs {
    /// The KPI tracker's configuration.
    pub fn config(&self) -> calliper_trackers::KpiConfig {
        calliper_trackers::KpiConfig {
            interval_ns: i64::from(self.kpi_interval) * 1_000_000_000,
            max_keys: self.kpi_keys as usize,
            trunks: self.trunks.clone(),
            ner: self.ner_codes.clone(),
        }
    }
}

/// How the engine analyses.
#[derive(clap::Args, Debug)]
pub struct EngineArgs {
    /// Ports always treated as SIP (repeat or comma-separate; replaces the defaults, so repeat them to add one). SIP on other ports is found by its start line.
    #[arg(long = "sip-port", value_delimiter = ',', default_values_t = Config::default().sip_ports)]
    pub sip_ports: Vec<u16>,
    /// Only treat the --sip-port ports as SIP.
    #[arg(long)]
    pub no_sip_detection: bool,
    /// Read HEP3 datagrams to this UDP port (a Homer feed from Kamailio, OpenSIPS, heplify...; 9060 by
    /// convention) as the SIP they carry, with the agents' addresses and times, and their RTCP and
    /// quality reports into the calls they name. Off by default: a HEP feed crossing a monitored link
    /// would count its SIP twice, and anyone on the link can send HEP (`probe --hep-listen` sets it
    /// to its own port and checks a key).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub hep_port: Option<u16>,
    /// Do not report RTP streams that no SDP describes.
    #[arg(long)]
    pub no_rtp_heuristic: bool,
    /// End a call after this many seconds without SIP or media.
    #[arg(long, default_value_t = default_seconds(|c| c.call_idle_timeout_ns), value_name = "SECONDS", value_parser = positive_seconds)]
    pub call_timeout: f64,
    /// Keep a call this many seconds after BYE/CANCEL/failure, for late media and retries.
    #[arg(long, default_value_t = default_seconds(|c| c.call_grace_ns), value_name = "SECONDS", value_parser = nonnegative_seconds)]
    pub call_grace: f64,
    /// Wait this many seconds for the retry of an INVITE challenged with
    /// 401/407 (a user typing a password): the retry joins the same call.
    #[arg(long, default_value_t = default_seconds(|c| c.challenge_wait_ns), value_name = "SECONDS", value_parser = nonnegative_seconds)]
    pub challenge_wait: f64,
    /// End a stream without signalling after this many seconds of silence.
    #[arg(long, default_value_t = default_seconds(|c| c.stream_idle_timeout_ns), value_name = "SECONDS", value_parser = positive_seconds)]
    pub stream_timeout: f64,
    /// Most calls held at once (the least recently active is evicted beyond it).
    #[arg(long, default_value_t = Config::default().max_calls, value_parser = at_least_one)]
    pub max_calls: usize,
    /// Most RTP streams held at once (new streams are refused beyond it).
    #[arg(long, default_value_t = Config::default().max_streams)]
    pub max_streams: usize,
    /// Most SDP media addresses held at once (new ones are refused beyond it).
    #[arg(long, default_value_t = Config::default().max_media)]
    pub max_media: usize,
    /// Most calls whose INVITE has had no response at all (an INVITE flood
    /// evicts only its own kind beyond it).
    #[arg(long, default_value_t = Config::default().max_unanswered)]
    pub max_unanswered: usize,
    /// End a call whose INVITE had no response at all after this many seconds (Timer B).
    #[arg(long, default_value_t = default_seconds(|c| c.unanswered_timeout_ns), value_name = "SECONDS", value_parser = positive_seconds)]
    pub unanswered_timeout: f64,
    /// Drop a packet equal to one seen this many milliseconds before (a capture
    /// on Linux `any` or a SPAN of both directions shows each packet twice); 0 keeps all.
    #[arg(long, default_value_t = default_seconds(|c| c.dedup_window_ns) * 1e3, value_name = "MS")]
    pub dedup_window: f64,
    /// Analysis threads. Above 1, each shard analyses the media of its share
    /// of addresses (reading capture files itself) and every shard parses all
    /// signalling; the calls, streams and counters equal one thread's, perhaps in
    /// another order (KPI rows may split differently, with equal sums:
    /// docs/kpi.md). On a 2-vCPU
    /// machine 2 threads ran at 0.85-1.25x the speed of 1 (BENCHMARKS.md).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: u16,
    /// Rules from this TOML file: ignore, label or select for recording
    /// traffic by exact flow, network and port ranges, or SIP fields
    /// (docs/rules.md). Each rule's hits are reported at the end.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Length of a stream's reporting interval, at least 1 s (intervals
    /// align to multiples of it, so all streams' intervals line up).
    #[arg(long, default_value_t = default_seconds(|c| c.interval_ns), value_name = "SECONDS", value_parser = positive_seconds)]
    pub interval: f64,
}

/// A default of the engine's configuration, in seconds (the one
/// definition of each default is `Config::default`).
fn default_seconds(field: fn(&Config) -> i64) -> f64 {
    field(&Config::default()) as f64 / 1e9
}

fn seconds(s: f64) -> i64 {
    (s * 1e9) as i64
}

impl EngineArgs {
    /// The engine's configuration, rules loaded.
    pub fn config(&self) -> Result<Config> {
        if !(0.0..=1000.0).contains(&self.dedup_window) {
            bail!("--dedup-window must be between 0 and 1000 ms");
        }
        if self.interval < 1.0 {
            bail!("--interval must be at least 1 second");
        }
        let mut cfg = Config {
            sip_ports: self.sip_ports.clone(),
            sip_any_port: !self.no_sip_detection,
            hep_port: self.hep_port,
            rtp_heuristic: !self.no_rtp_heuristic,
            call_idle_timeout_ns: seconds(self.call_timeout),
            call_grace_ns: seconds(self.call_grace),
            challenge_wait_ns: seconds(self.challenge_wait),
            stream_idle_timeout_ns: seconds(self.stream_timeout),
            max_calls: self.max_calls,
            max_streams: self.max_streams,
            max_media: self.max_media,
            max_unanswered: self.max_unanswered,
            unanswered_timeout_ns: seconds(self.unanswered_timeout),
            dedup_window_ns: (self.dedup_window * 1e6) as i64,
            interval_ns: seconds(self.interval),
            // Tests of failure handling only (docs/hostile-input.md).
            fault_panic_after_packets: std::env::var("CALLIPER_FAULT_PANIC_AFTER_PACKETS")
                .ok()
                .and_then(|v| v.parse().ok()),
            ..Config::default()
        };
        if let Some(path) = &self.rules {
            cfg.rules = Some(load_rules(path)?);
        }
        Ok(cfg)
    }
}

/// Loads a rules file (warning when it has no rule).
pub fn load_rules(path: &std::path::Path) -> Result<calliper_rules::Rules> {
    let rules = calliper_rules::Rules::new();
    if calliper_rules::load_file(path, &rules)? == 0 {
        eprintln!("calliper: warning: {} has no [[rule]]: everything is tracked", path.display());
    }
    Ok(rules)
}

/// Longest timeout accepted (ten years): far beyond any use, and its
/// nanoseconds fit in an i64.
const MAX_SECONDS: f64 = 315_576_000.0;

/// A duration in seconds, 0 allowed: finite and at most [`MAX_SECONDS`]
/// (NaN or infinity would make every call expire at once or never).
pub fn nonnegative_seconds(s: &str) -> Result<f64, String> {
    match parse_seconds(s)? {
        v if (0.0..=MAX_SECONDS).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` must be between 0 and {MAX_SECONDS} seconds")),
    }
}

/// A duration in seconds above 0 (see [`nonnegative_seconds`]).
pub fn positive_seconds(s: &str) -> Result<f64, String> {
    match parse_seconds(s)? {
        v if v > 0.0 && v <= MAX_SECONDS => Ok(v),
        _ => Err(format!("`{s}` must be more than 0 and at most {MAX_SECONDS} seconds")),
    }
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    s.trim().parse().map_err(|_| format!("`{s}` is not a number of seconds"))
}

/// Event kinds chosen with `--events`.
#[derive(Clone, Debug)]
pub struct EventKinds(pub Vec<EventKind>);

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

/// A HEP endpoint, `udp:ADDR:PORT` or `tcp:ADDR:PORT` (a host name is
/// resolved once, now). `ADDR` names the address in messages, `port` what
/// the port is, for refusing 0.
fn hep_endpoint(s: &str, addr: &str, port: &str) -> Result<(HepTransport, SocketAddr), String> {
    use std::net::ToSocketAddrs;
    let (transport, rest) = match s.split_once(':') {
        Some(("udp", rest)) => (HepTransport::Udp, rest),
        Some(("tcp", rest)) => (HepTransport::Tcp, rest),
        _ => {
            return Err(format!(
                "{s}: give udp:{addr}:PORT or tcp:{addr}:PORT (e.g. udp:127.0.0.1:9060)"
            ))
        }
    };
    let address = rest
        .to_socket_addrs()
        .map_err(|e| format!("{rest}: {e}"))?
        .next()
        .ok_or_else(|| format!("{rest}: no address"))?;
    if address.port() == 0 {
        return Err(format!("{rest}: give {port} (not 0)"));
    }
    Ok((transport, address))
}

/// Where a collector listens (the engine reads HEP on this port: it must
/// be known before binding).
pub(crate) fn hep_listen_address(s: &str) -> Result<(HepTransport, SocketAddr), String> {
    hep_endpoint(s, "ADDR", "the port agents send to")
}

/// Where HEP is sent.
fn hep_collector(s: &str) -> Result<(HepTransport, SocketAddr), String> {
    hep_endpoint(s, "HOST", "the collector's port")
}
