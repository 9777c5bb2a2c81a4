use super::*;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};

fn message(key: Option<&'static [u8]>, body: &'static [u8]) -> Vec<u8> {
    let (src, dst) =
        (("192.0.2.10".parse().unwrap(), 5060), ("198.51.100.7".parse().unwrap(), 5080));
    let at = 1_700_000_000_123_456_000;
    hep::Hep { capture_id: 7, auth_key: key, ..hep::Hep::udp(hep::kind::SIP, src, dst, at, body) }
        .emit()
        .unwrap()
}

fn listen(transport: HepTransport, key: Option<&[u8]>) -> HepListener {
    listen_reordering(transport, key, DEFAULT_REORDER)
}

fn listen_reordering(
    transport: HepTransport,
    key: Option<&[u8]>,
    reorder: Duration,
) -> HepListener {
    HepListener::open(&HepListenConfig {
        transport,
        address: (Ipv4Addr::LOCALHOST, 0).into(),
        key: key.map(<[u8]>::to_vec),
        reorder,
    })
    .unwrap()
}

/// What is handed over until `want` frames came (or 10 s passed), as
/// (time, link type, frame).
fn collect(l: &mut HepListener, want: usize) -> Vec<(i64, u16, Vec<u8>)> {
    collect_within(l, want, Duration::from_secs(10))
}

fn collect_within(l: &mut HepListener, want: usize, within: Duration) -> Vec<(i64, u16, Vec<u8>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + within;
    while got.len() < want && Instant::now() < deadline {
        l.next_batch(Duration::from_millis(100), &mut |b| {
            got.extend(b.iter().map(|p| (p.ts_ns, p.link_type, p.data.to_vec())))
        });
    }
    got
}

/// Waits until the listener's counts satisfy `done`.
fn settle(l: &HepListener, done: impl Fn(&HepListenStats) -> bool) -> HepListenStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(&l.stats()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    l.stats()
}

/// A datagram becomes a raw IP frame from the agent to the listener whose
/// UDP payload is the message, byte for byte, stamped when it came; what
/// is not HEP3 is counted and left out.
#[test]
fn datagrams_become_frames_from_the_agent() {
    let mut l = listen(HepTransport::Udp, None);
    let agent = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let m = message(None, b"OPTIONS sip:a@b SIP/2.0\r\n\r\n");
    let before = now_ns();
    agent.send_to(b"INVITE sip:a@b SIP/2.0\r\n\r\n", l.local_addr()).unwrap();
    agent.send_to(&m, l.local_addr()).unwrap();
    let got = collect(&mut l, 1);
    assert_eq!(got.len(), 1);
    let (ts, link, frame) = &got[0];
    assert!((before..=now_ns()).contains(ts));
    assert_eq!(*link, linktype::RAW);
    let f = calliper_wire::decode(*link, frame).unwrap();
    let (sport, dport, payload) = f.udp().unwrap();
    assert_eq!(SocketAddr::new(f.src, sport), agent.local_addr().unwrap());
    assert_eq!(SocketAddr::new(f.dst, dport), l.local_addr());
    assert_eq!(payload, &m[..]);
    let s = settle(&l, |s| s.malformed == 1);
    assert_eq!((s.received, s.malformed), (1, 1));
}

/// With a key, only messages carrying it are taken; a TCP connection is
/// closed at its first message without it.
#[test]
fn the_key_is_required_when_configured() {
    let mut l = listen(HepTransport::Udp, Some(b"s3cret"));
    let agent = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    for key in [None, Some(&b"s3creT"[..]), Some(&b"s3cret!"[..]), Some(&b"s3cret"[..])] {
        agent.send_to(&message(key, b"BYE sip:x SIP/2.0\r\n\r\n"), l.local_addr()).unwrap();
    }
    assert_eq!(collect(&mut l, 1).len(), 1);
    let s = settle(&l, |s| s.unauthenticated == 3);
    assert_eq!((s.received, s.unauthenticated), (1, 3));

    let mut l = listen(HepTransport::Tcp, Some(b"s3cret"));
    let mut c = TcpStream::connect(l.local_addr()).unwrap();
    c.write_all(&message(None, b"BYE sip:x SIP/2.0\r\n\r\n")).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(c.read(&mut [0u8; 16]).unwrap(), 0, "the connection is closed");
    // Already counted (the connection was closed for it): nothing came.
    assert!(collect_within(&mut l, 1, Duration::from_millis(300)).is_empty());
    assert_eq!(l.stats().unauthenticated, 1);
}

