use super::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A node's configuration: `id` on `listen` with `neighbours`, defaults
/// otherwise (no emulation unless the neighbours say).
fn node_config(id: NodeId, listen: SocketAddr, neighbours: Vec<Neighbour>) -> NodeConfig {
    NodeConfig { neighbours, ..NodeConfig::new(id, listen) }
}

/// Two nodes on loopback ports `ports`, neighbours with 5 % emulated loss
/// and 5 ms delay each way (cRTP with `crtp` = Some(N)), each running on
/// its own thread until [`Running::stop`].
struct Running {
    stop: Arc<AtomicBool>,
    nodes: [JoinHandle<UdpNode>; 2],
    addrs: [SocketAddr; 2],
}

impl Running {
    fn start(ports: [u16; 2], crtp: Option<u8>, seeds: [u64; 2], key: Option<&Path>) -> Running {
        let addrs = ports.map(|p| SocketAddr::from(([127, 0, 0, 1], p)));
        let stop = Arc::new(AtomicBool::new(false));
        let nodes = [0, 1].map(|i| {
            let neighbour = Neighbour {
                loss_pct: 5.0,
                delay_ms: 5.0,
                crtp: crtp.is_some(),
                crtp_repeats: crtp.unwrap_or(0),
                key_file: key.map(Path::to_path_buf),
                ..Neighbour::new(2 - i as NodeId, addrs[1 - i])
            };
            let cfg = node_config(i as NodeId + 1, addrs[i], vec![neighbour]);
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
    let nodes = Running::start([47101, 47102], None, [1, 2], None);
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
    assert!(na.protocol_counters().retransmitted > 0, "{:?}", na.protocol_counters());
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
    let nodes = Running::start([47111, 47112], Some(2), [3, 4], None);
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
    assert!(got.len() as u64 >= n - 2, "{} of {n}: {sent:?} {received:?}", got.len());
    assert!(sent.retransmitted > 0, "{sent:?}");
    assert_eq!(received.crtp_damaged, 0, "{received:?}");
    let (compressor, _) = na.node.crtp_stats(2).unwrap();
    let (header_in, header_out) = (compressor.header_bytes_in, compressor.header_bytes_out);
    assert!(header_out * 5 < header_in, "{header_out} of {header_in} header bytes");
}

/// A node with no neighbours on a loopback port, for its clients.
fn lone_node(lease_ms: u64) -> UdpNode {
    let cfg = NodeConfig {
        client_lease_ms: lease_ms,
        ..node_config(1, SocketAddr::from(([127, 0, 0, 1], 0)), vec![])
    };
    UdpNode::bind(&cfg, 1).unwrap()
}

/// Another local process cannot bind or release a virtual port a live
/// client holds (it used to take it by binding it); it may once the owner
/// has released it or gone silent for the lease. Each refusal is counted.
#[test]
fn port_theft_is_refused_while_the_owner_lives() {
    let mut n = lone_node(3_000);
    let (owner, thief) =
        (SocketAddr::from(([127, 0, 0, 1], 40_001)), SocketAddr::from(([127, 0, 0, 1], 40_002)));
    let s = 1_000_000_000;
    let holder = |n: &UdpNode| n.clients.get(&9).map(|b| b.owner);
    n.datagram(0, owner, &[1, 0, 9]);
    n.datagram(s, thief, &[1, 0, 9]);
    n.datagram(s, thief, &[3, 0, 9]);
    assert_eq!(holder(&n), Some(owner));
    assert_eq!(n.counters().vport_refused, 2);
    // Renewed at 2 s, so still the owner's at 4.9 s.
    n.datagram(2 * s, owner, &[1, 0, 9]);
    n.datagram(49 * s / 10, thief, &[1, 0, 9]);
    assert_eq!(holder(&n), Some(owner));
    assert_eq!(n.counters().vport_refused, 3);
    // Silent past the lease: the port is free to take.
    n.datagram(51 * s / 10, thief, &[1, 0, 9]);
    assert_eq!(holder(&n), Some(thief));
    // Released by its holder: free at once.
    n.datagram(6 * s, thief, &[3, 0, 9]);
    n.datagram(6 * s, owner, &[1, 0, 9]);
    assert_eq!(holder(&n), Some(owner));
    // Port 0 is never bound.
    n.datagram(6 * s, owner, &[1, 0, 0]);
    assert!(!n.clients.contains_key(&0));
    assert_eq!(n.counters().bad_client, 1);
    assert_eq!(n.counters().vport_refused, 3);
}

/// On real sockets: a second local client binding the same virtual port
/// gets nothing; every delivery reaches the first, and datagrams another
/// process writes straight to a client are not taken for deliveries.
#[test]
fn a_stolen_port_gets_no_deliveries() {
    let mut node = lone_node(30_000);
    let addr = node.socket.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            node.run(|_| stop.load(Ordering::Relaxed)).unwrap();
            node
        })
    };
    let owner = Client::bind(addr, 9).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let thief = Client::bind(addr, 9).unwrap();
    let sender = Client::bind(addr, 0).unwrap();
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger.send_to(b"\x00\x01\x00\x09fake", owner.local_addr().unwrap()).unwrap();
    for i in 0..20u32 {
        sender.send_to(1, 9, &i.to_be_bytes()).unwrap();
    }
    let mut buf = [0u8; 16];
    let mut got = 0;
    while let Some((origin, vport, len)) = owner.recv(&mut buf, Duration::from_millis(300)).unwrap()
    {
        assert_eq!((origin, vport, &buf[..len]), (1, 9, &(got as u32).to_be_bytes()[..]));
        got += 1;
    }
    assert_eq!(got, 20);
    assert_eq!(owner.foreign(), 1);
    assert_eq!(thief.recv(&mut buf, Duration::from_millis(100)).unwrap(), None);
    drop(thief); // its release is refused too
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let mut node = running.join().unwrap();
    assert_eq!(node.counters().vport_refused, 2);
    assert_eq!(node.counters().unbound, 0);
    assert_eq!(node.protocol_counters().delivered, 20);
}

