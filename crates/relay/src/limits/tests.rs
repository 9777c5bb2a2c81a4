use super::*;
use crate::sim::{self, Cut, Settings, StreamSpec};

fn topology() -> Topology {
    Topology {
        settings: Settings::default(),
        links: vec![LinkSpec {
            a: 1,
            b: 2,
            delay_ms: 10.0,
            jitter_ms: 0.0,
            loss_pct: 5.0,
            burst: 0.0,
            rate_kbps: 0.0,
            crtp: false,
        }],
        streams: vec![StreamSpec {
            from: 1,
            to: 2,
            packets: 10,
            count: 1,
            interval_ms: 20.0,
            start_ms: 0.0,
            payload: 160,
            rtp: false,
        }],
        cuts: vec![Cut { a: 2, b: 1, at_ms: 100.0 }],
    }
}

/// `calliper relay simulate` with a link delay of 1e13 ms never finished
/// (the clock overflowed); now the file is refused at once, the error
/// naming the field, the value and the range.
#[test]
fn simulator_delay_of_1e13_ms_is_refused() {
    let mut t = topology();
    t.links[0].delay_ms = 1e13;
    let start = std::time::Instant::now();
    let e = sim::run(&t).unwrap_err().0;
    assert_eq!(e, "links[0].delay_ms = 10000000000000 is out of range: allowed 0 to 10000 ms");
    assert!(start.elapsed().as_secs_f64() < 1.0);
    assert!(sim::run(&topology()).is_ok());
}

/// Every kind of field: each bad value is refused, naming the field.
#[test]
fn every_simulator_number_is_range_checked() {
    type Edit = fn(&mut Topology);
    let cases: [(Edit, &str); 16] = [
        (|t| t.settings.budget_ms = 0.0, "settings.budget_ms = 0 "),
        (|t| t.settings.warmup_ms = f64::INFINITY, "settings.warmup_ms = inf "),
        (|t| t.settings.nack_rounds = 200, "settings.nack_rounds = 200 "),
        (|t| t.settings.retransmit_share = -1.0, "settings.retransmit_share = -1 "),
        (|t| t.settings.crtp_repeats = 8, "settings.crtp_repeats = 8 "),
        (|t| t.links[0].jitter_ms = f64::NAN, "links[0].jitter_ms = NaN "),
        (|t| t.links[0].loss_pct = 100.0, "links[0].loss_pct = 100 "),
        (|t| t.links[0].burst = 1.0, "links[0].burst = 1 "),
        (|t| t.links[0].rate_kbps = 0.5, "links[0].rate_kbps = 0.5 "),
        (|t| t.streams[0].packets = 0, "streams[0].packets = 0 "),
        (|t| t.streams[0].count = 100_000, "streams[0].count = 100000 "),
        (|t| t.streams[0].interval_ms = 0.0, "streams[0].interval_ms = 0 "),
        (|t| t.streams[0].payload = 1 << 20, "streams[0].payload = 1048576 "),
        (|t| t.streams[0].start_ms = -5.0, "streams[0].start_ms = -5 "),
        (
            |t| t.streams[0].packets = 10_000_000,
            "streams[0]: start_ms + packets × interval_ms = 200000000 ",
        ),
        (|t| t.cuts[0].at_ms = 1e300, "cuts[0].at_ms = 1000000"),
    ];
    for (edit, want) in cases {
        let mut t = topology();
        edit(&mut t);
        let e = t.validate().unwrap_err().0;
        assert!(e.starts_with(want) && e.contains("allowed"), "{e}");
    }
    let mut t = topology();
    t.cuts[0].b = 3;
    assert_eq!(t.validate().unwrap_err().0, "cuts[0]: no link 2 - 3");
    t = topology();
    t.streams[0].count = 10_000;
    t.streams[0].packets = 10_000;
    let e = t.validate().unwrap_err().0;
    assert!(e.starts_with("streams: count × packets, all together = 100000000"), "{e}");
}

fn node() -> NodeConfig {
    let mut c = NodeConfig::new(1, "127.0.0.1:0".parse().unwrap());
    c.neighbours = vec![Neighbour::new(2, "127.0.0.1:7002".parse().unwrap())];
    c
}

/// A node's file: every number, and neighbours that repeat or are the
/// node itself. The node refuses to start on any of them.
#[test]
fn every_node_config_number_is_range_checked() {
    type Edit = fn(&mut NodeConfig);
    let cases: [(Edit, &str); 10] = [
        (|c| c.budget_ms = 1e13, "budget_ms = 10000000000000 "),
        (|c| c.nack_rounds = 255, "nack_rounds = 255 "),
        (|c| c.socket_buffer = 1, "socket_buffer = 1 "),
        (|c| c.client_lease_ms = 10, "client_lease_ms = 10 "),
        (|c| c.neighbours[0].delay_ms = 1e13, "neighbours[0].delay_ms = 10000000000000 "),
        (|c| c.neighbours[0].loss_pct = -1.0, "neighbours[0].loss_pct = -1 "),
        (|c| c.neighbours[0].rate_kbps = 1e9, "neighbours[0].rate_kbps = 1000000000 "),
        (|c| c.neighbours[0].crtp_repeats = 9, "neighbours[0].crtp_repeats = 9 "),
        (|c| c.neighbours[0].id = 1, "neighbours[0].id = 1: repeated, or this node's"),
        (|c| c.neighbours = vec![c.neighbours[0].clone(); 300], "neighbours (how many) = 300 "),
    ];
    for (edit, want) in cases {
        let mut c = node();
        edit(&mut c);
        let e = c.validate().unwrap_err();
        assert!(e.starts_with(want), "{e}");
        let refused = crate::udp::UdpNode::bind(&c, 1).err().unwrap();
        assert_eq!(refused.to_string(), e);
    }
    assert!(node().validate().is_ok());
}

/// `[edge]`: the control address, the port range and the numbers.
#[test]
fn edge_settings_are_checked() {
    let edge = |control: &str, ports: &str, idle: f64, calls: usize| crate::edge::EdgeConfig {
        control: control.into(),
        allow: vec![],
        address: "10.0.0.1".parse().unwrap(),
        ports: ports.into(),
        max_calls: calls,
        idle_timeout_s: idle,
        refuse_other_media: false,
        peers: vec![],
    };
    for (e, want) in [
        (edge("127.0.0.1:2223", "40000-40999", 60.0, 10), "edge.control"),
        (edge("udp:nowhere", "40000-40999", 60.0, 10), "edge.control"),
        (edge("udp:127.0.0.1:2223", "40999-40000", 60.0, 10), "edge.ports"),
        (edge("udp:127.0.0.1:2223", "80-90", 60.0, 10), "edge.ports"),
        (edge("udp:127.0.0.1:2223", "40000", 60.0, 10), "edge.ports"),
        (edge("udp:127.0.0.1:2223", "40000-40999", f64::NAN, 10), "edge.idle_timeout_s"),
        (edge("udp:127.0.0.1:2223", "40000-40999", 60.0, 0), "edge.max_calls"),
    ] {
        let mut c = node();
        c.edge = Some(e);
        let err = c.validate().unwrap_err();
        assert!(err.starts_with(want), "{err}");
    }
    let mut c = node();
    c.edge = Some(edge("udp:127.0.0.1:2223", "40000-40999", 60.0, 10));
    assert!(c.validate().is_ok());
}
