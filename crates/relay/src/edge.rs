//! An edge node's ng endpoint on real sockets: the control socket a SIP
//! proxy's `rtpengine` module talks to, and a pair of UDP sockets per
//! relayed stream, all in one thread waiting in `poll(2)`. The decisions
//! are [`crate::ng::Control`]'s; this module only moves datagrams.

use crate::ng::{Control, ControlConfig, ControlCounters, Forward, Source};
use crate::packet::NodeId;
use crate::udp::Client;
use serde::Deserialize;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// `[edge]` in a node file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeConfig {
    /// Where the ng control protocol is served: `udp:ADDR:PORT`
    /// (rtpengine's module default is `udp:127.0.0.1:2223`).
    pub control: String,
    /// Addresses other than loopback allowed to send control requests.
    #[serde(default)]
    pub allow: Vec<IpAddr>,
    /// The address media is received on and written into SDP.
    pub address: IpAddr,
    /// The media ports, `MIN-MAX` (RTP on even ports, RTCP on the next).
    pub ports: String,
    /// Calls held at once (an offer beyond is refused).
    #[serde(default = "default_max_calls")]
    pub max_calls: usize,
    /// Seconds without a request or media after which a call ends.
    #[serde(default = "default_idle")]
    pub idle_timeout_s: f64,
    /// Set non-audio media's port to 0 instead of leaving it as sent.
    #[serde(default)]
    pub refuse_other_media: bool,
    /// Other edges of the overlay, by their media address: a party whose
    /// SDP names one of them is that edge, and its media crosses the
    /// overlay to that node instead of the network.
    #[serde(default)]
    pub peers: Vec<EdgePeer>,
}

/// Another edge node (`peers = [{ node = 2, address = "10.0.0.2" }]`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgePeer {
    /// Its node id.
    pub node: NodeId,
    /// Its `[edge] address`.
    pub address: IpAddr,
}

fn default_max_calls() -> usize {
    ControlConfig::default().max_calls
}

fn default_idle() -> f64 {
    ControlConfig::default().idle_timeout_ns as f64 / 1e9
}

impl EdgeConfig {
    /// The control address (from `udp:ADDR:PORT`).
    pub fn control_addr(&self) -> Result<SocketAddr, String> {
        self.control.strip_prefix("udp:").and_then(|a| a.parse().ok()).ok_or_else(|| {
            format!(
                "edge.control = {:?}: give udp:ADDR:PORT, e.g. udp:127.0.0.1:2223",
                self.control
            )
        })
    }

    /// The media port range (from `MIN-MAX`).
    pub fn port_range(&self) -> Result<(u16, u16), String> {
        let bad = || {
            format!(
                "edge.ports = {:?}: give MIN-MAX, 1024 to 65535, at least two ports",
                self.ports
            )
        };
        let (a, b) = self.ports.split_once('-').ok_or_else(bad)?;
        let (a, b): (u16, u16) =
            (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
        (a >= 1024 && b > a).then_some((a, b)).ok_or_else(bad)
    }

    /// The protocol core's settings.
    pub fn control_config(&self) -> Result<ControlConfig, String> {
        if !(1.0..=86_400.0).contains(&self.idle_timeout_s) {
            return Err(format!(
                "edge.idle_timeout_s = {} is out of range: allowed 1 to 86400",
                self.idle_timeout_s
            ));
        }
        if !(1..=1_000_000).contains(&self.max_calls) {
            return Err(format!(
                "edge.max_calls = {} is out of range: allowed 1 to 1000000",
                self.max_calls
            ));
        }
        Ok(ControlConfig {
            address: self.address,
            ports: self.port_range()?,
            max_calls: self.max_calls,
            idle_timeout_ns: (self.idle_timeout_s * 1e9) as i64,
            refuse_other_media: self.refuse_other_media,
            peers: self.peers.iter().map(|p| p.address).collect(),
        })
    }
}

/// What the edge's sockets counted, beside the protocol's counters.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EdgeCounters {
    /// The ng core's counters.
    pub control: ControlCounters,
    /// Control datagrams from addresses not allowed (no reply).
    pub control_refused: u64,
    /// Sends that failed (the receiver unreachable, a full buffer).
    pub send_errors: u64,
    /// Media sent to another edge over the overlay, and received from one.
    pub overlay_sent: u64,
    /// Media received from another edge over the overlay.
    pub overlay_received: u64,
    /// Overlay deliveries from a node that is not a configured peer.
    pub overlay_unknown_origin: u64,
}

