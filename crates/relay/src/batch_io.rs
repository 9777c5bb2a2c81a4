//! Batched datagram I/O on Linux: one `recvmmsg` or `sendmmsg` moves up to
//! [`BATCH`] datagrams, so a busy node pays one system call per batch rather
//! than per packet. Buffers are allocated once; nothing is allocated per
//! datagram.
//!
//! This is the crate's only unsafe code: the two system calls and
//! `getsockopt(SO_MEMINFO)` through `libc`, with the pointer arrays built on
//! the stack for each call so no raw pointer outlives it (and the node stays
//! `Send`). The std library has no batched socket calls.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// Datagrams per system call.
pub const BATCH: usize = 64;
/// Largest datagram carried; longer ones are counted and dropped. Voice
/// packets are far smaller; jumbo frames still fit.
pub const MAX_DATAGRAM: usize = 9216;

/// Receives batches of datagrams.
pub struct RecvBatch {
    buf: Vec<u8>,
    lens: [usize; BATCH],
    from: [Option<SocketAddr>; BATCH],
    n: usize,
    /// Datagrams longer than [`MAX_DATAGRAM`] (dropped).
    pub truncated: u64,
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch {
            buf: vec![0; BATCH * MAX_DATAGRAM],
            lens: [0; BATCH],
            from: [None; BATCH],
            n: 0,
            truncated: 0,
        }
    }
}

impl RecvBatch {
    /// Receives up to [`BATCH`] datagrams. With `wait`, blocks for the first
    /// (up to the socket's read timeout) and takes whatever else is queued;
    /// without, returns at once. Returns how many arrived (0 on timeout).
    pub fn recv(&mut self, socket: &UdpSocket, wait: bool) -> io::Result<usize> {
        // SAFETY: all-zero is a valid value for these plain C structs.
        let mut names: [libc::sockaddr_in6; BATCH] = unsafe { zeroed() };
        let mut iov: [libc::iovec; BATCH] = unsafe { zeroed() };
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        for (i, chunk) in self.buf.chunks_exact_mut(MAX_DATAGRAM).enumerate() {
            iov[i] = libc::iovec {
                iov_base: chunk.as_mut_ptr().cast(),
                iov_len: MAX_DATAGRAM,
            };
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_in6).cast();
            h.msg_namelen = size_of::<libc::sockaddr_in6>() as u32;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
        }
        let flags = if wait {
            libc::MSG_WAITFORONE
        } else {
            libc::MSG_DONTWAIT
        };
        // SAFETY: every header points at a live buffer, name and iovec of the
        // sizes given, all outliving the call.
        let r = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                hdrs.as_mut_ptr(),
                BATCH as u32,
                flags,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            self.n = 0;
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted => Ok(0),
                // An ICMP error for an earlier send; nothing to read.
                io::ErrorKind::ConnectionRefused => Ok(0),
                _ => Err(e),
            };
        }
        let mut n = 0;
        for i in 0..r as usize {
            if hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.truncated += 1;
                continue;
            }
            self.lens[n] = hdrs[i].msg_len as usize;
            self.from[n] = sockaddr_to(&names[i]);
            if n != i {
                self.buf.copy_within(
                    i * MAX_DATAGRAM..i * MAX_DATAGRAM + self.lens[n],
                    n * MAX_DATAGRAM,
                );
            }
            n += 1;
        }
        self.n = n;
        Ok(n)
    }

    /// Datagram `i` of the last batch: sender and bytes (None for an
    /// address family other than IPv4/IPv6).
    pub fn get(&self, i: usize) -> Option<(SocketAddr, &[u8])> {
        let from = self.from[..self.n].get(i).copied().flatten()?;
        Some((
            from,
            &self.buf[i * MAX_DATAGRAM..i * MAX_DATAGRAM + self.lens[i]],
        ))
    }
}

/// Collects datagrams and sends them in batches.
pub struct SendBatch {
    buf: Vec<u8>,
    lens: [usize; BATCH],
    to: [SocketAddr; BATCH],
    n: usize,
    /// Datagrams the kernel accepted.
    pub sent: u64,
    /// Datagrams the kernel refused (an error for that datagram).
    pub errors: u64,
    /// Datagrams longer than [`MAX_DATAGRAM`] (dropped).
    pub oversize: u64,
}

impl Default for SendBatch {
    fn default() -> Self {
        SendBatch {
            buf: vec![0; BATCH * MAX_DATAGRAM],
            lens: [0; BATCH],
            to: [SocketAddr::from(([0, 0, 0, 0], 0)); BATCH],
            n: 0,
            sent: 0,
            errors: 0,
            oversize: 0,
        }
    }
}

impl SendBatch {
    /// Queues `bytes` for `to`, sending the batch first if it is full.
    pub fn push(&mut self, socket: &UdpSocket, to: SocketAddr, bytes: &[u8]) {
        self.push_parts(socket, to, &[], bytes);
    }

    /// Queues `head` followed by `body` as one datagram.
    pub fn push_parts(&mut self, socket: &UdpSocket, to: SocketAddr, head: &[u8], body: &[u8]) {
        let len = head.len() + body.len();
        if len > MAX_DATAGRAM {
            self.oversize += 1;
            return;
        }
        if self.n == BATCH {
            self.flush(socket);
        }
        let at = self.n * MAX_DATAGRAM;
        self.buf[at..at + head.len()].copy_from_slice(head);
        self.buf[at + head.len()..at + len].copy_from_slice(body);
        self.lens[self.n] = len;
        self.to[self.n] = to;
        self.n += 1;
    }

