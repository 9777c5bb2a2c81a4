//! The packet path: decoding a group of packets with prefetching, the
//! duplicate filter, reassembly of fragments, and dispatch of each
//! transport payload to SIP, TCP/SCTP/WebSocket framing or media.

use super::*;

impl Engine {
    /// Analyses one captured frame.
    pub fn packet(&mut self, ts_ns: i64, link_type: u16, data: &[u8]) {
        self.packets(&[RawPacket { ts_ns, link_type, data, routing: Routing::Unknown }]);
    }

    /// Analyses captured frames in order, with the same results as one
    /// [`Engine::packet`] call each, but faster: for each group of
    /// [`LOOKAHEAD`] packets it first decodes them all and starts loading
    /// what their lookups will touch (duplicate filter slot, stream index
    /// slot, then the stream itself), so the cache misses of a group overlap
    /// instead of stalling one packet after another. The prefetches are
    /// hints only: every packet is then handled exactly as alone.
    pub fn packets(&mut self, batch: &[RawPacket<'_>]) {
        // Batch ends, unless the caller ends batches (a shard): looked for
        // once for the lot, and packet by packet only when one falls inside.
        if self.external_batches || self.batcher.take_all(batch) {
            return self.groups(batch);
        }
        let mut start = 0;
        for (j, p) in batch.iter().enumerate() {
            if self.batcher.boundary(p.ts_ns) {
                self.groups(&batch[start..j]);
                start = j;
                self.advance_to(p.ts_ns);
                self.end_batch(&[]);
            }
        }
        self.groups(&batch[start..]);
    }

    /// Packets within one batch, a group of [`LOOKAHEAD`] at a time.
    fn groups(&mut self, batch: &[RawPacket<'_>]) {
        if let [one] = batch {
            // No lookahead: skip setting up a group's worth of state.
            return self.group::<1>(std::slice::from_ref(one));
        }
        for group in batch.chunks(LOOKAHEAD) {
            self.group::<LOOKAHEAD>(group);
        }
    }

    /// Handles up to `N` packets.
    pub(crate) fn group<'a, const N: usize>(&mut self, group: &[RawPacket<'a>]) {
        self.rules.sync();
        // An action no call took stays with its packet, even if the rules
        // were just emptied and no lookup will clear it.
        self.packet_rule = None;
        if let Some(n) = self.cfg.fault_panic_after_packets {
            if self.counters.packets >= n && self.shard.is_none_or(|(i, n)| i + 1 == n) {
                panic!("fault injection after {n} packets");
            }
        }
        let mut ahead = Ahead::<'a, N>::default();
        let n = group.len();
        // A rolling pipeline: decoding packet i + INDEX_AHEAD starts the load of
        // its index slot, packet i + STREAM_AHEAD (whose slot has arrived by
        // now) starts the load of its stream, and packet i is handled.
        for (i, p) in group.iter().enumerate().take(INDEX_AHEAD) {
            self.decode_ahead(p, i, &mut ahead);
        }
        for &sh in &ahead.stream_hash[..n.min(STREAM_AHEAD)] {
            self.load_stream(sh);
        }
        // Each packet's anomalies are dated by it: looked for before the
        // next (a duplicate returns early from `handle_decoded`).
        let anomaly_events = self.events.media();
        let mut previous_ts = None;
        for (i, p) in group.iter().enumerate() {
            if let (true, Some(t)) = (anomaly_events, previous_ts) {
                self.packet_anomaly_events(t);
            }
            previous_ts = Some(p.ts_ns);
            if i + INDEX_AHEAD < n {
                self.decode_ahead(&group[i + INDEX_AHEAD], i + INDEX_AHEAD, &mut ahead);
            }
            if i + STREAM_AHEAD < n {
                self.load_stream(ahead.stream_hash[i + STREAM_AHEAD]);
            }
            self.handle_decoded(p, i, &ahead);
        }
        if let (true, Some(t)) = (anomaly_events, previous_ts) {
            self.packet_anomaly_events(t);
        }
    }

