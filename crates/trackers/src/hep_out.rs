//! [`HepOut`]: each SIP message the engine sees, sent as a HEP3 datagram
//! (type 1, SIP) to a collector such as Homer, heplify-server or sngrep,
//! with its captured addresses, ports and time, and its Call-ID as the
//! correlation id (chunk 0x11). The packet path only queues bytes: a
//! thread sends them. The queue is bounded ([`MAX_QUEUED`] messages,
//! [`MAX_QUEUED_BYTES`]); what does not fit is counted as dropped, never
//! waited for, so a slow or dead collector cannot hold up capture. A send
//! waits at most [`SEND_TIMEOUT`], and the end of a run at most
//! [`FINISH_WITHIN`]: what is left then is counted as dropped. Messages
//! that arrived as HEP are not sent again (a probe reading one feed and
//! sending to the same collector would loop). docs/hep.md lists the chunks.

use crate::hep_quality::{self, CallIds, HepFields};
use crate::hep_rtcp;
use crate::lock;
use calliper_model::event::{CallPhase, SipSeen, SipTransport};
use calliper_model::{Event, Tracker};
use calliper_wire::hep::{self, Hep, HepTransport};
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most messages waiting to be sent; beyond it new ones are dropped.
pub const MAX_QUEUED: usize = 8192;
/// Most bytes waiting to be sent (the batch being sent may hold as many).
pub const MAX_QUEUED_BYTES: usize = 16 << 20;
/// Longest one send may block (a link slower than the messages).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest the end of a run waits for the queue to drain.
pub const FINISH_WITHIN: Duration = Duration::from_secs(5);

/// Where and how to send.
#[derive(Debug, Clone)]
pub struct HepTarget {
    /// UDP or TCP.
    pub transport: HepTransport,
    /// The collector.
    pub addr: SocketAddr,
    /// The capture agent id every message carries (chunk 0x0c).
    pub capture_id: u32,
    /// The collector's authentication key (chunk 0x0e), if it wants one.
    pub auth_key: Option<Vec<u8>>,
}

/// What the sender did, counted.
#[derive(Debug, Default)]
pub struct HepCounts {
    /// Messages handed to the kernel (UDP: not a delivery).
    pub sent: AtomicU64,
    /// Messages dropped: the queue was full, or still queued when the run
    /// ended and [`FINISH_WITHIN`] had passed.
    pub dropped: AtomicU64,
    /// Messages the socket refused or timed out on (a collector's port
    /// unreachable is reported by the kernel on the send after).
    pub failed: AtomicU64,
    /// Messages too long for HEP's 16-bit length, not sent.
    pub too_long: AtomicU64,
    /// Interval reports not sent: their call's Call-ID was not kept
    /// ([`crate::hep_quality::MAX_CALLS`] open calls were).
    pub uncorrelated: AtomicU64,
}

#[derive(Default)]
struct Queue {
    messages: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Set by the end of the run: send what is queued until then.
    closed: Option<Instant>,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    counts: HepCounts,
    target: HepTarget,
    /// Open calls' Call-IDs, for their interval reports (shards deliver
    /// media events, the first shard signalling: one table for all).
    calls: Mutex<CallIds>,
}

/// The tracker that queues HEP messages, and (in the original, not its
/// clones) the thread that sends them.
pub struct HepOut {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl HepOut {
    /// Opens a UDP socket towards `target` (TCP connects when the first
    /// message is sent) and starts the sending thread.
    pub fn start(target: HepTarget) -> std::io::Result<HepOut> {
        let link = Link::open(&target)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            counts: HepCounts::default(),
            target,
            calls: Mutex::new(CallIds::default()),
        });
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name("hep-out".into())
            .spawn(move || send_all(&for_thread, link))?;
        Ok(HepOut { shared, thread: Some(thread) })
    }

    /// A handle for the analyser's trackers (queues; never sends itself).
    pub fn tracker(&self) -> Box<dyn Tracker> {
        Box::new(HepOut { shared: self.shared.clone(), thread: None })
    }

    /// The counts so far.
    pub fn counts(&self) -> &HepCounts {
        &self.shared.counts
    }

    /// Sends what is queued (for at most [`FINISH_WITHIN`]), then stops
    /// the thread; the counts stay.
    pub fn finish(&mut self) {
        let Some(t) = self.thread.take() else {
            return;
        };
        lock(&self.shared.queue).closed.get_or_insert(Instant::now() + FINISH_WITHIN);
        self.shared.ready.notify_all();
        let _ = t.join();
    }

    fn queue(&self, message: Vec<u8>) {
        let mut q = lock(&self.shared.queue);
        let full = q.messages.len() >= MAX_QUEUED || q.bytes + message.len() > MAX_QUEUED_BYTES;
        if full || q.closed.is_some() {
            drop(q);
            self.shared.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.bytes += message.len();
        q.messages.push_back(message);
        drop(q);
        self.shared.ready.notify_one();
    }
}

