//! The defragmenter on arbitrary fragment sequences: caps hold, no panic.
#![no_main]
use calliper_engine::defrag::{DefragConfig, Defragmenter, MAX_DATAGRAM};
use calliper_fuzz::records;
use calliper_wire::Fragment;
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr};

fuzz_target!(|data: &[u8]| {
    let cfg = DefragConfig { max_datagrams: 8, max_bytes: 100_000, timeout_ns: 1000 };
    let mut d = Defragmenter::new(cfg);
    let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut now = 0i64;
    // Each piece: id (1), offset/8 (2), more (1), time step (1), length (1), bytes.
    for (h, piece) in records(data, 6, |h| usize::from(h[5])) {
        now += h[4] as i64 * 10;
        let frag = Fragment {
            id: h[0] as u32 % 4,
            offset: u16::from_be_bytes([h[1], h[2]]) as u32 * 8,
            more: h[3] & 1 != 0,
            protocol: 17,
        };
        if let Some(dg) = d.add(now, a, a, frag, piece) {
            assert!(dg.payload.len() <= MAX_DATAGRAM);
            d.recycle(dg.payload);
        }
        assert!(d.bytes() <= 100_000 + MAX_DATAGRAM);
        assert!(d.len() <= 8);
    }
});