/// Over TCP, messages are found by their stated lengths however the stream
/// is cut; a stream that stops being HEP3 is counted and closed.
#[test]
fn tcp_streams_are_split_by_stated_length() {
    let mut l = listen(HepTransport::Tcp, None);
    let mut c = TcpStream::connect(l.local_addr()).unwrap();
    c.set_nodelay(true).unwrap();
    let a = message(None, b"INVITE sip:a@b SIP/2.0\r\n\r\n");
    let b = message(None, b"SIP/2.0 200 OK\r\n\r\n");
    // The first byte by byte, then the second with the first's end.
    for byte in &a[..a.len() - 3] {
        c.write_all(&[*byte]).unwrap();
    }
    c.write_all(&[&a[a.len() - 3..], &b[..]].concat()).unwrap();
    let got = collect(&mut l, 2);
    let payloads: Vec<Vec<u8>> = got
        .iter()
        .map(|(_, link, f)| calliper_wire::decode(*link, f).unwrap().udp().unwrap().2.to_vec())
        .collect();
    assert_eq!(payloads, [a.clone(), b]);
    c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(c.read(&mut [0u8; 16]).unwrap(), 0, "closed after garbage");
    let s = settle(&l, |s| s.malformed == 1);
    assert_eq!((s.received, s.malformed, s.connections), (2, 1, 1));
    // A header stating less than itself is garbage too.
    let mut c = TcpStream::connect(l.local_addr()).unwrap();
    c.write_all(b"HEP3\x00\x03").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(c.read(&mut [0u8; 16]).unwrap(), 0);
    assert_eq!(settle(&l, |s| s.malformed == 2).malformed, 2);
}

/// A full queue drops and counts what does not fit (the engine is not
/// reading here); nothing is lost uncounted.
#[test]
fn a_full_queue_drops_and_counts() {
    let l = listen(HepTransport::Tcp, None);
    let mut c = TcpStream::connect(l.local_addr()).unwrap();
    let m = message(None, b"OPTIONS sip:a@b SIP/2.0\r\n\r\n");
    let total = QUEUE + 100;
    let all: Vec<u8> = (0..total).flat_map(|_| m.iter().copied()).collect();
    c.write_all(&all).unwrap();
    let s = settle(&l, |s| s.received + s.dropped == total as u64);
    assert_eq!((s.received, s.dropped), (QUEUE as u64, 100));
}

