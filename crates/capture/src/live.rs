//! Live capture: an AF_PACKET TPACKET_V3 receive ring on Linux interfaces.
//!
//! The kernel fills fixed-size blocks of a memory-mapped ring with packets
//! and hands a block over when it is full or its timeout has passed;
//! [`LiveCapture::next_block`] gives the caller that block's packets,
//! borrowed from the ring (no copy), then returns the block to the kernel.
//! What the kernel could not put in the ring is counted by it
//! (`PACKET_STATISTICS`) and summed by [`LiveCapture::stats`]: capture loss is
//! reported, never mistaken for network loss.
//!
//! One interface binds the socket to it; several bind it to all interfaces
//! with a classic BPF program that accepts only theirs (so one ring keeps
//! their packets in the kernel's order). Sockets may join a fanout group,
//! which spreads packets among them by flow hash (both directions of a flow
//! alike; IP fragments reassembled first so they follow their flow).
//!
//! As libpcap does, a packet a loopback interface sends is skipped: the same
//! packet is seen again as received. VLAN tags the network card removed
//! are not put back (the analysis does not use them).
//!
//! Needs `CAP_NET_RAW` (root, or `setcap cap_net_raw+ep` on the binary).
#![allow(unsafe_code)]

use crate::{linktype, Packet};
use socket::{filter_link_type, get_option, os, set_option, socket_filter};
pub use socket::{interface_index, interfaces};

mod socket;
use std::ffi::c_void;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};

/// How a ring is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveConfig {
    /// Interfaces to capture on (at least one).
    pub interfaces: Vec<String>,
    /// Bytes per block: a power of two from 4 KiB to 128 MiB, larger than
    /// the largest packet.
    pub block_size: u32,
    /// Blocks in the ring.
    pub block_count: u32,
    /// The kernel hands over a block that is not full after this long (ms).
    pub block_timeout_ms: u32,
    /// Put the interfaces in promiscuous mode (undone when the socket closes).
    pub promiscuous: bool,
    /// Join this fanout group: packets are spread among its sockets by flow.
    pub fanout_group: Option<u16>,
    /// Which packets of the interfaces to keep.
    pub direction: Direction,
    /// Keep only packets this tcpdump-language expression accepts (run by
    /// the kernel; compiled by libpcap, see [`crate::filter`]).
    pub filter: Option<String>,
}

/// Which packets of an interface a ring keeps (tcpdump's `-Q`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// Received and sent.
    #[default]
    Both,
    /// Received only (the kernel leaves sent packets out).
    In,
    /// Sent only: on a router or proxy, what it forwards after its own
    /// filtering.
    Out,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            interfaces: Vec::new(),
            block_size: 1 << 20,
            block_count: 64,
            // At a low packet rate each block leaves after its timeout: 64
            // blocks of 50 ms ride out a 3 s stall of the probe.
            block_timeout_ms: 50,
            promiscuous: true,
            fanout_group: None,
            direction: Direction::Both,
            filter: None,
        }
    }
}

/// The most interfaces one ring captures (its filter's jumps are 8-bit).
pub const MAX_INTERFACES: usize = 64;

/// The most ring memory accepted (a typo should not pin the machine's RAM).
pub const MAX_RING_BYTES: u64 = 16 << 30;

/// Why a live capture could not start or go on.
#[derive(Debug)]
pub enum LiveError {
    /// No interface has this name; the ones that exist are listed.
    NoInterface {
        /// The name asked for.
        name: String,
        /// The interfaces there are.
        existing: Vec<String>,
    },
    /// The process may not capture.
    NotPermitted,
    /// The configuration cannot work.
    Config(String),
    /// The operating system refused a step.
    Os {
        /// The step.
        what: &'static str,
        /// Its error.
        error: io::Error,
    },
}

impl fmt::Display for LiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LiveError::NoInterface { name, existing } => write!(
                f,
                "no network interface named `{name}` (there are: {})",
                existing.join(", ")
            ),
            LiveError::NotPermitted => write!(
                f,
                "capturing needs CAP_NET_RAW: run as root, or give the binary the capability \
                 with `sudo setcap cap_net_raw+ep $(command -v calliper)`"
            ),
            LiveError::Config(why) => write!(f, "{why}"),
            LiveError::Os { what, error } => write!(f, "{what}: {error}"),
        }
    }
}

impl std::error::Error for LiveError {}

/// Totals the kernel reported for a socket since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveStats {
    /// Packets put in the ring.
    pub received: u64,
    /// Packets the kernel dropped because the ring was full.
    pub dropped: u64,
    /// Times the ring was full (the kernel froze its queue).
    pub ring_full: u64,
}

