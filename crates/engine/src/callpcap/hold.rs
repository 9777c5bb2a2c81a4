//! Frames held for recording while a message spans several packets.
//!
//! A SIP message over TCP, SCTP or WebSocket, or a datagram cut into IP
//! fragments, belongs to a call only once it is whole; its earlier packets
//! wait here, copied, under their reassembly context (the TCP flow, the
//! SCTP association direction, the fragmented datagram). When a packet
//! completes a message of a recorded call, the context's frames go to that
//! call's file before it; while the context still holds part of a message
//! (the next one started in the same segment), the frames stay for it.
//! Capped in contexts, in bytes per context and in all, and in age; the
//! oldest context goes first (an activity list, no scan). What is given up
//! is counted, and the message it belonged to is recorded as partial.

use crate::lru::{Idx, Linked, Links, Slab};
use crate::Flow;
use hashbrown::HashMap;
use std::net::IpAddr;

const LIST: u8 = 0;
/// Contexts held at once.
pub(crate) const MAX_CONTEXTS: usize = 16_384;
/// Frame bytes held in all contexts together.
pub(crate) const MAX_BYTES: usize = 32 << 20;
/// Frame bytes held for one context: a whole SIP message with its body
/// over many small segments, or a 64 KiB datagram's fragments.
pub(crate) const MAX_CONTEXT_BYTES: usize = 1 << 20;
/// Frames held for one context: a 64 KiB message in full-size segments
/// takes 45. Each packet that completes a message handles its context's
/// frames, so this also bounds the work per packet.
pub(crate) const MAX_CONTEXT_FRAMES: usize = 64;
/// A context with no new frame for this long is given up (ns): longer
/// than the reassemblers' own gap and partial-message timeouts.
pub(crate) const MAX_AGE_NS: i64 = 60_000_000_000;
/// Calls one held frame remembers having been recorded for: those of its
/// own packet ([`super::MAX_CALLS_PER_FRAME`]) and a few more.
const RECORDED_FOR: usize = 40;
/// Buffers kept for reuse, and the largest kept.
const POOL: usize = 256;
const POOL_BUFFER_MAX: usize = 16 << 10;

/// A reassembly context: where the rest of a message will come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum HoldKey {
    /// A TCP flow (one direction), SIP or WebSocket.
    Tcp(Flow),
    /// An SCTP association direction.
    Sctp(Flow),
    /// An IP datagram in fragments: source, destination, id, protocol.
    Fragments(IpAddr, IpAddr, u32, u8),
}

/// One copied frame.
#[derive(Debug)]
pub(crate) struct Held {
    pub ts_ns: i64,
    pub link_type: u16,
    pub data: Vec<u8>,
    /// Calls (by serial) it was already recorded for.
    recorded_for: [u64; RECORDED_FOR],
    recorded: usize,
}

impl Held {
    /// Whether it is still to be recorded for the call `serial` (past what
    /// it remembers, it is recorded again: a copy rather than a hole).
    pub fn wanted_by(&self, serial: u64) -> bool {
        !self.recorded_for[..self.recorded].contains(&serial)
    }

    /// Notes it was recorded for `serial`.
    pub fn recorded(&mut self, serial: u64) {
        if self.recorded < RECORDED_FOR {
            self.recorded_for[self.recorded] = serial;
            self.recorded += 1;
        }
    }
}

#[derive(Debug)]
struct Context {
    links: Links,
    key: HoldKey,
    frames: Vec<Held>,
    bytes: usize,
    /// Frames of it were given up.
    lost: bool,
}

impl Linked for Context {
    fn links(&mut self) -> &mut Links {
        &mut self.links
    }
}

/// Worst-case heap of the hold (docs/hostile-input.md): frame bytes (a
/// copy's capacity may be twice its length), pooled buffers, and per
/// context its slot, index entry and frame list (a frame at least 64 bytes).
pub(crate) fn memory_bound() -> usize {
    use crate::bound::{slab, table};
    use std::mem::size_of;
    2 * MAX_BYTES
        + POOL * POOL_BUFFER_MAX
        + slab::<Context>(MAX_CONTEXTS)
        + table::<(HoldKey, Idx)>(MAX_CONTEXTS)
        + 2 * (MAX_BYTES / 64 + MAX_CONTEXTS) * size_of::<Held>()
}