    /// Decodes packet `i` of a group before its turn, and starts loading
    /// its duplicate-filter set and its stream's index slot.
    #[inline(always)]
    fn decode_ahead<'a, const N: usize>(
        &self,
        p: &RawPacket<'a>,
        i: usize,
        ahead: &mut Ahead<'a, N>,
    ) {
        if let Routing::Counted { .. } | Routing::Skipped = p.routing {
            return;
        }
        // Written in place and read by reference: a frame is ten words.
        let r = ahead.decoded[i].insert(match calliper_wire::decode_plain(p.link_type, p.data) {
            Some(f) => Ok(f),
            None => calliper_wire::decode(p.link_type, p.data),
        });
        if let Ok(f) = r {
            ahead.media[i] = match p.routing {
                Routing::Owned => Some(true),
                _ => self.media_owner(f),
            };
        }
        if let (Ok(f), false) = (&*r, ahead.media[i] == Some(false)) {
            // A shard's own media was found so by `media_owner` or the
            // reader: its key needs no second ownership test.
            let mine = self.shard.is_none() || ahead.media[i] == Some(true);
            let key_hash = self.rtp_key(f).filter(|_| mine).map(|k| k.hash(self.key_seed));
            if let Some(d) = &self.dedup {
                ahead.dedup_hash[i] = match (key_hash, f.udp()) {
                    (Some(k), Some((_, _, payload))) => Some(d.hash_rtp(f.ip_id, payload, k)),
                    _ => d.hash(f),
                };
                if let Some(h) = ahead.dedup_hash[i] {
                    d.prefetch(h);
                }
            }
            if let Some(h) = key_hash {
                self.stream_ids.prefetch(h);
                ahead.stream_hash[i] = Some(h);
            }
        }
    }

    /// Starts loading the stream whose index slot `hash` found.
    #[inline(always)]
    fn load_stream(&self, hash: Option<u64>) {
        if let Some(si) = hash.and_then(|h| self.stream_ids.peek(h)) {
            self.streams.prefetch(si);
        }
    }

    /// Handles packet `i` of a group, decoded ahead.
    #[inline(always)]
    fn handle_decoded<const N: usize>(
        &mut self,
        p: &RawPacket<'_>,
        i: usize,
        ahead: &Ahead<'_, N>,
    ) {
        self.counters.packets += 1;
        self.counters.bytes += p.data.len() as u64;
        if p.ts_ns > self.now {
            self.now = p.ts_ns;
        }
        match p.routing {
            Routing::Counted { class, src } => {
                return self.count_routed(p.ts_ns, p.data.len(), class, IpAddr::V4(src));
            }
            Routing::Skipped => return,
            Routing::Owned | Routing::Unknown => {}
        }
        let decoded = &ahead.decoded[i];
        self.key_hint = match (decoded, ahead.stream_hash[i]) {
            (Some(Ok(f)), Some(hash)) => Some(KeyHint { stream: self.stream_of_frame(f, hash) }),
            _ => None,
        };
        match (decoded, self.key_hint) {
            (Some(Ok(f)), Some(KeyHint { stream: Some(si) })) => {
                self.count_stream_traffic(p.ts_ns, p.data.len(), si, f)
            }
            (Some(d), _) => self.count_traffic(p.ts_ns, p.data.len(), d),
            (None, _) => {}
        }
        let media = ahead.media[i];
        match decoded {
            // Another shard's media: it alone goes further with it.
            Some(Ok(_)) if media == Some(false) => {}
            Some(Ok(frame)) => {
                if let Some((index, _)) = self.shard {
                    // Media is seen by its owner only, which counts its
                    // rule hits; what all shards see, the first counts.
                    self.rules.count_hits(media.is_some() || index == 0);
                }
                if let (Some(d), Some(h)) = (self.dedup.as_mut(), ahead.dedup_hash[i]) {
                    if d.check(p.ts_ns, h) {
                        self.owned_duplicates += media.is_some() as u64;
                        return;
                    }
                }
                self.frame(p.ts_ns, frame);
                if self.recorder.is_some() {
                    self.record_packet(p);
                }
            }
            Some(Err(calliper_wire::DecodeError::NotIp(kind))) => self.counters.not_ip(kind),
            Some(Err(e)) => self.counters.anomaly(e.name()),
            None => {}
        }
    }

    /// For one shard of several: whether a frame is media (UDP that is
    /// neither SIP, HEP nor RTCP, the very tests `transport` makes) and if so
    /// whether this shard owns its address pair. Media goes no further than
    /// decoding in the other shards — no duplicate filter, no rules, no
    /// counting — so shards split the work; everything else (signalling,
    /// RTCP, fragments, other transports) every shard handles (None).
    #[inline(always)]
    pub(crate) fn media_owner(&self, f: &Frame<'_>) -> Option<bool> {
        let (i, n) = self.shard?;
        Some(route::media_flow(&self.sip, f)?.shard(n) == i)
    }

    /// The stream key of a frame analysed as RTP: one `transport` would
    /// send to `media_datagram` (it then does, by the key hint), given that
    /// in a sharded run the caller found the frame to be this shard's media.
    /// No SIP test: SIP starts with a letter, never with RTP's version bits
    /// (`SipClassifier::is_sip`; its test `rtp_is_never_sip` holds that).
    #[inline(always)]
    pub(crate) fn rtp_key(&self, f: &Frame<'_>) -> Option<StreamKey> {
        let (sport, dport, payload) = f.udp()?;
        if payload.len() < 12 || payload[0] >> 6 != 2 || looks_like_rtcp(payload) {
            return None;
        }
        Some(StreamKey {
            src: f.src,
            dst: f.dst,
            sport,
            dport,
            ssrc: u32::from_be_bytes([payload[8], payload[9], payload[10], payload[11]]),
        })
    }

    /// The stream of a frame whose [`Engine::rtp_key`] hashed to `hash`
    /// (that key, without its tests again: it passed them).
    #[inline(always)]
    fn stream_of_frame(&self, f: &Frame<'_>, hash: u64) -> Option<Idx> {
        let (sport, dport, payload) = f.udp()?;
        let ssrc = u32::from_be_bytes(payload.get(8..12)?.try_into().ok()?);
        self.stream_by_hash(&StreamKey { src: f.src, dst: f.dst, sport, dport, ssrc }, hash)
    }

    /// Handles a decoded frame. A fragment goes to reassembly; a datagram it
    /// completes may itself be a fragment of an inner datagram (a tunnel
    /// inside a fragmented packet), so reassembly loops here instead of
    /// calling back into this function: nesting in the input is bounded by
    /// the decoder's depth limit and never grows the stack.
    #[inline(always)]
    pub(crate) fn frame(&mut self, now: i64, f: &Frame<'_>) {
        let Transport::Fragment { frag, payload } = f.transport else {
            if !self.rules.no_network_rules() && self.ignored_by_rule(f) {
                return;
            }
            return self.transport(now, f);
        };
        self.fragment_frame(now, f, frag, payload);
    }

    /// [`Engine::frame`] for a fragment, apart so that the common frame's
    /// path inlines into the packet loop (a call level cost 20
    /// instructions a packet).
    #[inline(never)]
    fn fragment_frame(
        &mut self,
        now: i64,
        f: &Frame<'_>,
        frag: calliper_wire::Fragment,
        payload: &[u8],
    ) {
        let mut next = self.fragment(now, f, frag, payload);
        while let Some((d, outer)) = next.take() {
            match calliper_wire::transport_of(&outer, d.protocol, &d.payload) {
                Ok(inner) => match inner.transport {
                    Transport::Fragment { frag, payload } => {
                        next = self.fragment(now, &inner, frag, payload);
                    }
                    // A reassembled datagram has the ports its fragments lacked.
                    _ if !self.rules.no_network_rules() && self.ignored_by_rule(&inner) => {}
                    _ => self.transport(now, &inner),
                },
                Err(e) => self.counters.anomaly(e.name()),
            }
            self.defrag.recycle(d.payload);
        }
    }

    /// Offers one fragment to reassembly; returns the datagram it completes
    /// and the frame it was found in (addresses, VLAN, nesting depth).
    pub(crate) fn fragment(
        &mut self,
        now: i64,
        f: &Frame<'_>,
        frag: calliper_wire::Fragment,
        payload: &[u8],
    ) -> Option<(defrag::Datagram, Frame<'static>)> {
        self.counters.ip_fragments += 1;
        let key = (f.src, f.dst, frag.id, frag.protocol);
        // For the recorder: whether the datagram was under way (one timed
        // out by now is not).
        let known = self.recorder.is_some() && {
            self.defrag.expire(now);
            self.defrag.holds(&key)
        };
        let d = self.defrag.add(now, f.src, f.dst, frag, payload);
        if self.recorder.is_some() {
            self.fragment_seen(key, known, d.is_some());
        }
        let d = d?;
        let outer =
            Frame { transport: Transport::Other { protocol: d.protocol, payload: &[] }, ..*f };
        Some((d, outer))
    }

    /// Looks the packet up in the network rules: true when an `ignore` rule
    /// drops it; a `label` or `record` action is kept for the call its SIP
    /// message or stream belongs to. Fragments carry no ports, so rules
    /// judge the reassembled datagram, never its pieces.
    fn ignored_by_rule(&mut self, f: &Frame<'_>) -> bool {
        let (protocol, sport, dport) = match f.transport {
            Transport::Udp { sport, dport, .. } => (17, sport, dport),
            Transport::Tcp { sport, dport, .. } => (6, sport, dport),
            Transport::Fragment { .. } => return false,
            Transport::Other { protocol, payload } => match payload {
                // SCTP's common header starts with the ports.
                [a, b, c, d, ..] if protocol == 132 => {
                    (protocol, u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))
                }
                _ => (protocol, 0, 0),
            },
        };
        let flow =
            calliper_rules::Flow { vlan: f.vlan, protocol, src: f.src, dst: f.dst, sport, dport };
        self.packet_rule = None;
        match self.rules.lookup(&flow) {
            Some(RuleAction::Ignore) => {
                // Media is counted by the shard that owns it alone (a
                // reassembled datagram reaches every shard), so shards add
                // up to one engine's count.
                match self.media_owner(f) {
                    Some(true) => self.owned.rule_ignored_packets += 1,
                    Some(false) => {}
                    None => self.counters.rule_ignored_packets += 1,
                }
                true
            }
            Some(RuleAction::Track) | None => false,
            Some(a) => {
                self.packet_rule = Some(a.clone());
                false
            }
        }
    }

    /// Handles a frame's transport payload (never a fragment). UDP, where
    /// media is, inlines into the packet loop; the rest is a call away.
    #[inline(always)]
    pub(crate) fn transport(&mut self, now: i64, f: &Frame<'_>) {
        match f.transport {
            Transport::Udp { sport, dport, payload } => {
                self.udp_datagram(now, f, sport, dport, payload)
            }
            _ => self.other_transport(now, f),
        }
    }

    /// A UDP datagram: media, HEP, SIP or RTCP.
    #[inline(always)]
    fn udp_datagram(&mut self, now: i64, f: &Frame<'_>, sport: u16, dport: u16, payload: &[u8]) {
        // Signalling is counted by every shard alike (`counters`),
        // media only by the shard that owns its address pair (`owned`).
        // A key hint says `rtp_key` already found this datagram to
        // be owned media, by the same tests as below.
        if self.key_hint.is_some() {
            self.owned.udp += 1;
            return self.media_datagram(now, f, sport, dport, payload);
        }
        let flow = flow(f, sport, dport);
        if self.sip.is_hep(dport, payload) {
            // Before SIP: an agent such as Kamailio sends its HEP
            // from its SIP port, and "HEP3" starts with a letter.
            self.counters.udp += 1;
            self.hep_datagram(now, payload);
        } else if self.sip.is_sip(sport, dport, payload) {
            self.counters.udp += 1;
            self.sip_transport = SipTransport::Udp;
            self.sip_datagram(now, &flow, payload);
        } else if looks_like_rtcp(payload) {
            // Every shard reads RTCP (it is light), each applying it
            // to the streams it owns: RTCP need not be on RTP's
            // port + 1 (RFC 3605), so it may hash to another shard.
            self.counters.udp += 1;
            self.rtcp_datagram(now, &flow, payload);
        } else if self.shard.is_none_or(|(i, n)| flow.shard(n) == i) {
            self.owned.udp += 1;
            self.media_datagram(now, f, sport, dport, payload);
        }
    }

    /// [`Engine::transport`] for all but UDP.
    #[inline(never)]
    fn other_transport(&mut self, now: i64, f: &Frame<'_>) {
        match f.transport {
            Transport::Tcp { sport, dport, seq, flags, payload } => {
                self.counters.tcp += 1;
                let key = flow(f, sport, dport);
                // Track a direction from its SYN to a SIP port or from its
                // first segment that starts a SIP message.
                // WebSocket from its upgrade, or from a frame starting a
                // SIP message (a connection picked up after its upgrade).
                let mut ws = 0;
                let tracked =
                    (!payload.is_empty() || self.recorder.is_some()) && self.tcp.tracks(&key);
                let start = if payload.is_empty() {
                    flags & 0x12 == 0x02 && self.sip.port(sport, dport)
                } else if tracked {
                    false
                } else {
                    if websocket::is_sip_upgrade(payload) {
                        ws = websocket::TAG_HANDSHAKE;
                    } else if websocket::starts_sip_frame(payload) {
                        ws = websocket::TAG_FRAMES;
                    }
                    ws != 0 || self.sip.is_sip(sport, dport, payload)
                };
                let gaps = self.tcp.counters.gaps;
                if let Some(o) = self.tcp.segment(now, key, seq, flags, payload, start) {
                    if ws != 0 {
                        self.tcp.set_tag(o.flow, ws);
                    }
                    if self.tcp.tag(o.flow) == 0 {
                        self.sip_stream(now, key, o.flow);
                    } else {
                        self.websocket_stream(now, key, o.flow);
                    }
                    if o.closing {
                        self.tcp.close(o.flow);
                    }
                    // For the recorder: a flow started anew (a SYN, a new
                    // connection on these addresses), and gaps given up on.
                    let restarted = flags & 0x02 != 0 || !tracked;
                    if self.recorder.is_some() && (!payload.is_empty() || o.closing || restarted) {
                        if self.tcp.counters.gaps != gaps {
                            // What was held before the gap is no message's now.
                            self.message_completed();
                        }
                        let pending = self.tcp.pending(o.flow);
                        self.reassembling(key, true, restarted, pending);
                    }
                }
            }
            // UDP is `transport`'s; a fragment is `frame`'s, which loops
            // over nested reassemblies.
            Transport::Udp { .. } | Transport::Fragment { .. } => {}
            Transport::Other { protocol: 132, payload } => {
                self.counters.other_ip += 1;
                // Taken out for the length of the call so messages can reach
                // the call table; an empty map, so nothing is allocated.
                let mut sctp = std::mem::take(&mut self.sctp);
                self.sip_transport = SipTransport::Sctp;
                let given_up = sctp.counters.dropped_pieces + sctp.counters.partial_expired;
                let ports = sctp.packet(now, f.src, f.dst, payload, |p, m| {
                    if self.sip.is_sip(p.sport, p.dport, m) {
                        self.sip_datagram(now, &flow(f, p.sport, p.dport), m);
                    }
                });
                if let (Some(p), true) = (ports, self.recorder.is_some()) {
                    let key = flow(f, p.sport, p.dport);
                    // A partial message abandoned: what was held is no message's.
                    let abandoned =
                        sctp.counters.dropped_pieces + sctp.counters.partial_expired != given_up;
                    self.reassembling(key, false, abandoned, sctp.holds(&key));
                }
                self.sctp = sctp;
            }
            Transport::Other { .. } => self.counters.other_ip += 1,
        }
    }
}

type Decoded<'a> = Option<Result<Frame<'a>, calliper_wire::DecodeError>>;

/// What a group's decoding ahead found for each of its packets.
struct Ahead<'a, const N: usize> {
    decoded: [Decoded<'a>; N],
    dedup_hash: [Option<u64>; N],
    /// For a shard: Some(owned) when the packet is media (`media_owner`).
    media: [Option<bool>; N],
    stream_hash: [Option<u64>; N],
}

impl<const N: usize> Default for Ahead<'_, N> {
    fn default() -> Self {
        Ahead {
            decoded: [None; N],
            dedup_hash: [None; N],
            media: [None; N],
            stream_hash: [None; N],
        }
    }
}
