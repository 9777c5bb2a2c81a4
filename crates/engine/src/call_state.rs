//! A call's state from its SIP messages: which messages it takes (only
//! responses to its own requests, only requests from its hops), and what
//! each request and response changes (answer, ringing, hang-up, cancel,
//! failure, the setup delays). The call table and its lists are
//! `dialogs`'; this is the call's own state machine.

use super::*;
use crate::transactions::Answer;

/// Why a message was not taken by its call.
pub(crate) enum Refused {
    /// Not the call's business (a response to a request it did not track,
    /// a message of a leg not yet answered).
    Silently,
    /// Counted as this anomaly on the call and the engine.
    Anomaly(&'static str),
}

impl Call {
    /// A call set up by an INVITE from `flow`'s source at `now`: its
    /// `serial`, its texts, and the capture's drop total then.
    pub(crate) fn new(
        serial: u64,
        text: CallText,
        flow: &Flow,
        now: i64,
        capture_dropped: u32,
    ) -> Call {
        Call {
            links: Links::default(),
            serial,
            text,
            caller: (flow.src, flow.sport),
            callee: (flow.dst, flow.dport),
            invite_ns: now,
            first_provisional_ns: None,
            srd_from_ns: now,
            srd_to_ns: None,
            srd_failed: false,
            bye_answer_ns: None,
            ringing_ns: None,
            answer_ns: None,
            end_ns: None,
            final_status: None,
            closing: None,
            hangup_by: None,
            cancelled: false,
            responded: false,
            sip_messages: 0,
            invites: 0,
            rtcp_packets: 0,
            t38_packets: 0,
            anomalies: 0,
            media: Vec::new(),
            media_keys: Vec::new(),
            streams: Vec::new(),
            labels: Box::default(),
            record_payload: false,
            ignored: false,
            held: false,
            refer_cseq: 0,
            transactions: Default::default(),
            hops: Default::default(),
            capture_dropped_at_start: capture_dropped,
            agent_reports: None,
        }
    }

    /// Whether the call takes message `m` from `src` to `dst`, and if so
    /// whether it belongs to an establishing INVITE's transaction. A
    /// response changes the call only if it answers one of the call's
    /// requests (`transactions`); a request from an address that is none
    /// of the call's hops may not end it or describe its media.
    pub(crate) fn admit(
        &mut self,
        seed: u64,
        m: &SipMessage<'_>,
        src: IpAddr,
        dst: IpAddr,
    ) -> Result<bool, Refused> {
        match m.start.ok_or(Refused::Silently)? {
            StartLine::Request { method, .. } => {
                let establishing = method == "INVITE" && establishes(self, m, src, dst);
                if establishing {
                    self.transactions.request(seed, m, src, dst, true);
                }
                if !self.hops.contains(src, seed) {
                    // A leg's INVITE waits for its answer to make its
                    // addresses hops; anything else from here is refused.
                    self.invites += u32::from(method == "INVITE");
                    if !establishing && matches!(method, "BYE" | "CANCEL" | "INVITE" | "UPDATE") {
                        return Err(Refused::Anomaly("sip_request_from_outsider"));
                    }
                    return Err(Refused::Silently);
                }
                if !establishing {
                    self.transactions.request(seed, m, src, dst, false);
                }
                Ok(establishing)
            }
            StartLine::Response { code, .. } => match self.transactions.response(seed, m, src, dst)
            {
                // An establishing INVITE answered 1xx or 2xx: its two ends
                // are the call's hops (a leg that no one answers adds none).
                Answer::Matched { establishing: true } => {
                    if code < 300 {
                        self.hops.insert(src, seed);
                        self.hops.insert(dst, seed);
                    }
                    Ok(true)
                }
                Answer::Matched { .. } if !self.hops.contains(src, seed) => Err(Refused::Silently),
                Answer::Matched { .. } => Ok(false),
                Answer::Untracked => Err(Refused::Silently),
                Answer::Unmatched => Err(Refused::Anomaly("sip_response_unmatched")),
            },
        }
    }

