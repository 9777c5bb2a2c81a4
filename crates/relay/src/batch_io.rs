//! Batched datagram I/O on Linux. A busy node pays one system call per
//! batch rather than per packet, and one trip through the kernel's UDP/IP
//! stack per run of datagrams rather than per datagram:
//!
//! - receive: `recvmmsg` takes up to [`BATCH`] messages; with `UDP_GRO` on
//!   the socket, one message may hold many same-sized datagrams from one
//!   sender (a neighbour's segmentation-offloaded run, below), split here;
//! - send: `sendmmsg` sends the queue; consecutive datagrams to the same
//!   address with the same length go as one message with `UDP_SEGMENT`
//!   (segmentation offload: the stack is crossed once and the packet is cut
//!   at the device, or carried whole over veth to a GRO socket). If the
//!   kernel refuses segmentation the batch falls back to plain datagrams.
//!
//! Buffers are allocated once; nothing is allocated per datagram.
//!
//! This is the crate's only unsafe code: the system calls through `libc`.
//! The std library has no batched socket calls. The receive side keeps its
//! message headers between calls (a busy-polling node makes millions of
//! empty calls, and zeroing and rebuilding 64 headers cost more than the
//! call): they point into two heap blocks owned by the batch and never
//! reallocated, so the pointers stay valid wherever the batch moves; each
//! call resets only the fields the kernel changed in the previous one. The
//! send side builds its headers per call.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

/// Messages per system call.
pub const BATCH: usize = 64;
/// Largest datagram sent; longer ones are counted and dropped. Voice
/// packets are far smaller; jumbo frames still fit.
pub const MAX_DATAGRAM: usize = 9216;
/// Receive space per message: a whole GRO run, or any single UDP datagram.
const SLOT: usize = 65_536;
/// Most datagrams in one segmented send (the kernel's UDP_MAX_SEGMENTS).
const MAX_SEGMENTS: usize = 64;
/// Most bytes in one segmented send (an IP datagram's limit, with headroom).
const MAX_SEGMENTED_BYTES: usize = 60_000;
/// Control space for one `int` option (CMSG_SPACE(4) on 64-bit Linux).
const CONTROL: usize = 24;

/// Message headers for `recvmmsg`, kept between calls.
struct RecvHeaders {
    names: [libc::sockaddr_in6; BATCH],
    iov: [libc::iovec; BATCH],
    hdrs: [libc::mmsghdr; BATCH],
    control: [[u64; CONTROL / 8]; BATCH],
}

// SAFETY: the raw pointers inside point only into the owning `RecvBatch`'s
// own heap blocks, which move with it; nothing is shared between threads.
unsafe impl Send for RecvHeaders {}

/// Receives batches of datagrams.
pub struct RecvBatch {
    /// Never resized: the headers point into it.
    buf: Vec<u8>,
    headers: Box<RecvHeaders>,
    /// Messages the last call received (whose headers the kernel changed).
    used: usize,
    /// (sender, start, length) of each datagram of the last batch.
    datagrams: Vec<(SocketAddr, usize, usize)>,
    /// Datagrams longer than a receive slot (dropped).
    pub truncated: u64,
    /// Messages that held more than one datagram (coalesced by GRO).
    pub coalesced: u64,
}

impl RecvBatch {
    /// Buffers for `socket`, whose receive coalescing (UDP_GRO) is turned on
    /// where the kernel has it.
    pub fn new(socket: &UdpSocket) -> RecvBatch {
        let _ = set_int(socket, libc::SOL_UDP, libc::UDP_GRO, 1);
        let mut r = RecvBatch {
            // Pages are touched only as datagrams fill them.
            buf: vec![0; BATCH * SLOT],
            // SAFETY: all-zero is a valid value for these plain C structs.
            headers: Box::new(unsafe { zeroed() }),
            used: BATCH,
            datagrams: Vec::with_capacity(BATCH * MAX_SEGMENTS),
            truncated: 0,
            coalesced: 0,
        };
        let RecvHeaders { names, iov, hdrs, control } = &mut *r.headers;
        for (((chunk, v), h), (name, c)) in r
            .buf
            .chunks_exact_mut(SLOT)
            .zip(iov.iter_mut())
            .zip(hdrs.iter_mut())
            .zip(names.iter_mut().zip(control.iter_mut()))
        {
            v.iov_base = chunk.as_mut_ptr().cast();
            v.iov_len = SLOT;
            let h = &mut h.msg_hdr;
            h.msg_name = (name as *mut libc::sockaddr_in6).cast();
            h.msg_iov = v;
            h.msg_iovlen = 1;
            h.msg_control = c.as_mut_ptr().cast();
        }
        r
    }

