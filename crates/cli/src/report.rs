//! `calliper report`: figures read back from a database written with --db.

use anyhow::{bail, Context, Result};
use calliper_store::KpiSum;
use calliper_trackers::{Dimension, KpiCounts, OTHER};
use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum ReportCommand {
    /// Service KPIs per interval: ASR, NER (E.411), SER, SEER, ISA, SCR,
    /// SRD, SDD, SDT, IRA, RRD (RFC 6076).
    #[command(
        long_about = "Service KPIs per interval and key, summed from the KPI rows `analyze` or `probe` \
stored with --db: ASR and NER (ITU-T E.411), and RFC 6076's session establishment ratio (SER), \
effectiveness ratio (SEER), ineffective attempts (ISA), completion ratio (SCR), request delay (SRD, \
successful and failed), disconnect delay (SDD), duration (SDT), ineffective registrations (IRA) and \
registration delay (RRD). Ratios are percentages of the attempts with a known outcome; a call counts \
in the interval of its INVITE. Definitions and choices: docs/kpi.md.",
        after_help = "Examples:\n  calliper report kpi --db calls.db\n  calliper report kpi --db calls.db --by trunk --interval 15m --top 5\n  calliper report kpi --db calls.db --by agent --interval 1d --format jsonl"
    )]
    Kpi(KpiReportArgs),
}

/// The dimension a report is broken down by.
#[derive(Clone, Copy, ValueEnum, Debug)]
pub enum By {
    /// Everything together.
    Total,
    /// Named trunks (--trunk), else signalling address pairs.
    Trunk,
    /// The caller's domain (From host; a REGISTER's AOR host).
    Domain,
    /// The callee's domain (To host).
    CalleeDomain,
    /// The caller's User-Agent.
    Agent,
}

impl By {
    fn dimension(self) -> Dimension {
        match self {
            By::Total => Dimension::Total,
            By::Trunk => Dimension::Trunk,
            By::Domain => Dimension::CallerDomain,
            By::CalleeDomain => Dimension::CalleeDomain,
            By::Agent => Dimension::UserAgent,
        }
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub enum ReportFormat {
    /// A table per interval.
    Text,
    /// One JSON object per interval and key: the counters and the figures.
    Jsonl,
}

#[derive(Args)]
pub struct KpiReportArgs {
    /// The database written with --db.
    #[arg(long, value_name = "FILE")]
    db: PathBuf,
    /// Break the figures down by this dimension.
    #[arg(long, value_enum, default_value = "total")]
    by: By,
    /// Interval to sum into: a number of seconds, or with a unit (90s, 15m,
    /// 1h, 1d); a multiple of the stored KPI interval (--kpi-interval).
    #[arg(long, default_value = "1h", value_parser = duration_ns)]
    interval: i64,
    /// Keys shown per interval, the busiest first; the rest are summed as `other`.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    top: u32,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    format: ReportFormat,
}

/// Parses `90`, `90s`, `15m`, `1h`, `1d` as ns.
fn duration_ns(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("`{s}`: the unit must be s, m, h or d")),
    };
    match num.parse::<i64>() {
        Ok(n) if n > 0 && n <= 366 * 86400 / scale => Ok(n * scale * 1_000_000_000),
        _ => Err(format!("`{s}` is not a whole number of {unit} between 1 and a year")),
    }
}

pub fn run(cmd: ReportCommand) -> Result<()> {
    let ReportCommand::Kpi(a) = cmd;
    if !a.db.exists() {
        bail!(
            "{} does not exist (write one with `calliper analyze CAPTURE --db FILE`)",
            a.db.display()
        );
    }
    let conn = calliper_store::open_read_only(&a.db)
        .with_context(|| format!("cannot open {}", a.db.display()))?;
    let stored = calliper_store::kpi_intervals(&conn).map_err(|e| {
        if e.to_string().contains("no such table") {
            anyhow::anyhow!(
                "{} has no KPI table: it was written by an older calliper or is not a calliper database",
                a.db.display()
            )
        } else {
            anyhow::anyhow!("cannot read {}: {e}", a.db.display())
        }
    })?;
    if stored.is_empty() {
        bail!("{} holds no KPI rows (no calls or registrations were stored)", a.db.display());
    }
    for s in &stored {
        let ns = (s * 1e9).round() as i64;
        if ns <= 0 || a.interval % ns != 0 {
            bail!(
                "the report's interval ({} s; --interval, an hour by default) is not a multiple of the stored KPI interval ({s} s): give --interval as a multiple of it",
                a.interval / 1_000_000_000
            );
        }
    }
    let sums = calliper_store::kpi_sums(&conn, a.by.dimension().name(), a.interval)?;
    let mut out = std::io::stdout().lock();
    for chunk in sums.chunk_by(|x, y| x.start_ns == y.start_ns) {
        let rows = top(chunk, a.top as usize);
        match a.format {
            ReportFormat::Jsonl => jsonl(&mut out, &a, &rows)?,
            ReportFormat::Text => table(&mut out, &a, &rows)?,
        }
    }
    if matches!(a.format, ReportFormat::Text) && !sums.is_empty() {
        writeln!(out, "{}", calliper_model::kpi::LEGEND)?;
    }
    out.flush()?;
    Ok(())
}

