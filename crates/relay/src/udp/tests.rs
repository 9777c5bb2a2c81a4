use super::*;

/// Two nodes on loopback ports, 5 % emulated loss each way: a stream
/// crosses with recovery, and a stranger's datagram is dropped unanswered.
#[test]
fn two_nodes_on_loopback_recover_loss() {
    let a: SocketAddr = "127.0.0.1:47101".parse().unwrap();
    let b: SocketAddr = "127.0.0.1:47102".parse().unwrap();
    let cfg = |id, listen, peer_id, peer| NodeConfig {
        id,
        listen,
        metric: Metric::ExpectedLatency,
        nack_rounds: 0,
        budget_ms: 100.0,
        busy_poll: false,
        socket_buffer: 1 << 20,
        neighbours: vec![Neighbour {
            id: peer_id,
            addr: peer,
            loss_pct: 5.0,
            burst: 0.0,
            delay_ms: 5.0,
            jitter_ms: 0.0,
            rate_kbps: 0.0,
            crtp: false,
            crtp_repeats: 0,
        }],
    };
    let mut na = UdpNode::bind(&cfg(1, a, 2, b), 1).unwrap();
    let mut nb = UdpNode::bind(&cfg(2, b, 1, a), 2).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s1, s2) = (stop.clone(), stop.clone());
    let ta = std::thread::spawn(move || {
        na.run(|_| s1.load(std::sync::atomic::Ordering::Relaxed))
            .unwrap();
        na
    });
    let tb = std::thread::spawn(move || {
        nb.run(|_| s2.load(std::sync::atomic::Ordering::Relaxed))
            .unwrap();
        nb
    });
    let rx = Client::bind(b, 9).unwrap();
    let tx = Client::bind(a, 9).unwrap();
    std::thread::sleep(Duration::from_millis(600)); // hellos and link state
                                                    // Read while sending: a client socket's buffer holds only a few hundred datagrams.
    let reader = std::thread::spawn(move || {
        let mut got = std::collections::BTreeSet::new();
        let mut buf = [0u8; 64];
        while let Some((origin, vport, len)) =
            rx.recv(&mut buf, Duration::from_millis(500)).unwrap()
        {
            assert_eq!((origin, vport, len), (1, 9, 4));
            got.insert(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]));
        }
        got
    });
    let n = 500u32;
    for i in 0..n {
        tx.send_to(2, 9, &i.to_be_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let got = reader.join().unwrap();
    // Junk from a local port that is not a neighbour: a bad client
    // request, counted and unanswered.
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger.send_to(b"\xCA\x11junk", b).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut na, mut nb) = (ta.join().unwrap(), tb.join().unwrap());
    assert!(na.counters().emulated_loss > 0);
    assert!(
        na.protocol_counters().retransmitted > 0,
        "{:?}",
        na.protocol_counters()
    );
    let (ca, cb) = (na.counters().clone(), nb.counters().clone());
    assert!(
        got.len() as u32 >= n - 2,
        "delivered {} of {n}: {:?} {:?} {:?} {:?}",
        got.len(),
        na.protocol_counters(),
        nb.protocol_counters(),
        ca,
        cb
    );
    assert_eq!(nb.counters().bad_client, 1);
    assert_eq!(nb.counters().kernel_drops, 0);
}

/// A compressed link between two real nodes at 5 % loss: every G.729
/// datagram comes back byte for byte, none is lost to context damage,
/// and the headers cross in a few bytes.
#[test]
fn a_compressed_link_gives_back_every_datagram() {
    let a: SocketAddr = "127.0.0.1:47111".parse().unwrap();
    let b: SocketAddr = "127.0.0.1:47112".parse().unwrap();
    let cfg = |id, listen, peer_id, peer| NodeConfig {
        id,
        listen,
        metric: Metric::ExpectedLatency,
        nack_rounds: 0,
        budget_ms: 100.0,
        busy_poll: false,
        socket_buffer: 1 << 20,
        neighbours: vec![Neighbour {
            id: peer_id,
            addr: peer,
            loss_pct: 5.0,
            burst: 0.0,
            delay_ms: 5.0,
            jitter_ms: 0.0,
            rate_kbps: 0.0,
            crtp: true,
            crtp_repeats: 2,
        }],
    };
    let mut na = UdpNode::bind(&cfg(1, a, 2, b), 3).unwrap();
    let mut nb = UdpNode::bind(&cfg(2, b, 1, a), 4).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s1, s2) = (stop.clone(), stop.clone());
    let ta = std::thread::spawn(move || {
        na.run(|_| s1.load(std::sync::atomic::Ordering::Relaxed))
            .unwrap();
        na
    });
    let tb = std::thread::spawn(move || {
        nb.run(|_| s2.load(std::sync::atomic::Ordering::Relaxed))
            .unwrap();
        nb
    });
    let rx = Client::bind(b, 9).unwrap();
    let tx = Client::bind(a, 9).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let datagram = |k: u64| {
        let mut p = Vec::new();
        crate::sim::voice::payload(true, 0, k, 20_000_000, 20, &mut p);
        p
    };
    let reader = std::thread::spawn(move || {
        let (mut got, mut wrong) = (std::collections::BTreeSet::new(), 0);
        let mut buf = [0u8; 128];
        while let Some((_, _, len)) = rx.recv(&mut buf, Duration::from_millis(500)).unwrap() {
            let k = u16::from_be_bytes([buf[30], buf[31]]) as u64;
            wrong += (buf[..len] != datagram(k)[..]) as u32;
            got.insert(k);
        }
        (got, wrong)
    });
    let n = 500u64;
    for k in 0..n {
        tx.send_to(2, 9, &datagram(k)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let (got, wrong) = reader.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (na, nb) = (ta.join().unwrap(), tb.join().unwrap());
    let (received, sent) = (nb.protocol_counters(), na.protocol_counters());
    assert_eq!(wrong, 0);
    assert!(
        got.len() as u64 >= n - 2,
        "{} of {n}: {sent:?} {received:?}",
        got.len()
    );
    assert!(sent.retransmitted > 0, "{sent:?}");
    assert_eq!(received.crtp_damaged, 0, "{received:?}");
    let (header_in, header_out, _, _) = na.node.crtp_stats(2).unwrap();
    assert!(
        header_out * 5 < header_in,
        "{header_out} of {header_in} header bytes"
    );
}
