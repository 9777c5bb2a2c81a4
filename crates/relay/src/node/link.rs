//! One link's state: what was sent within the budget, what is missing,
//! loss and RTT measurement, the cost last advertised.

use super::{LinkCrtp, NodeId, MAX_TOKENS, MS};
use std::collections::{BTreeMap, VecDeque};

/// A gap in the link's data sequence: when it was seen, how often it was
/// asked for, and when to ask again.
#[derive(Debug, Clone, Copy)]
pub(super) struct Missing {
    pub(super) detected: i64,
    pub(super) rounds: u8,
    pub(super) next_at: i64,
}

/// What a link received and recovered, for its report ([`LinkReport`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LinkTally {
    /// Data that arrived in order, first copies (retransmissions apart).
    pub(super) in_order: u64,
    /// Data sequence numbers found missing.
    pub(super) gaps: u64,
    /// Gaps filled by a retransmission or a late original.
    pub(super) recovered: u64,
    /// Gaps given up.
    pub(super) given_up: u64,
}

impl LinkTally {
    /// Counts `n` gaps on the link and in the node's totals at once.
    pub(super) fn gaps(&mut self, node: &mut super::Counters, n: u64) {
        self.gaps += n;
        node.gaps += n;
    }

    /// Counts `n` gaps filled, on the link and in the node's totals.
    pub(super) fn recovered(&mut self, node: &mut super::Counters, n: u64) {
        self.recovered += n;
        node.recovered += n;
    }

    /// Counts `n` gaps given up, on the link and in the node's totals.
    pub(super) fn given_up(&mut self, node: &mut super::Counters, n: u64) {
        self.given_up += n;
        node.given_up += n;
    }
}

/// One link as its node sees it: measured loss and RTT, and what recovery
/// made of the data it received. Loss before recovery is `gaps` of the
/// data expected (`in_order + gaps`); after recovery, `given_up` of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LinkReport {
    /// The neighbour.
    pub neighbour: NodeId,
    /// Whether its hellos are arriving.
    pub alive: bool,
    /// Smoothed round-trip time, ms (None before the first hello answer).
    pub rtt_ms: Option<f64>,
    /// Loss measured on all that arrives from it (EWMA), percent.
    pub loss_received_percent: f64,
    /// Loss on what is sent to it, as it reports, percent.
    pub loss_sent_percent: f64,
    /// Data expected from it (arrived in order, or found missing).
    pub data_expected: u64,
    /// Gaps in its data: loss before recovery.
    pub gaps: u64,
    /// Gaps filled.
    pub recovered: u64,
    /// Gaps given up: loss after recovery.
    pub given_up: u64,
    /// `gaps` as a percentage of `data_expected`.
    pub loss_before_recovery_percent: f64,
    /// `given_up` as a percentage of `data_expected`.
    pub loss_after_recovery_percent: f64,
}

/// Tails sent when data pauses ([`crate::packet::Message::Tail`]): a second
/// in case the first is lost.
const TAILS: u8 = 2;
/// A tail waits twice the link's longest recent gap between data packets
/// (calls in step send in bursts: the gap that matters is the one between
/// bursts, not the mean), within these bounds: past the next packet of a
/// steady stream (20-30 ms apart), and early enough that what it shows
/// missing can still come back within a 100 ms budget.
const TAIL_WAIT_MIN: i64 = 5 * MS;
const TAIL_WAIT_MAX: i64 = 50 * MS;

