//! The media table: SDP offers and answers map (address, port) to their
//! call and media description, in both directions.

use super::*;

/// How long a peer holds a media address against another peer the SDP
/// does not name: a NAT that rebinds the port mid-call is followed after
/// this much silence.
pub(crate) const NAT_HOLD_NS: i64 = 2_000_000_000;

impl Engine {
    /// Applies a session description `side` sent; returns whether it puts
    /// the call on hold (audio offered send-only, inactive or to 0.0.0.0),
    /// None when it has no audio.
    pub(crate) fn apply_sdp(&mut self, idx: Idx, side: Side, body: &[u8]) -> Option<bool> {
        let parsed = sdp::parse(body);
        let hold = parsed
            .media
            .iter()
            .filter(|m| m.kind.eq_ignore_ascii_case("audio") && m.port != 0)
            .map(|m| {
                matches!(m.direction, Direction::SendOnly | Direction::Inactive)
                    || m.addr.is_some_and(|a| a.is_unspecified())
            })
            .reduce(|a, b| a || b);
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
            let Some(call) = self.calls.get_mut(idx) else {
                return hold;
            };
            let rtpmaps: Box<[Rtpmap]> = med
                .rtpmaps
                .iter()
                .map(|r| Rtpmap::new(r.payload_type, r.encoding, r.clock_rate))
                .collect();
            // The same media offered again (session refresh, hold and
            // resume) reuses its description instead of filling the cap.
            let encrypted = med.encrypted();
            let same =
                |d: &MediaDesc| d.owner == side && d.rtpmaps == rtpmaps && d.encrypted == encrypted;
            let desc = match call.media.iter().position(same) {
                Some(d) => d as u16,
                None if call.media.len() >= MAX_DESCS_PER_CALL => {
                    self.counters.anomaly("sdp_too_many_media_per_call");
                    break;
                }
                None => {
                    push_exact(
                        &mut call.media,
                        MediaDesc {
                            owner: side,
                            rtpmaps,
                            encrypted,
                        },
                    );
                    (call.media.len() - 1) as u16
                }
            };
            let rtp = med.proto.to_ascii_uppercase().contains("RTP");
            let rtcp = med.rtcp_port.unwrap_or(port.wrapping_add(1));
            for key in [(addr, port), (addr, rtcp)] {
                if let Some(e) = self.media.get_mut(&key) {
                    e.call = idx;
                    e.desc = desc;
                    e.rtp = rtp;
                } else if self.media.len() >= self.cfg.max_media {
                    self.counters.media_refused += 1;
                    continue;
                } else {
                    self.media.insert(
                        key,
                        MediaEntry {
                            call: idx,
                            desc,
                            rtp,
                            streams: Vec::new(),
                        },
                    );
                }
                if !call.media_keys.contains(&key) {
                    push_exact(&mut call.media_keys, key);
                }
            }
            // Streams on this address follow its latest description (RTP <-> T.38),
            // whichever call (or leg through a proxy) they were first seen in.
            if let Some(e) = self.media.get(&(addr, port)) {
                for &si in &e.streams {
                    if let Some(st) = self.streams.get_mut(si) {
                        if (st.key.dst, st.key.dport) == (addr, port)
                            || (st.key.src, st.key.sport) == (addr, port)
                        {
                            st.closed = !rtp;
                        }
                    }
                }
            }
        }
        hold
    }

    /// The media entry for a stream: by destination (where SDP says the
    /// receiver listens), else by source (symmetric RTP).
    pub(crate) fn media_entry(&self, k: &StreamKey) -> Option<(MediaRef, bool)> {
        let r = |e: &MediaEntry| MediaRef {
            call: e.call,
            desc: e.desc,
            rtp: e.rtp,
        };
        self.media
            .get(&(k.dst, k.dport))
            .map(|e| (r(e), true))
            .or_else(|| self.media.get(&(k.src, k.sport)).map(|e| (r(e), false)))
    }

    /// Whether a new stream may join the call whose SDP names one of its
    /// ends (the anchor: its destination when `by_dst`, else its source).
    /// The other end (the peer) must be where the other side's SDP or
    /// signalling says that side is (any port: senders often send from
    /// another port than they listen on). Otherwise, by the NAT rule, a
    /// peer the SDP does not name (a caller behind NAT, seen at its public
    /// address) is taken only while no other peer holds the anchor: a
    /// stream of the call on the anchor, from another peer, with a packet
    /// in the last [`NAT_HOLD_NS`]. So a foreign host can never join a
    /// media address the SDP's own source is using, and the SDP's own
    /// source is never refused.
    pub(crate) fn admits(&self, k: &StreamKey, e: MediaRef, by_dst: bool, now: i64) -> bool {
        let Some(call) = self.calls.get(e.call) else {
            return false;
        };
        let Some(owner) = call.media.get(e.desc as usize).map(|d| d.owner) else {
            return true;
        };
        let ends = |k: &StreamKey, by_dst: bool| {
            let (dst, src) = ((k.dst, k.dport), (k.src, k.sport));
            if by_dst {
                (dst, src)
            } else {
                (src, dst)
            }
        };
        let (anchor, peer) = ends(k, by_dst);
        let signalling = match owner {
            Side::Caller => call.callee.0,
            Side::Callee => call.caller.0,
        };
        let named_by_peer_sdp = call.media_keys.iter().any(|key| {
            key.0 == peer.0
                && self
                    .media
                    .get(key)
                    .and_then(|m| call.media.get(m.desc as usize))
                    .is_some_and(|d| d.owner != owner)
        });
        if peer.0 == signalling || named_by_peer_sdp {
            return true;
        }
        !call
            .streams
            .iter()
            .filter_map(|&si| self.streams.get(si))
            .any(|s| {
                let (a, p) = if (s.key.dst, s.key.dport) == anchor {
                    ends(&s.key, true)
                } else {
                    ends(&s.key, false)
                };
                a == anchor && p != peer && now - s.stats.last_ns < NAT_HOLD_NS
            })
    }

    /// Registers a stream with the media entries of its two addresses.
    pub(crate) fn register_stream(&mut self, si: Idx, k: &StreamKey) {
        for key in [(k.dst, k.dport), (k.src, k.sport)] {
            if let Some(e) = self.media.get_mut(&key) {
                if e.streams.len() < MAX_STREAMS_PER_CALL {
                    push_exact(&mut e.streams, si);
                }
            }
        }
    }
}
