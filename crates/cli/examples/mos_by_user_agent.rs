//! An example tracker: calls and mean MOS per caller User-Agent, built on
//! the engine's events without touching the engine.
//!
//! `cargo run --release --example mos_by_user_agent -- capture.pcap`

use calliper_capture::CaptureReader;
use calliper_engine::{Engine, Event, MosScale, RawPacket, Tracker, TrackerHub};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// User-Agent → (calls, streams with a MOS, sum of those MOS).
type Table = BTreeMap<String, (u64, u64, f64)>;

/// Calls and the sum of their streams' MOS, per caller User-Agent.
#[derive(Clone, Default)]
pub struct MosByUserAgent {
    table: Arc<Mutex<Table>>,
}

/// Most User-Agents kept (the rest are counted under one key).
const MAX_AGENTS: usize = 1000;

impl Tracker for MosByUserAgent {
    fn event(&mut self, event: &Event<'_>) {
        let Event::CallRecord(c) = event else {
            return;
        };
        let mut t = self.table.lock().unwrap();
        let mut ua = c.caller_user_agent.clone().unwrap_or_else(|| "(none)".into());
        if !t.contains_key(&ua) && t.len() >= MAX_AGENTS {
            ua = "(other)".into();
        }
        let row = t.entry(ua).or_default();
        row.0 += 1;
        let narrowband =
            |s: &&calliper_engine::StreamRecord| s.mos_scale == Some(MosScale::Narrowband);
        for mos in c.streams.iter().filter(narrowband).filter_map(|s| s.mos) {
            row.1 += 1;
            row.2 += mos;
        }
    }
}

impl MosByUserAgent {
    /// (User-Agent, calls, mean MOS over their streams).
    pub fn rows(&self) -> Vec<(String, u64, Option<f64>)> {
        let t = self.table.lock().unwrap();
        t.iter()
            .map(|(ua, &(calls, n, sum))| (ua.clone(), calls, (n > 0).then(|| sum / n as f64)))
            .collect()
    }
}

/// Analyses `files` with the tracker attached and returns its rows.
pub fn run(files: &[std::path::PathBuf]) -> anyhow::Result<Vec<(String, u64, Option<f64>)>> {
    let tracker = MosByUserAgent::default();
    let hub: TrackerHub = Arc::new(Mutex::new(vec![Box::new(tracker.clone())]));
    let mut engine = Engine::new(calliper_engine::Config::default());
    engine.set_trackers(hub, true, true);
    for f in files {
        let mut reader = CaptureReader::new(std::fs::File::open(f)?)?;
        while let Some(p) = reader.next_packet()? {
            engine.packets(&[RawPacket::from(p)]);
        }
    }
    engine.finish();
    engine.drain().for_each(drop);
    Ok(tracker.rows())
}

#[allow(dead_code)] // built as an example; the tests use `run`
fn main() -> anyhow::Result<()> {
    let files: Vec<std::path::PathBuf> = std::env::args_os().skip(1).map(Into::into).collect();
    if files.is_empty() {
        anyhow::bail!("usage: mos_by_user_agent CAPTURE...");
    }
    println!("{:<50} {:>6} {:>8}", "caller user agent", "calls", "mean MOS");
    for (ua, calls, mos) in run(&files)? {
        let mos = mos.map_or("-".into(), |m| format!("{m:.2}"));
        println!("{ua:<50} {calls:>6} {mos:>8}");
    }
    Ok(())
}
