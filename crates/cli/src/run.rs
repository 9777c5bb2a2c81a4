//! What `analyze` and `probe` share once packets arrive: the outputs (text
//! or JSON lines, SQLite, the trackers' results and the event log).

use crate::options::{Format, OutputArgs};
use crate::summary;
use crate::writer::{Batch, Finish, Sinks, Writer};
use anyhow::{Context, Result};
use calliper_engine::{Analyzer, Counters, Record, TrackerHub};
use calliper_store::{JsonLines, Sqlite};
pub use calliper_trackers::Dropped;
use calliper_trackers::{HepOut, HepTarget, TrackerSet, TrackerSetConfig};
use std::io::{self, BufWriter, Write};
use std::sync::atomic::Ordering;

/// Everything results are written to (through the [`Writer`] thread), and
/// the trackers that produce some.
pub struct Outputs {
    writer: Writer,
    trackers: TrackerSet,
    /// SIP messages sent as HEP to a collector (`--hep`).
    hep: Option<HepOut>,
    /// Trackers that write nothing here (the console's live calls).
    others: Vec<Box<dyn calliper_engine::Tracker>>,
    /// Call records handed to the writer so far.
    pub calls_written: u64,
    /// What the ClickHouse sink delivered, spooled and lost (`--clickhouse`).
    pub clickhouse: Option<calliper_store::clickhouse::Delivery>,
}

