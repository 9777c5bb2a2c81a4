//! The media table: SDP offers and answers map (address, port) to their
//! call and media description, in both directions.

use super::*;

impl Engine {
    /// The media entry of a datagram: by destination (where SDP says the
    /// receiver listens), else by source (symmetric RTP).
    #[inline]
    pub(crate) fn media_of(&self, flow: &Flow) -> Option<&MediaEntry> {
        (self.media.get(&(flow.dst, flow.dport)))
            .or_else(|| self.media.get(&(flow.src, flow.sport)))
    }

    /// Applies a session description `side` sent (from `sender`); returns
    /// whether it puts the call on hold (audio offered send-only, inactive
    /// or to 0.0.0.0), None when it has no audio. An address another live
    /// call holds is taken over only by the party at that address, or one
    /// of that call's hops (a phone reusing its port, a proxy's next
    /// call): a stranger's SDP cannot move or close another call's media
    /// (`sdp_media_of_another_call`).
    pub(crate) fn apply_sdp(
        &mut self,
        idx: Idx,
        side: Side,
        body: &[u8],
        sender: IpAddr,
    ) -> Option<bool> {
        let parsed = sdp::parse(body);
        let hold = parsed.audio_hold();
        if parsed.bad_lines > 0 {
            if let Some(call) = self.calls.get_mut(idx) {
                call.anomalies += 1;
            }
            self.counters.anomaly("sdp_bad_line");
        }
        for med in &parsed.media {
            let (Some(addr), port) = (med.addr, med.port) else {
                self.counters.anomaly("sdp_media_without_address");
                continue;
            };
            if port == 0 || addr.is_unspecified() && med.direction == Direction::Inactive {
                continue;
            }
            if self.held_by_another_call(idx, (addr, port), sender) {
                self.counters.anomaly("sdp_media_of_another_call");
                continue;
            }
            if self.calls.get(idx).is_none() {
                return hold;
            }
            let Some(desc) = self.description(idx, side, med) else {
                self.counters.anomaly("sdp_too_many_media_per_call");
                break;
            };
            let rtp = med.proto.to_ascii_uppercase().contains("RTP");
            let rtcp = med.rtcp_port.unwrap_or(port.wrapping_add(1));
            for key in [(addr, port), (addr, rtcp)] {
                self.map_media(idx, key, MediaEntry { call: idx, desc, rtp });
            }
            // The call's streams to or from this address follow its latest
            // description (RTP <-> T.38).
            let Some(call) = self.calls.get(idx) else {
                return hold;
            };
            for &si in &call.streams {
                if let Some(st) = self.streams.get_mut(si) {
                    if (st.key.dst, st.key.dport) == (addr, port)
                        || (st.key.src, st.key.sport) == (addr, port)
                    {
                        st.closed = !rtp;
                    }
                }
            }
        }
        hold
    }

    /// Whether another live call holds `at`, and `sender` may not take it
    /// over: neither the party at that address nor one of that call's hops.
    fn held_by_another_call(&self, idx: Idx, at: (IpAddr, u16), sender: IpAddr) -> bool {
        let holder = self.media.get(&at).map(|e| e.call).filter(|&c| c != idx);
        holder
            .and_then(|c| self.calls.get(c))
            .is_some_and(|other| at.0 != sender && !other.hops.contains(sender, self.key_seed))
    }

    /// The index of call `idx`'s description of `med` as `side` offered it:
    /// the same one again (session refresh, hold and resume) reuses its
    /// description instead of filling the cap; None past the cap.
    fn description(&mut self, idx: Idx, side: Side, med: &sdp::Media<'_>) -> Option<u16> {
        let call = self.calls.get_mut(idx)?;
        let rtpmaps: Box<[Rtpmap]> = med
            .rtpmaps
            .iter()
            .map(|r| Rtpmap::new(r.payload_type, r.encoding, r.clock_rate))
            .collect();
        let encrypted = med.encrypted();
        let same =
            |d: &MediaDesc| d.owner == side && d.rtpmaps == rtpmaps && d.encrypted == encrypted;
        match call.media.iter().position(same) {
            Some(d) => Some(d as u16),
            None if call.media.len() >= MAX_DESCS_PER_CALL => None,
            None => {
                push_exact(&mut call.media, MediaDesc { owner: side, rtpmaps, encrypted });
                Some((call.media.len() - 1) as u16)
            }
        }
    }

    /// Points the media table's entry for `key` at call `idx` (a new entry
    /// within `max_media`, else refused and counted), and lists the key
    /// with the call.
    fn map_media(&mut self, idx: Idx, key: (IpAddr, u16), entry: MediaEntry) {
        if let Some(e) = self.media.get_mut(&key) {
            *e = entry;
        } else if self.media.len() >= self.cfg.max_media {
            self.counters.media_refused += 1;
            return;
        } else {
            self.media.insert(key, entry);
        }
        if let Some(call) = self.calls.get_mut(idx) {
            if !call.media_keys.contains(&key) {
                push_exact(&mut call.media_keys, key);
            }
        }
    }

    /// The media entry for a stream: by destination (where SDP says the
    /// receiver listens), else by source (symmetric RTP).
    pub(crate) fn media_entry(&self, k: &StreamKey) -> Option<(MediaEntry, bool)> {
        self.media
            .get(&(k.dst, k.dport))
            .map(|e| (*e, true))
            .or_else(|| self.media.get(&(k.src, k.sport)).map(|e| (*e, false)))
    }

    /// Whether a new stream may join the call whose SDP names one of its
    /// ends (its destination when `by_dst`, else its source). Its other
    /// end, the peer, must be at an address one of the call's SDPs names
    /// (any port: senders often send from another port than they listen
    /// on; SDP is taken only from the call's hops), or, by the NAT rule,
    /// at one of the call's hops (a phone behind NAT sends its media from
    /// the public address its signalling came from: RFC 4787's paired
    /// pooling). Anything else is refused and counted (`rtp_foreign`), so
    /// a host the call does not name can never join, displace or dilute
    /// its media. The rule reads only signalling, which every shard sees
    /// alike: any thread count decides the same.
    pub(crate) fn admits(&self, k: &StreamKey, e: MediaEntry, by_dst: bool) -> bool {
        let Some(call) = self.calls.get(e.call) else {
            return false;
        };
        let peer = if by_dst { k.src } else { k.dst };
        call.media_keys.iter().any(|key| key.0 == peer) || call.hops.contains(peer, self.key_seed)
    }
}

/// One `a=rtpmap` line, the name kept inline: no allocation per codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rtpmap {
    pub(crate) payload_type: u8,
    name_len: u8,
    /// Encoding name, cut at 15 bytes (the longest registered name,
    /// "telephone-event", just fits).
    name: [u8; 15],
    pub(crate) clock_rate: u32,
}

impl Rtpmap {
    pub(crate) fn new(payload_type: u8, encoding: &str, clock_rate: u32) -> Rtpmap {
        let mut cut = encoding.len().min(15);
        while !encoding.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut name = [0; 15];
        name[..cut].copy_from_slice(&encoding.as_bytes()[..cut]);
        Rtpmap { payload_type, name_len: cut as u8, name, clock_rate }
    }

    pub(crate) fn name(&self) -> &str {
        std::str::from_utf8(&self.name[..self.name_len as usize]).unwrap_or("")
    }
}
