//! RTP header compression on a link (cRTP, RFC 2508 and RFC 3545, from
//! `calliper_crtp`), enabled by both ends ([`Node::compress_link`]).
//!
//! The sending end compresses the IPv4/UDP/RTP datagram each DATA carries.
//! The history keeps the compressed form, so a retransmission is the very
//! packet the decompressor missed. The receiving end must give the
//! decompressor each flow's packets once each and in order: copies are
//! already dropped by data sequence number, and here a packet after a gap
//! waits until the gap is filled (a retransmission or a late original) or
//! given up, which the budget bounds. So the link's recovery repairs a gap
//! before the decompressor needs the missing delta. Only the flow that
//! lost a packet waits: a packet whose context shows no gap of its own (its
//! 4-bit link sequence follows on) and has nothing held goes straight
//! through, since the packet missing is not of its flow. A gap given up reaches
//! the decompressor as a gap in its link sequence: unless RFC 3545's
//! repeats bridge it, the context is invalidated and its refresh asked for
//! with CONTEXT_STATE, sent N+1 times as a CRTP_STATE datagram.

use super::*;
use crate::packet::crtp_kind;
use calliper_crtp::{
    Compressor, CompressorStats, Config as CrtpConfig, Decompressor, DecompressorStats,
    Error as CrtpError,
};
use std::collections::BTreeMap;

/// Packets held behind a gap, and their bytes, before more are dropped
/// (counted): a gap of this many is an outage.
const MAX_HELD: usize = MAX_MISSING;
const MAX_HELD_BYTES: usize = 1 << 20;

/// One link's compressor, decompressor and in-order stage.
pub(super) struct LinkCrtp {
    config: CrtpConfig,
    compressor: Compressor,
    decompressor: Decompressor,
    /// Next data sequence number the decompressor takes, unwrapped (the
    /// link's 32-bit numbers counted on past their wrap, so that order
    /// holds across it).
    next: Option<u64>,
    /// Data after a gap: unwrapped data sequence number → (context id,
    /// datagram).
    held: BTreeMap<u64, (Option<u32>, Vec<u8>)>,
    held_bytes: usize,
    /// Held packets per context id.
    held_contexts: HashMap<u32, u32>,
    buf: Vec<u8>,
    state: Vec<u8>,
}

impl std::fmt::Debug for LinkCrtp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkCrtp")
            .field("config", &self.config)
            .field("next", &self.next)
            .field("held", &self.held.len())
            .finish()
    }
}

impl Node {
    /// Compresses RTP headers on the link to `peer` with `config`; the
    /// peer must do the same for its end.
    pub fn compress_link(&mut self, peer: NodeId, config: CrtpConfig) -> Result<(), String> {
        let li = *self.by_peer.get(&peer).ok_or_else(|| format!("{peer} is not a neighbour"))?;
        self.links[li].crtp = Some(Box::new(LinkCrtp {
            config,
            compressor: Compressor::new(config)?,
            decompressor: Decompressor::new(config)?,
            next: None,
            held: BTreeMap::new(),
            held_bytes: 0,
            held_contexts: HashMap::new(),
            buf: Vec::new(),
            state: Vec::new(),
        }));
        Ok(())
    }

    /// The link to `peer`'s compressor and decompressor counters.
    pub fn crtp_stats(&self, peer: NodeId) -> Option<(CompressorStats, DecompressorStats)> {
        let c = self.links[*self.by_peer.get(&peer)?].crtp.as_ref()?;
        Some((c.compressor.stats, c.decompressor.stats))
    }

    /// The payload as it crosses link `li`: compressed into `out` with the
    /// kind byte first when the link compresses (true), else untouched.
    pub(super) fn compress_for(
        &mut self,
        li: usize,
        now: i64,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(c) = self.links[li].crtp.as_mut() else {
            return false;
        };
        let kind = c.compressor.compress(payload, now.max(0) as u64, &mut c.buf);
        out.clear();
        out.push(crtp_kind::to_byte(kind));
        out.extend_from_slice(&c.buf);
        true
    }

