//! A HEP collector as a packet source: HEP3 messages that capture agents
//! (Kamailio's `siptrace`, heplify, OpenSIPS, rtpengine) send over UDP or
//! TCP are handed on like a ring's packets, each as a raw IP frame from the
//! agent to the listening address carrying the message as one UDP datagram.
//! The engine reads HEP on that port (`Config::hep_port`) as it reads HEP
//! found in a capture, so a feed and a capture of that feed give the same
//! calls.
//!
//! Receiving runs on threads of its own (one for UDP; for TCP one accepting
//! and one per connection, at most [`MAX_CONNECTIONS`]); they stamp each
//! message with the time it came and queue it, bounded by messages and
//! bytes. What does not fit, fails the key, is not HEP, or cannot be framed
//! is counted in [`HepListenStats`], never waited for.

use crate::Packet;
use calliper_wire::{emit, hep, ipproto, linktype};
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Messages queued between the receiving threads and the engine.
const QUEUE: usize = 8192;
/// Bytes of messages queued.
const QUEUE_BYTES: usize = 16 << 20;
/// TCP connections read at once; more are closed at once (counted).
pub const MAX_CONNECTIONS: usize = 64;
/// A TCP connection that completes no message for this long is closed.
const IDLE: Duration = Duration::from_secs(120);
/// How often the receiving threads look at the stop flag.
const POLL: Duration = Duration::from_millis(200);
/// The largest message that fits one UDP datagram in the frames made here.
const MAX_MESSAGE: usize = 0xFFFF - 20 - 8;
/// Messages handed over at once.
const BATCH: usize = 64;

/// How agents reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HepTransport {
    /// One message per datagram.
    Udp,
    /// Messages back to back on a stream, each framed by its stated length.
    Tcp,
}

/// Where to listen, and the key agents must carry.
#[derive(Debug, Clone)]
pub struct HepListenConfig {
    /// UDP or TCP.
    pub transport: HepTransport,
    /// The address and port to bind.
    pub address: SocketAddr,
    /// When set, a message is taken only if its authentication key chunk
    /// (0x000e) equals this.
    pub key: Option<Vec<u8>>,
}

/// What the collector received and what it left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HepListenStats {
    /// Messages handed to the engine.
    pub received: u64,
    /// Messages dropped because the queue was full (the engine behind).
    pub dropped: u64,
    /// Messages without the configured key (a TCP connection is closed at
    /// its first).
    pub unauthenticated: u64,
    /// Datagrams that are not HEP3, and TCP streams that stopped being
    /// HEP3 (closed: a stream cannot be resynchronised).
    pub malformed: u64,
    /// Messages longer than one datagram can carry.
    pub too_long: u64,
    /// TCP connections accepted.
    pub connections: u64,
    /// TCP connections closed at once: [`MAX_CONNECTIONS`] were open.
    pub connections_refused: u64,
    /// TCP connections closed after [`IDLE`] without a message.
    pub connections_idle: u64,
}

#[derive(Default)]
struct Counts {
    received: AtomicU64,
    dropped: AtomicU64,
    unauthenticated: AtomicU64,
    malformed: AtomicU64,
    too_long: AtomicU64,
    connections: AtomicU64,
    connections_refused: AtomicU64,
    connections_idle: AtomicU64,
}

/// A message as it came: when, and its frame.
struct Message {
    ts_ns: i64,
    frame: Vec<u8>,
}

/// What the receiving threads share.
struct Shared {
    counts: Counts,
    stop: AtomicBool,
    queued_bytes: AtomicUsize,
    open_connections: AtomicUsize,
    key: Option<Vec<u8>>,
    local: SocketAddr,
}

/// A running collector; dropping it stops its threads (within [`POLL`]).
pub struct HepListener {
    shared: Arc<Shared>,
    rx: Receiver<Message>,
    /// The messages of the batch handed over last (reused).
    batch: Vec<Message>,
}

