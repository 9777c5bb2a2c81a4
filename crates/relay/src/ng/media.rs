//! Media through an edge: where a datagram goes, and calls that went quiet.

use super::calls::{Control, Forward};
use calliper_rtp::SeqTracker;
use std::net::SocketAddr;

/// Where a media datagram came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The network: its source address.
    Net(SocketAddr),
    /// Another edge over the overlay (authenticated by the overlay): that
    /// edge's address and the port the datagram left it from.
    Peer(SocketAddr),
}

/// A party's RTP by sequence number (the probe's own RFC 3550 A.1 tracker):
/// what it sent and never arrived here, in this direction. From another
/// edge, what the overlay's recovery could not bring back. RTCP sharing
/// the RTP port (rtcp-mux) is not RTP and is left out.
pub(super) fn count_rtp(seq: &mut SeqTracker, datagram: &[u8]) {
    if let [b0, b1, s0, s1, ..] = *datagram {
        if b0 >> 6 == 2 && datagram.len() >= 12 && !(200..=204).contains(&b1) {
            seq.update(u16::from_be_bytes([s0, s1]));
        }
    }
}

impl Control {
    /// Where a datagram from `src`, received on edge port `port`, goes
    /// (None: dropped, counted).
    ///
    /// From the network, the first datagram of a stream from its party's
    /// SDP address latches the source (address and port, RTP and RTCP
    /// apart): only it is taken afterwards, and it is where the other
    /// party's media for that party goes, as rtpengine's symmetric
    /// latching. A party that is another edge is reached and heard only
    /// over the overlay, at exactly the address and port its SDP names:
    /// the network's datagrams claiming its address are refused.
    pub fn forward(
        &mut self,
        now: i64,
        port: u16,
        src: Source,
        datagram: &[u8],
    ) -> Option<Forward> {
        let len = datagram.len();
        let kind = usize::from(port % 2 == 1);
        let (id, from, index) = self.owners.get(&(port - kind as u16))?;
        let (from, index) = (*from, *index);
        let peers = &self.cfg.peers;
        let call = self.calls.get_mut(id)?;
        let sender = &mut call.parties[from];
        let sdp = sender.remote.get(index).map(|a| if kind == 1 { a.rtcp } else { a.rtp });
        let latch = sender.latched.get_mut(index).map(|l| &mut l[kind]);
        let admitted = match (src, sdp, latch) {
            (Source::Peer(p), Some(sdp), _) => p == sdp && peers.contains(&p.ip()),
            (Source::Net(n), Some(sdp), Some(latch))
                if n.ip() == sdp.ip() && !peers.contains(&n.ip()) =>
            {
                match latch {
                    Some(l) => *l == n,
                    None => {
                        *latch = Some(n);
                        true
                    }
                }
            }
            _ => false,
        };
        if !admitted {
            self.counters.media_foreign_source += 1;
            return None;
        }
        let to = &call.parties[1 - from];
        let out = to.local.get(index).copied().filter(|&p| p != 0);
        let dest = to.remote.get(index).filter(|a| !a.rejected).map(|a| {
            let sdp = if kind == 1 { a.rtcp } else { a.rtp };
            let latched = to.latched.get(index).and_then(|l| l[kind]);
            // A peer edge is never latched: its SDP address is where it is.
            if peers.contains(&sdp.ip()) {
                sdp
            } else {
                latched.unwrap_or(sdp)
            }
        });
        let (Some(out), Some(dest)) = (out, dest) else {
            self.counters.media_no_destination += 1;
            return None;
        };
        if dest.port() == 0 || dest.ip().is_unspecified() {
            self.counters.media_no_destination += 1;
            return None;
        }
        let sender = &mut call.parties[from];
        let received = &mut sender.received[kind];
        received.0 += 1;
        received.1 += len as u64;
        if kind == 0 {
            // One count per audio stream (at most the SDP's 16).
            if sender.rtp_seq.len() <= index {
                sender.rtp_seq.resize_with(index + 1, SeqTracker::default);
            }
            count_rtp(&mut sender.rtp_seq[index], datagram);
        }
        call.last_ns = now;
        self.counters.media_relayed += 1;
        self.counters.media_bytes += len as u64;
        Some(Forward { from_port: out + kind as u16, to: dest })
    }

    /// Ends the calls with no request and no media relayed for the
    /// configured timeout.
    pub fn expire(&mut self, now: i64) {
        let limit = self.cfg.idle_timeout_ns;
        let idle: Vec<Box<str>> = self
            .calls
            .iter()
            .filter(|(_, c)| now - c.last_ns >= limit)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            if let Some(call) = self.calls.remove(&id) {
                self.counters.calls_timed_out += 1;
                self.free_ports(call, now);
            }
        }
    }
}
