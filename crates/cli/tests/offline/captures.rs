//! The command's output on captures: `-o -` is standard output, and the
//! in-process probe the engine's tests use gives exactly the command's
//! lines (the captures' own figures are the engine's tests:
//! `crates/engine/tests/analysis/captures.rs`).

use crate::common;

use common::{calliper_jsonl, kpi_rows_summed};
use serde_json::Value;

/// `-o -` is standard output, as for most tools, not a file named `-`.
#[test]
fn output_dash_is_stdout() {
    let dir = common::scratch_dir("dash-output");
    let capture = common::sample_capture();
    let args = "analyze --progress never --format jsonl -o -".split(' ');
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_calliper"));
    let out = cmd.current_dir(&dir).args(args).arg(&capture).output().unwrap();
    let created = dir.join("-").exists();
    std::fs::remove_dir_all(&dir).ok();
    common::succeeded(&out);
    assert!(!created, "a file named - was written");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.contains("\"type\":\"call\"")), "{text}");
}

/// The in-process probe the library crates' tests use
/// (`calliper_testkit::probe`) gives, on every capture and on the impaired
/// generated one (`calliper_testkit::generated::impaired`), what `calliper
/// analyze --format jsonl --events all` writes: the same call and stream
/// lines, the same event lines and the same tracker rows (KPIs, traffic,
/// registrations, alerts, users), each in the same order with one thread,
/// and the same summary. With the default options,
/// and with those the engine's event tests use (`--interval 1
/// --dedup-window 0`) on two threads. So the tests moved out of this crate
/// (`crates/engine/tests`) still speak for the command-line tool.
#[test]
fn the_in_process_probe_gives_the_command_lines_records_events_and_counters() {
    let event_tests = calliper_engine::Config {
        interval_ns: 1_000_000_000,
        dedup_window_ns: 0,
        ..calliper_engine::Config::default()
    };
    let runs: [(&[&str], calliper_engine::Config, usize); 2] = [
        (&[], calliper_engine::Config::default(), 1),
        (&["--interval", "1", "--dedup-window", "0", "--threads", "2"], event_tests, 2),
    ];
    let (mut records, mut events, mut rows) = (0, 0, 0);
    let impaired = common::scratch("impaired.pcap");
    let spec = calliper_testkit::generated::impaired();
    std::fs::write(&impaired, calliper_testkit::generated::pcap(&spec)).unwrap();
    let mut files = common::captures();
    files.push(impaired.clone());
    for (flags, cfg, threads) in runs {
        for file in &files {
            let file = file.as_path();
            let name = format!("{} {flags:?}", file.display());
            let mut args = vec!["--events", "all"];
            args.extend_from_slice(flags);
            let cli = Lines::of(calliper_jsonl(file, &args));
            let mut probe = calliper_testkit::probe::Probe::new(cfg.clone(), threads);
            probe.capture(file);
            let out = probe.finish();
            let ours = Lines::of(out.lines().into_iter().chain(out.events).collect());
            // Each kind in order with one thread: both take what is
            // finished every EMIT_EVERY packets and end alike. Shards
            // deliver in an order of their own: compared as sets, and a
            // KPI interval's rows summed (which of its rows counts a
            // call written near the rows' emission depends on that order).
            for (what, cli, ours) in [
                ("records", &cli.records, &ours.records),
                ("events", &cli.events, &ours.events),
                ("tracker rows", &cli.rows, &ours.rows),
            ] {
                if threads == 1 {
                    same_lines(&name, what, cli, ours);
                } else {
                    let summed = |v: &[Value]| sorted(&kpi_rows_summed(v.to_vec()));
                    assert_eq!(summed(cli), summed(ours), "{name}: {what}");
                }
            }
            same_counters(&name, &cli.summary, &ours.summary);
            records += ours.records.len();
            events += ours.events.len();
            rows += ours.rows.len();
        }
    }
    assert!(
        records >= common::at_least(200, 6)
            && events >= common::at_least(1600, 60)
            && rows >= common::at_least(400, 10),
        "only {records} records, {events} events and {rows} tracker rows compared"
    );
    std::fs::remove_file(&impaired).ok();
}

/// One run's lines by kind.
struct Lines {
    records: Vec<Value>,
    events: Vec<Value>,
    /// The trackers' rows.
    rows: Vec<Value>,
    summary: Value,
}

impl Lines {
    fn of(lines: Vec<Value>) -> Lines {
        // The trackers' lines, neither records nor events.
        const ROWS: &[&str] = &["kpi", "traffic", "registration", "alert", "user"];
        let mut l = Lines {
            records: Vec::new(),
            events: Vec::new(),
            rows: Vec::new(),
            summary: Value::Null,
        };
        for v in lines {
            match v["type"].as_str().unwrap_or("") {
                "call" | "stream" => l.records.push(v),
                "summary" => l.summary = v,
                t if ROWS.contains(&t) => l.rows.push(v),
                _ => l.events.push(v),
            }
        }
        l
    }
}

fn sorted(v: &[Value]) -> Vec<String> {
    let mut s: Vec<String> = v.iter().map(Value::to_string).collect();
    s.sort();
    s
}

/// Every counter of the probe's summary is the command's; the command
/// adds only the name of its input.
fn same_counters(name: &str, cli: &Value, ours: &Value) {
    const COMMAND_ONLY: &[&str] = &["input"];
    let (Some(cli), Some(ours)) = (cli.as_object(), ours.as_object()) else {
        panic!("{name}: a summary is missing");
    };
    for (k, v) in ours {
        assert_eq!(cli.get(k), Some(v), "{name}: summary {k}");
    }
    for k in cli.keys().filter(|k| !ours.contains_key(*k)) {
        assert!(COMMAND_ONLY.contains(&k.as_str()), "{name}: summary {k} only from the command");
    }
}

/// Fails at the first line where the command and the probe differ, showing
/// those two lines only.
fn same_lines(file: &str, what: &str, cli: &[Value], in_process: &[Value]) {
    let differ = cli.iter().zip(in_process).position(|(a, b)| a != b);
    if let Some(n) = differ {
        panic!(
            "{file}: {what} differ at line {n}:\ncommand:    {}\nin process: {}",
            cli[n], in_process[n]
        );
    }
    assert_eq!(cli.len(), in_process.len(), "{file}: {what}: lines");
}
