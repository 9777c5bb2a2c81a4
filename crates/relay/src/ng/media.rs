//! Media through an edge: where a datagram goes, and calls that went quiet.

use super::calls::{Control, Forward};
use std::net::SocketAddr;

impl Control {
    /// Where a datagram of `len` bytes from `src`, received on edge port
    /// `port`, goes (None: dropped, counted). The first datagram of a
    /// stream from its party's SDP address latches the source (address and
    /// port, RTP and RTCP apart): only it is taken afterwards, and it is
    /// where the other party's media for that party goes, as rtpengine's
    /// symmetric latching. A source port 0 marks media from another edge
    /// over the overlay (its address is the edge's, its port unknown).
    pub fn forward(&mut self, now: i64, port: u16, src: SocketAddr, len: usize) -> Option<Forward> {
        let kind = usize::from(port % 2 == 1);
        let (id, from, index) = self.owners.get(&(port - kind as u16))?;
        let (from, index) = (*from, *index);
        // Port 0: from another edge over the overlay; nobody else.
        if src.port() == 0 && !self.cfg.peers.contains(&src.ip()) {
            self.counters.media_foreign_source += 1;
            return None;
        }
        let call = self.calls.get_mut(id)?;
        let sender = &mut call.parties[from];
        let sdp_addr = sender
            .remote
            .get(index)
            .map(|a| if kind == 1 { a.rtcp } else { a.rtp });
        let latch = sender.latched.get_mut(index).map(|l| &mut l[kind]);
        let admitted = match (sdp_addr, latch) {
            (Some(a), Some(latch)) if a.ip() == src.ip() => match latch {
                Some(l) => *l == src || src.port() == 0,
                None => {
                    if src.port() != 0 {
                        *latch = Some(src);
                    }
                    true
                }
            },
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
            latched.unwrap_or(sdp)
        });
        let (Some(out), Some(dest)) = (out, dest) else {
            self.counters.media_no_destination += 1;
            return None;
        };
        if dest.port() == 0 || dest.ip().is_unspecified() {
            self.counters.media_no_destination += 1;
            return None;
        }
        let received = &mut call.parties[from].received[kind];
        received.0 += 1;
        received.1 += len as u64;
        call.last_ns = now;
        self.counters.media_relayed += 1;
        self.counters.media_bytes += len as u64;
        Some(Forward {
            from_port: out + kind as u16,
            to: dest,
        })
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