/// The `n` busiest keys (attempts, then registrations), the rest summed as `other`.
fn top(rows: &[KpiSum], n: usize) -> Vec<KpiSum> {
    use calliper_trackers::Counter::{Attempts, Registrations};
    let mut rows = rows.to_vec();
    rows.sort_by_key(|r| {
        (
            r.key == OTHER,
            std::cmp::Reverse((r.counts.get(Attempts), r.counts.get(Registrations))),
            r.key.clone(),
        )
    });
    if rows.len() > n {
        let rest = rows.split_off(n);
        let mut other =
            KpiSum { start_ns: rows[0].start_ns, key: OTHER.into(), counts: KpiCounts::default() };
        for r in &rest {
            other.counts.add(&r.counts);
        }
        rows.push(other);
    }
    rows
}

fn jsonl(out: &mut impl Write, a: &KpiReportArgs, rows: &[KpiSum]) -> Result<()> {
    for r in rows {
        let mut m = serde_json::Map::new();
        m.insert("start".into(), calliper_store::rfc3339(r.start_ns).into());
        m.insert("start_ns".into(), r.start_ns.into());
        m.insert("interval_s".into(), (a.interval / 1_000_000_000).into());
        m.insert("dimension".into(), a.by.dimension().name().into());
        m.insert("key".into(), r.key.clone().into());
        for (name, v) in calliper_trackers::COUNTER_NAMES.iter().zip(r.counts.0) {
            m.insert((*name).into(), v.into());
        }
        if let serde_json::Value::Object(f) = serde_json::to_value(r.counts.figures())? {
            m.extend(f);
        }
        serde_json::to_writer(&mut *out, &m)?;
        writeln!(out)?;
    }
    Ok(())
}

fn table(out: &mut impl Write, a: &KpiReportArgs, rows: &[KpiSum]) -> Result<()> {
    use calliper_model::kpi::Figure;
    use calliper_trackers::Counter::*;
    let Some(first) = rows.first() else {
        return Ok(());
    };
    let start = calliper_store::rfc3339(first.start_ns);
    writeln!(out, "{} + {}", &start[..16.min(start.len())].replace('T', " "), human(a.interval))?;
    writeln!(
        out,
        "  {:<28} {:>8} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>7} {:>7} {:>6} {:>6} {:>7}",
        a.by.dimension().name(),
        "attempts",
        "ASR%",
        "NER%",
        "SER%",
        "SEER%",
        "ISA%",
        "SCR%",
        "SRD ms",
        "fSRD ms",
        "SDD ms",
        "SDT s",
        "REG",
        "IRA%",
        "RRD ms"
    )?;
    let f = |v: Option<f64>, w: usize, p: usize| {
        v.map_or(format!("{:>w$}", "-"), |v| format!("{v:>w$.p$}"))
    };
    for r in rows {
        let k = r.counts.figures();
        let mut key = crate::summary::printable(&r.key).into_owned();
        if key.chars().count() > 28 {
            key = key.chars().take(27).collect::<String>() + "…";
        }
        writeln!(
            out,
            "  {:<28} {:>8} {} {} {} {} {} {} {} {} {} {} {:>6} {} {}",
            key,
            r.counts.get(Attempts),
            f(k.get(Figure::Asr), 6, 1),
            f(k.get(Figure::Ner), 6, 1),
            f(k.get(Figure::Ser), 6, 1),
            f(k.get(Figure::Seer), 6, 1),
            f(k.get(Figure::Isa), 6, 1),
            f(k.get(Figure::Scr), 6, 1),
            f(k.get(Figure::SrdMs), 8, 1),
            f(k.get(Figure::FailedSrdMs), 8, 1),
            f(k.get(Figure::SddMs), 7, 1),
            f(k.get(Figure::SdtS), 7, 1),
            r.counts.get(Registrations),
            f(k.get(Figure::Ira), 6, 1),
            f(k.get(Figure::RrdMs), 7, 1),
        )?;
    }
    Ok(())
}

fn human(ns: i64) -> String {
    let s = ns / 1_000_000_000;
    match s {
        s if s % 86400 == 0 => format!("{}d", s / 86400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::duration_ns;

    #[test]
    fn durations_take_units_and_refuse_nonsense() {
        let second = 1_000_000_000;
        for (text, ns) in [
            ("90", 90 * second),
            ("15m", 900 * second),
            ("1h", 3600 * second),
            ("1d", 86_400 * second),
        ] {
            assert_eq!(duration_ns(text), Ok(ns), "{text}");
        }
        for bad in ["0", "-1h", "1w", "h", "1.5h", "400d"] {
            assert!(duration_ns(bad).is_err(), "{bad}");
        }
    }
}