/// The edge: control socket, media sockets by port, the ng core.
pub struct Edge {
    control_socket: UdpSocket,
    allow: Vec<IpAddr>,
    address: IpAddr,
    media: HashMap<u16, UdpSocket>,
    /// This node's client, holding a virtual port per media port, when
    /// the edge has peers.
    overlay: Option<Client>,
    peers: Vec<EdgePeer>,
    core: Control,
    counters: EdgeCounters,
    start: Instant,
}

impl Edge {
    /// Binds the control socket (media sockets are bound per call); with
    /// peers, a client of the node listening on `node`.
    pub fn bind(cfg: &EdgeConfig, node: SocketAddr) -> Result<Edge, String> {
        let overlay = if cfg.peers.is_empty() {
            None
        } else {
            // A node bound to every address is reached on loopback.
            let mut at = node;
            if at.ip().is_unspecified() {
                at.set_ip(IpAddr::from([127, 0, 0, 1]));
            }
            let client = Client::bind(at, EDGE_VPORT)
                .map_err(|e| format!("cannot reach the node at {at}: {e}"))?;
            Some(client)
        };
        // Media ports are bound per call: an address not on this host would
        // only show as every offer refused ("Ran out of ports").
        UdpSocket::bind((cfg.address, 0)).map_err(|e| {
            format!(
                "edge.address {} is not an address of this host ({e}): media is received there",
                cfg.address
            )
        })?;
        let control_cfg = cfg.control_config()?;
        let addr = cfg.control_addr()?;
        let control_socket =
            UdpSocket::bind(addr).map_err(|e| format!("cannot bind edge.control {addr}: {e}"))?;
        control_socket.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(Edge {
            control_socket,
            allow: cfg.allow.clone(),
            address: cfg.address,
            media: HashMap::new(),
            overlay,
            peers: cfg.peers.clone(),
            core: Control::new(control_cfg),
            counters: EdgeCounters::default(),
            start: Instant::now(),
        })
    }

    /// The control socket's address (its port when 0 was asked).
    pub fn control_addr(&self) -> io::Result<SocketAddr> {
        self.control_socket.local_addr()
    }

