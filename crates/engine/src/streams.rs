//! RTP streams: lookup by (addresses, ports, SSRC), analysis per packet,
//! streams tied to calls through the media table, heuristic candidates
//! without signalling, and the caps on them.

use super::*;

impl Engine {
    /// A UDP datagram that is media (neither SIP, HEP nor RTCP), from the
    /// frame `f`: its flow is built only off the known stream's path, which
    /// needs none.
    pub(crate) fn media_datagram(
        &mut self,
        now: i64,
        f: &Frame<'_>,
        sport: u16,
        dport: u16,
        payload: &[u8],
    ) {
        let Ok(h) = RtpHeader::parse(payload) else {
            let entry = self.media_of(&flow(f, sport, dport)).map(|e| (e.call, e.rtp));
            match entry.filter(|&(_, rtp)| !rtp) {
                Some((c, _)) if self.calls.get(c).is_some() => {
                    if let Some(call) = self.calls.get_mut(c) {
                        call.t38_packets = call.t38_packets.saturating_add(1);
                    }
                    self.attribute(c, false);
                }
                _ => self.owned.udp_untracked += 1,
            }
            return;
        };
        let pkt = calliper_rtp::Packet {
            arrival_ns: now,
            seq: h.seq,
            timestamp: h.timestamp,
            payload_type: h.payload_type,
            marker: h.marker,
            bytes: payload.len() as u32,
        };
        let key = |h: &RtpHeader| StreamKey { src: f.src, dst: f.dst, sport, dport, ssrc: h.ssrc };
        // Looked up already when the packet's traffic was counted (the
        // same key: the same frame, the same SSRC bytes).
        let found = match self.key_hint.take() {
            Some(KeyHint { stream }) => stream,
            None => self.stream_id(&key(&h)),
        };
        if let Some(si) = found {
            let start = (h.header_len as usize).min(payload.len());
            let end = (start + h.payload_len as usize).min(payload.len());
            self.stream_packet(si, &pkt, &payload[start..end], now);
            return;
        }
        self.media_unknown(key(&h), &pkt, now);
    }

    /// A packet of no stream yet: a new stream of a call, T.38, a
    /// candidate, or nothing (out of line: the packet loop is for known
    /// streams).
    #[inline(never)]
    fn media_unknown(&mut self, key: StreamKey, pkt: &calliper_rtp::Packet, now: i64) {
        let entry = self.media_entry(&key);
        if let Some((e, by_dst)) = entry {
            if e.rtp && !self.admits(&key, e, by_dst) {
                self.owned.rtp_foreign += 1;
                self.owned.udp_untracked += 1;
                return;
            }
            self.attribute(e.call, false);
            if e.rtp {
                self.new_call_stream(key, e, by_dst, pkt, now);
            } else if let Some(call) = self.calls.get_mut(e.call) {
                call.t38_packets = call.t38_packets.saturating_add(1);
            }
        } else if self.cfg.rtp_heuristic {
            self.new_candidate(key, pkt, now);
        } else {
            self.owned.udp_untracked += 1;
        }
    }

    pub(crate) fn stream_packet(
        &mut self,
        si: Idx,
        pkt: &calliper_rtp::Packet,
        body: &[u8],
        now: i64,
    ) {
        if self.recorder.is_some() {
            if let Some(c) = self.streams.get(si).and_then(|s| s.call) {
                self.attribute(c, false);
            }
        }
        let Some(s) = self.streams.get_mut(si) else {
            return;
        };
        if s.closed {
            if let Some(call) = s.call.and_then(|c| self.calls.get_mut(c)) {
                call.t38_packets = call.t38_packets.saturating_add(1);
            }
            return;
        }
        if s.stats.interval_due(now) {
            let call = s.call.and_then(|c| self.calls.get(c));
            media_events::cut_interval(&self.events, self.cfg.interval_ns, s, call, Some(now), now);
        }
        if s.call.is_none() {
            if let Some(list) = self.orphan_packet(si, pkt) {
                self.streams.touch(si, list, now);
            }
            return;
        }
        if pkt.payload_type != s.last_pt {
            s.last_pt = pkt.payload_type;
            s.last_clock = match (s.call, s.desc) {
                (Some(c), Some(d)) => {
                    self.calls.get(c).map_or(Codec::static_clock(pkt.payload_type), |call| {
                        resolve(call.media.get(d as usize), pkt.payload_type).clock
                    })
                }
                _ => Codec::static_clock(pkt.payload_type),
            };
        }
        if let ClockRate::Event(hz) = s.last_clock {
            let end = body.get(1).is_some_and(|flags| flags & 0x80 != 0);
            let dtmf = s.dtmf.get_or_insert_with(Default::default);
            let same_event = dtmf.same_event(pkt.timestamp);
            if s.stats.update_event(pkt, hz, end, same_event) {
                dtmf.end_repeats = dtmf.end_repeats.saturating_add(1);
            }
            // Durations are in units of the event's own clock (RFC 4733 §2.3).
            let ended = dtmf.update(now, pkt.timestamp, body, hz);
            if let (Some(e), Some(call)) = (ended, s.call.and_then(|c| self.calls.get(c))) {
                media_events::dtmf_event(&self.events, call, &s.key, &e);
            }
        } else {
            s.stats.update(pkt, s.last_clock);
        }
        self.owned.rtp_in_calls += 1;
        // Refreshing the call's place on its activity list touches three
        // other entries (cache misses); once a second is precise enough for
        // timeouts of seconds to minutes, and the record's end time takes the
        // streams' exact last packet.
        if now - s.touched_call_ns >= TOUCH_EVERY_NS {
            s.touched_call_ns = now;
            if let Some(c) = s.call {
                self.pending_touches.push((now, c));
            }
        }
    }