    /// A first copy of compressed data from link `li` (its encoded datagram
    /// `bytes`): decompressed now if it is next, else held behind the gap.
    pub(super) fn crtp_receive(&mut self, now: i64, li: usize, x: &Data<'_>, bytes: &[u8]) {
        let Some(c) = self.links[li].crtp.as_mut() else {
            // Compressed data on a link this node does not decompress.
            self.counters.malformed += 1;
            return;
        };
        // Unwrapped numbers start high, so that nothing goes below zero.
        let next = *c.next.get_or_insert((1 << 40) + x.data_seq as u64);
        let seq = unwrap(next, x.data_seq);
        if seq == next {
            c.next = Some(next + 1);
            self.crtp_take(now, li, x);
        } else if seq > next {
            let packet = split(&c.config, x.payload);
            let cid = packet.and_then(|(p, b)| Decompressor::context_of(p, b)).map(|c| c.0);
            let free = packet.is_some_and(|(p, b)| c.decompressor.in_step(p, b))
                && cid.is_none_or(|id| !c.held_contexts.contains_key(&id));
            if free {
                self.crtp_take(now, li, x);
                return;
            }
            if c.held.len() >= MAX_HELD || c.held_bytes + bytes.len() > MAX_HELD_BYTES {
                self.counters.crtp_held_dropped += 1;
                return;
            }
            if let Some(id) = cid {
                *c.held_contexts.entry(id).or_default() += 1;
            }
            c.held_bytes += bytes.len();
            c.held.insert(seq, (cid, bytes.to_vec()));
            // Counted when it waits for a gap recovery still asks for.
            let waits = first_missing(&self.links[li].missing, next, seq).is_some();
            self.counters.crtp_held += waits as u64;
        } else {
            // Its place was given up before it came: too late to use.
            self.links[li].tally.given_up(&mut self.counters, 1);
        }
        self.crtp_release(now, li);
    }

    /// Hands the decompressor what waited behind gaps that are now filled
    /// or given up (`link.missing` no longer holds them).
    pub(super) fn crtp_release(&mut self, now: i64, li: usize) {
        loop {
            let link = &mut self.links[li];
            let Some(c) = link.crtp.as_mut() else {
                return;
            };
            let (Some(next), Some(&first)) = (c.next, c.held.keys().next()) else {
                return;
            };
            if first != next {
                // Waiting for a gap still asked for; else skip to the next
                // gap or the first held packet.
                match first_missing(&link.missing, next, first) {
                    Some(gap) if gap == next => return,
                    Some(gap) => c.next = Some(gap),
                    None => c.next = Some(first),
                }
                continue;
            }
            let (cid, bytes) = c.held.remove(&first).expect("first key");
            c.held_bytes -= bytes.len();
            c.next = Some(first + 1);
            if let Some(n) = cid.and_then(|id| c.held_contexts.get_mut(&id)) {
                *n -= 1;
                if *n == 0 {
                    c.held_contexts.remove(&cid.expect("counted"));
                }
            }
            if let Ok(packet::Datagram { msg: Message::Data(x), .. }) = packet::decode(&bytes) {
                self.crtp_take(now, li, &x);
            }
        }
    }

    /// Gives a link's held packets to the decompressor when the link dies.
    pub(super) fn crtp_flush(&mut self, now: i64, li: usize) {
        self.crtp_release(now, li);
        if let Some(c) = self.links[li].crtp.as_mut() {
            c.next = None;
        }
    }

    /// Decompresses `x`'s payload and passes the datagram on; asks for
    /// refreshes of damaged contexts.
    fn crtp_take(&mut self, now: i64, li: usize, x: &Data<'_>) {
        let c = self.links[li].crtp.as_mut().expect("compressed link");
        let mut ip = std::mem::take(&mut c.buf);
        let result = match split(&c.config, x.payload) {
            Some((protocol, packet)) => {
                c.decompressor.decompress(protocol, packet, now.max(0) as u64, &mut ip).map(|_| ())
            }
            None => Err(CrtpError::Malformed("kind")),
        };
        let mut state = std::mem::take(&mut c.state);
        let asks = c.decompressor.context_state(&mut state);
        let copies = c.config.repeats as usize + 1;
        match result {
            Ok(()) => self.accept(now, &Data { payload: &ip, ..*x }),
            Err(CrtpError::ContextDamaged) => self.counters.crtp_damaged += 1,
            Err(_) => self.counters.malformed += 1,
        }
        if asks {
            for _ in 0..copies {
                self.emit(li, 0, Message::CrtpState(&state));
            }
        }
        if let Some(c) = self.links[li].crtp.as_mut() {
            (c.buf, c.state) = (ip, state);
        }
    }