    /// A request `sender` sent that the call took ([`Call::admit`]).
    pub(crate) fn apply_request(
        &mut self,
        now: i64,
        m: &SipMessage<'_>,
        method: &str,
        sender: Side,
        establishing: bool,
    ) {
        match method {
            "INVITE" => {
                self.invites += 1;
                // A retry after a challenge or failure reopens an unanswered
                // call; after a challenge, SRD is measured from the retry.
                if establishing
                    && self.answer_ns.is_none()
                    && self.closing.is_some()
                    && !self.cancelled
                {
                    if self.challenged() {
                        self.srd_from_ns = now;
                        self.srd_to_ns = None;
                        self.srd_failed = false;
                    }
                    self.closing = None;
                    self.end_ns = None;
                }
            }
            "BYE" if self.closing.is_none() => {
                self.closing = Some(if self.answer_ns.is_some() {
                    CallState::Completed
                } else {
                    CallState::Cancelled
                });
                self.end_ns = Some(now);
                self.hangup_by = Some(sender);
                self.text.set(Field::HangupReason, m.reason_header.map(cut));
            }
            // The first CANCEL ends it; retransmissions change nothing.
            "CANCEL" if self.answer_ns.is_none() && !self.cancelled => {
                self.cancelled = true;
                self.closing = Some(CallState::Cancelled);
                self.end_ns = Some(now);
                self.hangup_by = Some(sender);
                self.text.set(Field::HangupReason, m.reason_header.map(cut));
            }
            _ => {}
        }
    }

    /// A response `sender` sent that the call took ([`Call::admit`]): a
    /// BYE's final answer dates SDD; only an establishing INVITE's answer
    /// sets the call up.
    pub(crate) fn apply_response(
        &mut self,
        now: i64,
        m: &SipMessage<'_>,
        (code, reason): (u16, &str),
        sender: Side,
        establishing: bool,
    ) {
        if m.cseq_method == Some("BYE") {
            // SDD: the BYE that ended the call, to its first final answer.
            if code >= 200 && self.ended_by_bye() && self.bye_answer_ns.is_none() {
                self.bye_answer_ns = NonZeroI64::new(now);
            }
            return;
        }
        if m.cseq_method != Some("INVITE") || !establishing {
            return;
        }
        self.responded = true;
        if sender == Side::Callee && self.text.get(Field::CalleeUa).is_none() {
            self.text.set(Field::CalleeUa, m.server.or(m.user_agent).map(cut));
        }
        if code < 200 && self.first_provisional_ns.is_none() && self.answer_ns.is_none() {
            self.first_provisional_ns = NonZeroI64::new(now);
        }
        let challenge = code == 401 || code == 407;
        if code > 100 && !challenge && self.srd_to_ns.is_none() && self.answer_ns.is_none() {
            self.srd_to_ns = NonZeroI64::new(now);
            self.srd_failed = code >= 400;
        }
        if (code == 180 || code == 183) && self.ringing_ns.is_none() {
            self.ringing_ns = NonZeroI64::new(now);
        }
        if code >= 200 && self.answer_ns.is_none() {
            self.final_status = Some(code);
            self.text.set(Field::FinalReason, Some(cut(reason)));
            if code < 300 {
                self.answer_ns = Some(now);
                self.closing = None;
                self.end_ns = None;
            } else if self.closing.is_none() || self.cancelled {
                self.closing =
                    Some(if self.cancelled { CallState::Cancelled } else { CallState::Failed });
                self.end_ns.get_or_insert(now);
            }
        }
    }

    /// A BYE ended it: hung up, and not by a CANCEL (a 2xx that crossed a
    /// CANCEL makes the call answered, and its BYE the end).
    pub(crate) fn ended_by_bye(&self) -> bool {
        self.hangup_by.is_some() && (!self.cancelled || self.answer_ns.is_some())
    }

    /// Failed by a 401/407 challenge, so waiting for the retry with
    /// credentials (a retry, CANCEL or BYE changes `closing`).
    pub(crate) fn challenged(&self) -> bool {
        self.closing == Some(CallState::Failed) && matches!(self.final_status, Some(401 | 407))
    }
}

/// Whether an INVITE sets the call up (`transactions`): an initial INVITE
/// of one of the call's legs (no To tag: the caller's, a proxy's copy, a
/// B2BUA's second leg, seen at another capture point): to the first
/// INVITE's destination, or after a redirect, or else a leg between two
/// other addresses than the caller's — so a scanner cannot answer a copy
/// it sends itself or elsewhere. Its addresses become the call's hops
/// once its destination answers it 1xx or 2xx.
fn establishes(call: &Call, m: &SipMessage<'_>, src: IpAddr, dst: IpAddr) -> bool {
    let to_tag = m.to.and_then(|t| NameAddr::parse(t).tag).is_some();
    let redirected = call.final_status.is_some_and(|s| (300..400).contains(&s));
    let elsewhere = src != call.caller.0 && dst != call.caller.0 && src != dst;
    !to_tag && (dst == call.callee.0 || redirected || elsewhere)
}