    /// A stream's statistics from its first packet, reporting intervals started.
    fn new_stats(&self, pkt: &calliper_rtp::Packet, clock: ClockRate) -> StreamStats {
        let mut stats = StreamStats::new(pkt, clock);
        stats.start_intervals(self.cfg.interval_ns);
        stats
    }

    /// The stream with this key.
    pub(crate) fn stream_id(&self, k: &StreamKey) -> Option<Idx> {
        self.stream_by_hash(k, k.hash(self.key_seed))
    }

    /// The stream with key `k`, whose hash is `hash`.
    #[inline(always)]
    pub(crate) fn stream_by_hash(&self, k: &StreamKey, hash: u64) -> Option<Idx> {
        let streams = &self.streams;
        self.stream_ids.find(hash, |i| streams.get(i).is_some_and(|s| s.key == *k))
    }

    /// A packet of a stream without a call: confirm candidates, adopt the
    /// stream into a call if SDP has since described its address.
    /// Returns the list the stream should be on, or None if it was dropped.
    pub(crate) fn orphan_packet(&mut self, si: Idx, pkt: &calliper_rtp::Packet) -> Option<u8> {
        let s = self.streams.get_mut(si)?;
        if s.probation > 0 {
            let step = pkt.seq.wrapping_sub(s.stats.seq.extended_max() as u16);
            if step > 10 {
                self.drop_candidate(si);
                self.owned.udp_untracked += 1;
                return None;
            }
            // A continuing number under the same SSRC confirms, whatever the
            // payload type (comfort noise, an event); a repeat (RFC 4733 end
            // packets are sent three times) neither confirms nor refutes. The
            // packets are kept, so a confirmed stream has all tshark counts.
            if step != 0 {
                s.probation -= 1;
            }
        }
        let clock = Codec::static_clock(pkt.payload_type);
        s.stats.update(pkt, clock);
        let key = s.key;
        let confirmed = s.probation == 0;
        if confirmed {
            let entry = self.media_entry(&key);
            self.owned.rtp_orphan += 1;
            if let Some((e, by_dst)) = entry.filter(|&(e, d)| self.admits(&key, e, d)) {
                if self.adopt(si, e, by_dst) {
                    return None;
                }
            }
            return Some(LIST_ORPHAN);
        }
        self.owned.rtp_orphan += 1;
        Some(LIST_CANDIDATE)
    }

    /// Stores a new stream, within the stream cap: this engine's own, or in
    /// a sharded run the cap on all shards' streams together, so a sharded
    /// run refuses streams at the same table size as one engine.
    pub(crate) fn insert_stream(&mut self, stream: Stream) -> Option<Idx> {
        if let Some(c) = &self.shared {
            if !c.take_stream(self.cfg.max_streams) {
                return None;
            }
        }
        match self.streams.insert(stream) {
            Ok(si) => Some(si),
            Err(_) => {
                if let Some(c) = &self.shared {
                    c.give_back_stream();
                }
                None
            }
        }
    }

    /// Takes a place for one more stream in call `idx`: fewer than
    /// [`MAX_STREAMS_PER_CALL`] here and, when sharded, in all shards.
    pub(crate) fn admit_call_stream(&self, idx: Idx) -> bool {
        let Some(call) = self.calls.get(idx) else {
            return false;
        };
        call.streams.len() < MAX_STREAMS_PER_CALL
            && self.shared.as_ref().is_none_or(|c| c.admit_call_stream(idx, call.serial))
    }

    /// Gives back a place [`Self::admit_call_stream`] took.
    pub(crate) fn release_call_stream(&self, idx: Idx) {
        if let (Some(c), Some(call)) = (&self.shared, self.calls.get(idx)) {
            c.release_call_stream(idx, call.serial);
        }
    }

    /// Removes a stream from the tables.
    pub(crate) fn remove_stream(&mut self, si: Idx) -> Option<Stream> {
        let s = self.streams.remove(si)?;
        if let Some(c) = &self.shared {
            c.give_back_stream();
        }
        self.stream_ids.remove(s.key.hash(self.key_seed), si);
        Some(s)
    }

