//! `calliper relay`: the media relay overlay.

use crate::relay_stats::StatsWriter;
use anyhow::{Context, Result};
use calliper_relay::sim;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum RelayCommand {
    /// Run a relay node on a UDP socket, configured by a TOML file.
    #[command(
        long_about = "Run a relay node. The TOML file names the node, the address to bind and \
its neighbours; only datagrams from those neighbours (and local clients) are accepted, everything \
else is counted and dropped.\n\nExample (the addresses stand for this host's and its neighbours'; `neighbours` may be left out):\n\n  id = 1\n  listen = \"10.0.0.1:7000\"\n  \
nack_rounds = 0       # 0: ask while the budget allows; 1: one attempt\n  budget_ms = 100\n  \
recovery = true       # false: forward what arrives, ask for nothing (for comparison)\n  \
busy_poll = false     # true: never sleep, lowest latency, one core busy\n  \
socket_buffer = 4194304\n\n  \
[[neighbours]]\n  id = 2\n  addr = \"10.0.0.2:7000\"   # its listen address\n  \
loss_pct = 0   # tests only: loss emulated on what we send it\n  \
delay_ms = 0   # tests only: delay emulated likewise\n  rate_kbps = 0  # tests only: emulated bandwidth; 0: none\n  crtp = false   # compress RTP \
headers on this link (the neighbour says the same of us)\n  crtp_repeats = 0  # with crtp: RFC 3545's N, \
0 for plain RFC 2508\n  key_file = \"link-1-2.key\"  # (umask 077; head -c 32 /dev/urandom > link-1-2.key): authenticate every datagram on this link \
(16 to 1024 bytes, the same file at both ends, relative to this file; without it the neighbour is known by its address alone)\n\n  \
[edge]                 # optional: SIP proxies steer calls' media here (rtpengine's ng protocol)\n  \
control = \"udp:127.0.0.1:2223\"   # required; Kamailio: modparam(\"rtpengine\", \"rtpengine_sock\", \"udp:127.0.0.1:2223\")\n  \
address = \"192.0.2.1\"  # media is received here and written into SDP\n  \
ports = \"40000-40999\"  # RTP on even ports, RTCP on the next\n  \
allow = []             # control from addresses other than loopback\n  \
peers = [{ node = 3, address = \"198.51.100.1\" }]   # other edges by their [edge] address \
(not their listen address): media to them crosses the overlay\n  \
max_calls = 10000\n  idle_timeout_s = 60\n\n\
--stats FILE writes the counters when the node stops (SIGINT, SIGTERM): protocol, socket, each \
link's (data from that neighbour: RTT, loss before and after recovery, recovered, given up, forged, \
replayed) and the edge's; --stats-every S rewrites it while the node runs (without the edge's). \
docs/relay.md has a three-node example (two edges and a core).\n\n\
Applications talk to the node with `calliper relay send` / `recv` or the library's Client."
    )]
    Run(NodeArgs),
    /// Send a voice-like test stream through the local node.
    Send(SendArgs),
    /// Receive a test stream from the local node and report delivery and delay.
    Recv(RecvArgs),
    /// Run the real protocol over emulated links described in a TOML file and
    /// print delivery and delay figures.
    #[command(
        long_about = "Run the relay protocol core over emulated links (seeded Gilbert-Elliott loss, \
fixed delay, jitter, bandwidth, cuts) and print what the streams experienced: delivered, delivered within the \
delay budget, delay percentiles, recovery counters. Deterministic: the same file and seed give the \
same figures.\n\nExample file:\n\n  [settings]\n  seed = 7\n  nack_rounds = 1        # 1 = one NACK \
as Spines; 0 = ask while the budget allows\n  budget_ms = 100\n  metric = \"expected-latency\"  # or hops, \
latency, loss\n\n  [[links]]\n  a = 1\n  b = 2\n  delay_ms = 10\n  loss_pct = 5\n  burst = 0.5   \
# P(loss | previous lost)\n  rate_kbps = 0  # bandwidth each way; 0: none\n  crtp = false   \
# compress RTP headers on this link (settings.crtp_repeats: RFC 3545's N)\n\n  [[streams]]\n  from = 1\n  \
to = 2\n  packets = 10000\n  count = 10  # parallel streams, 50 packets/s each\n  payload = 160\n  \
rtp = false   # true: each payload is the voice of an IPv4/UDP/RTP datagram\n\n  [[cuts]]\n  a = 1\n  b = 2\n  at_ms = 3000"
    )]
    Simulate(SimulateArgs),
}