impl HepListener {
    /// Binds and starts receiving.
    pub fn open(cfg: &HepListenConfig) -> std::io::Result<HepListener> {
        let (tx, rx) = sync_channel(QUEUE);
        let bound = match cfg.transport {
            HepTransport::Udp => Bound::Udp(UdpSocket::bind(cfg.address)?),
            HepTransport::Tcp => Bound::Tcp(TcpListener::bind(cfg.address)?),
        };
        let local = bound.local_addr()?;
        let shared = Arc::new(Shared {
            counts: Counts::default(),
            stop: AtomicBool::new(false),
            queued_bytes: AtomicUsize::new(0),
            open_connections: AtomicUsize::new(0),
            key: cfg.key.clone(),
            local,
        });
        let s = shared.clone();
        match bound {
            Bound::Udp(socket) => {
                socket.set_read_timeout(Some(POLL))?;
                std::thread::spawn(move || receive_datagrams(&socket, &s, &tx));
            }
            Bound::Tcp(listener) => {
                listener.set_nonblocking(true)?;
                std::thread::spawn(move || accept(&listener, &s, &tx));
            }
        }
        Ok(HepListener {
            shared,
            rx,
            batch: Vec::with_capacity(BATCH),
        })
    }

    /// The address bound (the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// Hands the messages received so far (at most a batch) to `f`, waiting
    /// up to `wait` for the first.
    pub fn next_batch(&mut self, wait: Duration, f: &mut dyn FnMut(&[Packet<'_>])) {
        self.batch.clear();
        match self.rx.recv_timeout(wait) {
            Ok(m) => self.batch.push(m),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return,
        }
        while self.batch.len() < BATCH {
            match self.rx.try_recv() {
                Ok(m) => self.batch.push(m),
                Err(_) => break,
            }
        }
        let bytes: usize = self.batch.iter().map(|m| m.frame.len()).sum();
        self.shared.queued_bytes.fetch_sub(bytes, Relaxed);
        let mut packets = [EMPTY; BATCH];
        for (p, m) in packets.iter_mut().zip(&self.batch) {
            *p = Packet {
                ts_ns: m.ts_ns,
                link_type: linktype::RAW,
                data: &m.frame,
                orig_len: m.frame.len() as u32,
                file_offset: 0,
            };
        }
        f(&packets[..self.batch.len()]);
    }

    /// The counts so far.
    pub fn stats(&self) -> HepListenStats {
        let c = &self.shared.counts;
        HepListenStats {
            received: c.received.load(Relaxed),
            dropped: c.dropped.load(Relaxed),
            unauthenticated: c.unauthenticated.load(Relaxed),
            malformed: c.malformed.load(Relaxed),
            too_long: c.too_long.load(Relaxed),
            connections: c.connections.load(Relaxed),
            connections_refused: c.connections_refused.load(Relaxed),
            connections_idle: c.connections_idle.load(Relaxed),
        }
    }
}

impl Drop for HepListener {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
    }
}

const EMPTY: Packet<'static> = Packet {
    ts_ns: 0,
    link_type: 0,
    data: &[],
    orig_len: 0,
    file_offset: 0,
};

enum Bound {
    Udp(UdpSocket),
    Tcp(TcpListener),
}

impl Bound {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Bound::Udp(s) => s.local_addr(),
            Bound::Tcp(l) => l.local_addr(),
        }
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Why a message was not queued.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    NotHep,
    Unauthenticated,
    TooLong,
    QueueFull,
}

impl Shared {
    /// Checks one message and queues its frame.
    fn take(
        &self,
        peer: SocketAddr,
        message: &[u8],
        tx: &SyncSender<Message>,
    ) -> Result<(), Refused> {
        let c = &self.counts;
        let refused = |counter: &AtomicU64, why| {
            counter.fetch_add(1, Relaxed);
            Err(why)
        };
        if !message.starts_with(hep::MAGIC) {
            return refused(&c.malformed, Refused::NotHep);
        }
        if let Some(key) = &self.key {
            let given = hep::Hep::parse(message).ok().and_then(|h| h.auth_key);
            if !given.is_some_and(|g| same(g, key)) {
                return refused(&c.unauthenticated, Refused::Unauthenticated);
            }
        }
        if message.len() > MAX_MESSAGE {
            return refused(&c.too_long, Refused::TooLong);
        }
        let frame = frame(peer, self.local, message);
        if self.queued_bytes.fetch_add(frame.len(), Relaxed) + frame.len() > QUEUE_BYTES {
            self.queued_bytes.fetch_sub(frame.len(), Relaxed);
            return refused(&c.dropped, Refused::QueueFull);
        }
        let len = frame.len();
        match tx.try_send(Message {
            ts_ns: now_ns(),
            frame,
        }) {
            Ok(()) => {
                c.received.fetch_add(1, Relaxed);
                Ok(())
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.queued_bytes.fetch_sub(len, Relaxed);
                refused(&c.dropped, Refused::QueueFull)
            }
        }
    }
}