    /// Serves until `stop` is set; returns what was counted.
    pub fn run(mut self, stop: &AtomicBool) -> io::Result<EdgeCounters> {
        let mut last_expiry = Instant::now();
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) {
            let ready = self.wait(100)?;
            for fd_index in ready {
                match fd_index {
                    CONTROL => self.serve_control(&mut buf),
                    OVERLAY => self.relay_overlay(&mut buf),
                    port => self.relay(port as u16, &mut buf),
                }
            }
            if last_expiry.elapsed().as_secs() >= 1 {
                last_expiry = Instant::now();
                // The overlay client's lease, renewed even when no media flows.
                if let Some(c) = &self.overlay {
                    let _ = c.keep_bound();
                }
                self.core.expire(self.now());
                self.close_released();
            }
        }
        let mut counters = self.counters;
        counters.control = self.core.counters.clone();
        Ok(counters)
    }

    fn now(&self) -> i64 {
        self.start.elapsed().as_nanos() as i64
    }

    /// Waits up to `ms` for datagrams: the sockets that have some
    /// ([`CONTROL`], [`OVERLAY`], media sockets by port).
    fn wait(&self, ms: i32) -> io::Result<Vec<usize>> {
        let mut fds = vec![self.control_socket.as_raw_fd()];
        let mut ports = vec![CONTROL];
        if let Some(c) = &self.overlay {
            fds.push(c.as_raw_fd());
            ports.push(OVERLAY);
        }
        for (port, s) in &self.media {
            fds.push(s.as_raw_fd());
            ports.push(usize::from(*port));
        }
        let ready = crate::batch_io::wait_readable(&fds, ms)?;
        Ok(ready.into_iter().map(|i| ports[i]).collect())
    }

    /// Answers every control datagram waiting.
    fn serve_control(&mut self, buf: &mut [u8]) {
        for _ in 0..TURN_BUDGET {
            let Ok((n, src)) = self.control_socket.recv_from(buf) else {
                break;
            };
            if !src.ip().is_loopback() && !self.allow.contains(&src.ip()) {
                self.counters.control_refused += 1;
                continue;
            }
            let now = self.now();
            let (address, media) = (self.address, &mut self.media);
            let mut bind = |port: u16| bind_pair(address, port, media);
            let reply = self.core.handle(now, src, &buf[..n], &mut bind);
            // Before the next request can take a port given back.
            self.close_released();
            if let Some(reply) = reply {
                if self.control_socket.send_to(&reply, src).is_err() {
                    self.counters.send_errors += 1;
                }
            }
        }
    }

    /// Relays every datagram waiting on media port `port`.
    fn relay(&mut self, port: u16, buf: &mut [u8]) {
        for _ in 0..TURN_BUDGET {
            let Some(socket) = self.media.get(&port) else {
                return;
            };
            let Ok((n, src)) = socket.recv_from(buf) else {
                return;
            };
            let now = self.now();
            if let Some(f) = self.core.forward(now, port, Source::Net(src), &buf[..n]) {
                self.send(f, &buf[..n]);
            }
        }
    }

    /// Relays every delivery the overlay has for this edge: media another
    /// edge sent, framed as `to port (2) from port (2) datagram`.
    fn relay_overlay(&mut self, buf: &mut [u8]) {
        for _ in 0..TURN_BUDGET {
            let Some(client) = &self.overlay else { return };
            let Ok(Some((origin, _vport, n))) = client.try_recv(buf) else {
                return;
            };
            self.counters.overlay_received += 1;
            let peer = self.peers.iter().find(|p| p.node == origin);
            let (Some(peer), [t0, t1, f0, f1, ..]) = (peer, &buf[..n]) else {
                self.counters.overlay_unknown_origin += 1;
                continue;
            };
            let (to, from) = (u16::from_be_bytes([*t0, *t1]), u16::from_be_bytes([*f0, *f1]));
            let src = Source::Peer(SocketAddr::new(peer.address, from));
            let now = self.now();
            if let Some(f) = self.core.forward(now, to, src, &buf[4..n]) {
                self.send(f, &buf[4..n]);
            }
        }
    }

    /// Sends relayed media: to a peer edge over the overlay (framed with
    /// the port it is for and the port it leaves), else from the edge port
    /// facing the receiver.
    fn send(&mut self, f: Forward, bytes: &[u8]) {
        let peer = self.peers.iter().find(|p| p.address == f.to.ip());
        let sent = match (peer, &self.overlay) {
            (Some(p), Some(client)) => {
                self.counters.overlay_sent += 1;
                let [t0, t1] = f.to.port().to_be_bytes();
                let [f0, f1] = f.from_port.to_be_bytes();
                client.send_parts(p.node, EDGE_VPORT, &[t0, t1, f0, f1], bytes).is_ok()
            }
            _ => self.media.get(&f.from_port).is_some_and(|s| s.send_to(bytes, f.to).is_ok()),
        };
        if !sent {
            self.counters.send_errors += 1;
        }
    }

    /// Closes the sockets of ports the core gave up.
    fn close_released(&mut self) {
        for port in self.core.take_released() {
            self.media.remove(&port);
            self.media.remove(&(port + 1));
        }
    }
}

/// The virtual port every edge's overlay client holds: media between edges
/// travels to it, framed with the edge ports it is for and from.
pub const EDGE_VPORT: u16 = 2223;

/// Datagrams read from one socket per turn of the loop: a flood on one
/// port cannot keep the others (or the control socket) waiting.
const TURN_BUDGET: usize = 32;

/// Where the wait says the control socket and the overlay client are
/// (media sockets are named by their port, below these).
const CONTROL: usize = usize::MAX;
const OVERLAY: usize = usize::MAX - 1;