/// A key file of 32 random-looking bytes, made 0600 in the temp directory.
fn key_file(name: &str, seed: u8) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("calliper-link-{name}-{}", std::process::id()));
    let bytes: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37).wrapping_add(seed)).collect();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Keyed links: a stream crosses two keyed nodes at 5 % loss with
/// recovery, nothing refused.
#[test]
fn keyed_links_carry_a_stream_with_recovery() {
    let key = key_file("stream", 1);
    let nodes = Running::start([47121, 47122], None, [5, 6], Some(&key));
    let [a, b] = nodes.addrs;
    let rx = Client::bind(b, 9).unwrap();
    let tx = Client::bind(a, 9).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let reader = std::thread::spawn(move || {
        let mut got = 0;
        let mut buf = [0u8; 64];
        while rx.recv(&mut buf, Duration::from_millis(500)).unwrap().is_some() {
            got += 1;
        }
        got
    });
    for i in 0..200u32 {
        tx.send_to(2, 9, &i.to_be_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let got = reader.join().unwrap();
    let (mut na, mut nb) = nodes.stop();
    assert!(got >= 198, "delivered {got} of 200");
    assert!(na.protocol_counters().retransmitted > 0);
    // b's report of its link from a: the gaps it found and filled, as its
    // node-wide counters (it has no other link), within the 200 sent.
    let (link, total) = (nb.link_stats()[0].link.clone(), nb.protocol_counters());
    assert_eq!(link.neighbour, 1);
    assert!(link.gaps > 0, "{link:?}");
    let counts = (link.gaps, link.recovered, link.given_up);
    assert_eq!(counts, (total.gaps, total.recovered, total.given_up));
    assert!((190..=200).contains(&link.data_expected), "{link:?}");
    assert!(link.rtt_ms.is_some_and(|ms| ms < 100.0), "{link:?}");
    for c in [na.counters().clone(), nb.counters().clone()] {
        assert_eq!((c.forged, c.replayed), (0, 0), "{c:?}");
    }
    std::fs::remove_file(key).ok();
}

/// From the keyed neighbour's own address, what the key did not seal —
/// junk, a well-formed HELLO without a trailer, one sealed with another
/// key, one the node itself sealed for the neighbour — is forged, and a
/// sealed one sent again is replayed: dropped and counted, none reaching
/// the protocol.
#[test]
fn forged_and_replayed_datagrams_are_dropped_whatever_address_they_claim() {
    let key = key_file("forged", 2);
    let attacker = UdpSocket::bind("127.0.0.1:47132").unwrap();
    let neighbour = Neighbour {
        key_file: Some(key.clone()),
        ..Neighbour::new(2, attacker.local_addr().unwrap())
    };
    let cfg = node_config(1, SocketAddr::from(([127, 0, 0, 1], 47131)), vec![neighbour]);
    let mut node = UdpNode::bind(&cfg, 1).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        node.run(|_| flag.load(Ordering::Relaxed)).unwrap();
        node
    });
    let mut hello = Vec::new();
    let msg = crate::packet::Message::Hello { seq: 1, echo_us: 0, rx_loss: 0, reply: false };
    crate::packet::encode(&crate::packet::Datagram { flags: 0, link_seq: 1, msg }, &mut hello);
    let now = super::wall_ns();
    let mut other = auth::LinkAuth::new(auth::load_key(&key_file("other", 3)).unwrap(), 2, 1, now);
    let mut right = auth::LinkAuth::new(auth::load_key(&key).unwrap(), 2, 1, now);
    let sealed = [&hello[..], &right.seal(now, &hello)].concat();
    // Node 1's own kind of datagram (sealed 1 -> 2) sent back to it.
    let mut reflected = auth::LinkAuth::new(auth::load_key(&key).unwrap(), 1, 2, now);
    let reflected = [&hello[..], &reflected.seal(now, &hello)].concat();
    let to = cfg.listen;
    for d in [
        b"junk".to_vec(),
        hello.clone(),
        [&hello[..], &other.seal(now, &hello)].concat(),
        reflected,
        sealed.clone(),
        sealed,
    ] {
        attacker.send_to(&d, to).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let mut node = thread.join().unwrap();
    let c = node.counters().clone();
    assert_eq!((c.forged, c.replayed), (4, 1), "{c:?}");
    // Charged to the link whose address they claimed.
    let links = node.link_stats();
    assert_eq!(links.len(), 1, "{links:?}");
    let want = super::Refusals { forged: 4, replayed: 1 };
    assert_eq!((links[0].link.neighbour, links[0].refused), (2, want));
    assert_eq!(node.protocol_counters().malformed, 0, "nothing forged was parsed");
    std::fs::remove_file(key).ok();
}
