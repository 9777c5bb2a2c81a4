//! The probe once started: what it hands the analyser, and what it tells
//! the outputs, the console's health page and the log as it goes.

use super::{drops, log, realtime_ns, ProbeArgs, Source};
use crate::run::Outputs;
use anyhow::Result;
use calliper_capture::hep_listen::HepListenStats;
use calliper_capture::live::LiveStats;
use calliper_capture::Packet;
use calliper_console::{LiveCalls, ProbeHealth};
use calliper_engine::workers::WorkerFailed;
use calliper_engine::Analyzer;
use calliper_engine::EMIT_EVERY;

/// What the probe's console shows of it: its health, published, and its
/// live calls, whose clock the probe moves on a quiet link.
pub(super) struct Console {
    pub health: ProbeHealth,
    pub live: LiveCalls,
}

/// The analyser, its outputs and the counts the probe reports.
pub(super) struct Running {
    pub engine: Analyzer,
    pub outputs: Outputs,
    /// The console, when it runs.
    pub console: Option<Console>,
    /// The interfaces or files read, for the log and the summary.
    pub input: String,
    pub started_ns: i64,
    pub packets: u64,
    since_emit: u64,
    /// The analysis itself failed (a bug): nothing more is analysed.
    pub failure: Option<WorkerFailed>,
    /// The capture's latest counts (live).
    pub stats: Option<LiveStats>,
    /// The HEP collector's counts at the end (`--hep-listen`), and the
    /// ring's packets to its port left out.
    pub hep: Option<(calliper_capture::hep_listen::HepListenStats, u64)>,
}

impl Running {
    pub fn new(
        engine: Analyzer,
        outputs: Outputs,
        console: Option<Console>,
        input: String,
    ) -> Self {
        Running {
            engine,
            outputs,
            console,
            input,
            started_ns: realtime_ns(),
            packets: 0,
            since_emit: 0,
            failure: None,
            stats: None,
            hep: None,
        }
    }

    /// Analyses what the source read, however many packets it gives at once.
    pub fn packets(&mut self, b: &[Packet<'_>]) {
        if self.failure.is_some() {
            return;
        }
        self.packets += b.len() as u64;
        self.since_emit += b.len() as u64;
        if let Err(f) = self.engine.captured(b.iter().copied()) {
            self.failure = Some(f);
        }
    }

    /// Writes what the analysis finished, every [`EMIT_EVERY`] packets.
    pub fn emit_when_due(&mut self) -> Result<()> {
        if self.since_emit >= EMIT_EVERY {
            self.since_emit = 0;
            self.outputs.emit(&mut self.engine, false)?;
        }
        Ok(())
    }

    /// Once a second: the capture's counts, idle time passing (live, up to
    /// `lag_ns` behind the clock), durable outputs and the health page.
    pub fn each_second(&mut self, source: &mut Source, a: &ProbeArgs, lag_ns: i64) -> Result<()> {
        if let Some(s) = source.stats()? {
            self.stats = Some(s);
            self.engine.set_capture_dropped(s.dropped);
        }
        if source.is_live() {
            let now_ns = realtime_ns() - lag_ns;
            if let Err(f) = self.engine.tick(now_ns) {
                self.failure = Some(f);
                return Ok(());
            }
            // Ended calls leave the live page on time with no traffic.
            if let Some(c) = &self.console {
                c.live.tick(now_ns);
            }
        }
        self.outputs.emit(&mut self.engine, true)?;
        self.publish_health(a, source.hep_stats());
        Ok(())
    }

    /// The health page's report; the HEP collector's refusals join the
    /// outputs' drops (`calliper_probe_dropped_total` in /metrics).
    fn publish_health(&mut self, a: &ProbeArgs, hep: Option<(HepListenStats, u64)>) {
        let Some(Console { health: h, .. }) = &self.console else {
            return;
        };
        h.publish(calliper_console::HealthReport {
            started_ns: self.started_ns,
            updated_ns: realtime_ns(),
            input: self.input.clone(),
            interfaces: a.interfaces.clone(),
            threads: a.engine.threads.into(),
            packets: self.packets,
            capture: self.stats.map(|s| calliper_console::RingCounts {
                received: s.received,
                dropped: s.dropped,
                ring_full: s.ring_full,
            }),
            calls_open: self.engine.active_calls().map(|n| n as u64),
            calls_written: self.outputs.calls_written,
            dropped: self
                .outputs
                .drops()
                .iter()
                .map(|d| (d.key, d.count))
                .chain(hep.iter().flat_map(|(h, _)| {
                    [
                        ("hep_listen_dropped", h.dropped),
                        ("hep_listen_unauthenticated", h.unauthenticated),
                        ("hep_listen_malformed", h.malformed),
                        ("hep_listen_too_long", h.too_long),
                        ("hep_listen_connections_refused", h.connections_refused),
                        ("hep_listen_connections_timed_out", h.connections_timed_out),
                    ]
                }))
                .collect(),
            engine: crate::summary::counters_json(&self.engine.counters_so_far()),
            clickhouse: self.outputs.clickhouse.as_ref().map(|d| d.report()),
        });
    }

    /// The `--status-every` log line.
    pub fn log_status(&self) {
        log(&format!(
            "event=status packets={} calls_open={} calls_written={}{}",
            self.packets,
            self.engine.active_calls().map_or("-".into(), |n| n.to_string()),
            self.outputs.calls_written,
            drops(self.stats)
        ));
    }
}
