//! The engine's in-process probe, after quinn-proto's `tests/util.rs`:
//! frames or capture files in; records (and the JSON lines `analyze
//! --format jsonl` writes for them), event lines and counters out. No child
//! process: one engine, or shards, exactly as `analyze` runs them.

use calliper_capture::files::Inputs;
use calliper_engine::{Analyzer, CallRecord, Config, Counters, RawPacket, Record};
use calliper_store::{JsonLines, Sink};
use calliper_trackers::{EventKind, EventLog};
use serde_json::Value;
use std::net::SocketAddrV4;
use std::path::Path;

/// An analysis fed in process.
pub struct Probe {
    analyzer: Analyzer,
    events: EventLog,
    records: Vec<Record>,
}

/// What an analysis gave.
pub struct Outcome {
    /// Calls and streams without a call, in the order they were finished.
    pub records: Vec<Record>,
    /// The run's counters.
    pub counters: Counters,
    /// The event log (every kind), a JSON value a line.
    pub events: Vec<Value>,
}

impl Probe {
    /// One engine (`threads` 1) or shards, with every event logged.
    pub fn new(cfg: Config, threads: usize) -> Probe {
        let events = EventLog::new(&EventKind::ALL);
        let hub = std::sync::Arc::new(std::sync::Mutex::new(vec![
            Box::new(events.clone()) as Box<dyn calliper_engine::Tracker>
        ]));
        Probe {
            analyzer: Analyzer::new(cfg, threads, hub),
            events,
            records: Vec::new(),
        }
    }

    /// One frame of `link_type` captured at `ts_ns`, as a batch of its own
    /// (the engine judges capture times by batch: `analyze` reads 64 at a
    /// time; [`Probe::capture`] reads as it does).
    pub fn frame(&mut self, ts_ns: i64, link_type: u16, data: &[u8]) {
        let mut p = [RawPacket {
            ts_ns,
            link_type,
            data,
            ..RawPacket::default()
        }];
        self.analyzer.packets(&mut p).expect("the analysis failed");
        self.records.extend(self.analyzer.drain());
    }

    /// A UDP datagram over IPv4 (a raw IP frame) from `src` to `dst`.
    pub fn udp(&mut self, ts_ns: i64, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) {
        use calliper_wire::{emit, ipproto, linktype};
        let packet = emit::Ipv4 {
            id: 1,
            frag: 0x4000,
            ..emit::Ipv4::new(*src.ip(), *dst.ip(), ipproto::UDP)
        }
        .emit(&emit::udp(src.port(), dst.port(), payload));
        self.frame(ts_ns, linktype::RAW, &packet);
    }

    /// Every packet of a capture file, read as `analyze` reads it.
    pub fn capture(&mut self, path: &Path) {
        let mut inputs = Inputs::open(&[path.to_path_buf()])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut say = |m: &str| eprintln!("{m}");
        while let Some(b) = inputs.next_batch(calliper_engine::READ_BATCH, &mut say) {
            self.analyzer
                .captured(b.iter())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            self.records.extend(self.analyzer.drain());
        }
    }

    /// Ends the input: open calls are finished as they stand.
    pub fn finish(mut self) -> Outcome {
        self.analyzer.finish().expect("the analysis failed");
        self.records.extend(self.analyzer.drain());
        assert_eq!(self.events.dropped(), 0, "the event log dropped events");
        let events = self.events.take();
        Outcome {
            records: self.records,
            counters: self.analyzer.counters().clone(),
            events: json_lines(&events),
        }
    }
}

impl Outcome {
    /// The call records.
    pub fn calls(&self) -> impl Iterator<Item = &CallRecord> {
        self.records.iter().filter_map(|r| match r {
            Record::Call(c) => Some(&**c),
            Record::Stream(_) => None,
        })
    }

    /// The summary line `analyze --format jsonl` ends with: the counters
    /// (without the fields only the command adds: input, rules, drops).
    pub fn summary(&self) -> Value {
        let mut v = serde_json::to_value(&self.counters).expect("counters serialise");
        if let Value::Object(o) = &mut v {
            o.insert("type".into(), "summary".into());
        }
        v
    }

    /// What `analyze --format jsonl` writes, a value a line: the records,
    /// then the summary.
    pub fn lines(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut sink = JsonLines::new(&mut out);
        for r in &self.records {
            sink.write(r).expect("a record that does not serialise");
        }
        drop(sink);
        let mut lines = json_lines(&out);
        lines.push(self.summary());
        lines
    }
}

/// The analysis of one capture file with the default configuration, one
/// engine, as `analyze FILE` runs it.
pub fn analyze(path: &Path) -> Outcome {
    let mut p = Probe::new(Config::default(), 1);
    p.capture(path);
    p.finish()
}

fn json_lines(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("a line that is not JSON"))
        .collect()
}
