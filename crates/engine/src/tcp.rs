//! TCP stream reassembly for signalling.
//!
//! One flow per direction, keyed by (source, port, destination, port). Bytes
//! in sequence are appended to the flow's buffer, where the caller frames
//! messages (SIP by Content-Length) and consumes them. Retransmitted bytes are
//! trimmed; segments ahead of a gap wait in a small out-of-order list. A gap
//! that stays open — the capture missed a segment, so no retransmission will
//! come — is skipped once the waiting data passes a cap or an age, and the
//! flow is marked for resynchronisation on the next message start. Every byte
//! given up is counted. Flows sit on one activity list, so idle expiry and
//! eviction look only at its head.

use crate::lru::{Idx, KeyedSlab, Links};
use crate::Flow;

const LIST: u8 = 0;
const SYN: u8 = 0x02;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;
/// Out-of-order segments held per flow.
const MAX_OOO_SEGMENTS: usize = 64;
const POOL: usize = 256;
/// Largest buffer kept for reuse: the pool holds at most `POOL` of these.
const POOL_BUFFER_MAX: usize = 64 << 10;

/// Caps of the reassembler.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// Most flows held at once; beyond it the least recently active goes.
    pub max_flows: usize,
    /// Most bytes buffered per flow (in order and out of order).
    pub max_flow_bytes: usize,
    /// Most bytes buffered across all flows.
    pub max_bytes: usize,
    /// A flow with no segment for this long is dropped (ns).
    pub idle_timeout_ns: i64,
    /// Data waiting behind a gap this long means the gap will not fill (ns).
    pub gap_timeout_ns: i64,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            max_flows: 65_536,
            max_flow_bytes: calliper_sip::MAX_BODY + calliper_sip::MAX_MESSAGE,
            max_bytes: 256 << 20,
            idle_timeout_ns: 600_000_000_000,
            gap_timeout_ns: 2_000_000_000,
        }
    }
}

counters! {
    /// What the reassembler did and gave up on.
    pub struct TcpCounters {
        /// Segments offered to tracked flows.
        pub segments: u64,
        /// Flows started.
        pub flows: u64,
        /// Flows ended by FIN or RST.
        pub flows_closed: u64,
        /// Flows dropped after the idle timeout.
        pub flows_expired: u64,
        /// Flows evicted to stay under the caps.
        pub flows_evicted: u64,
        /// Bytes seen again (retransmissions, overlaps) and ignored.
        pub retransmitted_bytes: u64,
        /// Segments that arrived ahead of a gap.
        pub out_of_order: u64,
        /// Gaps given up on (bytes never seen).
        pub gaps: u64,
        /// Bytes in skipped gaps.
        pub gap_bytes: u64,
        /// Buffered bytes dropped because a flow or the total hit its cap.
        pub overflow_bytes: u64,
    }
}

/// One direction of a connection being reassembled.
#[derive(Debug)]
struct FlowState {
    links: Links,
    key: Flow,
    /// Next sequence number expected.
    next: u32,
    /// Bytes in sequence, not yet consumed.
    buf: Vec<u8>,
    /// Segments beyond a gap: (sequence, arrival, bytes).
    ooo: Vec<(u32, i64, Vec<u8>)>,
    ooo_bytes: usize,
    /// The buffer may start mid-message (gap, overflow, pickup mid-stream).
    resync: bool,
    /// Buffered bytes the framer needs before it can make progress (a
    /// message whose length is known but not all here yet): below it, new
    /// segments are only buffered, not parsed again.
    wait: usize,
    /// What the caller frames in this flow (its own meaning).
    tag: u8,
}

crate::lru::entry!(FlowState, key: Flow);

/// Result of offering a segment to a tracked flow.
#[derive(Debug, Clone, Copy)]
pub struct Offered {
    /// The flow; its buffer may hold new bytes.
    pub flow: Idx,
    /// FIN or RST: consume what is buffered, then [`TcpReassembler::close`].
    pub closing: bool,
}

/// Worst-case heap of a reassembler with these caps (docs/hostile-input.md):
/// buffered bytes (capacity up to twice the length), the recycled buffers,
/// and per flow its slot, index entry and out-of-order segment list.
pub(crate) fn memory_bound(cfg: &TcpConfig) -> usize {
    use crate::bound::{slab, table};
    use std::mem::size_of;
    2 * cfg.max_bytes
        + POOL * POOL_BUFFER_MAX
        + slab::<FlowState>(cfg.max_flows)
        + table::<(Flow, Idx)>(cfg.max_flows)
        // Each out-of-order segment's entry, and its buffer's allocation
        // rounding (a 1-byte segment still takes a minimum block).
        + cfg.max_flows * 2 * MAX_OOO_SEGMENTS * (size_of::<(u32, i64, Vec<u8>)>() + 32)
}

/// Reassembles TCP byte streams of chosen flows.
#[derive(Debug)]
pub struct TcpReassembler {
    cfg: TcpConfig,
    flows: KeyedSlab<FlowState>,
    bytes: usize,
    pool: Vec<Vec<u8>>,
    /// Counters.
    pub counters: TcpCounters,
}

fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl TcpReassembler {
    /// A reassembler with these caps.
    pub fn new(cfg: TcpConfig) -> Self {
        TcpReassembler {
            flows: KeyedSlab::with_capacity(cfg.max_flows),
            bytes: 0,
            pool: Vec::new(),
            counters: TcpCounters::default(),
            cfg,
        }
    }

    /// Flows held.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// True when no flow is held.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Bytes buffered across flows.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// True when this direction is tracked.
    pub fn tracks(&self, key: &Flow) -> bool {
        self.flows.holds(key)
    }

    /// Offers a segment. Untracked flows are ignored unless `start` asks to
    /// track this one (its payload starts a message, or it is a SYN to a
    /// signalling port).
    pub fn segment(
        &mut self,
        now: i64,
        key: Flow,
        seq: u32,
        flags: u8,
        payload: &[u8],
        start: bool,
    ) -> Option<Offered> {
        self.expire(now);
        let idx = match self.flows.find(&key) {
            Some(i) => i,
            None if start => self.open(key, seq)?,
            None => return None,
        };
        self.counters.segments += 1;
        self.flows.touch(idx, LIST, now);
        let mut seq = seq;
        if flags & SYN != 0 {
            let f = self.flows.get_mut(idx)?;
            f.next = seq.wrapping_add(1);
            f.resync = false;
            seq = seq.wrapping_add(1);
        }
        if !payload.is_empty() {
            self.data(now, idx, seq, payload);
        }
        Some(Offered { flow: idx, closing: flags & (FIN | RST) != 0 })
    }

    /// Takes a flow's buffer to frame messages in it; give it back with
    /// [`TcpReassembler::put_buffer`] after draining what was consumed.
    pub fn take_buffer(&mut self, flow: Idx) -> (Vec<u8>, bool) {
        match self.flows.get_mut(flow) {
            Some(f) => {
                self.bytes -= f.buf.len();
                (std::mem::take(&mut f.buf), std::mem::replace(&mut f.resync, false))
            }
            None => (Vec::new(), false),
        }
    }

    /// Returns a flow's buffer, holding what was not consumed.
    pub fn put_buffer(&mut self, flow: Idx, buf: Vec<u8>) {
        match self.flows.get_mut(flow) {
            Some(f) => {
                self.bytes += buf.len();
                f.buf = buf;
            }
            None => self.recycle(buf),
        }
    }

    /// The caller's tag of a flow (0 until set).
    pub fn tag(&self, flow: Idx) -> u8 {
        self.flows.get(flow).map_or(0, |f| f.tag)
    }

    /// Sets the caller's tag of a flow (for example, how it is framed).
    pub fn set_tag(&mut self, flow: Idx, tag: u8) {
        if let Some(f) = self.flows.get_mut(flow) {
            f.tag = tag;
        }
    }

    /// Asks for resynchronisation on the next message start.
    pub fn mark_resync(&mut self, flow: Idx) {
        if let Some(f) = self.flows.get_mut(flow) {
            f.resync = true;
            f.wait = 0;
            f.wait = 0;
        }
    }

    /// Whether the framer should look at the flow's buffer again: it holds
    /// at least the bytes the framer said it needs ([`Self::set_wait`]).
    pub fn ready(&self, flow: Idx) -> bool {
        self.flows.get(flow).is_some_and(|f| f.buf.len() >= f.wait)
    }

    /// Whether the flow holds bytes not yet framed (part of a message, or
    /// segments beyond a gap).
    pub fn pending(&self, flow: Idx) -> bool {
        self.flows.get(flow).is_some_and(|f| !f.buf.is_empty() || !f.ooo.is_empty())
    }

    /// Tells the flow not to be framed again until its buffer holds `bytes`.
    pub fn set_wait(&mut self, flow: Idx, bytes: usize) {
        if let Some(f) = self.flows.get_mut(flow) {
            f.wait = bytes;
        }
    }

    /// Ends a flow (after FIN or RST).
    pub fn close(&mut self, flow: Idx) {
        if self.remove(flow) {
            self.counters.flows_closed += 1;
        }
    }

    /// Drops flows idle past the timeout.
    pub fn expire(&mut self, now: i64) {
        while let Some(idx) = self.flows.idle_past(LIST, now, self.cfg.idle_timeout_ns) {
            self.counters.flows_expired += 1;
            self.remove(idx);
        }
    }

    fn open(&mut self, key: Flow, seq: u32) -> Option<Idx> {
        while self.flows.is_full() {
            let (oldest, _) = self.flows.oldest(LIST)?;
            self.counters.flows_evicted += 1;
            self.remove(oldest);
        }
        let buf = self.pool.pop().unwrap_or_default();
        let idx = self
            .flows
            .insert(FlowState {
                links: Links::default(),
                key,
                next: seq,
                buf,
                ooo: Vec::new(),
                ooo_bytes: 0,
                resync: false,
                wait: 0,
                tag: 0,
            })
            .ok()?;
        self.counters.flows += 1;
        Some(idx)
    }

    fn remove(&mut self, idx: Idx) -> bool {
        let Some(mut f) = self.flows.remove(idx) else {
            return false;
        };
        self.bytes -= f.buf.len() + f.ooo_bytes;
        for (_, _, b) in f.ooo.drain(..) {
            self.recycle(b);
        }
        self.recycle(f.buf);
        true
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < POOL && buf.capacity() <= POOL_BUFFER_MAX {
            buf.clear();
            self.pool.push(buf);
        }
    }

    fn data(&mut self, now: i64, idx: Idx, seq: u32, payload: &[u8]) {
        let Some(f) = self.flows.get(idx) else {
            return;
        };
        let next = f.next;
        if after(seq, next) {
            self.hold(now, idx, seq, payload);
        } else {
            self.append(idx, seq, payload);
            self.drain_ooo(idx);
        }
        self.skip_stale_gap(now, idx);
    }

    /// Appends the part of a segment at or after `next`.
    fn append(&mut self, idx: Idx, seq: u32, payload: &[u8]) {
        let cap = self.cfg.max_flow_bytes;
        let total_full = self.bytes + payload.len() > self.cfg.max_bytes;
        let Some(f) = self.flows.get_mut(idx) else {
            return;
        };
        let old = f.next.wrapping_sub(seq) as usize;
        if old >= payload.len() {
            self.counters.retransmitted_bytes += payload.len() as u64;
            return;
        }
        self.counters.retransmitted_bytes += old as u64;
        let new = &payload[old..];
        f.next = f.next.wrapping_add(new.len() as u32);
        if f.buf.len() + f.ooo_bytes + new.len() > cap || total_full {
            // No message is this long: drop what is held and start over at
            // the next message start.
            self.counters.overflow_bytes += (f.buf.len() + new.len()) as u64;
            self.bytes -= f.buf.len();
            f.buf.clear();
            f.resync = true;
            f.wait = 0;
            f.wait = 0;
            return;
        }
        f.buf.extend_from_slice(new);
        self.bytes += new.len();
    }

    fn hold(&mut self, now: i64, idx: Idx, seq: u32, payload: &[u8]) {
        let cap = self.cfg.max_flow_bytes;
        let Some(f) = self.flows.get_mut(idx) else {
            return;
        };
        self.counters.out_of_order += 1;
        if f.ooo.iter().any(|(s, _, b)| *s == seq && b.len() >= payload.len()) {
            self.counters.retransmitted_bytes += payload.len() as u64;
            return;
        }
        if f.ooo.len() >= MAX_OOO_SEGMENTS || f.buf.len() + f.ooo_bytes + payload.len() > cap {
            // Too much waits on this gap: give it up, then place the segment.
            if f.ooo.is_empty() {
                self.jump_to(idx, seq);
                self.append(idx, seq, payload);
            } else {
                self.skip_gap(idx);
                self.data(now, idx, seq, payload);
            }
            return;
        }
        let mut b = self.pool.pop().unwrap_or_default();
        b.extend_from_slice(payload);
        let at = f.ooo.partition_point(|(s, _, _)| after(seq, *s));
        f.ooo.insert(at, (seq, now, b));
        f.ooo_bytes += payload.len();
        self.bytes += payload.len();
    }

    /// Moves held segments that now continue the stream into the buffer.
    fn drain_ooo(&mut self, idx: Idx) {
        loop {
            let Some(f) = self.flows.get_mut(idx) else {
                return;
            };
            let Some(&(seq, _, _)) = f.ooo.first() else {
                return;
            };
            if after(seq, f.next) {
                return;
            }
            let (seq, _, b) = f.ooo.remove(0);
            f.ooo_bytes -= b.len();
            self.bytes -= b.len();
            self.append(idx, seq, &b);
            self.recycle(b);
        }
    }

    fn skip_stale_gap(&mut self, now: i64, idx: Idx) {
        let stale = self
            .flows
            .get(idx)
            .is_some_and(|f| f.ooo.iter().any(|&(_, t, _)| now - t >= self.cfg.gap_timeout_ns));
        if stale {
            self.skip_gap(idx);
        }
    }

    /// Gives up on the gap before the first held segment.
    fn skip_gap(&mut self, idx: Idx) {
        let Some(f) = self.flows.get_mut(idx) else {
            return;
        };
        let Some(&(seq, _, _)) = f.ooo.first() else {
            return;
        };
        self.jump_to(idx, seq);
        self.drain_ooo(idx);
    }

    /// Continues the stream at `seq`, giving up the bytes before it.
    fn jump_to(&mut self, idx: Idx, seq: u32) {
        let Some(f) = self.flows.get_mut(idx) else {
            return;
        };
        self.counters.gaps += 1;
        self.counters.gap_bytes += seq.wrapping_sub(f.next) as u64;
        // The message the gap cut cannot be completed.
        self.counters.overflow_bytes += f.buf.len() as u64;
        self.bytes -= f.buf.len();
        f.buf.clear();
        f.next = seq;
        f.resync = true;
        f.wait = 0;
    }
}

#[cfg(test)]
mod tests;
