//! Relay datagrams into a node: decoding, NACK handling, link state, timers.
//! Each record: neighbour (1 byte), time step (1), length (2), datagram.
#![no_main]
use calliper_relay::node::{Config, Node};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = calliper_relay::packet::decode(data);
    let mut n = Node::new(Config::new(1), &[2, 3], 0);
    let mut now = 0i64;
    let mut rest = data;
    while rest.len() >= 4 {
        let from = 2 + (rest[0] % 3) as u16; // 4 is a stranger
        now += rest[1] as i64 * 1_000_000;
        let len = (u16::from_be_bytes([rest[2], rest[3]]) as usize).min(rest.len() - 4);
        let (d, tail) = rest[4..].split_at(len);
        rest = tail;
        n.handle(now, from, d);
        if n.poll_timeout() <= now {
            n.handle_timeout(now);
        }
        n.send(now, 3, 1, b"x");
        while n.poll_transmit().is_some() {}
        while n.poll_delivery().is_some() {}
    }
});