    pub(crate) fn direction(owner: Side, by_dst: bool) -> StreamDirection {
        // The media entry's owner receives on that address.
        match (owner, by_dst) {
            (Side::Callee, true) | (Side::Caller, false) => StreamDirection::CallerToCallee,
            (Side::Caller, true) | (Side::Callee, false) => StreamDirection::CalleeToCaller,
        }
    }

    /// Moves an orphan stream into a call. False if the call cannot take it.
    pub(crate) fn adopt(&mut self, si: Idx, e: MediaEntry, by_dst: bool) -> bool {
        if !self.admit_call_stream(e.call) {
            return false;
        }
        self.apply_packet_rule(e.call);
        let Some(call) = self.calls.get_mut(e.call) else {
            return false;
        };
        push_exact(&mut call.streams, si);
        let desc = call.media.get(e.desc as usize);
        let direction = desc.map_or(StreamDirection::Unknown, |d| Self::direction(d.owner, by_dst));
        let Some(s) = self.streams.get_mut(si) else {
            return false;
        };
        s.last_pt = s.stats.payload_type;
        s.last_clock = resolve(desc, s.stats.payload_type).clock;
        s.call = Some(e.call);
        s.desc = Some(e.desc);
        s.direction = direction;
        // Call streams live and die with their call: take it off the orphan lists.
        self.streams.detach(si);
        self.stream_started_event(si, self.now);
        self.owned.rtp_orphan -= s_packets(&self.streams, si).min(self.owned.rtp_orphan);
        self.owned.rtp_in_calls += s_packets(&self.streams, si);
        true
    }

    pub(crate) fn new_call_stream(
        &mut self,
        key: StreamKey,
        e: MediaEntry,
        by_dst: bool,
        pkt: &calliper_rtp::Packet,
        now: i64,
    ) {
        if !self.admit_call_stream(e.call) {
            self.owned.anomaly("rtp_too_many_streams_per_call");
            return;
        }
        self.apply_packet_rule(e.call);
        let Some(call) = self.calls.get(e.call) else {
            return;
        };
        let desc = call.media.get(e.desc as usize);
        let codec = resolve(desc, pkt.payload_type);
        let direction = desc.map_or(StreamDirection::Unknown, |d| Self::direction(d.owner, by_dst));
        let stream = Stream {
            links: Links::default(),
            key,
            call: Some(e.call),
            desc: Some(e.desc),
            direction,
            last_pt: pkt.payload_type,
            last_clock: codec.clock,
            stats: self.new_stats(pkt, codec.clock),
            touched_call_ns: now,
            probation: 0,
            dtmf: None,
            rtcp: RtcpView::default(),
            closed: false,
            traffic: traffic::StreamTraffic::new(&self.sip, &key),
        };
        let Some(si) = self.insert_stream(stream) else {
            self.release_call_stream(e.call);
            self.owned.streams_refused += 1;
            return;
        };
        if let Some(call) = self.calls.get_mut(e.call) {
            push_exact(&mut call.streams, si);
        }
        self.stream_ids.insert(key.hash(self.key_seed), si);
        self.owned.streams += 1;
        self.owned.rtp_in_calls += 1;
        self.pending_touches.push((now, e.call));
        self.stream_started_event(si, now);
    }

    pub(crate) fn new_candidate(&mut self, key: StreamKey, pkt: &calliper_rtp::Packet, now: i64) {
        let own = self.streams.list_len(LIST_CANDIDATE);
        let full = match (&self.shared, self.shard) {
            (Some(c), Some((i, _))) => c.candidates_full(i as usize, own, self.cfg.max_candidates),
            _ => own >= self.cfg.max_candidates,
        };
        if full {
            if let Some((old, _)) = self.streams.oldest(LIST_CANDIDATE) {
                self.drop_candidate(old);
            }
        }
        let codec = Codec::resolve(pkt.payload_type, None);
        let stream = Stream {
            links: Links::default(),
            key,
            call: None,
            desc: None,
            direction: StreamDirection::Unknown,
            last_pt: pkt.payload_type,
            last_clock: codec.clock,
            stats: self.new_stats(pkt, codec.clock),
            touched_call_ns: now,
            probation: HEURISTIC_CONFIRM - 1,
            dtmf: None,
            rtcp: RtcpView::default(),
            closed: false,
            traffic: traffic::StreamTraffic::new(&self.sip, &key),
        };
        let Some(si) = self.insert_stream(stream) else {
            self.owned.streams_refused += 1;
            return;
        };
        self.stream_ids.insert(key.hash(self.key_seed), si);
        self.streams.touch(si, LIST_CANDIDATE, now);
        self.owned.rtp_orphan += 1;
    }

    pub(crate) fn drop_candidate(&mut self, si: Idx) {
        if let Some(s) = self.remove_stream(si) {
            self.owned.candidates_rejected += 1;
            self.owned.udp_untracked += s.stats.packets;
            self.owned.rtp_orphan -= s.stats.packets.min(self.owned.rtp_orphan);
        }
    }
}

pub(crate) fn s_packets(streams: &Slab<Stream>, si: Idx) -> u64 {
    streams.get(si).map_or(0, |s| s.stats.packets)
}