    /// Receives up to [`BATCH`] messages. With `wait`, blocks for the first
    /// (up to the socket's read timeout) and takes whatever else is queued;
    /// without, returns at once. Returns how many datagrams arrived (0 on
    /// timeout); read them with [`RecvBatch::get`].
    pub fn recv(&mut self, socket: &UdpSocket, wait: bool) -> io::Result<usize> {
        self.datagrams.clear();
        let RecvHeaders { names, hdrs, .. } = &mut *self.headers;
        for h in &mut hdrs[..self.used] {
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_in6>() as u32;
            h.msg_hdr.msg_controllen = CONTROL;
            h.msg_hdr.msg_flags = 0;
        }
        self.used = 0;
        let flags = if wait { libc::MSG_WAITFORONE } else { libc::MSG_DONTWAIT };
        // SAFETY: every header points at a live buffer, name, iovec and
        // control area of the sizes given, all outliving the call.
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
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock
                | io::ErrorKind::TimedOut
                | io::ErrorKind::Interrupted
                // An ICMP error for an earlier send; nothing to read.
                | io::ErrorKind::ConnectionRefused => Ok(0),
                _ => Err(e),
            };
        }
        self.used = r as usize;
        for (i, h) in hdrs.iter().take(r as usize).enumerate() {
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.truncated += 1;
                continue;
            }
            let Some(from) = sockaddr_to(&names[i]) else {
                continue;
            };
            let len = h.msg_len as usize;
            let segment = gro_segment(&h.msg_hdr).unwrap_or(len).max(1);
            self.coalesced += (len > segment) as u64;
            let mut at = 0;
            while at < len {
                let n = segment.min(len - at);
                self.datagrams.push((from, i * SLOT + at, n));
                at += n;
            }
        }
        Ok(self.datagrams.len())
    }

    /// Datagram `i` of the last batch: sender and bytes.
    pub fn get(&self, i: usize) -> Option<(SocketAddr, &[u8])> {
        let &(from, at, len) = self.datagrams.get(i)?;
        Some((from, &self.buf[at..at + len]))
    }
}