impl Outputs {
    /// Opens the outputs `o` asks for (creating files 0600); `append` adds
    /// to an existing --output file instead of replacing it; `lossy` drops
    /// (and counts) what the writer cannot take instead of waiting.
    pub fn open(o: &OutputArgs, append: bool, lossy: bool) -> Result<Outputs> {
        let open =
            if append { calliper_store::append_private } else { calliper_store::create_private };
        let out: Box<dyn Write + Send> = match &o.output {
            Some(p) if p.as_os_str() != "-" => Box::new(BufWriter::new(
                open(p).with_context(|| format!("cannot create {}", p.display()))?,
            )),
            _ => Box::new(BufWriter::new(io::stdout())),
        };
        let mut sinks = Sinks { sinks: Vec::new(), text: None };
        match o.format {
            Format::Jsonl => sinks.sinks.push(Box::new(JsonLines::new(out))),
            // A probe (which appends) runs for ever: its orphans go at once.
            Format::Text => sinks.text = Some(summary::TextReport::new(out, !append)),
        }
        if let Some(db) = &o.db {
            sinks.sinks.push(Box::new(
                Sqlite::open(db)
                    .with_context(|| format!("cannot open database {}", db.display()))?,
            ));
        }
        if let Some(dir) = &o.db_dir {
            let retention = calliper_store::Retention {
                keep_days: o.keep_days,
                max_bytes: o.max_db_mib.map(|m| m.saturating_mul(1 << 20)),
            };
            sinks
                .sinks
                .push(Box::new(calliper_store::Daily::open(dir, retention).with_context(
                    || format!("cannot use database directory {}", dir.display()),
                )?));
        }
        // A probe's lines are logfmt, as its own; analyze says it plainly.
        let say: Box<dyn Fn(&str) + Send + Sync> = if lossy {
            Box::new(|m: &str| {
                eprintln!(
                    "calliper probe: time={} event=clickhouse message={m:?}",
                    calliper_store::rfc3339(
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_nanos() as i64)
                    )
                )
            })
        } else {
            Box::new(|m: &str| eprintln!("calliper: {m}"))
        };
        let clickhouse = o.clickhouse.sink(lossy, say)?;
        let delivery = clickhouse.as_ref().map(|c| c.delivery());
        if let Some(ch) = clickhouse {
            sinks.sinks.push(Box::new(ch));
        }
        let hep = match o.hep {
            Some((transport, addr)) => Some(
                HepOut::start(hep_target(o, transport, addr)?)
                    .with_context(|| format!("cannot send HEP to {addr}"))?,
            ),
            None => None,
        };
        Ok(Outputs {
            hep,
            writer: Writer::start(sinks, lossy),
            trackers: TrackerSet::new(&TrackerSetConfig {
                events: o.events.as_ref().map_or(Vec::new(), |k| k.0.clone()),
                kpi: o.kpi.config(),
                alerts: o.alerts.config(&o.kpi.trunks),
                // SIP messages and interval reports, when a database keeps them.
                call_detail: (o.db.is_some()
                    || o.db_dir.is_some()
                    || o.clickhouse.clickhouse.is_some())
                    && !o.no_call_detail,
            }),
            others: Vec::new(),
            calls_written: 0,
            clickhouse: delivery,
        })
    }

    /// The trackers, for the analyser: the run's [`TrackerSet`], the HEP
    /// sender's and those added.
    pub fn hub(&mut self) -> TrackerHub {
        let mut trackers = self.trackers.trackers();
        if let Some(h) = &self.hep {
            trackers.push(h.tracker());
        }
        trackers.append(&mut self.others);
        std::sync::Arc::new(std::sync::Mutex::new(trackers))
    }

    /// Adds a tracker that keeps its results itself (attached by [`Self::hub`]).
    pub fn add_tracker(&mut self, t: Box<dyn calliper_engine::Tracker>) {
        self.others.push(t);
    }

    /// Hands the writer what the analyser and the trackers finished since
    /// last time; `flush` also makes everything written durable.
    pub fn emit(&mut self, engine: &mut Analyzer, flush: bool) -> Result<()> {
        self.emit_records(engine.drain().collect(), flush)
    }

    /// As [`Outputs::emit`], with records already drained.
    pub fn emit_records(&mut self, records: Vec<Record>, flush: bool) -> Result<()> {
        let mut b = Batch { records, flush, ..Batch::default() };
        let calls = b.records.iter().filter(|r| matches!(r, Record::Call(_))).count() as u64;
        let taken = self.trackers.take(false)?;
        (b.tracked, b.lines) = (taken.rows, taken.lines);
        let dropped = self.writer.dropped;
        self.writer.send(b)?;
        if self.writer.dropped == dropped {
            self.calls_written += calls;
        }
        Ok(())
    }

    /// What the outputs and trackers dropped so far, each with its summary
    /// key and why (the summary line and the probe's health page).
    pub fn drops(&self) -> Vec<Dropped> {
        let mut drops = Vec::from(self.hep_drops());
        drops.push(Dropped {
            what: "records and rows",
            key: "output_dropped",
            count: self.writer.dropped,
            why: "the output could not keep up with the capture".into(),
        });
        drops.extend(self.trackers.drops());
        drops.extend(self.clickhouse_drops());
        drops
    }

    /// What the ClickHouse sink lost (`--clickhouse`; docs/scale-out.md).
    fn clickhouse_drops(&self) -> Vec<Dropped> {
        let Some(r) = self.clickhouse.as_ref().map(|d| d.report()) else {
            return Vec::new();
        };
        vec![
            Dropped {
                what: "ClickHouse rows",
                key: "clickhouse_dropped",
                count: r.dropped,
                why: "the spool was full or could not be written, or the run ended with rows held in memory".into(),
            },
            Dropped {
                what: "ClickHouse rows",
                key: "clickhouse_rejected",
                count: r.rejected,
                why: "refused by the server 5 times or by the check of its tables, and set aside: kept as .rejected files in a spool directory, lost without one".into(),
            },
        ]
    }

    /// What the HEP sender (`--hep`) dropped.
    fn hep_drops(&self) -> [Dropped; 4] {
        let hep = |f: fn(&calliper_trackers::HepCounts) -> &std::sync::atomic::AtomicU64| {
            self.hep.as_ref().map_or(0, |h| f(h.counts()).load(Ordering::Relaxed))
        };
        [
            Dropped {
                what: "HEP messages",
                key: "hep_dropped",
                count: hep(|c| &c.dropped),
                why: format!(
                    "the collector could not keep up (more than {} messages or {} MiB waiting), or still waiting {} s after the end",
                    calliper_trackers::MAX_HEP_QUEUED,
                    calliper_trackers::MAX_HEP_QUEUED_BYTES >> 20,
                    calliper_trackers::HEP_FINISH_WITHIN.as_secs()
                ),
            },
            Dropped {
                what: "HEP messages",
                key: "hep_failed",
                count: hep(|c| &c.failed),
                why: format!(
                    "the socket refused them or took over {} s (the collector unreachable or the link too slow)",
                    calliper_trackers::HEP_SEND_TIMEOUT.as_secs()
                ),
            },
            Dropped {
                what: "messages not sent as HEP",
                key: "hep_too_long",
                count: hep(|c| &c.too_long),
                why: "over HEP's 64 KiB with their chunks".into(),
            },
            Dropped {
                what: "interval quality reports not sent as HEP",
                key: "hep_uncorrelated",
                count: hep(|c| &c.uncorrelated),
                why: format!(
                    "their call's Call-ID was not kept (more than {} calls open)",
                    calliper_trackers::MAX_HEP_CALLS
                ),
            },
        ]
    }

    /// Waits for what was handed over to be written, without a summary
    /// (the analysis failed); what the trackers still hold (the alerts
    /// still waiting for their place among the records judged now) is
    /// written first.
    pub fn close(mut self) -> Result<()> {
        if let Some(h) = &mut self.hep {
            h.finish();
        }
        self.writer.send(self.trackers.take(true)?.into())?;
        self.writer.close()
    }

    /// Writes the users, the run's summary (counters, rules' hits, `extra`
    /// fields) and waits for the writer to finish.
    pub fn finish(
        mut self,
        counters: &Counters,
        rules: Option<&calliper_rules::Rules>,
        input: &str,
        extra: serde_json::Map<String, serde_json::Value>,
    ) -> Result<()> {
        // What the trackers still hold (the alerts still waiting are judged
        // now) is taken before the drops are counted, and goes before the end.
        let taken = self.trackers.take(true)?;
        if let Some(h) = &mut self.hep {
            h.finish();
        }
        let mut summary = summary::counters_json(counters);
        let rule_list = rules.map(|r| r.list()).unwrap_or_default();
        let mut fields = extra;
        if rules.is_some() {
            fields.insert("rules".into(), serde_json::to_value(&rule_list)?);
        }
        for d in self.drops() {
            if d.count > 0 {
                eprintln!("calliper: warning: {} {} dropped ({})", d.count, d.what, d.why);
                fields.insert(d.key.into(), d.count.into());
            }
        }
        if let Some(h) = &self.hep {
            fields.insert("hep_sent".into(), h.counts().sent.load(Ordering::Relaxed).into());
        }
        let late = self.trackers.late_stream_intervals();
        if late > 0 {
            fields.insert("late_stream_intervals".into(), late.into());
        }
        if let serde_json::Value::Object(o) = &mut summary {
            o.extend(fields);
        }
        self.writer.finish(Finish {
            last: taken.into(),
            input: input.to_string(),
            summary,
            counters: counters.clone(),
            rules: rule_list,
            users: self.trackers.users(),
            kpis: self.trackers.kpi_run_total(),
        })
    }
}

