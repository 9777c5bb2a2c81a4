//! The callpcap hook (`--record`): the packets of the calls chosen for recording go,
//! as captured, to a [`PacketSink`] (the per-call capture writer of
//! `calliper-callpcap`), each tagged with its call. Handling a packet marks
//! the call it belonged to (its SIP message's, its stream's, its RTCP's);
//! the packet loop then hands the frame over. Signalling every shard
//! handles is recorded by the first shard only; media by its owner. A
//! message carried in several packets is recorded with all of them: the
//! earlier ones wait in the [`hold`] until it is whole.

mod hold;

use super::*;
use hold::{Held, Hold, HoldKey};

/// Distinct calls one frame is recorded for (a TCP segment or an SCTP
/// packet may end messages of several calls; beyond, counted).
const MAX_CALLS_PER_FRAME: usize = 32;

/// Worst-case heap of the recording hook (docs/hostile-input.md).
pub(crate) fn memory_bound() -> usize {
    hold::memory_bound()
        + 2 * MAX_CALLS_PER_FRAME * std::mem::size_of::<(Idx, bool)>()
        + 2 * hold::MAX_CONTEXT_BYTES / 64 * std::mem::size_of::<Held>()
}

/// Which calls' packets are recorded (a `record` rule adds its calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordingMode {
    /// Only the calls a `record` rule selects, all their packets.
    #[default]
    None,
    /// Every call's signalling (and all packets of `record` calls).
    Sip,
    /// Every call's signalling, RTP and RTCP.
    All,
}

/// The call a recorded packet belongs to.
#[derive(Debug, Clone, Copy)]
pub struct CallTag<'a> {
    /// The call's number in the run ([`CallRecord::serial`]).
    pub serial: u64,
    /// Its Call-ID.
    pub call_id: &'a str,
    /// Its INVITE's time (ns since the epoch).
    pub start_ns: i64,
}

/// Where recorded packets go. One per engine (shard): it must not block.
pub trait PacketSink: Send {
    /// A captured frame of `call`. A message carried in several packets
    /// (SIP over TCP, SCTP or WebSocket; an IP datagram in fragments) comes
    /// as all its packets, in order. `whole`: false when some of those
    /// were given up (the hold's caps), so the message is not all there.
    fn packet(&mut self, call: CallTag<'_>, ts_ns: i64, link_type: u16, frame: &[u8], whole: bool);
    /// The call's record was written (its file may be closed; a later
    /// packet of it, from another shard, reopens it).
    fn call_ended(&mut self, serial: u64);
    /// The batch ended: pass on what is held.
    fn flush(&mut self);
}

/// Makes each engine's sink (a sharded run has one per shard).
#[derive(Clone)]
pub struct SinkFactory(pub Arc<dyn Fn() -> Box<dyn PacketSink> + Send + Sync>);

impl std::fmt::Debug for SinkFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SinkFactory")
    }
}

/// The engine's side of recording: the sink, the calls the packet being
/// handled belongs to, and the frames held for messages not yet whole.
pub(crate) struct Hook {
    sink: Box<dyn PacketSink>,
    /// Calls of the packet being handled, and whether by signalling.
    calls: Vec<(Idx, bool)>,
    /// The reassembly context the packet went into, if any.
    source: Option<HoldKey>,
    /// That context still holds part of a message after the packet.
    pending: bool,
    /// Earlier fragments of a datagram the packet completed.
    carried: Vec<Held>,
    /// Some of those were given up.
    carried_lost: bool,
    hold: Hold,
    /// One packet's frames while they are recorded (reused).
    group: Vec<Held>,
    /// A SIP message was handled for the packet being handled.
    completed: bool,
    /// Calls of a frame beyond [`MAX_CALLS_PER_FRAME`]: not recorded.
    calls_missed: u64,
}

impl Hook {
    pub(crate) fn new(sink: Box<dyn PacketSink>) -> Box<Self> {
        Box::new(Hook {
            sink,
            calls: Vec::with_capacity(MAX_CALLS_PER_FRAME),
            source: None,
            pending: false,
            carried: Vec::new(),
            carried_lost: false,
            hold: Hold::default(),
            group: Vec::new(),
            completed: false,
            calls_missed: 0,
        })
    }

    /// The call's record was written.
    pub(crate) fn call_ended(&mut self, serial: u64) {
        self.sink.call_ended(serial);
    }

    /// The batch ended.
    pub(crate) fn flush(&mut self) {
        self.sink.flush();
    }

    /// Frames held and given up (caps, age).
    pub(crate) fn held_dropped(&self) -> u64 {
        self.hold.dropped
    }

    /// Calls a frame was not recorded for (more than a frame's cap).
    pub(crate) fn calls_missed(&self) -> u64 {
        self.calls_missed
    }
}

impl Engine {
    /// Marks the packet being handled as `call`'s (`signalling`: a SIP
    /// message, which every shard handles).
    #[inline]
    pub(crate) fn attribute(&mut self, call: Idx, signalling: bool) {
        if let Some(h) = self.recorder.as_deref_mut() {
            if !h.calls.iter().any(|c| c.0 == call) {
                if h.calls.len() < MAX_CALLS_PER_FRAME {
                    h.calls.push((call, signalling));
                } else {
                    h.calls_missed += 1;
                }
            }
        }
    }