/// An open receive ring.
pub struct LiveCapture {
    fd: OwnedFd,
    ring: NonNull<u8>,
    ring_len: usize,
    block_size: usize,
    block_count: usize,
    /// The block to read next.
    next: usize,
    totals: LiveStats,
    /// Packets whose header did not fit their block (never seen; counted).
    malformed: u64,
    /// Keep only packets this host sent.
    outgoing_only: bool,
}

// SAFETY: the ring is owned by this value alone; the kernel's side of it is
// synchronised through each block's status word, not through the thread.
unsafe impl Send for LiveCapture {}

/// One packet entry of a ring block.
struct Entry {
    /// Where its frame is in the block, and its link type; None for a
    /// frame not kept (another link type, or a direction left out).
    frame: Option<(usize, usize, u16)>,
    ts_ns: i64,
    orig_len: u32,
    /// The offset of the next entry from this one (0: the last).
    next: u32,
}

/// Packets handed to the caller at once.
const BATCH: usize = 64;
const ARPHRD_ETHER: u16 = 1;
const ARPHRD_LOOPBACK: u16 = 772;
const ARPHRD_NONE: u16 = 0xfffe;

/// The configuration's sizes and interfaces within what a probe takes.
fn check(cfg: &LiveConfig) -> Result<(), LiveError> {
    let bs = cfg.block_size;
    if !bs.is_power_of_two() || !(4096..=128 << 20).contains(&bs) {
        return Err(LiveError::Config(format!(
            "block size {bs} must be a power of two from 4096 to 134217728 bytes"
        )));
    }
    let ring_len = bs as u64 * cfg.block_count as u64;
    if cfg.block_count == 0 || ring_len > MAX_RING_BYTES {
        return Err(LiveError::Config(format!(
            "block count {} must be at least 1 and the ring ({ring_len} bytes) at most {MAX_RING_BYTES}",
            cfg.block_count
        )));
    }
    if !(1..=60_000).contains(&cfg.block_timeout_ms) {
        return Err(LiveError::Config("block timeout must be 1 to 60000 ms".into()));
    }
    if cfg.interfaces.is_empty() {
        return Err(LiveError::Config("no interface to capture on".into()));
    }
    if cfg.interfaces.len() > MAX_INTERFACES {
        return Err(LiveError::Config(format!(
            "{} interfaces: at most {MAX_INTERFACES} per probe",
            cfg.interfaces.len()
        )));
    }
    Ok(())
}

/// The kernel filter, when one is needed: the interfaces' program for
/// several interfaces, ending in the user's `--filter` if given.
fn attach_filter(fd: &OwnedFd, cfg: &LiveConfig, indexes: &[u32]) -> Result<(), LiveError> {
    let user = match &cfg.filter {
        Some(expr) => {
            let link_type = filter_link_type(&cfg.interfaces)?;
            Some(crate::filter::compile(expr, link_type).map_err(|e| LiveError::Config(e.0))?)
        }
        None => None,
    };
    if indexes.len() > 1 || user.is_some() {
        let prog = socket_filter(indexes, user.as_ref());
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_ptr() as *mut libc::sock_filter,
        };
        set_option(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &fprog,
            "cannot attach the capture filter",
        )?;
    }
    Ok(())
}

