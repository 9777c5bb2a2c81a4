//! A call's client transactions and hops, so that a response changes the
//! call only when it answers a request the call made, and only the
//! call's own hops can set it up, end it or describe its media.
//!
//! RFC 3261 §17.1.3 matches a response to its client transaction by the top
//! Via's `branch` and the CSeq method. A probe sees every hop and anyone
//! can send a datagram, so the key here is stricter: the CSeq number and
//! method, the top Via's branch (or its absence: a response copies the
//! request's Via), and the direction (the response travels from the
//! request's destination back to its source). A scanner that answers its
//! own INVITE with a 200 sends it in the INVITE's direction, so the call
//! stays what the real peer made it.
//!
//! Only an *establishing* INVITE's answer sets the call up (answered,
//! ringing, failed): the initial INVITE, its retries, and its copies a
//! proxy forwards — an INVITE with the caller's From tag and no To tag,
//! sent by one of the call's hops (the caller, or an address an earlier
//! establishing INVITE went to), to another address; the caller itself
//! sends only to the INVITE's first destination (another, after a
//! redirect). Its destination becomes a hop. Anything else — a re-INVITE,
//! an INVITE a scanner sends to itself in the same Call-ID — is answered
//! without setting the call up.
//!
//! Keys are 32-bit hashes under the engine's secret seed (bit 0: the
//! INVITE establishes): 30 bytes per call whatever the input.

use crate::fasthash;
use calliper_sip::SipMessage;
use std::net::IpAddr;

/// Establishing INVITE transactions kept (the initial one, its retries
/// after a challenge, a proxy's copies): nothing else can push them out.
const INVITES: usize = 4;
/// Other transactions kept (re-INVITEs, BYE, CANCEL, UPDATE, PRACK, REFER).
const OTHERS: usize = 3;

/// The methods whose responses change a call (others are only shown).
fn tracked(method: &str) -> bool {
    matches!(method, "INVITE" | "BYE" | "CANCEL" | "UPDATE" | "PRACK" | "REFER")
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
    /// It answers a request the call made; `establishing`: an INVITE that
    /// sets the call up (see the module's text).
    Matched { establishing: bool },
    /// It answers a method the call does not follow (INFO, OPTIONS, ...).
    Untracked,
    /// It names a followed method but no request of the call: forged,
    /// misdirected, or its request was not captured.
    Unmatched,
}

impl Transactions {
    /// Remembers a request sent from `src` to `dst` (a retransmission
    /// takes no new slot).
    pub(crate) fn request(
        &mut self,
        seed: u64,
        m: &SipMessage<'_>,
        src: IpAddr,
        dst: IpAddr,
        establishing: bool,
    ) {
        let Some(method) = m.method().filter(|&x| tracked(x)) else {
            return;
        };
        let key = key(seed, m, method, src, dst) | u32::from(establishing);
        if self.keys.contains(&key) {
            return;
        }
        // The call's first INVITE keeps slot 0: no other leg pushes it out.
        if establishing && self.keys[0] == 0 {
            self.keys[0] = key;
            return;
        }
        let (ring, base, len) =
            if establishing { (0, 1, INVITES - 1) } else { (1, INVITES, OTHERS) };
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
        let Some(method) = m.cseq_method.filter(|&x| tracked(x)) else {
            return Answer::Untracked;
        };
        let key = key(seed, m, method, dst, src);
        match self.keys.iter().find(|&&k| k & !1 == key) {
            Some(k) => Answer::Matched { establishing: k & 1 == 1 },
            None => Answer::Unmatched,
        }
    }
}

/// Up to eight addresses (as seeded 32-bit words; 0 is empty): the call's
/// first INVITE's two ends, and those of each establishing INVITE its
/// destination answered 1xx or 2xx: its hops.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Hops([u32; 8]);

impl Hops {
    fn word(ip: IpAddr, seed: u64) -> u32 {
        (fasthash::ip_word(ip, seed) as u32).max(1)
    }

    /// Adds an address (beyond eight, the first eight are kept).
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
/// response (`from` its destination); bit 1 set (never 0), bit 0 clear.
fn key(seed: u64, m: &SipMessage<'_>, method: &str, from: IpAddr, to: IpAddr) -> u32 {
    let branch = m.via.and_then(calliper_sip::via_branch).unwrap_or("");
    let words = [
        u64::from(m.cseq.unwrap_or(0)) << 8 | method.len() as u64,
        fasthash::ip_word(from, seed),
        fasthash::ip_word(to, seed),
        fasthash::hash(seed, [0; 4], method.as_bytes()),
    ];
    fasthash::hash(seed, words, branch.as_bytes()) as u32 & !1 | 2
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
        let (a, b, c): (IpAddr, IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap());
        let seed = fasthash::seed();
        let invite = msg("INVITE sip:b@h SIP/2.0", "SIP/2.0/UDP a;branch=z9hG4bK1", "1 INVITE");
        let invite = calliper_sip::parse(&invite, false).unwrap();
        let mut t = Transactions::default();
        t.request(seed, &invite, a, b, true);
        let answer = |via: &str, cseq: &str, src, dst| {
            let r = msg("SIP/2.0 200 OK", via, cseq);
            t.response(seed, &calliper_sip::parse(&r, false).unwrap(), src, dst)
        };
        let via = "SIP/2.0/UDP a;branch=z9hG4bK1";
        assert_eq!(answer(via, "1 INVITE", b, a), Answer::Matched { establishing: true });
        // The scanner's own 200, sent the INVITE's way.
        assert_eq!(answer(via, "1 INVITE", a, b), Answer::Unmatched);
        assert_eq!(answer(via, "1 INVITE", c, a), Answer::Unmatched);
        assert_eq!(answer(via, "2 INVITE", b, a), Answer::Unmatched);
        assert_eq!(answer(via, "1 BYE", b, a), Answer::Unmatched);
        assert_eq!(answer("SIP/2.0/UDP a;branch=z9hG4bK2", "1 INVITE", b, a), Answer::Unmatched);
        assert_eq!(answer(via, "1 INFO", b, a), Answer::Untracked);
    }

    #[test]
    fn other_requests_cannot_push_out_invites() {
        let seed = fasthash::seed();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut t = Transactions::default();
        let invite = msg("INVITE sip:b@h SIP/2.0", "SIP/2.0/UDP a;branch=i", "1 INVITE");
        t.request(seed, &calliper_sip::parse(&invite, false).unwrap(), a, b, true);
        for n in 2..100 {
            let u = msg(
                "UPDATE sip:b@h SIP/2.0",
                &format!("SIP/2.0/UDP a;branch=u{n}"),
                &format!("{n} UPDATE"),
            );
            t.request(seed, &calliper_sip::parse(&u, false).unwrap(), a, b, false);
        }
        let ok = msg("SIP/2.0 200 OK", "SIP/2.0/UDP a;branch=i", "1 INVITE");
        assert_eq!(
            t.response(seed, &calliper_sip::parse(&ok, false).unwrap(), b, a),
            Answer::Matched { establishing: true }
        );
    }
}
