//! TCP reassembly on arbitrary segment sequences: caps hold, no panic.
#![no_main]
use calliper_engine::tcp::{TcpConfig, TcpReassembler};
use calliper_engine::Flow;
use calliper_fuzz::records;
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr};

fuzz_target!(|data: &[u8]| {
    let cfg = TcpConfig {
        max_flows: 4,
        max_flow_bytes: 4096,
        max_bytes: 8192,
        idle_timeout_ns: 10_000,
        gap_timeout_ns: 1000,
    };
    let mut r = TcpReassembler::new(cfg);
    let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut now = 0i64;
    // Each segment: port (1), seq (4), flags (1), time step (1), length (1), bytes.
    for (h, payload) in records(data, 8, |h| usize::from(h[7])) {
        now += h[6] as i64 * 10;
        let key = Flow { src: a, sport: h[0] as u16 % 6, dst: a, dport: 5060 };
        let seq = u32::from_be_bytes([h[1], h[2], h[3], h[4]]);
        if let Some(o) = r.segment(now, key, seq, h[5], payload, true) {
            let (mut buf, _) = r.take_buffer(o.flow);
            let keep = buf.len() / 2;
            buf.drain(..keep);
            r.put_buffer(o.flow, buf);
            if o.closing {
                r.close(o.flow);
            }
        }
        assert!(r.len() <= 4);
        assert!(r.bytes() <= 8192 + 4096);
    }
});
