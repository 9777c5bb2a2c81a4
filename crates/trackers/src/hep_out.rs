//! [`HepOut`]: each SIP message the engine sees, sent as a HEP3 datagram
//! (type 1, SIP) to a collector such as Homer, heplify-server or sngrep,
//! with its captured addresses, ports and time, and its Call-ID as the
//! correlation id (chunk 0x11). The packet path only queues bytes: a
//! thread sends them. The queue is bounded ([`MAX_QUEUED`]); what does not
//! fit is counted as dropped, never waited for, so a slow or dead
//! collector cannot hold up capture. docs/hep.md lists the chunks.

use crate::lock;
use calliper_model::event::SipTransport;
use calliper_model::{Event, Tracker};
use calliper_wire::hep::{self, Hep};
use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Most messages waiting to be sent; beyond it new ones are dropped.
pub const MAX_QUEUED: usize = 8192;

/// Where and how to send.
#[derive(Debug, Clone)]
pub struct HepTarget {
    /// The collector (UDP).
    pub addr: SocketAddr,
    /// The capture agent id every message carries (chunk 0x0c).
    pub capture_id: u32,
    /// The collector's authentication key (chunk 0x0e), if it wants one.
    pub auth_key: Option<Vec<u8>>,
}

/// What the sender did, counted.
#[derive(Debug, Default)]
pub struct HepCounts {
    /// Messages sent.
    pub sent: AtomicU64,
    /// Messages dropped: the queue was full.
    pub dropped: AtomicU64,
    /// Messages the socket refused (the collector unreachable, say).
    pub failed: AtomicU64,
    /// Messages too long for HEP's 16-bit length, not sent.
    pub too_long: AtomicU64,
}

#[derive(Default)]
struct Queue {
    messages: VecDeque<Vec<u8>>,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    counts: HepCounts,
    target: HepTarget,
}

/// The tracker that queues HEP messages, and (in the original, not its
/// clones) the thread that sends them.
pub struct HepOut {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl HepOut {
    /// Opens a UDP socket towards `target` and starts the sending thread.
    pub fn start(target: HepTarget) -> std::io::Result<HepOut> {
        let bind: SocketAddr = if target.addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(bind)?;
        socket.connect(target.addr)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            counts: HepCounts::default(),
            target,
        });
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name("hep-out".into())
            .spawn(move || send_all(&for_thread, &socket))?;
        Ok(HepOut {
            shared,
            thread: Some(thread),
        })
    }

    /// A handle for the analyser's trackers (queues; never sends itself).
    pub fn tracker(&self) -> Box<dyn Tracker> {
        Box::new(HepOut {
            shared: self.shared.clone(),
            thread: None,
        })
    }

    /// The counts so far.
    pub fn counts(&self) -> &HepCounts {
        &self.shared.counts
    }

    /// Sends what is queued, then stops the thread (the counts stay).
    pub fn finish(&mut self) {
        lock(&self.shared.queue).closed = true;
        self.shared.ready.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn queue(&self, message: Vec<u8>) {
        let mut q = lock(&self.shared.queue);
        if q.messages.len() >= MAX_QUEUED || q.closed {
            drop(q);
            self.shared.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.messages.push_back(message);
        drop(q);
        self.shared.ready.notify_one();
    }
}

/// The sending thread: until closed and empty.
fn send_all(shared: &Shared, socket: &UdpSocket) {
    loop {
        let batch: Vec<Vec<u8>> = {
            let mut q = lock(&shared.queue);
            while q.messages.is_empty() && !q.closed {
                q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            if q.messages.is_empty() {
                return;
            }
            q.messages.drain(..).collect()
        };
        for m in batch {
            let counter = match socket.send(&m) {
                Ok(_) => &shared.counts.sent,
                Err(_) => &shared.counts.failed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
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
        let Event::Sip(m) = event else {
            return;
        };
        let target = &self.shared.target;
        let message = Hep {
            src: m.src.0,
            dst: m.dst.0,
            sport: m.src.1,
            dport: m.dst.1,
            ip_protocol: ip_protocol(m.transport),
            ts_ns: m.ts_ns,
            kind: hep::kind::SIP,
            capture_id: target.capture_id,
            auth_key: target.auth_key.as_deref(),
            correlation_id: (!m.call_id.is_empty()).then_some(m.call_id.as_bytes()),
            vlan: None,
            mos: None,
            payload: m.bytes,
            compressed: false,
        };
        match message.emit() {
            Ok(bytes) => self.queue(bytes),
            Err(_) => {
                self.shared.counts.too_long.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for HepOut {
    /// The original, dropped without [`HepOut::finish`] (an analysis that
    /// failed): the thread is told to stop after what is queued.
    fn drop(&mut self) {
        if self.thread.is_some() {
            lock(&self.shared.queue).closed = true;
            self.shared.ready.notify_all();
        }
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
            addr: collector.local_addr().unwrap(),
            capture_id: 7,
            auth_key: Some(b"key".to_vec()),
        })
        .unwrap();
        let mut t = HepOut {
            shared: out.shared.clone(),
            thread: None,
        };
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
        };
        t.event(&Event::Sip(&seen));
        let mut buf = [0u8; 2048];
        let n = collector.recv(&mut buf).unwrap();
        let h = Hep::parse(&buf[..n]).unwrap();
        assert_eq!(
            (h.src, h.sport, h.dst, h.dport),
            (seen.src.0, 5060, seen.dst.0, 5080)
        );
        assert_eq!(
            (h.ts_ns, h.kind, h.capture_id),
            (seen.ts_ns, hep::kind::SIP, 7)
        );
        assert_eq!(
            (h.correlation_id, h.auth_key),
            (Some(&b"abc@x"[..]), Some(&b"key"[..]))
        );
        assert_eq!(h.payload, seen.bytes);
        // Finished: what comes after is dropped, and counted.
        let mut out = out;
        out.finish();
        t.event(&Event::Sip(&seen));
        let c = t.counts();
        assert_eq!(
            (
                c.sent.load(Ordering::Relaxed),
                c.dropped.load(Ordering::Relaxed)
            ),
            (1, 1)
        );
    }
}
