//! The engine's in-process probe, after quinn-proto's `tests/util.rs`:
//! frames or capture files in; records, the trackers' rows (KPIs, traffic,
//! registrations, alerts, users), event lines and counters out, and the
//! JSON lines `analyze --format jsonl` writes for them. No child process:
//! one engine, or shards, and the trackers, exactly as `analyze` runs them.

use calliper_capture::files::Inputs;
use calliper_engine::{
    Analyzer, CallRecord, Config, Counters, RawPacket, Record, EMIT_EVERY, FINISH_GROUP,
};
use calliper_store::{JsonLines, Sink};
use calliper_trackers::{EventKind, TrackerSet, TrackerSetConfig};
use serde_json::Value;
use std::net::SocketAddrV4;
use std::path::Path;

/// An analysis fed in process.
pub struct Probe {
    analyzer: Option<Analyzer>,
    trackers: TrackerSet,
    records: Vec<Record>,
    rows: Vec<(&'static str, Value)>,
    events: Vec<u8>,
    /// Packets fed so far: what is finished is taken every
    /// [`EMIT_EVERY`] of them, as the command takes it.
    packets: u64,
    /// The configuration and threads: the analyser starts with the first
    /// input, so that shards can read a capture file themselves.
    cfg: Config,
    threads: usize,
    /// Shards are handed the packets even when they could read the file
    /// themselves (as live rings and pipes feed them).
    pushed: bool,
}

/// What an analysis gave.
pub struct Outcome {
    /// Calls and streams without a call, in the order they were finished.
    pub records: Vec<Record>,
    /// The run's counters.
    pub counters: Counters,
    /// The event log (every kind), a JSON value a line.
    pub events: Vec<Value>,
    /// The trackers' rows by line type (`kpi`, `traffic`, `registration`,
    /// `alert`, `user`), as the command writes them.
    pub rows: Vec<(&'static str, Value)>,
    /// The summary's fields from the trackers: `late_stream_intervals` and
    /// what they dropped (only when not 0, as the command writes them).
    pub tracker_fields: serde_json::Map<String, Value>,
}

impl Probe {
    /// One engine (`threads` 1) or shards, with the trackers `analyze`
    /// runs by default and every event logged.
    pub fn new(cfg: Config, threads: usize) -> Probe {
        let trackers = TrackerSet::new(&TrackerSetConfig {
            events: EventKind::ALL.to_vec(),
            ..TrackerSetConfig::default()
        });
        Probe {
            cfg,
            threads,
            pushed: false,
            analyzer: None,
            trackers,
            records: Vec::new(),
            rows: Vec::new(),
            events: Vec::new(),
            packets: 0,
        }
    }

    /// Counts `n` packets fed, and takes what is finished when they cross
    /// a multiple of [`EMIT_EVERY`].
    fn fed(&mut self, n: usize) {
        let before = self.packets;
        self.packets += n as u64;
        if self.packets / EMIT_EVERY != before / EMIT_EVERY {
            self.take(false);
        }
    }

    /// As [`Probe::new`], with shards handed every packet by the caller's
    /// thread, as live rings and pipes feed them, even from a file.
    pub fn pushed(cfg: Config, threads: usize) -> Probe {
        Probe { pushed: true, ..Probe::new(cfg, threads) }
    }

    /// The trackers, as the analysis delivers to them.
    fn hub(&self) -> calliper_engine::TrackerHub {
        std::sync::Arc::new(std::sync::Mutex::new(self.trackers.trackers()))
    }

    /// The analyser, started (handed packets) if it was not yet.
    fn analyzer(&mut self) -> &mut Analyzer {
        if self.analyzer.is_none() {
            let (cfg, hub) = (self.cfg.clone(), self.hub());
            self.analyzer = Some(Analyzer::new(cfg, self.threads, hub));
        }
        self.analyzer.as_mut().expect("started above")
    }

    /// Takes what the analysis and the trackers finished.
    fn take(&mut self, end: bool) {
        let records: Vec<Record> = self.analyzer().drain().collect();
        self.records.extend(records);
        take_rows(&self.trackers, end, &mut self.rows, &mut self.events);
    }

    /// One frame of `link_type` captured at `ts_ns`, as a batch of its own
    /// (the engine judges capture times by batch: `analyze` reads 64 at a
    /// time; [`Probe::capture`] reads as it does).
    pub fn frame(&mut self, ts_ns: i64, link_type: u16, data: &[u8]) {
        let mut p = [RawPacket { ts_ns, link_type, data, ..RawPacket::default() }];
        self.analyzer().packets(&mut p).expect("the analysis failed");
        self.fed(1);
    }