/// The sending thread: until closed and empty, or closed and past its
/// deadline (what is left then counted as dropped).
fn send_all(shared: &Shared, mut link: Link) {
    loop {
        let (batch, deadline): (Vec<Vec<u8>>, Option<Instant>) = {
            let mut q = lock(&shared.queue);
            while q.messages.is_empty() && q.closed.is_none() {
                q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            if q.messages.is_empty() {
                return;
            }
            q.bytes = 0;
            (q.messages.drain(..).collect(), q.closed)
        };
        let n = batch.len();
        for (i, m) in batch.into_iter().enumerate() {
            if deadline.is_some_and(|d| Instant::now() > d) {
                let left = (n - i) as u64 + lock(&shared.queue).messages.drain(..).count() as u64;
                shared.counts.dropped.fetch_add(left, Ordering::Relaxed);
                return;
            }
            let counter = match link.send(&m) {
                Ok(_) => &shared.counts.sent,
                Err(_) => &shared.counts.failed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The way to the collector.
enum Link {
    Udp(UdpSocket),
    /// The connection (none before the first message or after a
    /// failure), and when to try again after one failed.
    Tcp {
        addr: SocketAddr,
        stream: Option<TcpStream>,
        retry_at: Instant,
    },
}

/// Wait before connecting again after a connection failed: messages in
/// between count as failed rather than each waiting for a connect.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

impl Link {
    fn open(target: &HepTarget) -> std::io::Result<Link> {
        if target.transport == HepTransport::Tcp {
            return Ok(Link::Tcp { addr: target.addr, stream: None, retry_at: Instant::now() });
        }
        let bind: SocketAddr = if target.addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(bind)?;
        socket.connect(target.addr)?;
        socket.set_write_timeout(Some(SEND_TIMEOUT))?;
        Ok(Link::Udp(socket))
    }

    /// Sends one message, waiting at most [`SEND_TIMEOUT`] (and as long
    /// to connect).
    fn send(&mut self, m: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        match self {
            Link::Udp(socket) => socket.send(m).map(drop),
            Link::Tcp { addr, stream, retry_at } => {
                if stream.is_none() {
                    if Instant::now() < *retry_at {
                        return Err(std::io::ErrorKind::NotConnected.into());
                    }
                    let s = TcpStream::connect_timeout(addr, SEND_TIMEOUT).inspect_err(|_| {
                        *retry_at = Instant::now() + RECONNECT_AFTER;
                    })?;
                    s.set_write_timeout(Some(SEND_TIMEOUT))?;
                    s.set_nodelay(true)?;
                    *stream = Some(s);
                }
                let sent = stream.as_mut().map_or(Ok(()), |s| s.write_all(m));
                if sent.is_err() {
                    // A message cut off mid-way would desynchronise the
                    // collector: start again on a new connection.
                    *stream = None;
                    *retry_at = Instant::now() + RECONNECT_AFTER;
                }
                sent
            }
        }
    }
}

/// The IP protocol HEP names a SIP transport by.
fn ip_protocol(t: SipTransport) -> u8 {
    match t {
        SipTransport::Udp => 17,
        SipTransport::Tcp | SipTransport::WebSocket => 6,
        SipTransport::Sctp => 132,
    }
}

impl Tracker for HepOut {
    fn event(&mut self, event: &Event<'_>) {
        let target = &self.shared.target;
        let fields =
            HepFields { capture_id: target.capture_id, auth_key: target.auth_key.as_deref() };
        match event {
            Event::Sip(m) if !m.via_hep => self.send(sip_message(m, &fields)),
            Event::Call(c) if c.phase == CallPhase::Started => {
                lock(&self.shared.calls).started(c.call, c.call_id);
            }
            // Every call ends so, with a record or without (one pushed out
            // by the unanswered-INVITE cap has none): its intervals are all
            // reported by then, and its hang-up reports take the record's.
            Event::Call(c) if c.phase == CallPhase::Ended => {
                lock(&self.shared.calls).ended(c.call);
            }
            Event::Interval(i) => {
                let Some(serial) = i.call else {
                    return;
                };
                let message = match lock(&self.shared.calls).get(serial) {
                    Some(call_id) => hep_quality::periodic(i, call_id, &fields),
                    None => {
                        self.shared.counts.uncorrelated.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                };
                self.send(message);
            }
            Event::RtcpPacket(p) => {
                for message in hep_rtcp::messages(p, &fields) {
                    self.send(message);
                }
            }
            Event::CallRecord(c) => {
                for s in &c.streams {
                    self.send(hep_quality::hangup(c, s, &fields));
                }
            }
            _ => {}
        }
    }
}

impl HepOut {
    /// Queues a message, or counts it as too long for HEP.
    fn send(&self, message: Option<Vec<u8>>) {
        match message {
            Some(bytes) => self.queue(bytes),
            None => {
                self.shared.counts.too_long.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A SIP message as HEP type 1 (None when too long).
fn sip_message(m: &SipSeen<'_>, f: &HepFields) -> Option<Vec<u8>> {
    Hep {
        ip_protocol: ip_protocol(m.transport),
        capture_id: f.capture_id,
        auth_key: f.auth_key,
        correlation_id: (!m.call_id.is_empty()).then_some(m.call_id.as_bytes()),
        ..Hep::udp(hep::kind::SIP, m.src, m.dst, m.ts_ns, m.bytes)
    }
    .emit()
    .ok()
}

impl Drop for HepOut {
    /// The original, dropped without [`HepOut::finish`] (an analysis that
    /// failed): what is queued is sent (within [`FINISH_WITHIN`]) and counted.
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages reach a socket as HEP that parses back to what was seen;
    /// a full queue counts what it drops.
    #[test]
    fn sip_goes_out_as_hep_and_a_full_queue_counts_drops() {
        let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
        let out = HepOut::start(HepTarget {
            transport: HepTransport::Udp,
            addr: collector.local_addr().unwrap(),
            capture_id: 7,
            auth_key: Some(b"key".to_vec()),
        })
        .unwrap();
        let mut t = HepOut { shared: out.shared.clone(), thread: None };
        let seen = calliper_model::event::SipSeen {
            ts_ns: 1_700_000_000_123_456_000,
            src: ("10.0.0.1".parse().unwrap(), 5060),
            dst: ("10.0.0.2".parse().unwrap(), 5080),
            transport: SipTransport::Udp,
            call_id: "abc@x",
            method: Some("INVITE"),
            status: None,
            cseq_method: Some("INVITE"),
            call: None,
            bytes: b"INVITE sip:b SIP/2.0\r\n\r\n",
            via_hep: false,
        };
        t.event(&Event::Sip(&seen));
        let mut buf = [0u8; 2048];
        let n = collector.recv(&mut buf).unwrap();
        let h = Hep::parse(&buf[..n]).unwrap();
        assert_eq!((h.src, h.sport, h.dst, h.dport), (seen.src.0, 5060, seen.dst.0, 5080));
        assert_eq!((h.ts_ns, h.kind, h.capture_id), (seen.ts_ns, hep::kind::SIP, 7));
        assert_eq!((h.correlation_id, h.auth_key), (Some(&b"abc@x"[..]), Some(&b"key"[..])));
        assert_eq!(h.payload, seen.bytes);
        // What came in as HEP is not sent again (no loop through a collector).
        t.event(&Event::Sip(&calliper_model::event::SipSeen { via_hep: true, ..seen }));
        // Finished: what comes after is dropped, and counted.
        let mut out = out;
        out.finish();
        t.event(&Event::Sip(&seen));
        let c = t.counts();
        assert_eq!((c.sent.load(Ordering::Relaxed), c.dropped.load(Ordering::Relaxed)), (1, 1));
    }
}