/// Connections beyond the cap from one address are closed at once and
/// counted; a slot comes free when its connection closes.
#[test]
fn connections_from_one_address_are_capped() {
    let l = listen(HepTransport::Tcp, None);
    let mut open: Vec<TcpStream> =
        (0..MAX_PER_PEER).map(|_| TcpStream::connect(l.local_addr()).unwrap()).collect();
    settle(&l, |s| s.connections == MAX_PER_PEER as u64);
    let mut extra = TcpStream::connect(l.local_addr()).unwrap();
    extra.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(extra.read(&mut [0u8; 16]).unwrap(), 0, "refused");
    let s = settle(&l, |s| s.connections_refused == 1);
    assert_eq!((s.connections, s.connections_refused), (MAX_PER_PEER as u64, 1));
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    while l.stats().connections < MAX_PER_PEER as u64 + 1 && Instant::now() < deadline {
        let c = TcpStream::connect(l.local_addr()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        open.push(c);
    }
    assert_eq!(l.stats().connections, MAX_PER_PEER as u64 + 1, "a freed slot is taken again");
}

/// A peer that sends nothing, or trickles a message, loses its slot after
/// MESSAGE_WITHIN (shortened in tests), counted.
#[test]
fn slow_peers_lose_their_slots() {
    let l = listen(HepTransport::Tcp, None);
    let silent = TcpStream::connect(l.local_addr()).unwrap();
    let mut trickle = TcpStream::connect(l.local_addr()).unwrap();
    let m = message(None, b"OPTIONS sip:a@b SIP/2.0\r\n\r\n");
    let started = Instant::now();
    for byte in &m[..m.len() - 1] {
        if trickle.write_all(&[*byte]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        if started.elapsed() > 4 * MESSAGE_WITHIN {
            break;
        }
    }
    let s = settle(&l, |s| s.connections_timed_out == 2);
    assert_eq!((s.connections_timed_out, s.received), (2, 0));
    for mut c in [silent, trickle] {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert!(matches!(c.read(&mut [0u8; 16]), Ok(0) | Err(_)), "closed");
    }
}

#[test]
fn next_message_waits_for_whole_messages_and_refuses_garbage() {
    let m = message(None, b"x");
    assert_eq!(next_message(&[]), None);
    assert_eq!(next_message(b"HE"), None);
    assert_eq!(next_message(&m[..m.len() - 1]), None);
    assert_eq!(next_message(&m), Some(Ok(m.len())));
    assert_eq!(next_message(b"HEX"), Some(Err(())));
    assert_eq!(next_message(b"HEP3\x00\x05"), Some(Err(())));
}

/// An agent's worker processes race: a response stamped after its request
/// can reach the collector first. Messages within [`DEFAULT_REORDER`] of each other
/// go on in the agent's time order, stamped in arrival order.
#[test]
fn a_response_that_overtook_its_request_is_handed_over_after_it() {
    let l = listen(HepTransport::Udp, None);
    response_before_request(l, Duration::ZERO);
}

/// On a loaded host one agent process can lag another by more than the
/// default window: a wider one (`--hep-reorder-ms`) still puts a request
/// that came 250 ms after its response first.
#[test]
fn a_wider_window_waits_for_a_request_that_lagged_longer() {
    let l = listen_reordering(HepTransport::Udp, None, Duration::from_millis(600));
    response_before_request(l, Duration::from_millis(250));
}

/// Sends a response, then `lag` later its request (stamped before it), and
/// requires them handed over request first.
fn response_before_request(mut l: HepListener, lag: Duration) {
    let agent = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let stamped = |ts_ns: i64, body: &'static [u8]| {
        let m = message(None, body);
        let mut h = hep::Hep::parse(&m).unwrap();
        h.ts_ns = ts_ns;
        h.emit().unwrap()
    };
    let t = now_ns();
    agent.send_to(&stamped(t + 2_000_000, b"SIP/2.0 200 OK\r\n\r\n"), l.local_addr()).unwrap();
    // The collector runs meanwhile: a window narrower than the lag lets
    // the response go alone.
    let mut got = collect_within(&mut l, 2, lag);
    agent.send_to(&stamped(t, b"BYE sip:a@b SIP/2.0\r\n\r\n"), l.local_addr()).unwrap();
    got.extend(collect(&mut l, 2 - got.len()));
    assert_eq!(got.len(), 2);
    let ends = |f: &[u8], s: &[u8]| f.windows(s.len()).any(|w| w == s);
    assert!(ends(&got[0].2, b"BYE sip:a@b"), "the request first");
    assert!(ends(&got[1].2, b"200 OK"));
    assert!(got[0].0 <= got[1].0, "times never go back");
}

/// A message its agent stamped ahead sorts last, but waits at most twice
/// [`DEFAULT_REORDER`] however steadily others arrive.
#[test]
fn a_message_stamped_ahead_is_not_held_for_ever() {
    let mut l = listen(HepTransport::Udp, None);
    let agent = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    // 50 s ahead: still believed (a minute at most), so it sorts last.
    // (HEP carries microseconds.)
    let t = now_ns() / 1000 * 1000;
    let ahead = t + 50_000_000_000;
    let stamped = |ts_ns: i64| {
        let m = message(None, b"OPTIONS sip:a@b SIP/2.0\r\n\r\n");
        let mut h = hep::Hep::parse(&m).unwrap();
        h.ts_ns = ts_ns;
        h.emit().unwrap()
    };
    agent.send_to(&stamped(ahead), l.local_addr()).unwrap();
    let (mut held_at, mut out_at) = (None, None);
    for n in 0..400 {
        // Steady traffic stamped before it, every 5 ms.
        agent.send_to(&stamped(t + n * 1000), l.local_addr()).unwrap();
        l.next_batch(Duration::from_millis(5), &mut |_| {});
        let holding = l.held.values().any(|m| m.hep_ns == ahead);
        if holding && held_at.is_none() {
            held_at = Some(Instant::now());
        }
        if !holding && held_at.is_some() {
            out_at = Some(Instant::now());
            break;
        }
    }
    let (held, out) = (held_at.expect("it was held"), out_at.expect("it was let go"));
    assert!(out - held < 3 * DEFAULT_REORDER, "held {:?}", out - held);
}