/// The collector and what each message carries, from the options.
fn hep_target(
    o: &OutputArgs,
    transport: calliper_wire::hep::HepTransport,
    addr: std::net::SocketAddr,
) -> Result<HepTarget> {
    let auth_key = match &o.hep_key {
        Some(path) => Some(read_hep_key(path)?),
        None => None,
    };
    Ok(HepTarget { transport, addr, capture_id: o.hep_id, auth_key })
}

/// Longest HEP key taken (Homer's are a few dozen bytes).
const MAX_HEP_KEY: usize = 256;

/// The first line of a HEP key file: a regular file (not a FIFO, a device
/// or a link), read up to a bound; a warning when others may read it.
pub(crate) fn read_hep_key(path: &std::path::Path) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    let meta = std::fs::symlink_metadata(path)
        .with_context(|| format!("cannot read the HEP key file {shown}"))?;
    anyhow::ensure!(
        meta.file_type().is_file(),
        "{shown}: the HEP key file must be a regular file (not a link, a FIFO or a device)"
    );
    if meta.permissions().mode() & 0o077 != 0 {
        eprintln!("calliper: warning: {shown}: others may read the HEP key (chmod 600 it)");
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(4096).read_to_string(&mut text))
        .with_context(|| format!("cannot read the HEP key file {shown}"))?;
    let key = text.lines().next().unwrap_or("").trim().as_bytes().to_vec();
    anyhow::ensure!(!key.is_empty(), "{shown}: the HEP key file's first line is empty");
    anyhow::ensure!(
        key.len() <= MAX_HEP_KEY,
        "{shown}: a HEP key of {} bytes; at most {MAX_HEP_KEY}",
        key.len()
    );
    Ok(key)
}