/// `calliper relay run`: a node on a UDP socket.
#[derive(clap::Args)]
pub struct NodeArgs {
    /// Node configuration (TOML).
    pub config: PathBuf,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Write the node's counters as JSON here when it stops: the protocol's,
    /// the socket's, each link's (RTT, loss before and after recovery,
    /// recovered, given up, forged, replayed) and the edge's.
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// Also rewrite --stats every SECONDS while the node runs (whole each
    /// time: written beside it and renamed over it; the edge's counters
    /// come with the last one, when it stops).
    #[arg(long, value_name = "SECONDS", requires = "stats")]
    pub stats_every: Option<f64>,
    /// Cut the emulated link to neighbour ID after SECONDS (repeatable: ID:SECONDS).
    #[arg(long, value_name = "ID:SECONDS")]
    pub cut: Vec<String>,
    /// Seed of the loss emulation.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Poll the socket without sleeping (lowest latency; keeps one core busy).
    #[arg(long)]
    pub busy_poll: bool,
}

/// `calliper relay send`: a test stream into the local node.
#[derive(clap::Args)]
pub struct SendArgs {
    /// The local node's address.
    #[arg(long)]
    pub node: std::net::SocketAddr,
    /// Destination node id.
    #[arg(long)]
    pub dest: u16,
    /// Virtual port at the destination.
    #[arg(long, default_value_t = 5000)]
    pub vport: u16,
    /// Packets to send.
    #[arg(long, default_value_t = 500)]
    pub count: u32,
    /// Interval between packets (ms); 0 sends as fast as the node takes
    /// them (a load test, benches/relay_forward.sh).
    #[arg(long, default_value_t = 20.0)]
    pub interval_ms: f64,
    /// Payload bytes (at least 12).
    #[arg(long, default_value_t = 160)]
    pub size: usize,
}

/// `calliper relay recv`: a test stream out of the local node, measured.
#[derive(clap::Args)]
pub struct RecvArgs {
    /// The local node's address.
    #[arg(long)]
    pub node: std::net::SocketAddr,
    /// Virtual port to bind.
    #[arg(long, default_value_t = 5000)]
    pub vport: u16,
    /// Packets the sender sends.
    #[arg(long, default_value_t = 500)]
    pub count: u32,
    /// Give up after this long without a packet (s).
    #[arg(long, default_value_t = 3.0)]
    pub idle: f64,
    /// Delay budget (ms): later packets count as late.
    #[arg(long, default_value_t = 100.0)]
    pub budget_ms: f64,
}

/// `calliper relay simulate`: the protocol over emulated links.
#[derive(clap::Args)]
pub struct SimulateArgs {
    /// Topology file (TOML).
    pub file: PathBuf,
    /// Override the seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override the NACK rounds (1 = one attempt, 0 = while the budget allows).
    #[arg(long)]
    pub nack_rounds: Option<u8>,
    /// Override every link's loss (percent).
    #[arg(long, value_name = "PCT")]
    pub loss: Option<f64>,
    /// Override every stream's count (parallel calls of each kind).
    #[arg(long, value_name = "N")]
    pub calls: Option<u32>,
    /// Turn loss recovery off (plain forwarding), for comparison.
    #[arg(long)]
    pub no_recovery: bool,
    /// cRTP on the links that set `crtp`: off (headers uncompressed), 2508 (plain RFC
    /// 2508) or 3545 (RFC 3545's repeats, N = 2, with its header checksum).
    #[arg(long, value_name = "SCHEME")]
    pub crtp: Option<CrtpScheme>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The header compression a simulation's links use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CrtpScheme {
    /// Headers uncompressed.
    Off,
    /// Plain RFC 2508.
    #[value(name = "2508")]
    Rfc2508,
    /// RFC 3545's repeated updates (N = 2) and header checksum.
    #[value(name = "3545")]
    Rfc3545,
}

fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

pub fn run(cmd: RelayCommand) -> Result<()> {
    match cmd {
        RelayCommand::Run(a) => a.run(),
        RelayCommand::Send(a) => a.run(),
        RelayCommand::Recv(a) => a.run(),
        RelayCommand::Simulate(a) => a.run(),
    }
}

/// The edge thread of a node file with `[edge]`: its stop flag and handle.
type EdgeThread = (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<std::io::Result<calliper_relay::edge::EdgeCounters>>,
);

/// Binds the ng endpoint before the node runs (a taken port fails at once)
/// and serves it on a thread of its own.
fn start_edge(
    cfg: &calliper_relay::udp::NodeConfig,
    file: &std::path::Path,
) -> Result<Option<EdgeThread>> {
    let Some(e) = &cfg.edge else {
        return Ok(None);
    };
    let edge = calliper_relay::edge::Edge::bind(e, cfg.listen)
        .map_err(|m| anyhow::anyhow!("{}: {m}", file.display()))?;
    eprintln!(
        "calliper relay: ng control on {} (media {} ports {})",
        e.control, e.address, e.ports
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::Builder::new()
        .name("edge".into())
        .spawn(move || edge.run(&flag))
        .context("cannot start the edge thread")?;
    Ok(Some((stop, handle)))
}

impl NodeArgs {
    fn run(self) -> Result<()> {
        let NodeArgs { config, duration, stats, stats_every, cut, seed, busy_poll } = self;
        if let Some(s) = stats_every {
            anyhow::ensure!(
                (0.1..=86_400.0).contains(&s),
                "--stats-every {s} is out of range: allowed 0.1 to 86400 s"
            );
        }
        let text = calliper_store::files::read_small(&config, 1 << 20)
            .with_context(|| format!("cannot read {}", config.display()))?;
        let mut cfg: calliper_relay::udp::NodeConfig = toml::from_str(&text)
            .with_context(|| format!("{}: not a node configuration", config.display()))?;
        cfg.busy_poll |= busy_poll;
        // Key files named relative to the node file, wherever it runs from.
        let base = config.parent().unwrap_or(std::path::Path::new("."));
        for n in &mut cfg.neighbours {
            if let Some(k) = n.key_file.as_mut().filter(|k| k.is_relative()) {
                *k = base.join(&*k);
            }
        }
        cfg.validate().map_err(|e| anyhow::anyhow!("{}: {e}", config.display()))?;
        let mut cuts = Vec::new();
        for c in &cut {
            let (id, at) = c.split_once(':').context("--cut takes ID:SECONDS")?;
            cuts.push((id.parse::<u16>()?, at.parse::<f64>()?));
        }
        let mut node = calliper_relay::udp::UdpNode::bind(&cfg, seed).with_context(|| {
            format!("{}: cannot start the node on {}", config.display(), cfg.listen)
        })?;
        let mut stats = StatsWriter::start(stats.as_deref(), stats_every, &config, &cfg)?;
        let n = cfg.neighbours.len();
        eprintln!("calliper relay: node {} on {} with {n} neighbours", cfg.id, cfg.listen);
        let edge = start_edge(&cfg, &config)?;
        // SIGINT and SIGTERM stop the node cleanly, so --stats is written.
        crate::probe::signals::install();
        let start = std::time::Instant::now();
        node.run(|n| {
            let t = start.elapsed().as_secs_f64();
            for &(id, at) in &cuts {
                if t >= at {
                    n.set_link_down(id, true);
                }
            }
            stats.tick(t, n);
            duration.is_some_and(|d| t >= d)
                || crate::probe::signals::stop_requested()
                || edge.as_ref().is_some_and(|(_, h)| h.is_finished())
        })?;
        let edge = match edge {
            Some((stop, handle)) => {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                let counters = handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("the edge thread panicked"))?
                    .context("the edge's sockets failed")?;
                Some(counters)
            }
            None => None,
        };
        stats.finish(&mut node, edge)
    }
}