/// The segment size the kernel reports for a coalesced message.
fn gro_segment(h: &libc::msghdr) -> Option<usize> {
    // SAFETY: `h` is a header the kernel filled, its control pointer and
    // length describing the live control area; the CMSG macros stay inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok();
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// Collects datagrams and sends them in batches.
pub struct SendBatch {
    buf: Vec<u8>,
    lens: [usize; BATCH],
    to: [SocketAddr; BATCH],
    n: usize,
    /// Whether runs go segmented (cleared if the kernel refuses).
    segment: bool,
    /// Datagrams the kernel accepted.
    pub sent: u64,
    /// Datagrams the kernel refused (an error for that datagram).
    pub errors: u64,
    /// Datagrams longer than [`MAX_DATAGRAM`] (dropped).
    pub oversize: u64,
    /// Segmented sends (several datagrams through the stack at once).
    pub segmented: u64,
}

impl Default for SendBatch {
    fn default() -> Self {
        SendBatch {
            buf: vec![0; BATCH * MAX_DATAGRAM],
            lens: [0; BATCH],
            to: [SocketAddr::from(([0, 0, 0, 0], 0)); BATCH],
            n: 0,
            segment: true,
            sent: 0,
            errors: 0,
            oversize: 0,
            segmented: 0,
        }
    }
}

impl SendBatch {
    /// Sends every datagram on its own (no segmentation offload).
    pub fn without_segmentation(mut self) -> Self {
        self.segment = false;
        self
    }

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

    /// How many datagrams from `first` go in one message.
    fn run_length(&self, first: usize) -> usize {
        if !self.segment {
            return 1;
        }
        let (to, len) = (self.to[first], self.lens[first]);
        let mut k = 1;
        while first + k < self.n
            && k < MAX_SEGMENTS
            && (k + 1) * len <= MAX_SEGMENTED_BYTES
            && self.to[first + k] == to
            && self.lens[first + k] == len
        {
            k += 1;
        }
        k
    }

    /// Sends what is queued. A datagram the kernel refuses is counted and
    /// skipped; the rest still go.
    pub fn flush(&mut self, socket: &UdpSocket) {
        let mut first = 0;
        while first < self.n {
            first = self.send_from(socket, first);
        }
        self.n = 0;
    }

    /// Sends datagrams from `first` on in one `sendmmsg`; returns the first
    /// datagram not yet handled.
    fn send_from(&mut self, socket: &UdpSocket, first: usize) -> usize {
        // SAFETY: all-zero is a valid value for these plain C structs.
        let mut names: [libc::sockaddr_in6; BATCH] = unsafe { zeroed() };
        let mut iov: [libc::iovec; BATCH] = unsafe { zeroed() };
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        let mut control = [[0u64; CONTROL / 8]; BATCH];
        let mut runs = [0usize; BATCH];
        let chunks = self.buf.chunks_exact_mut(MAX_DATAGRAM);
        for (i, (v, chunk)) in iov.iter_mut().zip(chunks).enumerate().take(self.n).skip(first) {
            *v = libc::iovec { iov_base: chunk.as_mut_ptr().cast(), iov_len: self.lens[i] };
        }
        let (mut m, mut d) = (0, first);
        while d < self.n {
            let k = self.run_length(d);
            runs[m] = k;
            let h = &mut hdrs[m].msg_hdr;
            h.msg_namelen = sockaddr_from(self.to[d], &mut names[m]);
            m += 1;
            d += k;
        }
        let (iov_at, names_at) = (iov.as_mut_ptr(), names.as_mut_ptr());
        let mut d = first;
        for (m, (h, c)) in hdrs.iter_mut().zip(control.iter_mut()).take(m).enumerate() {
            let k = runs[m];
            let h = &mut h.msg_hdr;
            h.msg_name = names_at.wrapping_add(m).cast();
            h.msg_iov = iov_at.wrapping_add(d);
            h.msg_iovlen = k;
            if k > 1 {
                h.msg_control = c.as_mut_ptr().cast();
                h.msg_controllen = CONTROL;
                // SAFETY: the control area is CONTROL bytes, room for one
                // header and an int; the macros stay inside it.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(
                        libc::CMSG_DATA(c).cast::<u16>(),
                        self.lens[d] as u16,
                    );
                }
            }
            d += k;
        }
        let mut done = 0;
        while done < m {
            // SAFETY: headers done..m point at live buffers, names, iovecs
            // and control areas of the sizes given, all outliving the call.
            let r = unsafe {
                libc::sendmmsg(socket.as_raw_fd(), hdrs[done..].as_mut_ptr(), (m - done) as u32, 0)
            };
            if r > 0 {
                for &k in &runs[done..done + r as usize] {
                    self.sent += k as u64;
                    self.segmented += (k > 1) as u64;
                }
                done += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let failed_first = first + runs[..done].iter().sum::<usize>();
            if runs[done] > 1
                && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT))
            {
                // No segmentation offload here: resend this run one by one.
                self.segment = false;
                return failed_first;
            }
            self.errors += runs[done] as u64;
            done += 1;
        }
        self.n
    }
}

fn set_int(
    socket: &UdpSocket,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int of the size given.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
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
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    for (force, plain) in
        [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)]
    {
        if set_int(socket, libc::SOL_SOCKET, force, v).is_err() {
            let _ = set_int(socket, libc::SOL_SOCKET, plain, v);
        }
    }
    let mut got: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `got` is writable for `len` bytes.
    unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
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
mod tests;

/// Waits up to `ms` milliseconds for any of `fds` to be readable
/// (`poll(2)`): the indices of those that are (none on a signal or timeout).
pub fn wait_readable(fds: &[std::os::fd::RawFd], ms: i32) -> io::Result<Vec<usize>> {
    let mut polls: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: `polls` is a valid, initialised array of `polls.len()`
    // pollfd structures, alive for the call.
    let n = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(Vec::new()) } else { Err(e) };
    }
    Ok(polls.iter().enumerate().filter(|(_, p)| p.revents != 0).map(|(i, _)| i).collect())
}
