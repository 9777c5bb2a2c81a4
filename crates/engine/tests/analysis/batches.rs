//! Batched analysis (`Engine::packets`, whose prefetch pipeline decodes
//! packets ahead of handling them) gives exactly the results of one packet
//! at a time: every record and every counter, on every capture and on a
//! generated one with duplicates, reordering and bursty loss.

use calliper_capture::CaptureReader;
use calliper_engine::{Config, Engine, RawPacket, Record};
use calliper_testkit::{captures::captures, generated};

/// Records in order and the counters, printed.
fn finish(mut e: Engine, mut out: Vec<Record>) -> (Vec<Record>, String) {
    e.finish();
    out.extend(e.drain());
    let counters = format!("{:?}", e.counters());
    (out, counters)
}

fn one_at_a_time(data: &[u8]) -> (Vec<Record>, String) {
    let mut e = Engine::new(Config::default());
    let mut out = Vec::new();
    let mut r = CaptureReader::new(data).unwrap();
    while let Ok(Some(p)) = r.next_packet() {
        e.packet(p.ts_ns, p.link_type, p.data);
        out.extend(e.drain());
    }
    finish(e, out)
}

fn batched(data: &[u8], max: usize) -> (Vec<Record>, String) {
    let mut e = Engine::new(Config::default());
    let mut out = Vec::new();
    let mut r = CaptureReader::new(data).unwrap();
    while let Ok(b) = r.next_batch(max) {
        if b.is_empty() {
            break;
        }
        let raw: Vec<RawPacket<'_>> = b.iter().map(RawPacket::from).collect();
        e.packets(&raw);
        out.extend(e.drain());
    }
    finish(e, out)
}

#[test]
fn batches_match_one_packet_at_a_time() {
    let impaired = generated::pcap(&generated::impaired());
    let mut inputs: Vec<(String, Vec<u8>)> = captures()
        .into_iter()
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    inputs.push(("generated".into(), impaired));
    let mut records = 0;
    for (name, data) in &inputs {
        let want = one_at_a_time(data);
        records += want.0.len();
        // 64 is the command's batch; 7 leaves partial groups and pipeline tails.
        for max in [7, 64, 200] {
            let got = batched(data, max);
            assert_eq!(got.1, want.1, "{name}: counters differ in batches of {max}");
            assert_eq!(got.0.len(), want.0.len(), "{name}: record count, batches of {max}");
            for (i, (g, w)) in got.0.iter().zip(&want.0).enumerate() {
                assert_eq!(g, w, "{name}: record {i} differs in batches of {max}");
            }
        }
    }
    assert!(records > 350, "only {records} records compared");
}