    /// The packet went into a TCP flow or SCTP association (`tcp`) whose
    /// buffer still holds part of a message afterwards (`pending`);
    /// `restarted`: the reassembler started it anew (a new connection on
    /// the flow's addresses, an SCTP message in pieces given up on), so
    /// what was held for it goes. Signalling is
    /// recorded by the first shard, so only it holds.
    pub(crate) fn reassembling(&mut self, key: Flow, tcp: bool, restarted: bool, pending: bool) {
        if self.shard.is_some_and(|(i, _)| i != 0) {
            return;
        }
        if let Some(h) = self.recorder.as_deref_mut() {
            let key = if tcp { HoldKey::Tcp(key) } else { HoldKey::Sctp(key) };
            if restarted {
                h.hold.reset(&key);
            }
            h.source = Some(key);
            h.pending = pending;
        }
    }

    /// The packet was an IP fragment of `(src, dst, id, protocol)`;
    /// `known`: its datagram was under way before it (else what an old one
    /// on this id left goes); `completed`: it completed the datagram, whose
    /// earlier fragments then travel with it.
    pub(crate) fn fragment_seen(
        &mut self,
        key: (IpAddr, IpAddr, u32, u8),
        known: bool,
        completed: bool,
    ) {
        let pending = !completed && self.defrag.holds(&key);
        if let Some(h) = self.recorder.as_deref_mut() {
            let key = HoldKey::Fragments(key.0, key.1, key.2, key.3);
            if !known {
                h.hold.reset(&key);
            }
            if completed {
                h.carried_lost |= h.hold.take(&key, &mut h.carried);
                h.source = None;
                h.pending = false;
            } else {
                h.source = Some(key);
                h.pending = pending;
            }
        }
    }

    /// A SIP message was handled for the packet: its context's older
    /// frames belonged to messages now whole.
    #[inline]
    pub(crate) fn message_completed(&mut self) {
        if let Some(h) = self.recorder.as_deref_mut() {
            h.completed = true;
        }
    }

    /// Hands the packet just handled (with the frames held for its
    /// message) to the sink for each recorded call it belongs to, and holds
    /// it while its reassembly context waits for more.
    pub(crate) fn record_packet(&mut self, p: &RawPacket<'_>) {
        let Some(h) = self.recorder.as_deref_mut() else {
            return;
        };
        let source = h.source.take();
        let pending = std::mem::take(&mut h.pending) && source.is_some();
        let completed = std::mem::take(&mut h.completed);
        if h.calls.is_empty() && h.carried.is_empty() {
            // Part of a message still to come: held in place (after what
            // messages now whole held). A message completed and nothing
            // pending: what it held goes.
            if let Some(key) = source {
                if completed || !pending {
                    h.hold.reset(&key);
                }
                if pending {
                    let frame = h.hold.copy(p.ts_ns, p.link_type, p.data);
                    h.hold.push(p.ts_ns, key, frame);
                }
            }
            return;
        }
        let mut group = std::mem::take(&mut h.group);
        let carried_lost = std::mem::take(&mut h.carried_lost);
        let mut lost = carried_lost;
        if let Some(k) = &source {
            lost |= h.hold.take(k, &mut group);
        }
        // This packet's own frames: the fragments it completed, and itself.
        let own = group.len();
        group.append(&mut h.carried);
        let mut current = pending.then(|| h.hold.copy(p.ts_ns, p.link_type, p.data));
        let first_shard = self.shard.is_none_or(|(i, _)| i == 0);
        for (idx, signalling) in h.calls.drain(..) {
            let Some(c) = self.calls.get(idx) else {
                continue;
            };
            let wanted = c.record_payload
                || match self.cfg.record {
                    RecordingMode::All => true,
                    RecordingMode::Sip => signalling,
                    RecordingMode::None => false,
                };
            if !wanted || c.ignored || (signalling && !first_shard) {
                continue;
            }
            let tag =
                CallTag { serial: c.serial, call_id: c.text.call_id(), start_ns: c.invite_ns };
            for f in group.iter_mut().filter(|f| f.wanted_by(tag.serial)) {
                h.sink.packet(tag, f.ts_ns, f.link_type, &f.data, !lost);
                f.recorded(tag.serial);
            }
            h.sink.packet(tag, p.ts_ns, p.link_type, p.data, !lost);
            if let Some(f) = current.as_mut() {
                f.recorded(tag.serial);
            }
        }
        match (source, current) {
            (Some(key), Some(f)) => {
                // The message still to come starts in this packet: the
                // older frames held messages now whole.
                if completed {
                    for f in group.drain(..own) {
                        h.hold.recycle(f);
                    }
                    lost = carried_lost;
                }
                group.push(f);
                h.hold.put(p.ts_ns, key, &mut group, lost);
            }
            _ => {
                for f in group.drain(..) {
                    h.hold.recycle(f);
                }
            }
        }
        h.group = group;
    }
}