    /// A CONTEXT_STATE from the peer's decompressor.
    pub(super) fn crtp_state(&mut self, li: usize, bytes: &[u8]) {
        match self.links[li].crtp.as_mut() {
            Some(c) => c.compressor.context_state(bytes),
            None => self.counters.malformed += 1,
        }
    }
}

/// `seq` unwrapped near `next` (within 2^31 either way).
fn unwrap(next: u64, seq: u32) -> u64 {
    next.wrapping_add(seq.wrapping_sub(next as u32) as i32 as i64 as u64)
}

/// The first data sequence number in [from, to) (unwrapped) that the link's
/// recovery still asks for, unwrapped; `missing` is keyed by the link's
/// 32-bit numbers, which may wrap inside the range.
fn first_missing(missing: &BTreeMap<u32, Missing>, from: u64, to: u64) -> Option<u64> {
    let (a, b) = (from as u32, to as u32);
    let found = if a <= b {
        missing.range(a..b).next()
    } else {
        missing.range(a..).next().or_else(|| missing.range(..b).next())
    };
    found.map(|(&seq, _)| unwrap(from, seq))
}

/// A compressed payload's PPP protocol number and cRTP packet.
fn split<'a>(config: &CrtpConfig, payload: &'a [u8]) -> Option<(u16, &'a [u8])> {
    let (&kind, packet) = payload.split_first()?;
    Some((crtp_kind::from_byte(kind)?.protocol(config), packet))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::voice;

    /// Node 1 with a compressed link to node 2, and the datagrams node 2
    /// would send it: G.729 packets compressed in order, data sequence
    /// numbers from `first_seq`.
    fn setup(first_seq: u32, count: u64) -> (Node, Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let config = CrtpConfig::default();
        let mut node = Node::new(Config::new(1), &[2], 0);
        node.compress_link(2, config).unwrap();
        let mut c = Compressor::new(config).unwrap();
        let (mut ip, mut link) = (Vec::new(), Vec::new());
        let (mut sent, mut datagrams) = (Vec::new(), Vec::new());
        for k in 0..count {
            voice::payload(true, 0, k, 20_000_000, 20, &mut ip);
            let kind = c.compress(&ip, k * 20_000_000, &mut link);
            let mut payload = vec![crtp_kind::to_byte(kind)];
            payload.extend_from_slice(&link);
            let mut bytes = Vec::new();
            let data = Data {
                origin: 2,
                dest: 1,
                vport: 9,
                ttl: 16,
                data_seq: first_seq.wrapping_add(k as u32),
                msg_seq: k as u32 + 1,
                sent_us: k * 20_000,
                payload: &payload,
            };
            let datagram =
                Datagram { flags: FLAG_CRTP, link_seq: k as u32, msg: Message::Data(data) };
            packet::encode(&datagram, &mut bytes);
            sent.push(ip.clone());
            datagrams.push(bytes);
        }
        (node, sent, datagrams)
    }

    #[test]
    fn order_holds_across_the_wrap_of_data_sequence_numbers() {
        // The packet at the wrap comes last (a late original): the ones
        // behind it wait for it, then all come out in order.
        let (mut node, sent, datagrams) = setup(u32::MAX - 3, 8);
        for (i, d) in datagrams.iter().enumerate() {
            if i != 3 {
                node.handle(i as i64, 2, d);
            }
        }
        node.handle(9, 2, &datagrams[3]);
        let got: Vec<Vec<u8>> =
            std::iter::from_fn(|| node.poll_delivery()).map(|d| d.payload).collect();
        assert_eq!(got, sent);
        assert_eq!(node.counters.crtp_damaged, 0);
    }

    #[test]
    fn a_jump_across_the_wrap_is_held_not_a_panic() {
        // Found by an attacker: a spoofed neighbour's data at 0xFFFFFFF0,
        // then at 5 with a context that is not in step.
        let (mut node, _, datagrams) = setup(0xFFFF_FFF0, 1);
        let (_, _, later) = setup(5, 3);
        node.handle(0, 2, &datagrams[0]);
        node.handle(1, 2, &later[2]);
        node.handle_timeout(1_000_000_000);
        assert!(node.counters.crtp_held <= 1);
    }
}
