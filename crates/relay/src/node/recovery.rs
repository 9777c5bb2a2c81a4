//! Loss recovery on a link: accounting of what arrived, NACKs when a gap
//! is due, retransmission from the send buffer.

use super::*;

/// The largest jump in a neighbour's data numbers taken as loss: several
/// seconds of a busy link (what exceeds `MAX_MISSING` is given up at once).
const MAX_GAP: u32 = 65_536;

impl Node {
    /// Data sequence accounting. Returns false for a copy already seen.
    pub(super) fn account(&mut self, now: i64, li: usize, seq: u32, retransmit: bool) -> bool {
        let link = &mut self.links[li];
        if retransmit {
            let filled = link.missing.remove(&seq).is_some();
            link.tally.recovered(&mut self.counters, filled as u64);
            return filled;
        }
        let Some(next) = link.rx_data_next else {
            link.rx_data_next = Some(seq.wrapping_add(1));
            link.tally.in_order += 1;
            return true;
        };
        let d = seq.wrapping_sub(next) as i32;
        if d >= 0 {
            link.tally.in_order += 1;
            self.open_gaps(now, li, next, d as u32);
            self.links[li].rx_data_next = Some(seq.wrapping_add(1));
            true
        } else if link.missing.remove(&seq).is_some() {
            // A late original: reordered, not lost.
            link.tally.recovered(&mut self.counters, 1);
            true
        } else {
            false
        }
    }

    /// The neighbour's data paused at `next` (the number its next data
    /// will take): what it sent before that and has not arrived is missing,
    /// as a later data packet would have shown.
    pub(super) fn tail(&mut self, now: i64, li: usize, next: u32) {
        let link = &mut self.links[li];
        let Some(expected) = link.rx_data_next else {
            // Nothing arrived yet: its data starts here.
            link.rx_data_next = Some(next);
            return;
        };
        let d = next.wrapping_sub(expected) as i32;
        if d as u32 > MAX_GAP {
            // A real tail never names more than was sent: moving the base
            // there would drop the neighbour's data as old.
            self.counters.data_resyncs += u64::from(d > 0);
        } else if d > 0 {
            self.open_gaps(now, li, expected, d as u32);
            self.links[li].rx_data_next = Some(next);
        }
    }

    /// Data `from` .. `from + count` did not arrive: asked for (or given up
    /// without recovery, or beyond the cap on what is asked for at once).
    /// A jump past [`MAX_GAP`] is a resync, not a loss: one datagram
    /// (spoofed, on a link without a key) must not move the link's loss
    /// figures by billions.
    fn open_gaps(&mut self, now: i64, li: usize, from: u32, count: u32) {
        if count > MAX_GAP {
            self.counters.data_resyncs += 1;
            return;
        }
        let link = &mut self.links[li];
        link.tally.gaps(&mut self.counters, count as u64);
        if !self.cfg.recovery {
            link.tally.given_up(&mut self.counters, count as u64);
            return;
        }
        for k in 0..count {
            if link.missing.len() >= MAX_MISSING {
                let left = (count - k) as u64;
                link.tally.given_up(&mut self.counters, left);
                break;
            }
            let m = Missing { detected: now, rounds: 0, next_at: now };
            link.missing.insert(from.wrapping_add(k), m);
        }
        if count > 0 {
            self.nack_due(now, li);
        }
    }

    /// Sends one NACK for every missing packet whose turn has come.
    pub(super) fn nack_due(&mut self, now: i64, li: usize) {
        let (budget, rounds) = (self.cfg.budget_ns, self.cfg.max_nack_rounds);
        let link = &mut self.links[li];
        if !link.alive {
            return;
        }
        let rtt_ns = (link.srtt_us.unwrap_or(20_000.0) * 1000.0) as i64;
        // Ask again once the answer to the last request is overdue.
        let wait = rtt_ns + rtt_ns / 4 + 2 * MS;
        let mut ask = Vec::new();
        let mut expired = 0;
        link.missing.retain(|&seq, m| {
            if m.next_at > now {
                return true;
            }
            // An answer takes about one RTT: past the budget it is useless.
            let too_late = now - m.detected + rtt_ns > budget;
            let rounds_done = rounds != 0 && m.rounds >= rounds;
            if too_late || rounds_done {
                expired += 1;
                return false;
            }
            if ask.len() < packet::MAX_NACKS {
                ask.push(seq);
                m.rounds = m.rounds.saturating_add(1);
                m.next_at = now + wait;
            }
            true
        });
        link.tally.given_up(&mut self.counters, expired);
        if !ask.is_empty() {
            self.counters.nacks_sent += 1;
            self.emit(li, 0, Message::Nack(ask));
        }
    }

    pub(super) fn retransmit(&mut self, now: i64, li: usize, seqs: &[u32]) {
        let budget = self.cfg.budget_ns;
        for &seq in seqs {
            let link = &mut self.links[li];
            let at = link.history.partition_point(|h| (h.0.wrapping_sub(seq) as i32) < 0);
            let held = link.history.get(at).filter(|h| h.0 == seq && now - h.1 <= budget);
            let Some(h) = held else {
                self.counters.retransmit_not_held += 1;
                continue;
            };
            if link.tokens < 1.0 {
                self.counters.retransmit_no_tokens += 1;
                continue;
            }
            link.tokens -= 1.0;
            let mut bytes = h.2.clone();
            let link_seq = link.next_link_seq();
            // The original's flags (compressed or not) stay.
            let flags = bytes[3] | FLAG_RETRANSMIT;
            packet::set_link_header(&mut bytes, link_seq, flags);
            let peer = link.peer;
            self.counters.retransmitted += 1;
            self.push_transmit(peer, bytes);
        }
    }
}