    /// Datagrams waiting.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True if nothing waits.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Sends what is queued. A datagram the kernel refuses is counted and
    /// skipped; the rest still go.
    pub fn flush(&mut self, socket: &UdpSocket) {
        if self.n == 0 {
            return;
        }
        // SAFETY: all-zero is a valid value for these plain C structs.
        let mut names: [libc::sockaddr_in6; BATCH] = unsafe { zeroed() };
        let mut iov: [libc::iovec; BATCH] = unsafe { zeroed() };
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        for i in 0..self.n {
            iov[i] = libc::iovec {
                iov_base: self.buf[i * MAX_DATAGRAM..].as_mut_ptr().cast(),
                iov_len: self.lens[i],
            };
            let h = &mut hdrs[i].msg_hdr;
            h.msg_namelen = sockaddr_from(self.to[i], &mut names[i]);
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_in6).cast();
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
        }
        let mut start = 0;
        while start < self.n {
            // SAFETY: headers start..n point at live buffers, names and
            // iovecs of the sizes given, all outliving the call.
            let r = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    hdrs[start..].as_mut_ptr(),
                    (self.n - start) as u32,
                    0,
                )
            };
            if r < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                self.errors += 1;
                start += 1;
            } else {
                self.sent += r as u64;
                start += (r as usize).max(1);
                if r == 0 {
                    self.errors += 1;
                }
            }
        }
        self.n = 0;
    }
}

/// Datagrams the kernel dropped on this socket because its receive buffer
/// was full (`SO_MEMINFO`), so a node's report shows loss it could not see.
pub fn kernel_drops(socket: &UdpSocket) -> io::Result<u64> {
    const SO_MEMINFO: libc::c_int = 55;
    // SK_MEMINFO_VARS is 9 today; room for the kernel to add more.
    let mut info = [0u32; 16];
    let mut len = size_of::<[u32; 16]>() as libc::socklen_t;
    // SAFETY: `info` is writable for `len` bytes; the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info[libc::SK_MEMINFO_DROPS as usize] as u64)
}

/// Asks for socket buffers of `bytes` each way; as root past the system
/// limit (`SO_*BUFFORCE`), otherwise up to it. Returns the receive size the
/// kernel granted.
pub fn set_buffers(socket: &UdpSocket, bytes: usize) -> usize {
    let fd = socket.as_raw_fd();
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        for opt in [force, plain] {
            // SAFETY: passes a pointer to a live c_int of the size given.
            let r = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r == 0 {
                break;
            }
        }
    }
    let mut got: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `got` is writable for `len` bytes.
    unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    got.max(0) as usize
}

fn sockaddr_to(s: &libc::sockaddr_in6) -> Option<SocketAddr> {
    match s.sin6_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in here; sockaddr_in6 is
            // larger and suitably aligned for it.
            let v4 = unsafe { &*(s as *const libc::sockaddr_in6).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)),
                u16::from_be(v4.sin_port),
            )))
        }
        libc::AF_INET6 => Some(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(s.sin6_addr.s6_addr),
            u16::from_be(s.sin6_port),
            u32::from_be(s.sin6_flowinfo),
            s.sin6_scope_id,
        ))),
        _ => None,
    }
}

fn sockaddr_from(a: SocketAddr, out: &mut libc::sockaddr_in6) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_in fits in, and is less aligned than, sockaddr_in6.
            let s = unsafe { &mut *(out as *mut libc::sockaddr_in6).cast::<libc::sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            out.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            out.sin6_port = v6.port().to_be();
            out.sin6_flowinfo = v6.flowinfo().to_be();
            out.sin6_addr.s6_addr = v6.ip().octets();
            out.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch sent to both families arrives whole, in order, with senders.
    #[test]
    fn batches_cross_loopback_both_families() {
        for local in ["127.0.0.1:0", "[::1]:0"] {
            let a = UdpSocket::bind(local).unwrap();
            let b = UdpSocket::bind(local).unwrap();
            b.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let to = b.local_addr().unwrap();
            let mut tx = SendBatch::default();
            for i in 0..100u8 {
                tx.push_parts(&a, to, &[i], &vec![i; i as usize]);
            }
            tx.push(&a, to, &vec![0; MAX_DATAGRAM + 1]);
            tx.flush(&a);
            assert_eq!((tx.sent, tx.errors, tx.oversize), (100, 0, 1));
            let mut rx = RecvBatch::default();
            let mut got = Vec::new();
            while got.len() < 100 {
                let n = rx.recv(&b, true).unwrap();
                assert!(n > 0);
                for i in 0..n {
                    let (from, bytes) = rx.get(i).unwrap();
                    assert_eq!(from, a.local_addr().unwrap());
                    got.push(bytes.to_vec());
                }
            }
            for (i, d) in got.iter().enumerate() {
                assert_eq!(d.len(), i + 1);
                assert!(d.iter().all(|&x| x == i as u8));
            }
            assert_eq!(kernel_drops(&b).unwrap(), 0);
        }
    }

    /// Overflowing a small receive buffer shows up in the kernel drop count.
    #[test]
    fn kernel_drops_are_seen() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_buffers(&b, 4096);
        let to = b.local_addr().unwrap();
        let mut tx = SendBatch::default();
        for _ in 0..500 {
            tx.push(&a, to, &[0; 1000]);
        }
        tx.flush(&a);
        assert!(kernel_drops(&b).unwrap() > 0);
    }
}
