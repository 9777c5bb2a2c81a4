//! The collector over TCP: one thread accepting, one per connection, each
//! splitting its stream into HEP3 messages by their stated lengths.

use super::*;

pub(super) fn accept(listener: &TcpListener, s: &Arc<Shared>, tx: &SyncSender<Message>) {
    while !s.stop.load(Relaxed) {
        let Ok((stream, peer)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        if !s.admit(peer.ip()) {
            s.counts.connections_refused.fetch_add(1, Relaxed);
            continue;
        }
        s.counts.connections.fetch_add(1, Relaxed);
        let (shared, tx) = (s.clone(), tx.clone());
        let started = std::thread::Builder::new().name("hep-tcp".into()).spawn(move || {
            read_stream(stream, peer, &shared, &tx);
            shared.release(peer.ip());
        });
        if started.is_err() {
            s.counts.threads_failed.fetch_add(1, Relaxed);
            s.release(peer.ip());
        }
    }
}

impl Shared {
    /// Takes a connection slot for `peer`, if one is free overall and for it.
    fn admit(&self, peer: IpAddr) -> bool {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let open = self.open_connections.load(Relaxed);
        let from_peer = peers.get(&peer).copied().unwrap_or(0);
        if open >= MAX_CONNECTIONS || from_peer >= MAX_PER_PEER {
            return false;
        }
        peers.insert(peer, from_peer + 1);
        self.open_connections.store(open + 1, Relaxed);
        true
    }

    /// Gives back a slot taken by [`Shared::admit`].
    fn release(&self, peer: IpAddr) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = peers.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                peers.remove(&peer);
            }
        }
        self.open_connections.fetch_sub(1, Relaxed);
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
    // When the message being read began (the connection, for the first).
    let mut message_began = Some(Instant::now());
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
                    message_began = None;
                }
            }
        }
        buf.drain(..used);
        if !buf.is_empty() {
            // Part of the next message came with the last one's end.
            message_began.get_or_insert_with(Instant::now);
        }
        // Checked on every pass: a peer that trickles bytes must not hold
        // its slot any longer than a silent one.
        let slow = message_began.is_some_and(|t| t.elapsed() >= MESSAGE_WITHIN);
        if slow || last_message.elapsed() >= IDLE {
            s.counts.connections_timed_out.fetch_add(1, Relaxed);
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => {
                message_began.get_or_insert_with(Instant::now);
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}

/// The length of the whole message at the start of `buf`: None when more
/// bytes are needed, Err when the stream is not HEP3 there.
pub(super) fn next_message(buf: &[u8]) -> Option<Result<usize, ()>> {
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
