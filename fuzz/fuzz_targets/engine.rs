//! The whole engine on a run of raw IP packets: each record is a 2-byte
//! length, a 1-byte time step, then the packet.
#![no_main]
use calliper_engine::{Config, Engine};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cfg = Config {
        max_calls: 16,
        max_streams: 32,
        max_media: 32,
        max_candidates: 8,
        max_unanswered: 4,
        ..Config::default()
    };
    let mut e = Engine::new(cfg);
    let mut rest = data;
    let mut now = 1_000_000_000i64;
    while rest.len() >= 3 {
        let len = (u16::from_be_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 3);
        now += rest[2] as i64 * 1_000_000;
        let (pkt, tail) = rest[3..].split_at(len);
        rest = tail;
        e.packet(now, 101, pkt); // LINKTYPE_RAW
        e.drain().for_each(drop);
        assert!(e.active_calls() <= 16);
    }
    e.finish();
    e.drain().for_each(drop);
});