impl SendArgs {
    fn run(self) -> Result<()> {
        let SendArgs { node, dest, vport, count, interval_ms, size } = self;
        anyhow::ensure!(size >= 12, "--size must be at least 12 bytes");
        anyhow::ensure!(
            interval_ms == 0.0 || (0.1..=60_000.0).contains(&interval_ms),
            "--interval-ms {interval_ms} is out of range: allowed 0 (as fast as possible) or 0.1 to 60000 ms"
        );
        let client = calliper_relay::udp::Client::bind(node, 0)?;
        let mut payload = vec![0u8; size];
        let start = std::time::Instant::now();
        for i in 0..count {
            let due = std::time::Duration::from_secs_f64(i as f64 * interval_ms / 1000.0);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
            payload[..4].copy_from_slice(&i.to_be_bytes());
            payload[4..12].copy_from_slice(&wall_ns().to_be_bytes());
            client.send_to(dest, vport, &payload)?;
        }
        Ok(())
    }
}

impl RecvArgs {
    fn run(self) -> Result<()> {
        let RecvArgs { node, vport, count, idle, budget_ms } = self;
        anyhow::ensure!(vport != 0, "--vport 0 cannot be bound (send only)");
        anyhow::ensure!(
            (0.001..=86_400.0).contains(&idle),
            "--idle {idle} is out of range: allowed 0.001 to 86400 s"
        );
        let client = calliper_relay::udp::Client::bind(node, vport)?;
        let mut seen = std::collections::HashSet::new();
        let mut delays = Vec::new();
        let (mut late, mut last, mut longest_gap) = (0u64, None::<i64>, 0i64);
        let mut buf = vec![0u8; 65_536];
        while let Some((_, _, n)) =
            client.recv(&mut buf, std::time::Duration::from_secs_f64(idle))?
        {
            if n < 12 {
                continue;
            }
            let seq = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
            let sent = i64::from_be_bytes(buf[4..12].try_into()?);
            let now = wall_ns();
            if !seen.insert(seq) {
                continue;
            }
            let delay = now - sent;
            late += (delay as f64 > budget_ms * 1e6) as u64;
            delays.push(delay);
            if let Some(l) = last {
                longest_gap = longest_gap.max(now - l);
            }
            last = Some(now);
            if seen.len() as u32 == count {
                break;
            }
        }
        delays.sort_unstable();
        let pct = |p: f64| {
            if delays.is_empty() {
                f64::NAN
            } else {
                delays[((p / 100.0) * (delays.len() - 1) as f64).round() as usize] as f64 / 1e6
            }
        };
        let v = serde_json::json!({
            "expected": count,
            "delivered": seen.len(),
            "late": late,
            "lost": count as u64 - seen.len() as u64,
            "delay_ms": {"p50": pct(50.0), "p90": pct(90.0), "p99": pct(99.0), "max": pct(100.0)},
            "longest_gap_ms": longest_gap as f64 / 1e6,
        });
        write_stdout(&format!("{v}\n"))
    }
}