/// The held frames of every context.
#[derive(Debug)]
pub(crate) struct Hold {
    contexts: Slab<Context>,
    index: HashMap<HoldKey, Idx>,
    bytes: usize,
    pool: Vec<Vec<u8>>,
    /// Frames given up (caps, age).
    pub dropped: u64,
}

impl Default for Hold {
    fn default() -> Self {
        Hold {
            contexts: Slab::with_capacity(MAX_CONTEXTS),
            index: HashMap::new(),
            bytes: 0,
            pool: Vec::new(),
            dropped: 0,
        }
    }
}

impl Hold {
    /// A copy of a frame, in a reused buffer when one is free.
    pub fn copy(&mut self, ts_ns: i64, link_type: u16, frame: &[u8]) -> Held {
        let mut data = self.pool.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(frame);
        Held { ts_ns, link_type, data, recorded_for: [0; RECORDED_FOR], recorded: 0 }
    }

    /// Gives a frame's buffer back.
    pub fn recycle(&mut self, frame: Held) {
        if self.pool.len() < POOL && frame.data.capacity() <= POOL_BUFFER_MAX {
            self.pool.push(frame.data);
        }
    }

    /// Moves the context's frames (oldest first) to the end of `out`;
    /// true when some of them were given up.
    pub fn take(&mut self, key: &HoldKey, out: &mut Vec<Held>) -> bool {
        let Some(idx) = self.index.remove(key) else {
            return false;
        };
        let Some(mut c) = self.contexts.remove(idx) else {
            return false;
        };
        self.bytes -= c.bytes;
        out.append(&mut c.frames);
        c.lost
    }

    /// Holds `frames` (drained) for the context at `now`: the rest of its
    /// message is still to come.
    pub fn put(&mut self, now: i64, key: HoldKey, frames: &mut Vec<Held>, mut lost: bool) {
        self.expire(now);
        let mut bytes: usize = frames.iter().map(|f| f.data.len()).sum();
        // Over the context's caps, the oldest frames go first. One already
        // recorded for a call was part of a message that was whole; one
        // never recorded may start the message still to come.
        let mut cut = 0;
        while (bytes > MAX_CONTEXT_BYTES || frames.len() - cut > MAX_CONTEXT_FRAMES)
            && cut < frames.len()
        {
            bytes -= frames[cut].data.len();
            lost |= frames[cut].recorded == 0;
            cut += 1;
        }
        if cut > 0 {
            self.dropped += cut as u64;
            for f in frames.drain(..cut) {
                self.recycle(f);
            }
        }
        while self.bytes + bytes > MAX_BYTES || self.contexts.is_full() {
            let Some((oldest, _)) = self.contexts.oldest(LIST) else {
                break;
            };
            self.give_up(oldest);
        }
        let context =
            Context { links: Links::default(), key, frames: std::mem::take(frames), bytes, lost };
        match self.contexts.insert(context) {
            Ok(idx) => {
                self.contexts.touch(idx, LIST, now);
                self.index.insert(key, idx);
                self.bytes += bytes;
            }
            Err(c) => {
                self.dropped += c.frames.len() as u64;
                for f in c.frames {
                    self.recycle(f);
                }
            }
        }
    }

    /// Adds one frame to the context (or starts it) at `now`, in place:
    /// the packet completed nothing, so nothing held moves.
    pub fn push(&mut self, now: i64, key: HoldKey, frame: Held) {
        self.expire(now);
        let len = frame.data.len();
        if let Some(&idx) = self.index.get(&key) {
            if let Some(c) = self.contexts.get_mut(idx) {
                if c.frames.len() < MAX_CONTEXT_FRAMES && c.bytes + len <= MAX_CONTEXT_BYTES {
                    c.frames.push(frame);
                    c.bytes += len;
                    self.bytes += len;
                    self.contexts.touch(idx, LIST, now);
                    while self.bytes > MAX_BYTES {
                        match self.contexts.oldest(LIST) {
                            Some((oldest, _)) if oldest != idx => self.give_up(oldest),
                            _ => break,
                        }
                    }
                    return;
                }
            }
        }
        // A new context, or one at a cap: the general path trims.
        let mut frames = Vec::new();
        let lost = self.take(&key, &mut frames);
        frames.push(frame);
        self.put(now, key, &mut frames, lost);
    }

    /// Forgets the context: the reassembler started it anew (a new
    /// connection on its addresses, a new datagram on its id), so what it
    /// held belongs to no message still to come.
    pub fn reset(&mut self, key: &HoldKey) {
        let mut frames = Vec::new();
        self.take(key, &mut frames);
        for f in frames {
            self.recycle(f);
        }
    }

