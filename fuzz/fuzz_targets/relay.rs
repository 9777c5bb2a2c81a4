//! Relay datagrams into a node: decoding, NACK handling, link state, timers.
//! Each record: neighbour (1 byte), time step (1), length (2), datagram.
#![no_main]
use calliper_fuzz::{be16, records};
use calliper_relay::node::{Config, Node};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = calliper_relay::packet::decode(data);
    let mut n = Node::new(Config::new(1), &[2, 3], 0);
    let mut now = 0i64;
    for (h, d) in records(data, 4, be16(2)) {
        let from = 2 + (h[0] % 3) as u16; // 4 is a stranger
        now += h[1] as i64 * 1_000_000;
        n.handle(now, from, d);
        if n.poll_timeout() <= now {
            n.handle_timeout(now);
        }
        n.send(now, 3, 1, b"x");
        while n.poll_transmit().is_some() {}
        while n.poll_delivery().is_some() {}
    }
});