impl SimulateArgs {
    fn run(self) -> Result<()> {
        let SimulateArgs { file, seed, nack_rounds, loss, calls, no_recovery, crtp, json } = self;
        let text = calliper_store::files::read_small(&file, 1 << 20)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let mut topo: sim::Topology =
            toml::from_str(&text).with_context(|| format!("{}: not a topology", file.display()))?;
        if let Some(s) = seed {
            topo.settings.seed = s;
        }
        if let Some(r) = nack_rounds {
            topo.settings.nack_rounds = r;
        }
        for l in &mut topo.links {
            l.loss_pct = loss.unwrap_or(l.loss_pct);
            l.crtp &= crtp != Some(CrtpScheme::Off);
        }
        for s in &mut topo.streams {
            s.count = calls.unwrap_or(s.count);
        }
        topo.settings.no_recovery |= no_recovery;
        if let Some(scheme) = crtp {
            topo.settings.crtp_repeats = if scheme == CrtpScheme::Rfc3545 { 2 } else { 0 };
        }
        topo.validate().map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        let r = sim::run(&topo)?;
        let out = if json { simulation_json(&r) } else { simulation_text(&r, &topo)? };
        write_stdout(&out)
    }
}

/// A simulation's figures as one JSON object.
fn simulation_json(r: &sim::Report) -> String {
    let lost = r.sent - r.delivered;
    let v = serde_json::json!({
        "sent": r.sent,
        "delivered": r.delivered,
        "delivered_ratio": r.delivered_ratio(),
        "within_budget": r.within_budget,
        "within_budget_ratio": r.within_budget_ratio(),
        "lost": lost,
        "delay_ms": {
            "p50": r.delay_percentile_ms(50.0),
            "p90": r.delay_percentile_ms(90.0),
            "p99": r.delay_percentile_ms(99.0),
            "max": r.delay_percentile_ms(100.0),
        },
        "longest_gap_after_cut_ms": r.longest_gap_after_cut_ns as f64 / 1e6,
        "link_drops": r.link_drops,
        "queue_drops": r.queue_drops,
        "link_bytes": r.link_bytes,
        "counters": r.counters,
    });
    format!("{v}\n")
}

/// A simulation's figures as text, a line per subject.
fn simulation_text(r: &sim::Report, topo: &sim::Topology) -> Result<String> {
    use std::fmt::Write as _;
    let lost = r.sent - r.delivered;
    let mut out = String::new();
    writeln!(
        out,
        "sent {}  delivered {} ({:.4} %)  within {} ms budget {} ({:.4} %)  lost {} ({:.4} %)",
        r.sent,
        r.delivered,
        100.0 * r.delivered_ratio(),
        topo.settings.budget_ms,
        r.within_budget,
        100.0 * r.within_budget_ratio(),
        lost,
        100.0 * lost as f64 / r.sent.max(1) as f64
    )?;
    writeln!(
        out,
        "delay ms     p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
        r.delay_percentile_ms(50.0),
        r.delay_percentile_ms(90.0),
        r.delay_percentile_ms(99.0),
        r.delay_percentile_ms(100.0)
    )?;
    let c = &r.counters;
    writeln!(
        out,
        "recovery     {} link drops, {} gaps, {} recovered, {} given up; {} NACKs, {} resent, {} refused (tokens), {} not held",
        r.link_drops, c.gaps, c.recovered, c.given_up, c.nacks_sent, c.retransmitted, c.retransmit_no_tokens, c.retransmit_not_held
    )?;
    writeln!(
        out,
        "links        {} bytes on the wire ({:.1} kb/s, both ways), {} dropped by full queues",
        r.link_bytes,
        r.link_bytes as f64 * 8.0 / 1000.0 / r.duration_s.max(1e-9),
        r.queue_drops
    )?;
    if topo.links.iter().any(|l| l.crtp) {
        writeln!(
            out,
            "crtp         {} lost to context damage; {} held for in-order decompression",
            c.crtp_damaged, c.crtp_held
        )?;
    }
    if !topo.cuts.is_empty() {
        writeln!(
            out,
            "cut          longest gap in delivery after the cut {:.1} ms; {} route changes",
            r.longest_gap_after_cut_ns as f64 / 1e6,
            c.route_changes
        )?;
    }
    Ok(out)
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn write_stdout(s: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(s.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