    /// Gives up contexts with no frame for [`MAX_AGE_NS`].
    fn expire(&mut self, now: i64) {
        while let Some(idx) = self.contexts.idle_past(LIST, now, MAX_AGE_NS) {
            self.give_up(idx);
        }
    }

    fn give_up(&mut self, idx: Idx) {
        if let Some(c) = self.contexts.remove(idx) {
            self.index.remove(&c.key);
            self.bytes -= c.bytes;
            self.dropped += c.frames.len() as u64;
            for f in c.frames {
                self.recycle(f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn key(n: u16) -> HoldKey {
        let a = IpAddr::V4(Ipv4Addr::LOCALHOST);
        HoldKey::Tcp(Flow { src: a, sport: n, dst: a, dport: 5060 })
    }

    #[test]
    fn frames_come_back_in_order_and_once() {
        let mut h = Hold::default();
        let mut g = vec![h.copy(1, 1, b"one"), h.copy(2, 1, b"two")];
        h.put(2, key(1), &mut g, false);
        assert!(g.is_empty());
        let mut out = Vec::new();
        assert!(!h.take(&key(1), &mut out));
        let texts: Vec<&[u8]> = out.iter().map(|f| f.data.as_slice()).collect();
        assert_eq!(texts, [b"one".as_slice(), b"two"]);
        assert!(!h.take(&key(1), &mut out), "taken once");
        assert_eq!((out.len(), h.bytes), (2, 0));
    }

    #[test]
    fn caps_and_age_give_up_the_oldest_and_count() {
        let mut h = Hold::default();
        let big = vec![0u8; MAX_CONTEXT_BYTES / 2 + 1];
        let mut g = vec![h.copy(1, 1, &big), h.copy(2, 1, &big), h.copy(3, 1, b"x")];
        h.put(3, key(1), &mut g, false);
        let mut out = Vec::new();
        assert!(h.take(&key(1), &mut out), "over the context cap: lost");
        assert_eq!((out.len(), h.dropped), (2, 1));
        // Fill the total: the first context goes when the cap is passed.
        let per = MAX_CONTEXT_BYTES;
        for n in 0..=(MAX_BYTES / per) as u16 {
            let mut g = vec![h.copy(10, 1, &vec![0u8; per])];
            h.put(10 + n as i64, key(100 + n), &mut g, false);
        }
        assert!(h.bytes <= MAX_BYTES);
        assert!(!h.take(&key(100), &mut out), "evicted: nothing to take");
        assert_eq!(h.dropped, 2);
        // Age: a put long after gives up everything older.
        let mut g = vec![h.copy(0, 1, b"late")];
        h.put(10 + MAX_AGE_NS + 100, key(1), &mut g, false);
        assert_eq!(h.contexts.len(), 1);
        assert_eq!(h.bytes, 4);
    }

    #[test]
    fn frames_are_capped_per_context_and_pushed_in_place() {
        let mut h = Hold::default();
        for t in 0..(MAX_CONTEXT_FRAMES as i64 + 10) {
            let f = h.copy(t, 1, &[t as u8; 100]);
            h.push(t, key(1), f);
        }
        let mut out = Vec::new();
        assert!(h.take(&key(1), &mut out), "frames never recorded were given up");
        assert_eq!(out.len(), MAX_CONTEXT_FRAMES);
        assert_eq!(out[0].ts_ns, 10, "the oldest went first");
        assert_eq!((h.dropped, h.bytes), (10, 0));
        // Frames already recorded for a call may go without loss.
        let mut g: Vec<Held> = (0..MAX_CONTEXT_FRAMES as i64 + 1)
            .map(|t| {
                let mut f = h.copy(t, 1, b"x");
                f.recorded(9);
                f
            })
            .collect();
        h.put(100, key(2), &mut g, false);
        assert!(!h.take(&key(2), &mut out));
    }

    #[test]
    fn a_frame_remembers_its_calls() {
        let mut h = Hold::default();
        let mut f = h.copy(0, 1, b"f");
        assert!(f.wanted_by(7));
        f.recorded(7);
        assert!(!f.wanted_by(7) && f.wanted_by(8));
        for s in 1..100 {
            f.recorded(s);
        }
        assert!(!f.wanted_by(39) && f.wanted_by(99), "beyond what it remembers: recorded again");
    }
}
