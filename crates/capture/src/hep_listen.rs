//! A HEP collector as a packet source: HEP3 messages that capture agents
//! (Kamailio's `siptrace`, heplify, OpenSIPS, rtpengine) send over UDP or
//! TCP are handed on like a ring's packets, each as a raw IP frame from the
//! agent to the listening address carrying the message as one UDP datagram.
//! The engine reads HEP on that port (`Config::hep_port`) as it reads HEP
//! found in a capture, so a feed and a capture of that feed give the same
//! calls.
//!
//! Receiving runs on threads of its own (one for UDP; for TCP one accepting
//! and one per connection, at most [`MAX_CONNECTIONS`], [`MAX_PER_PEER`]
//! from one address); they stamp each message with the time it came and
//! queue it, bounded by messages and bytes. A connection must complete each
//! message within [`MESSAGE_WITHIN`] of its first byte (its first message
//! within that of connecting), and is closed after [`IDLE`] without one, so
//! a peer that trickles or stays silent cannot hold a slot. What does not
//! fit, fails the key, is not HEP, or cannot be framed is counted in
//! [`HepListenStats`], never waited for.

use crate::Packet;
pub use calliper_wire::hep::HepTransport;
use calliper_wire::{emit, hep, ipproto, linktype};
use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcp::accept;
#[cfg(test)]
use tcp::next_message;

/// Messages queued between the receiving threads and the engine.
const QUEUE: usize = 8192;
/// Bytes of messages queued.
const QUEUE_BYTES: usize = 16 << 20;
/// TCP connections read at once; more are closed at once (counted).
pub const MAX_CONNECTIONS: usize = 64;
/// TCP connections read at once from one address.
pub const MAX_PER_PEER: usize = 8;
/// A TCP connection that completes no message for this long is closed.
pub const IDLE: Duration = Duration::from_secs(120);
/// Longest a TCP message may take from its first byte to its last, and a
/// connection from its start to its first message (shorter in unit tests,
/// which wait it out).
pub const MESSAGE_WITHIN: Duration =
    if cfg!(test) { Duration::from_millis(500) } else { Duration::from_secs(10) };
/// How often the receiving threads look at the stop flag.
const POLL: Duration = Duration::from_millis(200);
/// The largest message that fits one UDP datagram in the frames made here.
const MAX_MESSAGE: usize = 0xFFFF - 20 - 8;
/// Messages handed over at once.
const BATCH: usize = 64;

/// Where to listen, the key agents must carry, and how long messages wait
/// for ones sent before them.
#[derive(Debug, Clone)]
pub struct HepListenConfig {
    /// UDP or TCP.
    pub transport: HepTransport,
    /// The address and port to bind.
    pub address: SocketAddr,
    /// When set, a message is taken only if its authentication key chunk
    /// (0x000e) equals this.
    pub key: Option<Vec<u8>>,
    /// How long each message is held so that one sent earlier can overtake
    /// it ([`DEFAULT_REORDER`] unless the operator says otherwise).
    pub reorder: Duration,
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
    /// TCP connections closed at once: [`MAX_CONNECTIONS`] were open, or
    /// [`MAX_PER_PEER`] from the same address.
    pub connections_refused: u64,
    /// TCP connections closed for taking too long: [`IDLE`] without a
    /// message, or a message (the first one included) not whole within
    /// [`MESSAGE_WITHIN`].
    pub connections_timed_out: u64,
    /// Receiving threads the system would not start (a TCP connection is
    /// then closed).
    pub threads_failed: u64,
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
    connections_timed_out: AtomicU64,
    threads_failed: AtomicU64,
}

/// A message as it came: when (wall clock, and monotonic for holding), the
/// time its agent gave it, and its frame.
struct Message {
    ts_ns: i64,
    arrived: Instant,
    hep_ns: i64,
    frame: Vec<u8>,
}

/// Where a held message sorts: its agent's time (its arrival's when the
/// agent gave none or one over a minute off), then arrival order.
type HoldKey = (i64, u64);

