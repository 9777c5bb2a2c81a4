//! The recording hook: the packets of the calls chosen for recording go,
//! as captured, to a [`PacketSink`] (the per-call capture writer of
//! `calliper-recorder`), each tagged with its call. Handling a packet marks
//! the call it belonged to (its SIP message's, its stream's, its RTCP's);
//! the packet loop then hands the frame over. Signalling every shard
//! handles is recorded by the first shard only; media by its owner.

use super::*;

/// Which calls' packets are recorded (a `record` rule adds its calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordMode {
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
    /// A captured frame of `call`. `whole`: false when the frame completed
    /// something carried in several packets (a SIP message over TCP, SCTP
    /// or WebSocket, an IP fragment's datagram), whose earlier packets
    /// are not handed over.
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

impl Engine {
    /// Marks the packet being handled as `call`'s (`signalling`: a SIP
    /// message, which every shard handles).
    #[inline]
    pub(crate) fn attribute(&mut self, call: Idx, signalling: bool) {
        if self.recorder.is_some() {
            self.attributed = Some((call, signalling));
            self.attributed_whole = !self.in_fragment
                && (!signalling || matches!(self.sip_transport, SipTransport::Udp));
        }
    }

    /// Hands the packet just handled to the sink if its call is recorded.
    pub(crate) fn record_packet(&mut self, p: &RawPacket<'_>) {
        let Some((idx, signalling)) = self.attributed.take() else {
            return;
        };
        if signalling && self.shard.is_some_and(|(i, _)| i != 0) {
            return;
        }
        let (Some(c), Some(sink)) = (self.calls.get(idx), self.recorder.as_mut()) else {
            return;
        };
        let wanted = c.record_payload
            || match self.cfg.record {
                RecordMode::All => true,
                RecordMode::Sip => signalling,
                RecordMode::None => false,
            };
        if wanted && !c.ignored {
            let tag = CallTag {
                serial: c.serial,
                call_id: &c.call_id,
                start_ns: c.invite_ns,
            };
            sink.packet(tag, p.ts_ns, p.link_type, p.data, self.attributed_whole);
        }
    }
}