    /// Frames of `link_type` as `analyze` reads a capture of them: in
    /// batches of [`calliper_engine::READ_BATCH`], each batch's capture
    /// times judged together. (The file reader also ends a batch where its
    /// 1 MiB buffer ends: past 1 MiB of capture, use [`Probe::capture`]
    /// when batch edges matter.)
    pub fn frames(&mut self, link_type: u16, frames: &[(i64, Vec<u8>)]) {
        for chunk in frames.chunks(calliper_engine::READ_BATCH) {
            let packets = chunk.iter().map(|(ts_ns, data)| calliper_capture::Packet {
                ts_ns: *ts_ns,
                link_type,
                data,
                orig_len: data.len() as u32,
                ..calliper_capture::Packet::EMPTY
            });
            self.analyzer().captured(packets).expect("the analysis failed");
            self.fed(chunk.len());
        }
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

    /// Every packet of a capture file, read as `analyze` reads it (with
    /// shards, each reads the file itself when this is the probe's only
    /// input).
    pub fn capture(&mut self, path: &Path) {
        let mut inputs = Inputs::open(&[path.to_path_buf()])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if self.analyzer.is_none() && !self.pushed {
            let (cfg, hub) = (self.cfg.clone(), self.hub());
            self.analyzer = Some(Analyzer::for_files(cfg, self.threads, hub, &inputs));
        }
        self.analyzer();
        let mut say = |m: &str| eprintln!("{m}");
        let (trackers, records) = (&self.trackers, &mut self.records);
        let (rows, events) = (&mut self.rows, &mut self.events);
        let mut step = |a: &mut Analyzer, _| -> Result<(), ()> {
            records.extend(a.drain());
            take_rows(trackers, false, rows, events);
            Ok(())
        };
        let analyzer = self.analyzer.as_mut().expect("started above");
        let read = analyzer.read_files(&mut inputs, &mut say, &mut step);
        if let Ok(Err((input, e))) = read {
            panic!("{input}: {e}");
        }
    }

    /// Ends the input: open calls are finished as they stand.
    pub fn finish(mut self) -> Outcome {
        // As `analyze` ends: the open calls a group at a time, each group
        // taken, then what is left, then what the trackers still hold.
        self.analyzer();
        let (trackers, records) = (&self.trackers, &mut self.records);
        let (rows, events) = (&mut self.rows, &mut self.events);
        let analyzer = self.analyzer.as_mut().expect("started above");
        analyzer
            .finish_in_groups(FINISH_GROUP, |group| {
                records.extend(group);
                take_rows(trackers, false, rows, events);
            })
            .expect("the analysis failed");
        self.take(false);
        self.take(true);
        let mut tracker_fields = serde_json::Map::new();
        for d in self.trackers.drops() {
            assert!(d.key != "events_dropped" || d.count == 0, "the event log dropped events");
            if d.count > 0 {
                tracker_fields.insert(d.key.into(), d.count.into());
            }
        }
        let late = self.trackers.late_stream_intervals();
        if late > 0 {
            tracker_fields.insert("late_stream_intervals".into(), late.into());
        }
        for u in self.trackers.users().users.values() {
            let v = serde_json::to_value(u).expect("a user that does not serialise");
            self.rows.push(("user", v));
        }
        let counters = self.analyzer().counters().clone();
        Outcome {
            records: self.records,
            counters,
            events: json_lines(&self.events),
            rows: self.rows,
            tracker_fields,
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
    /// and the trackers' fields (without those only the command adds: its
    /// input, rules, and its outputs' drops).
    pub fn summary(&self) -> Value {
        let mut v = serde_json::to_value(&self.counters).expect("counters serialise");
        if let Value::Object(o) = &mut v {
            o.insert("type".into(), "summary".into());
            o.extend(self.tracker_fields.clone());
        }
        v
    }

    /// What `analyze --format jsonl` writes, a value a line: the records,
    /// the trackers' rows (the command interleaves them by its writes),
    /// then the summary.
    pub fn lines(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut sink = JsonLines::new(&mut out);
        for r in &self.records {
            sink.write(r).expect("a record that does not serialise");
        }
        for (kind, v) in &self.rows {
            sink.write_tracked(kind, v).expect("a row that does not serialise");
        }
        drop(sink);
        let mut lines = json_lines(&out);
        lines.push(self.summary());
        lines
    }
}

/// The JSON lines of one `type` ("call", "registration", "interval", …).
pub fn of_type<'a>(lines: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    lines.iter().filter(move |l| l["type"] == kind)
}

/// The analysis of one capture file with the default configuration, one
/// engine, as `analyze FILE` runs it.
pub fn analyze(path: &Path) -> Outcome {
    let mut p = Probe::new(Config::default(), 1);
    p.capture(path);
    p.finish()
}

/// KPI rows with equal interval, dimension and key summed into one (rows
/// add up, docs/kpi.md; how a run splits them depends on when records
/// arrive, which differs between one thread and several), after the other
/// lines in their order.
///
/// Where a dimension had more keys than it follows (an `other` key), which
/// keys got named places depends on that order too: its keys are summed
/// into one, `*`, so every attempt must still be counted once.
pub fn kpi_rows_summed(lines: Vec<Value>) -> Vec<Value> {
    let full: std::collections::BTreeSet<String> = lines
        .iter()
        .filter(|l| l["type"] == "kpi" && l["key"] == "other")
        .map(|l| format!("{} {}", l["start_ns"], l["dimension"]))
        .collect();
    let mut rows: std::collections::BTreeMap<String, Value> = Default::default();
    let mut out = Vec::new();
    for mut l in lines {
        if l["type"] != "kpi" {
            out.push(l);
            continue;
        }
        if full.contains(&format!("{} {}", l["start_ns"], l["dimension"])) {
            l["key"] = "*".into();
        }
        let id = format!("{} {} {}", l["start_ns"], l["dimension"], l["key"]);
        match rows.get_mut(&id) {
            None => {
                rows.insert(id, l);
            }
            Some(sum) => {
                for (k, v) in l.as_object().unwrap() {
                    if let (Some(a), Some(b)) = (sum[k].as_u64(), v.as_u64()) {
                        if k != "start_ns" {
                            sum[k] = (a + b).into();
                        }
                    }
                }
            }
        }
    }
    out.extend(rows.into_values());
    out
}

/// Adds what the trackers finished to `rows` and `events`.
fn take_rows(
    trackers: &TrackerSet,
    end: bool,
    rows: &mut Vec<(&'static str, Value)>,
    events: &mut Vec<u8>,
) {
    let taken = trackers.take(end).expect("a tracker row that does not serialise");
    rows.extend(taken.rows);
    events.extend(taken.lines);
}

fn json_lines(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("a line that is not JSON"))
        .collect()
}