/// How long a message is held so that one sent a moment earlier by another
/// process of the same agent can overtake it: Kamailio and OpenSIPS trace
/// from several worker processes, each with its own socket, so a response
/// handled by one can reach the collector before its request, handled by
/// another. Held messages go on in the agents' time order. A loaded host
/// delays one process more than another, so the window can be widened.
pub const DEFAULT_REORDER: Duration = Duration::from_millis(100);
/// The widest reorder window taken: what is held counts in the queue's
/// bounds (8 192 messages, 16 MiB: a wider window fills them at a lower
/// rate), and the probe's idle clock runs twice the window behind, so a
/// call's timeouts wait that much longer. Well below the 5 s call grace.
pub const MAX_REORDER: Duration = Duration::from_secs(2);

/// What the receiving threads share.
struct Shared {
    counts: Counts,
    stop: AtomicBool,
    queued_bytes: AtomicUsize,
    open_connections: AtomicUsize,
    /// Open TCP connections by peer address.
    peers: std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>,
    key: Option<Vec<u8>>,
    local: SocketAddr,
}

/// A running collector; dropping it stops its threads (within [`POLL`]).
pub struct HepListener {
    shared: Arc<Shared>,
    rx: Receiver<Message>,
    /// How long each message is held ([`HepListenConfig::reorder`]).
    reorder: Duration,
    /// Messages waiting out `reorder`, by agent time (then arrival).
    held: std::collections::BTreeMap<HoldKey, Message>,
    /// The same, in arrival order (entries already handed over are skipped).
    arrivals: std::collections::VecDeque<(Instant, HoldKey)>,
    /// Messages held so far (the second half of each key).
    held_seq: u64,
    /// Every message up to this key is overdue: it goes regardless.
    overdue: Option<HoldKey>,
    /// The time given to the last message handed over: what is handed over
    /// never goes back in time.
    last_ns: i64,
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
            peers: Default::default(),
            key: cfg.key.clone(),
            local,
        });
        let s = shared.clone();
        let receive = std::thread::Builder::new().name("hep-listen".into());
        match bound {
            Bound::Udp(socket) => {
                socket.set_read_timeout(Some(POLL))?;
                receive.spawn(move || receive_datagrams(&socket, &s, &tx))?;
            }
            Bound::Tcp(listener) => {
                listener.set_nonblocking(true)?;
                receive.spawn(move || accept(&listener, &s, &tx))?;
            }
        }
        Ok(HepListener {
            reorder: cfg.reorder.min(MAX_REORDER),
            shared,
            rx,
            held: std::collections::BTreeMap::new(),
            arrivals: std::collections::VecDeque::new(),
            held_seq: 0,
            overdue: None,
            last_ns: i64::MIN,
            batch: Vec::with_capacity(BATCH),
        })
    }

    /// The address bound (the port chosen when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// Hands the messages received at least the reorder window ago (at most a
    /// batch) to `f`, in their agents' time order, waiting up to `wait` for
    /// one; how many it handed. Each is stamped with when it arrived (never
    /// before the previous one handed over).
    pub fn next_batch(&mut self, wait: Duration, f: &mut dyn FnMut(&[Packet<'_>])) -> usize {
        let deadline = Instant::now() + wait;
        loop {
            self.receive(deadline);
            self.release(Instant::now(), false);
            if !self.batch.is_empty() || Instant::now() >= deadline {
                break;
            }
        }
        self.hand_over(f)
    }

    /// Hands over everything received and held, without waiting out
    /// the reorder window: for a probe that stops, so nothing received is lost.
    pub fn drain(&mut self, f: &mut dyn FnMut(&[Packet<'_>])) -> usize {
        while let Ok(m) = self.rx.try_recv() {
            self.hold(m);
        }
        let mut handed = 0;
        while !self.held.is_empty() {
            self.release(Instant::now(), true);
            handed += self.hand_over(f);
        }
        handed
    }

    /// Gives `f` the batch as packets; how many.
    fn hand_over(&mut self, f: &mut dyn FnMut(&[Packet<'_>])) -> usize {
        let bytes: usize = self.batch.iter().map(|m| m.frame.len()).sum();
        self.shared.queued_bytes.fetch_sub(bytes, Relaxed);
        let mut packets = [Packet::EMPTY; BATCH];
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
        self.batch.len()
    }

    /// Moves what the threads queued into `held`, waiting until `deadline`
    /// or until the first held message is due.
    fn receive(&mut self, deadline: Instant) {
        let due = self.held.values().next().map(|m| m.arrived + self.reorder);
        let until = due.map_or(deadline, |d| d.min(deadline));
        let first = self.rx.recv_timeout(until.saturating_duration_since(Instant::now()));
        let Ok(first) = first else { return };
        self.hold(first);
        while let Ok(m) = self.rx.try_recv() {
            self.hold(m);
        }
    }

    fn hold(&mut self, m: Message) {
        // An agent time over a minute from the arrival (none given, or a
        // clock far off) sorts by the arrival instead.
        let believed = (m.hep_ns - m.ts_ns).abs() <= 60_000_000_000;
        let key = (if believed { m.hep_ns } else { m.ts_ns }, self.held_seq);
        self.held_seq += 1;
        self.arrivals.push_back((m.arrived, key));
        self.held.insert(key, m);
    }

    /// Moves into `batch` the held messages whose reorder window has passed,
    /// earliest agent time first: one not yet due holds back those after
    /// it, but none waits past twice the window (an agent whose clock runs
    /// ahead sorts last, and steady traffic must not hold it for ever: all
    /// before it go with it), and never more than a queue's worth is held.
    /// With `all`, every held message is due.
    fn release(&mut self, now: Instant, all: bool) {
        self.batch.clear();
        while let Some(&(arrived, key)) = self.arrivals.front() {
            let gone = !self.held.contains_key(&key);
            if !gone && arrived + 2 * self.reorder > now {
                break;
            }
            if !gone {
                self.overdue = self.overdue.max(Some(key));
            }
            self.arrivals.pop_front();
        }
        while self.batch.len() < BATCH {
            let Some((&key, m)) = self.held.iter().next() else {
                break;
            };
            let due = all
                || m.arrived + self.reorder <= now
                || self.overdue.is_some_and(|o| key <= o)
                || self.held.len() > QUEUE;
            if !due {
                break;
            }
            let Some(mut m) = self.held.remove(&key) else {
                break;
            };
            m.ts_ns = m.ts_ns.max(self.last_ns);
            self.last_ns = m.ts_ns;
            self.batch.push(m);
        }
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
            connections_timed_out: c.connections_timed_out.load(Relaxed),
            threads_failed: c.threads_failed.load(Relaxed),
        }
    }
}

impl Drop for HepListener {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
    }
}

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
        let parsed = hep::Hep::parse(message).ok();
        if let Some(key) = &self.key {
            let given = parsed.as_ref().and_then(|h| h.auth_key);
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
        // Counted before it is queued: the engine may take it at once, and
        // the counts must never show a message handed over but not received.
        c.received.fetch_add(1, Relaxed);
        let ts_ns = now_ns();
        let hep_ns = parsed.map_or(ts_ns, |h| h.ts_ns);
        match tx.try_send(Message { ts_ns, arrived: Instant::now(), hep_ns, frame }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                c.received.fetch_sub(1, Relaxed);
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
    use std::io::ErrorKind;
    let mut buf = vec![0u8; 0x1_0000];
    while !s.stop.load(Relaxed) {
        match socket.recv_from(&mut buf) {
            Ok((n, peer)) => {
                let _ = s.take(peer, &buf[..n], tx);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            // Anything else (an ICMP error reported on the socket): no spin.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

mod tcp;
#[cfg(test)]
mod tests;
