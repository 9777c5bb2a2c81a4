use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Two nodes on loopback ports `ports`, neighbours with 5 % emulated loss
/// and 5 ms delay each way (cRTP with `crtp` = Some(N)), each running on
/// its own thread until [`Running::stop`].
struct Running {
    stop: Arc<AtomicBool>,
    nodes: [JoinHandle<UdpNode>; 2],
    addrs: [SocketAddr; 2],
}

impl Running {
    fn start(ports: [u16; 2], crtp: Option<u8>, seeds: [u64; 2]) -> Running {
        let addrs = ports.map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
        let stop = Arc::new(AtomicBool::new(false));
        let nodes = [0, 1].map(|i| {
            let cfg = NodeConfig {
                id: i as NodeId + 1,
                listen: addrs[i],
                metric: Metric::ExpectedLatency,
                nack_rounds: 0,
                budget_ms: 100.0,
                busy_poll: false,
                socket_buffer: 1 << 20,
                neighbours: vec![Neighbour {
                    id: 2 - i as NodeId,
                    addr: addrs[1 - i],
                    loss_pct: 5.0,
                    burst: 0.0,
                    delay_ms: 5.0,
                    jitter_ms: 0.0,
                    rate_kbps: 0.0,
                    crtp: crtp.is_some(),
                    crtp_repeats: crtp.unwrap_or(0),
                }],
            };
            let mut node = UdpNode::bind(&cfg, seeds[i]).unwrap();
            let stop = stop.clone();
            std::thread::spawn(move || {
                node.run(|_| stop.load(Ordering::Relaxed)).unwrap();
                node
            })
        });
        Running { stop, nodes, addrs }
    }

    /// Stops both nodes and gives them back.
    fn stop(self) -> (UdpNode, UdpNode) {
        self.stop.store(true, Ordering::Relaxed);
        let [a, b] = self.nodes;
        (a.join().unwrap(), b.join().unwrap())
    }
}

/// Two nodes on loopback ports, 5 % emulated loss each way: a stream
/// crosses with recovery, and a stranger's datagram is dropped unanswered.
#[test]
fn two_nodes_on_loopback_recover_loss() {
    let nodes = Running::start([47101, 47102], None, [1, 2]);
    let [a, b] = nodes.addrs;
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
    let (mut na, mut nb) = nodes.stop();
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
    let nodes = Running::start([47111, 47112], Some(2), [3, 4]);
    let [a, b] = nodes.addrs;
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
    let (na, nb) = nodes.stop();
    let (received, sent) = (nb.protocol_counters(), na.protocol_counters());
    assert_eq!(wrong, 0);
    assert!(
        got.len() as u64 >= n - 2,
        "{} of {n}: {sent:?} {received:?}",
        got.len()
    );
    assert!(sent.retransmitted > 0, "{sent:?}");
    assert_eq!(received.crtp_damaged, 0, "{received:?}");
    let (compressor, _) = na.node.crtp_stats(2).unwrap();
    let (header_in, header_out) = (compressor.header_bytes_in, compressor.header_bytes_out);
    assert!(
        header_out * 5 < header_in,
        "{header_out} of {header_in} header bytes"
    );
}