impl LiveCapture {
    /// Opens a ring on the configured interfaces.
    pub fn open(cfg: &LiveConfig) -> Result<LiveCapture, LiveError> {
        check(cfg)?;
        let indexes =
            cfg.interfaces.iter().map(|n| interface_index(n)).collect::<Result<Vec<_>, _>>()?;
        // Protocol 0: nothing is received before `bind` chooses.
        // SAFETY: plain system call.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(os("cannot open a packet socket"));
        }
        // SAFETY: `raw` is a new descriptor owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        set_option(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &version,
            "cannot select TPACKET_V3",
        )?;
        attach_filter(&fd, cfg, &indexes)?;
        let capture = LiveCapture::map_ring(fd, cfg)?;
        capture.bind(cfg, &indexes)?;
        Ok(capture)
    }

    /// Creates the socket's receive ring and maps it: the capture, which
    /// unmaps it when dropped.
    fn map_ring(fd: OwnedFd, cfg: &LiveConfig) -> Result<LiveCapture, LiveError> {
        let bs = cfg.block_size;
        let frame_size = 2048u32;
        let req = libc::tpacket_req3 {
            tp_block_size: bs,
            tp_block_nr: cfg.block_count,
            tp_frame_size: frame_size,
            tp_frame_nr: bs / frame_size * cfg.block_count,
            tp_retire_blk_tov: cfg.block_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        set_option(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "cannot create the receive ring (too large for the kernel's memory limits?)",
        )?;
        // Within MAX_RING_BYTES (`check`).
        let ring_len = (bs as u64 * cfg.block_count as u64) as usize;
        // SAFETY: maps the ring the kernel just allocated for this socket.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(os("cannot map the receive ring"));
        }
        let ring =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| os("cannot map the receive ring"))?;
        // From here `Drop` unmaps.
        Ok(LiveCapture {
            fd,
            ring,
            ring_len,
            block_size: bs as usize,
            block_count: cfg.block_count as usize,
            next: 0,
            totals: LiveStats::default(),
            malformed: 0,
            outgoing_only: cfg.direction == Direction::Out,
        })
    }

    /// Binds the socket to its interface (or all, for several: the filter
    /// keeps theirs), then sets the direction, promiscuous mode and the
    /// fanout group asked for.
    fn bind(&self, cfg: &LiveConfig, indexes: &[u32]) -> Result<(), LiveError> {
        // SAFETY: a zeroed sockaddr_ll is valid; fields set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = if indexes.len() == 1 { indexes[0] as i32 } else { 0 };
        // SAFETY: `addr` is a valid sockaddr_ll of the size given.
        let r = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(os("cannot bind the packet socket to the interface"));
        }
        if cfg.direction == Direction::In {
            let on: libc::c_int = 1;
            set_option(
                &self.fd,
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                &on,
                "cannot leave out sent packets",
            )?;
        }
        if cfg.promiscuous {
            for &ix in indexes {
                // SAFETY: a zeroed packet_mreq is valid.
                let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
                mreq.mr_ifindex = ix as i32;
                mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
                set_option(
                    &self.fd,
                    libc::SOL_PACKET,
                    libc::PACKET_ADD_MEMBERSHIP,
                    &mreq,
                    "cannot enter promiscuous mode",
                )?;
            }
        }
        if let Some(group) = cfg.fanout_group {
            let mode = libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_DEFRAG;
            let arg = (group as u32 | (mode << 16)) as libc::c_int;
            set_option(
                &self.fd,
                libc::SOL_PACKET,
                libc::PACKET_FANOUT,
                &arg,
                "cannot join the fanout group",
            )?;
        }
        Ok(())
    }

    fn block(&self, i: usize) -> *mut u8 {
        // SAFETY (of later uses): i < block_count, so the block is inside the mapping.
        self.ring.as_ptr().wrapping_add(i * self.block_size)
    }

    /// The status word of block `i`.
    fn status(&self, i: usize) -> *mut u32 {
        let desc = self.block(i).cast::<libc::tpacket_block_desc>();
        // SAFETY: computing a field's address inside the mapped block.
        unsafe { std::ptr::addr_of_mut!((*desc).hdr.bh1.block_status) }
    }

    fn ready(&self) -> bool {
        // SAFETY: the status word is inside the mapping; the kernel writes it concurrently.
        let s = unsafe { std::ptr::read_volatile(self.status(self.next)) };
        fence(Ordering::Acquire);
        s & libc::TP_STATUS_USER != 0
    }

    /// Waits up to `timeout_ms` for the next block and hands its packets to
    /// `f`, up to 64 at a time, in the kernel's order; returns how many.
    /// Zero means the wait timed out.
    pub fn next_block(
        &mut self,
        timeout_ms: i32,
        mut f: impl FnMut(&[Packet<'_>]),
    ) -> Result<usize, LiveError> {
        if !self.ready() && !self.wait_for_block(timeout_ms)? {
            return Ok(0);
        }
        let block = self.block(self.next);
        let desc = block.cast::<libc::tpacket_block_desc>();
        // SAFETY: the block is the caller's until its status is reset; the
        // header fields are inside it.
        let (count, first) = unsafe {
            let h = std::ptr::addr_of!((*desc).hdr.bh1);
            (
                std::ptr::read_volatile(std::ptr::addr_of!((*h).num_pkts)),
                std::ptr::read_volatile(std::ptr::addr_of!((*h).offset_to_first_pkt)),
            )
        };
        let mut batch =
            [Packet { ts_ns: 0, link_type: 0, data: &[], orig_len: 0, file_offset: 0 }; BATCH];
        let mut n = 0;
        let mut delivered = 0;
        let mut off = first as usize;
        for _ in 0..count {
            let Some(entry) = self.entry(off) else {
                self.malformed += 1;
                break;
            };
            if let Some((start, len, link_type)) = entry.frame {
                // SAFETY: inside the block (checked by `entry`), which stays
                // ours until released below.
                let data = unsafe { std::slice::from_raw_parts(block.add(start), len) };
                batch[n] = Packet {
                    ts_ns: entry.ts_ns,
                    link_type,
                    data,
                    orig_len: entry.orig_len,
                    file_offset: 0,
                };
                n += 1;
                if n == BATCH {
                    f(&batch);
                    delivered += n;
                    n = 0;
                }
            }
            if entry.next == 0 {
                break;
            }
            off += entry.next as usize;
        }
        if n > 0 {
            f(&batch[..n]);
            delivered += n;
        }
        fence(Ordering::Release);
        // SAFETY: hands the block back; no packet borrowed from it outlives `f`.
        unsafe { std::ptr::write_volatile(self.status(self.next), libc::TP_STATUS_KERNEL) };
        self.next = (self.next + 1) % self.block_count;
        Ok(delivered)
    }

    /// Waits up to `timeout_ms` for the kernel to hand over the next block:
    /// whether it did (a signal ends the wait early, as a timeout).
    fn wait_for_block(&self, timeout_ms: i32) -> Result<bool, LiveError> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(LiveError::Os { what: "waiting for packets failed", error: e });
        }
        if pfd.revents & libc::POLLERR != 0 {
            return Err(self.socket_error());
        }
        Ok(self.ready())
    }

    /// The packet entry at `off` in the block being read (`next`): None
    /// when its header or its frame would overrun the block (malformed).
    fn entry(&self, off: usize) -> Option<Entry> {
        let block = self.block(self.next);
        let hdr_len = std::mem::size_of::<libc::tpacket3_hdr>();
        let sll_at = (hdr_len + 15) & !15;
        let sll_len = std::mem::size_of::<libc::sockaddr_ll>();
        if off + sll_at + sll_len > self.block_size {
            return None;
        }
        // SAFETY: header and address lie inside the block (checked above).
        let (h, sll) = unsafe {
            (
                std::ptr::read_unaligned(block.add(off).cast::<libc::tpacket3_hdr>()),
                std::ptr::read_unaligned(block.add(off + sll_at).cast::<libc::sockaddr_ll>()),
            )
        };
        let start = off + h.tp_mac as usize;
        let len = h.tp_snaplen as usize;
        if start + len > self.block_size {
            return None;
        }
        let link = match sll.sll_hatype {
            ARPHRD_ETHER | ARPHRD_LOOPBACK => Some(linktype::ETHERNET),
            ARPHRD_NONE => Some(linktype::RAW),
            _ => None,
        };
        let sent = sll.sll_pkttype == libc::PACKET_OUTGOING;
        let skip =
            if self.outgoing_only { !sent } else { sent && sll.sll_hatype == ARPHRD_LOOPBACK };
        Some(Entry {
            frame: link.filter(|_| !skip).map(|link_type| (start, len, link_type)),
            ts_ns: h.tp_sec as i64 * 1_000_000_000 + h.tp_nsec as i64,
            orig_len: h.tp_len,
            next: h.tp_next_offset,
        })
    }

    fn socket_error(&self) -> LiveError {
        let mut err: libc::c_int = 0;
        // Unreadable, it stays 0: the socket failed, reason unknown.
        let _ = get_option(&self.fd, libc::SOL_SOCKET, libc::SO_ERROR, &mut err, "SO_ERROR");
        let error = io::Error::from_raw_os_error(err);
        let what = match err {
            libc::ENETDOWN => "the interface went down",
            libc::ENODEV => "the interface was removed",
            _ => "the packet socket failed",
        };
        LiveError::Os { what, error }
    }

    /// The kernel's totals for this socket so far.
    pub fn stats(&mut self) -> Result<LiveStats, LiveError> {
        let mut s = libc::tpacket_stats_v3 { tp_packets: 0, tp_drops: 0, tp_freeze_q_cnt: 0 };
        let (level, name) = (libc::SOL_PACKET, libc::PACKET_STATISTICS);
        get_option(&self.fd, level, name, &mut s, "cannot read the ring's statistics")?;
        // Reading resets the kernel's counts; its packet count includes drops.
        self.totals.received += s.tp_packets.saturating_sub(s.tp_drops) as u64;
        self.totals.dropped += s.tp_drops as u64;
        self.totals.ring_full += s.tp_freeze_q_cnt as u64;
        Ok(self.totals)
    }

    /// Packets skipped because the kernel's header for them did not fit
    /// their block (the kernel never writes such; counted, not trusted).
    pub fn malformed(&self) -> u64 {
        self.malformed
    }
}

impl Drop for LiveCapture {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`.
        unsafe { libc::munmap(self.ring.as_ptr().cast::<c_void>(), self.ring_len) };
    }
}

#[cfg(test)]
mod tests;
