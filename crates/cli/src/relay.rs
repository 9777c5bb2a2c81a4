//! `calliper relay`: the media relay overlay.

use anyhow::{Context, Result};
use calliper_relay::sim;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum RelayCommand {
    /// Run the real protocol over emulated links described in a TOML file and
    /// print delivery and delay figures.
    #[command(
        long_about = "Run the relay protocol core over emulated links (seeded Gilbert-Elliott loss, \
fixed delay, jitter, cuts) and print what the streams experienced: delivered, delivered within the \
delay budget, delay percentiles, recovery counters. Deterministic: the same file and seed give the \
same figures.\n\nExample file:\n\n  [settings]\n  seed = 7\n  nack_rounds = 1        # 1 = one NACK \
as Spines; 0 = ask while the budget allows\n  budget_ms = 100\n  metric = \"expected-latency\"  # or hops, \
latency, loss\n\n  [[links]]\n  a = 1\n  b = 2\n  delay_ms = 10\n  loss_pct = 5\n  burst = 0.5   \
# P(loss | previous lost)\n\n  [[streams]]\n  from = 1\n  to = 2\n  packets = 10000\n  count = 10  \
# parallel streams, 50 packets/s each\n\n  [[cuts]]\n  a = 1\n  b = 2\n  at_ms = 3000"
    )]
    Simulate {
        /// Topology file (TOML).
        file: PathBuf,
        /// Override the seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override the NACK rounds (1 = one attempt, 0 = while the budget allows).
        #[arg(long)]
        nack_rounds: Option<u8>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: RelayCommand) -> Result<()> {
    match cmd {
        RelayCommand::Simulate {
            file,
            seed,
            nack_rounds,
            json,
        } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let mut topo: sim::Topology = toml::from_str(&text)
                .with_context(|| format!("{}: not a topology", file.display()))?;
            if let Some(s) = seed {
                topo.settings.seed = s;
            }
            if let Some(r) = nack_rounds {
                topo.settings.nack_rounds = r;
            }
            let r = sim::run(&topo)?;
            let lost = r.sent - r.delivered;
            let mut out = String::new();
            use std::fmt::Write as _;
            if json {
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
                    "counters": r.counters,
                });
                writeln!(out, "{v}")?;
            } else {
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
                if !topo.cuts.is_empty() {
                    writeln!(
                        out,
                        "cut          longest gap in delivery after the cut {:.1} ms; {} route changes",
                        r.longest_gap_after_cut_ns as f64 / 1e6,
                        c.route_changes
                    )?;
                }
            }
            write_stdout(&out)
        }
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn write_stdout(s: &str) -> Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(s.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
