//! TCP reassembly tests.
use super::*;
use std::net::{IpAddr, Ipv4Addr};

const KEY: Flow = Flow {
    src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    sport: 5060,
    dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    dport: 5060,
};

fn text(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Offers segments and returns everything the flow delivered in order.
fn run(r: &mut TcpReassembler, segs: &[(i64, u32, &[u8])]) -> Vec<u8> {
    let mut out = vec![];
    for &(t, seq, p) in segs {
        if let Some(o) = r.segment(t, KEY, seq, 0, p, true) {
            let (buf, _) = r.take_buffer(o.flow);
            out.extend_from_slice(&buf);
            let mut buf = buf;
            buf.clear();
            r.put_buffer(o.flow, buf);
        }
    }
    out
}

#[test]
fn in_order_out_of_order_and_retransmitted_segments() {
    let data = text(300);
    let mut r = TcpReassembler::new(TcpConfig::default());
    let got = run(
        &mut r,
        &[
            (0, 1000, &data[..100]),
            (1, 1200, &data[200..]),
            (2, 1100, &data[100..200]),
            (3, 1050, &data[50..150]),
        ],
    );
    assert_eq!(got, data);
    assert_eq!(r.counters.out_of_order, 1);
    assert_eq!(r.counters.retransmitted_bytes, 100);
    assert_eq!(r.bytes(), 0);
}

#[test]
fn sequence_numbers_wrap() {
    let data = text(200);
    let mut r = TcpReassembler::new(TcpConfig::default());
    let start = u32::MAX - 49;
    let got = run(&mut r, &[(0, start, &data[..100]), (1, start.wrapping_add(100), &data[100..])]);
    assert_eq!(got, data);
}

#[test]
fn a_gap_that_never_fills_is_skipped_and_counted() {
    let data = text(300);
    let mut r = TcpReassembler::new(TcpConfig::default());
    let got = run(
        &mut r,
        &[(0, 0, &data[..100]), (1, 200, &data[200..250]), (3_000_000_000, 250, &data[250..])],
    );
    assert_eq!(got, [&data[..100], &data[200..]].concat());
    assert_eq!(r.counters.gaps, 1);
    assert_eq!(r.counters.gap_bytes, 100);
}

#[test]
fn caps_hold() {
    let cfg = TcpConfig { max_flow_bytes: 1000, max_flows: 2, ..Default::default() };
    let mut r = TcpReassembler::new(cfg);
    let big = text(600);
    let o = r.segment(0, KEY, 0, 0, &big, true).unwrap();
    r.segment(0, KEY, 600, 0, &big, true);
    assert!(r.bytes() <= 1000);
    assert!(r.counters.overflow_bytes >= 600);
    let (_, resync) = r.take_buffer(o.flow);
    assert!(resync);
    for port in 0..10 {
        let k = Flow { sport: port, ..KEY };
        r.segment(0, k, 0, 0, b"x", true);
    }
    assert_eq!(r.len(), 2);
    assert_eq!(r.counters.flows_evicted, 9);
}

#[test]
fn fin_closes_and_untracked_flows_are_ignored() {
    let mut r = TcpReassembler::new(TcpConfig::default());
    assert!(r.segment(0, KEY, 0, 0, b"abc", false).is_none());
    let o = r.segment(0, KEY, 0, FIN, b"abc", true).unwrap();
    assert!(o.closing);
    r.close(o.flow);
    assert!(r.is_empty());
    assert_eq!(r.counters.flows_closed, 1);
}

proptest::proptest! {
    /// Any delivery order with duplicates yields the stream exactly once.
    #[test]
    fn any_order_yields_the_stream(
        len in 1usize..5000,
        cuts in proptest::collection::vec(1usize..5000, 0..40),
        order in proptest::collection::vec(proptest::prelude::any::<u16>(), 0..80),
        isn in proptest::prelude::any::<u32>(),
    ) {
        let data = text(len);
        let mut bounds: Vec<usize> = cuts.into_iter().filter(|&c| c < len).collect();
        bounds.push(0);
        bounds.push(len);
        bounds.sort();
        bounds.dedup();
        let segs: Vec<(u32, &[u8])> = bounds
            .windows(2)
            .map(|w| (isn.wrapping_add(w[0] as u32), &data[w[0]..w[1]]))
            .collect();
        // The first segment opens the flow; the rest come in any order,
        // some twice, then all once more as retransmissions.
        let mut sequence = vec![0];
        sequence.extend(order.iter().map(|&o| o as usize % segs.len()));
        sequence.extend(0..segs.len());
        let offered: Vec<(i64, u32, &[u8])> =
            sequence.iter().map(|&i| (0, segs[i].0, segs[i].1)).collect();
        let mut r = TcpReassembler::new(TcpConfig::default());
        let got = run(&mut r, &offered);
        proptest::prop_assert_eq!(got, data);
    }
}
