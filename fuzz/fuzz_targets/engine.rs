//! The whole engine on a run of raw IP packets: each record is a 2-byte
//! length, a 1-byte time step, then the packet. Run one packet at a time
//! and in batches (the prefetch pipeline), the records must be the same;
//! recording every call's packets must change nothing in them, and hand
//! over only frames that were input.
#![no_main]
use calliper_engine::{
    CallTag, Config, Engine, PacketSink, RawPacket, Record, RecordingMode, SinkFactory,
};
use calliper_fuzz::{be16, records};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, Mutex};

/// Keeps what the engine hands over for recording.
struct Kept(Arc<Mutex<Vec<Vec<u8>>>>);

impl PacketSink for Kept {
    fn packet(&mut self, _: CallTag<'_>, _: i64, _: u16, frame: &[u8], _: bool) {
        self.0.lock().unwrap().push(frame.to_vec());
    }
    fn call_ended(&mut self, _: u64) {}
    fn flush(&mut self) {}
}

fn config() -> Config {
    Config {
        max_calls: 16,
        max_streams: 32,
        max_media: 32,
        max_candidates: 8,
        max_unanswered: 4,
        ..Config::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut packets = Vec::new();
    let mut now = 1_000_000_000i64;
    for (h, pkt) in records(data, 3, be16(0)) {
        now += h[2] as i64 * 1_000_000;
        packets.push(RawPacket {
            ts_ns: now,
            link_type: 101, // LINKTYPE_RAW
            data: pkt,
            ..RawPacket::default()
        });
    }
    let mut one = Engine::new(config());
    let mut want: Vec<Record> = Vec::new();
    for p in &packets {
        one.packet(p.ts_ns, p.link_type, p.data);
        want.extend(one.drain());
        assert!(one.active_calls() <= 16);
    }
    one.finish();
    want.extend(one.drain());
    let got = batched(Engine::new(config()), &packets);
    assert_eq!(format!("{got:?}"), format!("{want:?}"), "batched records differ");
    let kept = Arc::new(Mutex::new(Vec::new()));
    let sink = kept.clone();
    let recording = Engine::new(Config {
        record: RecordingMode::All,
        record_sink: Some(SinkFactory(Arc::new(move || Box::new(Kept(sink.clone()))))),
        ..config()
    });
    let got = batched(recording, &packets);
    assert_eq!(format!("{got:?}"), format!("{want:?}"), "recording changed the records");
    let input: std::collections::HashSet<&[u8]> = packets.iter().map(|p| p.data).collect();
    for frame in kept.lock().unwrap().iter() {
        assert!(input.contains(frame.as_slice()), "a recorded frame that was never input");
    }
});

/// The records of `engine` given `packets` in batches of 5 (the engine is
/// dropped at the end, so its recording sink has been handed everything).
fn batched(mut engine: Engine, packets: &[RawPacket<'_>]) -> Vec<Record> {
    let mut got = Vec::new();
    for group in packets.chunks(5) {
        engine.packets(group);
        got.extend(engine.drain());
    }
    engine.finish();
    got.extend(engine.drain());
    got
}
