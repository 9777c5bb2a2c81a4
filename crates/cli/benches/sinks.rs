//! Call records per second into each database sink: SQLite and ClickHouse
//! (one server or a cluster), in the same run. The records are a real
//! call's (the first answered call with streams in `testdata/sipp_hold_dtmf.pcap`,
//! analysed by the engine), copied with a new Call-ID and INVITE time each,
//! so the sinks, not the analysis, are measured. benches/clickhouse.sh
//! starts the servers and runs this.
//!
//! usage: sinks CALLS [http://HOST:PORT[,...] [CLUSTER]]
//! env:   CALLIPER_CLICKHOUSE_PASSWORD

use calliper_engine::{Config, Engine, Record};
use calliper_store::clickhouse::{ClickHouse, Config as ChConfig};
use calliper_store::{Sink, Sqlite};
use std::time::Instant;

fn template() -> calliper_engine::CallRecord {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/sipp_hold_dtmf.pcap");
    let mut reader =
        calliper_capture::CaptureReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut e = Engine::new(Config::default());
    loop {
        let batch = reader.next_batch(1024).unwrap();
        if batch.is_empty() {
            break;
        }
        for p in batch.iter() {
            e.packet(p.ts_ns, p.link_type, p.data);
        }
    }
    e.finish();
    let call = e.drain().find_map(|r| match r {
        Record::Call(c) if !c.streams.is_empty() => Some(*c),
        _ => None,
    });
    call.expect("an answered call with streams")
}

/// Writes `n` copies of `call` (new Call-ID and time each) and finishes;
/// returns the seconds taken.
fn fill(sink: &mut dyn Sink, call: &calliper_engine::CallRecord, n: u64) -> f64 {
    let started = Instant::now();
    let mut c = call.clone();
    for i in 0..n {
        c.call_id = format!("bench-{i}@calliper");
        c.invite_ns = call.invite_ns + i as i64 * 1_000_000;
        sink.write(&Record::Call(Box::new(c.clone()))).unwrap();
    }
    sink.finish("bench", &serde_json::Value::Null).unwrap();
    started.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let n: u64 = args.first().map_or(100_000, |a| a.parse().expect("CALLS"));
    let call = template();
    let streams = call.streams.len();
    let dir = std::env::temp_dir().join(format!("calliper-sinks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut sqlite = Sqlite::open(&dir.join("bench.db")).unwrap();
    let s = fill(&mut sqlite, &call, n);
    println!(
        "sqlite      {n} calls ({streams} streams each) in {s:.2} s: {:.0} calls/s",
        n as f64 / s
    );
    if let Some(url) = args.get(1) {
        let mut cfg = ChConfig::new(url, "bench");
        cfg.cluster = args.get(2).cloned();
        // A cluster's tables are not a single server's: a database each.
        if cfg.cluster.is_some() {
            cfg.database = "calliper_cluster".into();
        }
        // As `analyze` writes: waiting for the server, not spooling.
        cfg.wait_when_slow = true;
        cfg.password = std::env::var("CALLIPER_CLICKHOUSE_PASSWORD").unwrap_or_default();
        let mut ch = ClickHouse::open(&cfg, Box::new(|m| eprintln!("{m}"))).unwrap();
        let s = fill(&mut ch, &call, n);
        let r = ch.report();
        assert_eq!(r.sent, n * (1 + streams as u64), "{r}");
        println!(
            "clickhouse  {n} calls ({streams} streams each) in {s:.2} s: {:.0} calls/s ({}; {r})",
            n as f64 / s,
            cfg.cluster.as_deref().map_or("one server".to_string(), |c| format!("cluster {c}"))
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
