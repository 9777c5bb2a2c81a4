//! An application's handle on its local node.

use crate::packet::NodeId;
use std::cell::Cell;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// How often a client repeats its bind, so the node's lease on its virtual
/// port (`client_lease_ms`, at least 3 s) does not run out while it lives.
pub const CLIENT_REFRESH: Duration = Duration::from_secs(1);

/// An application's handle on its local node.
pub struct Client {
    socket: UdpSocket,
    node: SocketAddr,
    vport: u16,
    bound_at: Cell<Instant>,
    foreign: Cell<u64>,
    /// Whether the socket is non-blocking now (changed only when it must
    /// be, not on every receive).
    nonblocking: Cell<bool>,
}

impl Client {
    /// Connects to the node at `node` from an ephemeral local port and binds
    /// `vport` (0: send only, nothing bound). The binding is this socket's
    /// while the client lives: it is renewed every [`CLIENT_REFRESH`] while
    /// the client sends or receives, and released when it is dropped.
    pub fn bind(node: SocketAddr, vport: u16) -> io::Result<Client> {
        let local: SocketAddr = if node.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
            .parse()
            .map_err(io::Error::other)?;
        let c = Client {
            socket: UdpSocket::bind(local)?,
            node,
            vport,
            bound_at: Cell::new(Instant::now()),
            foreign: Cell::new(0),
            nonblocking: Cell::new(false),
        };
        c.request(1)?;
        Ok(c)
    }

    /// Sends a bind (1) or release (3) of this client's virtual port.
    fn request(&self, kind: u8) -> io::Result<()> {
        if self.vport == 0 {
            return Ok(());
        }
        let [v0, v1] = self.vport.to_be_bytes();
        self.socket.send_to(&[kind, v0, v1], self.node)?;
        self.bound_at.set(Instant::now());
        Ok(())
    }

    /// Repeats the bind if it is due (sending and receiving do it too; a
    /// client that may sit idle calls it each second, so its lease holds).
    pub fn keep_bound(&self) -> io::Result<()> {
        if self.bound_at.get().elapsed() >= CLIENT_REFRESH {
            self.request(1)?;
        }
        Ok(())
    }

    /// Sends `payload` to `vport` on node `dest` (like `sendto`).
    pub fn send_to(&self, dest: NodeId, vport: u16, payload: &[u8]) -> io::Result<()> {
        self.send_parts(dest, vport, &[], payload)
    }

    /// Sends `head` then `payload` as one datagram to `vport` on node
    /// `dest` (a caller's framing without a copy of its own).
    pub fn send_parts(
        &self,
        dest: NodeId,
        vport: u16,
        head: &[u8],
        payload: &[u8],
    ) -> io::Result<()> {
        self.keep_bound()?;
        let mut req = Vec::with_capacity(5 + head.len() + payload.len());
        req.push(2);
        req.extend_from_slice(&vport.to_be_bytes());
        req.extend_from_slice(&dest.to_be_bytes());
        req.extend_from_slice(head);
        req.extend_from_slice(payload);
        self.socket.send_to(&req, self.node)?;
        Ok(())
    }

    /// The client's own address (where deliveries come).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Datagrams that did not come from the node (another local process
    /// writing to this client's socket), ignored.
    pub fn foreign(&self) -> u64 {
        self.foreign.get()
    }

    /// Whether a datagram from `from` is the node's.
    fn is_node(&self, from: SocketAddr) -> bool {
        from == self.node || (self.node.ip().is_unspecified() && from.port() == self.node.port())
    }

    /// The `n` bytes received into `buf` from `from`: a datagram from the
    /// node is `origin (2) vport (2) payload`, and its payload is moved to
    /// the start of `buf`; anything else is counted as foreign.
    fn delivery(&self, buf: &mut [u8], n: usize, from: SocketAddr) -> Option<(NodeId, u16, usize)> {
        match buf[..n] {
            [o0, o1, v0, v1, ..] if self.is_node(from) => {
                buf.copy_within(4..n, 0);
                Some((u16::from_be_bytes([o0, o1]), u16::from_be_bytes([v0, v1]), n - 4))
            }
            _ => {
                self.foreign.set(self.foreign.get() + 1);
                None
            }
        }
    }

    /// Makes the socket blocking or not, if it is not already.
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        if self.nonblocking.get() != on {
            self.socket.set_nonblocking(on)?;
            self.nonblocking.set(on);
        }
        Ok(())
    }

    /// The socket's descriptor, for `poll(2)` beside other sockets.
    pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.socket)
    }

    /// The next delivery if one is waiting (origin, vport, bytes read),
    /// without waiting: for a caller that polls the socket itself. It
    /// leaves the socket non-blocking ([`Client::recv`] sets it back).
    /// `buf` takes the whole datagram, so a payload fills at most
    /// `buf.len() - 4` (the node's header comes first, then is dropped).
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<(NodeId, u16, usize)>> {
        self.keep_bound()?;
        self.set_nonblocking(true)?;
        loop {
            match self.socket.recv_from(buf) {
                Ok((n, from)) => {
                    if let Some(d) = self.delivery(buf, n, from) {
                        return Ok(Some(d));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Receives one delivery (like `recvfrom`): (origin, vport, bytes read).
    /// Returns None on timeout.
    pub fn recv(
        &self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> io::Result<Option<(NodeId, u16, usize)>> {
        let end = Instant::now().checked_add(timeout);
        loop {
            self.keep_bound()?;
            let left = end.map_or(CLIENT_REFRESH, |e| e.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Ok(None);
            }
            self.set_nonblocking(false)?;
            self.socket.set_read_timeout(Some(left.min(CLIENT_REFRESH)))?;
            match self.socket.recv_from(buf) {
                Ok((n, from)) => {
                    if let Some(d) = self.delivery(buf, n, from) {
                        return Ok(Some(d));
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::ConnectionRefused
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Client {
    /// Releases the virtual port.
    fn drop(&mut self) {
        let _ = self.request(3);
    }
}