/// Compares keys in time independent of where they first differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// A raw IP frame from the agent to the collector carrying `message` as a
/// UDP datagram (IPv6 when either end is; an IPv4 end then mapped).
fn frame(peer: SocketAddr, local: SocketAddr, message: &[u8]) -> Vec<u8> {
    let udp = emit::udp(peer.port(), local.port(), message);
    match (peer.ip().to_canonical(), local.ip().to_canonical()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => emit::Ipv4::new(s, d, ipproto::UDP).emit(&udp),
        (s, d) => emit::ipv6(v6(s), v6(d), ipproto::UDP, &udp),
    }
}

fn v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

fn receive_datagrams(socket: &UdpSocket, s: &Shared, tx: &SyncSender<Message>) {
    let mut buf = vec![0u8; 0x1_0000];
    while !s.stop.load(Relaxed) {
        if let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let _ = s.take(peer, &buf[..n], tx);
        }
    }
}

fn accept(listener: &TcpListener, s: &Arc<Shared>, tx: &SyncSender<Message>) {
    while !s.stop.load(Relaxed) {
        let Ok((stream, peer)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        if s.open_connections.fetch_add(1, Relaxed) >= MAX_CONNECTIONS {
            s.open_connections.fetch_sub(1, Relaxed);
            s.counts.connections_refused.fetch_add(1, Relaxed);
            continue;
        }
        s.counts.connections.fetch_add(1, Relaxed);
        let (s, tx) = (s.clone(), tx.clone());
        std::thread::spawn(move || {
            read_stream(stream, peer, &s, &tx);
            s.open_connections.fetch_sub(1, Relaxed);
        });
    }
}

/// Reads messages back to back from one connection until it closes, goes
/// idle, stops being HEP3 or fails the key.
fn read_stream(mut stream: TcpStream, peer: SocketAddr, s: &Shared, tx: &SyncSender<Message>) {
    if stream.set_nonblocking(false).is_err() || stream.set_read_timeout(Some(POLL)).is_err() {
        return;
    }
    // At most one message (64 KiB) and one read.
    let mut buf: Vec<u8> = Vec::with_capacity(0x1_0000 + 0x4000);
    let mut chunk = [0u8; 0x4000];
    let mut last_message = Instant::now();
    while !s.stop.load(Relaxed) {
        // Every whole message in the buffer.
        let mut used = 0;
        while let Some(len) = next_message(&buf[used..]) {
            match len {
                Err(()) => {
                    s.counts.malformed.fetch_add(1, Relaxed);
                    return;
                }
                Ok(len) => {
                    let taken = s.take(peer, &buf[used..used + len], tx);
                    if taken == Err(Refused::Unauthenticated) {
                        return;
                    }
                    used += len;
                    last_message = Instant::now();
                }
            }
        }
        buf.drain(..used);
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if last_message.elapsed() >= IDLE {
                    s.counts.connections_idle.fetch_add(1, Relaxed);
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The length of the whole message at the start of `buf`: None when more
/// bytes are needed, Err when the stream is not HEP3 there.
fn next_message(buf: &[u8]) -> Option<Result<usize, ()>> {
    let magic = &buf[..buf.len().min(4)];
    if !hep::MAGIC.starts_with(magic) {
        return Some(Err(()));
    }
    let len = match hep::stated_len(buf) {
        Some(len) => len,
        // A header that states less than itself.
        None if buf.len() >= 6 => return Some(Err(())),
        None => return None,
    };
    (buf.len() >= len).then_some(Ok(len))
}

#[cfg(test)]
mod tests;
