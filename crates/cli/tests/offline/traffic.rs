//! The time series as the command stores it: two threads give one
//! thread's rows, and SQLite holds exactly the JSON lines' rows. (The rows
//! against tshark are the engine's tests: `crates/engine/tests/analysis/traffic.rs`.)

use crate::common;

use common::calliper_jsonl;
use serde_json::Value;
use std::path::Path;

#[test]
fn two_threads_give_the_same_series_and_the_database_holds_it() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/heplify__rtp_rtcp_sip_ipv4_udp.pcap");
    let rows = |extra: &[&str]| -> Vec<Value> {
        calliper_jsonl(&file, extra).into_iter().filter(|l| l["type"] == "traffic").collect()
    };
    let one = rows(&[]);
    assert!(one.len() >= 3);
    assert_eq!(rows(&["--threads", "2"]), one);
    let db = calliper_testkit::captures::scratch_root().join("traffic.db");
    std::fs::remove_file(&db).ok();
    rows(&["--db", db.to_str().unwrap()]);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare("SELECT id, start_ns, end_ns, packets, bytes, calls_open, calls_started, calls_ended, capture_dropped FROM traffic ORDER BY id")
        .unwrap();
    let stored: Vec<(i64, Vec<i64>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, (1..9).map(|i| r.get(i).unwrap()).collect())))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(stored.len(), one.len());
    for ((id, cols), row) in stored.iter().zip(&one) {
        let want: Vec<i64> = [
            "start_ns",
            "end_ns",
            "packets",
            "bytes",
            "calls_open",
            "calls_started",
            "calls_ended",
            "capture_dropped",
        ]
        .iter()
        .map(|k| row[k].as_i64().unwrap())
        .collect();
        assert_eq!(cols, &want);
        let items: Vec<(String, String, String, i64, i64)> = conn
            .prepare("SELECT network, transport, application, packets, bytes FROM traffic_protocols WHERE parent = ? ORDER BY rowid")
            .unwrap()
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let want: Vec<(String, String, String, i64, i64)> = row["protocols"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["network"].as_str().unwrap().into(),
                    c["transport"].as_str().unwrap().into(),
                    c["application"].as_str().unwrap().into(),
                    c["packets"].as_i64().unwrap(),
                    c["bytes"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(items, want);
        let talkers: Vec<(String, i64, i64)> = conn
            .prepare("SELECT address, packets, bytes FROM traffic_talkers WHERE parent = ? ORDER BY rowid")
            .unwrap()
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let want: Vec<(String, i64, i64)> = row["top_talkers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["address"].as_str().unwrap().into(),
                    t["packets"].as_i64().unwrap(),
                    t["bytes"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(talkers, want);
    }
    std::fs::remove_file(&db).ok();
}