/// A neighbour and the state of the link to it.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) peer: NodeId,
    pub(super) alive: bool,
    pub(super) last_heard: i64,
    pub(super) tx_seq: u32,
    pub(super) tx_data_seq: u32,
    /// Data sent on this link within the budget: (data seq, sent, datagram).
    pub(super) history: VecDeque<(u32, i64, Vec<u8>)>,
    pub(super) tokens: f64,
    /// Next link sequence number expected (loss measurement).
    pub(super) rx_next: Option<u32>,
    /// Next data sequence number expected (recovery).
    pub(super) rx_data_next: Option<u32>,
    pub(super) missing: BTreeMap<u32, Missing>,
    pub(super) window_rx: u32,
    pub(super) window_lost: u32,
    /// Loss on what we receive (EWMA).
    pub(super) rx_loss: f64,
    /// Loss on what we send, as the peer reports it.
    pub(super) tx_loss: f64,
    pub(super) srtt_us: Option<f64>,
    pub(super) hello_seq: u32,
    pub(super) next_hello: i64,
    /// Cost last advertised for this link.
    pub(super) advertised: Option<u32>,
    /// RTP header compression, when both ends enable it.
    pub(super) crtp: Option<Box<LinkCrtp>>,
    pub(super) tally: LinkTally,
    /// When data was last sent (i64::MIN: never), the longest recent gap
    /// between data packets (held at each peak, decaying slowly), and tails
    /// sent since.
    last_data_sent: i64,
    data_gap_ns: i64,
    tails_sent: u8,
}

impl Link {
    /// Every datagram on the link takes the next link sequence number.
    pub(super) fn next_link_seq(&mut self) -> u32 {
        let seq = self.tx_seq;
        self.tx_seq = seq.wrapping_add(1);
        seq
    }

    pub(super) fn new(peer: NodeId, now: i64) -> Link {
        Link {
            peer,
            alive: false,
            last_heard: now,
            tx_seq: 0,
            tx_data_seq: 0,
            history: VecDeque::new(),
            tokens: MAX_TOKENS / 4.0,
            rx_next: None,
            rx_data_next: None,
            missing: BTreeMap::new(),
            window_rx: 0,
            window_lost: 0,
            rx_loss: 0.0,
            tx_loss: 0.0,
            srtt_us: None,
            hello_seq: 0,
            next_hello: now,
            advertised: None,
            crtp: None,
            tally: LinkTally::default(),
            last_data_sent: i64::MIN,
            data_gap_ns: TAIL_WAIT_MAX,
            tails_sent: 0,
        }
    }

    /// Notes original data sent at `now` (not a retransmission).
    pub(super) fn data_sent(&mut self, now: i64) {
        if self.last_data_sent != i64::MIN {
            let gap = now.saturating_sub(self.last_data_sent).clamp(0, TAIL_WAIT_MAX);
            if gap >= self.data_gap_ns {
                self.data_gap_ns = gap;
            } else {
                self.data_gap_ns -= (self.data_gap_ns - gap) / 64;
            }
        }
        self.last_data_sent = now;
        self.tails_sent = 0;
    }

    /// When the next tail is due, if data has paused and tails remain.
    pub(super) fn tail_due(&self) -> Option<i64> {
        let wait = (2 * self.data_gap_ns).clamp(TAIL_WAIT_MIN, TAIL_WAIT_MAX);
        (self.alive && self.last_data_sent != i64::MIN && self.tails_sent < TAILS)
            .then(|| self.last_data_sent + wait * (self.tails_sent as i64 + 1))
    }

    /// Whether no data has been sent on the link yet: its first data
    /// number is said with each hello until then, so a lost first packet
    /// is found like any other.
    pub(super) fn before_data(&self) -> bool {
        self.last_data_sent == i64::MIN
    }

    /// Takes the tail due at `now`, if any: the next data sequence number.
    pub(super) fn take_tail(&mut self, now: i64) -> Option<u32> {
        let due = self.tail_due().is_some_and(|at| now >= at);
        self.tails_sent += due as u8;
        due.then_some(self.tx_data_seq)
    }

    /// This link's report.
    pub(super) fn report(&self) -> LinkReport {
        let t = self.tally;
        let expected = t.in_order + t.gaps;
        let percent = |n: u64| 100.0 * n as f64 / expected.max(1) as f64;
        LinkReport {
            neighbour: self.peer,
            alive: self.alive,
            rtt_ms: self.srtt_us.map(|us| us / 1000.0),
            loss_received_percent: 100.0 * self.rx_loss,
            loss_sent_percent: 100.0 * self.tx_loss,
            data_expected: expected,
            gaps: t.gaps,
            recovered: t.recovered,
            given_up: t.given_up,
            loss_before_recovery_percent: percent(t.gaps),
            loss_after_recovery_percent: percent(t.given_up),
        }
    }
}