/// Binds `port` (RTP) and `port + 1` (RTCP) on `address`, non-blocking.
fn bind_pair(address: IpAddr, port: u16, media: &mut HashMap<u16, UdpSocket>) -> bool {
    let open = |p: u16| -> io::Result<UdpSocket> {
        let s = UdpSocket::bind(SocketAddr::new(address, p))?;
        s.set_nonblocking(true)?;
        Ok(s)
    };
    let (Ok(rtp), Ok(rtcp)) = (open(port), open(port + 1)) else {
        return false;
    };
    media.insert(port, rtp);
    media.insert(port + 1, rtcp);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn ask(control: SocketAddr, request: &[u8]) -> String {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.send_to(request, control).unwrap();
        let mut buf = [0u8; 4096];
        let n = s.recv(&mut buf).expect("the edge answers");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// An ng request with these items, and the SDP port it answers with.
    fn exchange(control: SocketAddr, items: &[(&str, &str)], sdp: &str) -> u16 {
        let mut w = crate::ng::bencode::Writer::default();
        w.dict(None);
        for (k, v) in items {
            w.text(k, v);
        }
        w.text("sdp", sdp).end();
        // Each request its own cookie (a repeated one is a retransmission).
        let cookie = format!("{} ", items.len());
        let reply = ask(control, &[cookie.as_bytes(), &w.out].concat());
        let doc = crate::ng::bencode::parse(&reply.as_bytes()[2..]).unwrap();
        let sdp = doc.str("sdp").unwrap_or_else(|| panic!("{reply}"));
        crate::ng::sdp::audio(sdp).unwrap()[0].rtp.port()
    }

    fn sdp_of(s: &UdpSocket) -> String {
        let a = s.local_addr().unwrap();
        format!("v=0\r\nc=IN IP4 {}\r\nm=audio {} RTP/AVP 0\r\n", a.ip(), a.port())
    }

    /// Two parties on loopback, the edge between them: what one sends to
    /// the port in its peer's rewritten SDP reaches the peer, from the
    /// edge; a stranger's datagram goes nowhere.
    #[test]
    fn media_crosses_the_edge_both_ways_and_strangers_are_dropped() {
        let cfg = EdgeConfig {
            control: "udp:127.0.0.1:0".into(),
            allow: vec![],
            address: "127.0.0.1".parse().unwrap(),
            ports: "47000-47099".into(),
            max_calls: 10,
            idle_timeout_s: 60.0,
            refuse_other_media: false,
            peers: vec![],
        };
        let edge = Edge::bind(&cfg, "127.0.0.1:9".parse().unwrap()).unwrap();
        let control = edge.control_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || edge.run(&flag));
        assert!(ask(control, b"p d7:command4:pinge").ends_with("d6:result4:ponge"));
        let caller = UdpSocket::bind("127.0.0.1:0").unwrap();
        let callee = UdpSocket::bind("127.0.0.1:0").unwrap();
        for s in [&caller, &callee] {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        let tags = [("call-id", "c@x"), ("from-tag", "a")];
        let to_callee =
            exchange(control, &[tags[0], tags[1], ("command", "offer")], &sdp_of(&caller));
        let answer = [tags[0], tags[1], ("to-tag", "b"), ("command", "answer")];
        let to_caller = exchange(control, &answer, &sdp_of(&callee));
        caller.send_to(b"hello callee", ("127.0.0.1", to_caller)).unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = callee.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from.port()), (&b"hello callee"[..], to_callee));
        callee.send_to(b"hello caller", ("127.0.0.1", to_callee)).unwrap();
        let (n, from) = caller.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from.port()), (&b"hello caller"[..], to_caller));
        let stranger = UdpSocket::bind("127.0.0.2:0").unwrap();
        stranger.send_to(b"spoof", ("127.0.0.1", to_caller)).unwrap();
        callee.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert!(callee.recv_from(&mut buf).is_err(), "a stranger's datagram was relayed");
        stop.store(true, Ordering::Relaxed);
        let counters = thread.join().unwrap().unwrap();
        assert_eq!(counters.control.media_relayed, 2);
        assert_eq!(counters.control.media_foreign_source, 1);
    }
}
