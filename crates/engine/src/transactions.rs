//! A call's client transactions, so that a response changes the call only
//! when it answers a request the call made.
//!
//! RFC 3261 §17.1.3 matches a response to its client transaction by the top
//! Via's `branch` and the CSeq method. A probe sees every hop and anyone
//! can send a datagram, so the key here is stricter: the CSeq number and
//! method, the top Via's branch (or its absence: a response copies the
//! request's Via), and the direction (the response travels from the
//! request's destination back to its source). A scanner that answers its
//! own INVITE with a 200 sends it in the INVITE's direction, so the call
//! stays what the real peer made it. Keys are 32-bit hashes under the
//! engine's secret seed: 30 bytes per call, whatever the input.

use crate::fasthash;
use calliper_sip::SipMessage;
use std::net::IpAddr;

/// INVITE transactions kept (a challenge's retry and re-INVITEs).
const INVITES: usize = 4;
/// Other transactions kept (BYE, CANCEL, UPDATE, PRACK, REFER): a flood of
/// these cannot push out the INVITEs.
const OTHERS: usize = 3;

/// The methods whose responses change a call (others are only shown).
fn tracked(method: &str) -> bool {
    matches!(
        method,
        "INVITE" | "BYE" | "CANCEL" | "UPDATE" | "PRACK" | "REFER"
    )
}

/// The latest requests of a call, as keys; 0 marks an empty slot.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Transactions {
    keys: [u32; INVITES + OTHERS],
    next: [u8; 2],
}

/// What a response is to the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// It answers a request the call made.
    Matched,
    /// It answers a method the call does not follow (INFO, OPTIONS, ...).
    Untracked,
    /// It names a followed method but no request of the call: forged,
    /// misdirected, or its request was not captured.
    Unmatched,
}

impl Transactions {
    /// Remembers a request sent from `src` to `dst` (a retransmission
    /// takes no new slot).
    pub(crate) fn request(&mut self, seed: u64, m: &SipMessage<'_>, src: IpAddr, dst: IpAddr) {
        let Some(method) = m.method().filter(|&x| tracked(x)) else {
            return;
        };
        let key = key(seed, m, method, src, dst);
        if self.keys.contains(&key) {
            return;
        }
        let (ring, base, len) = if method == "INVITE" {
            (0, 0, INVITES)
        } else {
            (1, INVITES, OTHERS)
        };
        let at = self.next[ring] as usize % len;
        self.keys[base + at] = key;
        self.next[ring] = ((at + 1) % len) as u8;
    }

    /// Whether a response sent from `src` to `dst` answers a remembered request.
    pub(crate) fn response(
        &self,
        seed: u64,
        m: &SipMessage<'_>,
        src: IpAddr,
        dst: IpAddr,
    ) -> Answer {
        match m.cseq_method.filter(|&x| tracked(x)) {
            None => Answer::Untracked,
            Some(method) if self.keys.contains(&key(seed, m, method, dst, src)) => Answer::Matched,
            Some(_) => Answer::Unmatched,
        }
    }
}

/// Up to four addresses (as seeded 32-bit words; 0 is empty) that took
/// part in a call's INVITE transactions answered 1xx or 2xx: its hops.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Hops([u32; 4]);

impl Hops {
    fn word(ip: IpAddr, seed: u64) -> u32 {
        (fasthash::ip_word(ip, seed) as u32).max(1)
    }

    /// Adds an address (beyond four, the first four are kept).
    pub(crate) fn insert(&mut self, ip: IpAddr, seed: u64) {
        let w = Self::word(ip, seed);
        if let Some(slot) = self.0.iter_mut().find(|s| **s == 0 || **s == w) {
            *slot = w;
        }
    }

    pub(crate) fn contains(&self, ip: IpAddr, seed: u64) -> bool {
        self.0.contains(&Self::word(ip, seed))
    }
}

/// A request's key, from the request (`from` its source) or from a
/// response (`from` its destination); never 0.
fn key(seed: u64, m: &SipMessage<'_>, method: &str, from: IpAddr, to: IpAddr) -> u32 {
    let branch = m.via.and_then(calliper_sip::via_branch).unwrap_or("");
    let words = [
        u64::from(m.cseq.unwrap_or(0)) << 8 | method.len() as u64,
        fasthash::ip_word(from, seed),
        fasthash::ip_word(to, seed),
        fasthash::hash(seed, [0; 4], method.as_bytes()),
    ];
    fasthash::hash(seed, words, branch.as_bytes()) as u32 | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(start: &str, via: &str, cseq: &str) -> Vec<u8> {
        format!("{start}\r\nVia: {via}\r\nCall-ID: t\r\nCSeq: {cseq}\r\nContent-Length: 0\r\n\r\n")
            .into_bytes()
    }

    #[test]
    fn responses_match_direction_cseq_and_branch() {
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
        );
        let seed = fasthash::seed();
        let invite = msg(
            "INVITE sip:b@h SIP/2.0",
            "SIP/2.0/UDP a;branch=z9hG4bK1",
            "1 INVITE",
        );
        let invite = calliper_sip::parse(&invite, false).unwrap();
        let mut t = Transactions::default();
        t.request(seed, &invite, a, b);
        let answer = |via: &str, cseq: &str, src, dst| {
            let r = msg("SIP/2.0 200 OK", via, cseq);
            t.response(seed, &calliper_sip::parse(&r, false).unwrap(), src, dst)
        };
        let via = "SIP/2.0/UDP a;branch=z9hG4bK1";
        assert_eq!(answer(via, "1 INVITE", b, a), Answer::Matched);
        // The scanner's own 200, sent the INVITE's way.
        assert_eq!(answer(via, "1 INVITE", a, b), Answer::Unmatched);
        assert_eq!(answer(via, "1 INVITE", c, a), Answer::Unmatched);
        assert_eq!(answer(via, "2 INVITE", b, a), Answer::Unmatched);
        assert_eq!(answer(via, "1 BYE", b, a), Answer::Unmatched);
        assert_eq!(
            answer("SIP/2.0/UDP a;branch=z9hG4bK2", "1 INVITE", b, a),
            Answer::Unmatched
        );
        assert_eq!(answer(via, "1 INFO", b, a), Answer::Untracked);
    }

    #[test]
    fn other_requests_cannot_push_out_invites() {
        let seed = fasthash::seed();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut t = Transactions::default();
        let invite = msg(
            "INVITE sip:b@h SIP/2.0",
            "SIP/2.0/UDP a;branch=i",
            "1 INVITE",
        );
        t.request(seed, &calliper_sip::parse(&invite, false).unwrap(), a, b);
        for n in 2..100 {
            let u = msg(
                "UPDATE sip:b@h SIP/2.0",
                &format!("SIP/2.0/UDP a;branch=u{n}"),
                &format!("{n} UPDATE"),
            );
            t.request(seed, &calliper_sip::parse(&u, false).unwrap(), a, b);
        }
        let ok = msg("SIP/2.0 200 OK", "SIP/2.0/UDP a;branch=i", "1 INVITE");
        assert_eq!(
            t.response(seed, &calliper_sip::parse(&ok, false).unwrap(), b, a),
            Answer::Matched
        );
    }
}
