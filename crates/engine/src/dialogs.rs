//! Calls from their SIP messages: the call table keyed by Call-ID, call
//! state (answer, hang-up, failure, cancel) and activity lists.

use super::*;
use crate::call_state::Refused;

impl Engine {
    pub(crate) fn sip_message(&mut self, now: i64, flow: &Flow, m: &SipMessage<'_>) {
        let Flow { src, sport, dst, dport } = *flow;
        self.counters.sip_messages += 1;
        self.message_completed();
        self.count_sip_kind(m);
        let (from, to) = ((src, sport), (dst, dport));
        let Some(call_id) = m.call_id.filter(|c| !c.is_empty()) else {
            self.counters.anomaly("sip_missing_call_id");
            return self.sip_event(now, from, to, m, None);
        };
        if call_id.len() > MAX_CALL_ID {
            self.counters.anomaly("sip_call_id_too_long");
            return self.sip_event(now, from, to, m, None);
        }
        let is_invite = matches!(m.start, Some(StartLine::Request { method: "INVITE", .. }));
        let (idx, started) = match self.call_ids.get(call_id, &self.calls) {
            Some(i) => (i, false),
            None if is_invite => match self.new_call(now, call_id, flow, m) {
                Some(i) => (i, true),
                None => return self.sip_event(now, from, to, m, None),
            },
            None => {
                self.counters.sip_outside_calls += 1;
                return self.sip_event(now, from, to, m, None);
            }
        };
        self.apply_packet_rule(idx);
        self.attribute(idx, true);
        // An ignored call's messages are followed, not reported.
        if let Some(c) = self.calls.get(idx).filter(|c| !c.ignored) {
            let serial = c.serial;
            self.sip_event(now, from, to, m, Some(serial));
        }
        if started {
            self.call_event(idx, now, CallPhase::Started, None, None);
        }
        let before = self.calls.get(idx).map(events::progress);
        let sdp_side = self.update_call(idx, now, m, src, dst);
        if let (Some(b), Some(a)) = (before, self.calls.get(idx).map(events::progress)) {
            if let Some(phase) = events::phase_change(b, a, m) {
                self.call_event(idx, now, phase, m.status(), None);
            }
        }
        if let Some(side) = sdp_side {
            self.apply_sdp_and_refer(idx, now, m, side, src);
        }
        self.touch_call(idx, now);
    }

    /// Counts a message by its kind. Keys come from a fixed set (methods
    /// by name, others as one key; status codes are 100..=699), so the map
    /// stays small whatever the input, and nothing is allocated once a kind
    /// has been seen.
    fn count_sip_kind(&mut self, m: &SipMessage<'_>) {
        let mut digits = [0u8; 5];
        let kind = match m.start {
            Some(StartLine::Request { method, .. }) => calliper_sip::METHODS
                .iter()
                .find(|&&k| k == method)
                .copied()
                .unwrap_or(OTHER_METHOD),
            Some(StartLine::Response { code, .. }) => decimal(code, &mut digits),
            None => "?",
        };
        match self.counters.sip_by_kind.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.counters.sip_by_kind.insert(kind.to_string(), 1);
            }
        }
    }

    /// What a message call `idx` took says, given who sent it (`side`,
    /// from `src`): its SDP describes where that side receives (an offer
    /// may hold or resume the call), and a REFER's 2xx transfers the call.
    fn apply_sdp_and_refer(
        &mut self,
        idx: Idx,
        now: i64,
        m: &SipMessage<'_>,
        side: Side,
        src: IpAddr,
    ) {
        if m.has_sdp() {
            let hold = self.apply_sdp(idx, side, m.body, src);
            // Offers decide (an answer to a hold says recvonly).
            let offer =
                matches!(m.start, Some(StartLine::Request { method: "INVITE" | "UPDATE", .. }));
            if let (Some(hold), true) = (hold, offer) {
                self.hold_change(idx, now, side, hold);
            }
        }
        // A REFER accepted: its sender (this response's receiver) transferred the call.
        let refer_accepted = m.cseq_method == Some("REFER")
            && m.status().is_some_and(|s| (200..300).contains(&s))
            && self.first_refer_answer(idx, m.cseq);
        if refer_accepted {
            let by = match side {
                Side::Caller => Side::Callee,
                Side::Callee => Side::Caller,
            };
            self.call_event(idx, now, CallPhase::Transferred, m.status(), Some(by));
        }
    }

    /// True for the first 2xx to a REFER transaction (its retransmissions
    /// are the same transfer).
    fn first_refer_answer(&mut self, idx: Idx, cseq: Option<u32>) -> bool {
        let (Some(call), Some(cseq)) = (self.calls.get_mut(idx), cseq) else {
            return false;
        };
        let mark = cseq.wrapping_add(1);
        let first = call.refer_cseq != mark;
        call.refer_cseq = mark;
        first
    }

    /// An offer in an answered call put it on hold or took it off.
    fn hold_change(&mut self, idx: Idx, now: i64, by: Side, hold: bool) {
        let Some(call) = self.calls.get_mut(idx) else {
            return;
        };
        if call.answer_ns.is_none() || call.held == hold {
            return;
        }
        call.held = hold;
        let phase = if hold { CallPhase::Held } else { CallPhase::Resumed };
        self.call_event(idx, now, phase, None, Some(by));
    }

    /// Records activity on a call, keeping it on the list its state belongs to.
    pub(crate) fn touch_call(&mut self, idx: Idx, now: i64) {
        let Some(call) = self.calls.get(idx) else {
            return;
        };
        let list = if call.challenged() {
            LIST_CHALLENGED
        } else if call.closing.is_some() {
            LIST_CLOSING
        } else if !call.responded {
            LIST_UNANSWERED
        } else {
            LIST_ACTIVE
        };
        self.calls.touch(idx, list, now);
    }

    #[allow(clippy::too_many_arguments)] // the 5-tuple plus the message; a struct would only rename them
    pub(crate) fn new_call(
        &mut self,
        now: i64,
        call_id: &str,
        flow: &Flow,
        m: &SipMessage<'_>,
    ) -> Option<Idx> {
        self.make_room_for_a_call()?;
        let (from_na, to_na) =
            (NameAddr::parse(m.from.unwrap_or("")), NameAddr::parse(m.to.unwrap_or("")));
        let rule = self.sip_rule(m, &from_na, &to_na);
        let c = &mut self.counters;
        let mut text = [None; call_text::FIELDS];
        text[Field::CallId as usize] = Some(call_id);
        text[Field::CallerTag as usize] = from_na.tag.map(cut);
        for (na, [uri, user, display]) in [
            (&from_na, [Field::FromUri, Field::FromUser, Field::FromDisplay]),
            (&to_na, [Field::ToUri, Field::ToUser, Field::ToDisplay]),
        ] {
            text[uri as usize] = Some(c.cut(na.uri));
            text[user as usize] = na.user.map(|u| c.cut(u));
            text[display as usize] = na.display.map(|d| c.cut(d));
        }
        text[Field::CallerUa as usize] = m.user_agent.map(|u| c.cut(u));
        // Signalling is counted alike in every shard, so shards agree.
        let serial = self.counters.calls + 1;
        let mut call = Call::new(serial, CallText::new(text), flow, now, self.capture_dropped);
        // The first INVITE's two ends take part whatever comes of it.
        call.hops.insert(flow.src, self.key_seed);
        call.hops.insert(flow.dst, self.key_seed);
        let idx = self.calls.insert(call).ok()?;
        self.call_ids.insert(call_id, idx, &self.calls);
        self.counters.calls += 1;
        if let Some(a) = rule {
            self.apply_rule(idx, a);
        }
        Some(idx)
    }

    /// Makes room for a new call: past the unanswered cap its oldest
    /// unanswered call goes; in a full table a challenged call, else the
    /// oldest unanswered, closing or active one. None when a full table has
    /// no call to evict (`max_calls` 0).
    fn make_room_for_a_call(&mut self) -> Option<()> {
        if self.calls.list_len(LIST_UNANSWERED) >= self.cfg.max_unanswered {
            if let Some((oldest, _)) = self.calls.oldest(LIST_UNANSWERED) {
                // A flood: count it, do not write a record per forged INVITE.
                self.counters.unanswered_evicted += 1;
                self.finish_call(oldest, Ending::Discarded);
            }
        }
        if self.calls.is_full() {
            if let Some((oldest, _)) = self.calls.oldest(LIST_CHALLENGED) {
                // A flood of INVITEs a server challenges (a scan): counted,
                // not written, and never at the cost of a call in progress.
                self.counters.challenged_evicted += 1;
                self.finish_call(oldest, Ending::Discarded);
            } else {
                let (oldest, _) = self
                    .calls
                    .oldest(LIST_UNANSWERED)
                    .or_else(|| self.calls.oldest(LIST_CLOSING))
                    .or_else(|| self.calls.oldest(LIST_ACTIVE))?;
                self.counters.calls_evicted += 1;
                self.finish_call(oldest, Ending::Evicted);
            }
        }
        Some(())
    }

    /// The action of the first SIP rule a new call's INVITE matches.
    fn sip_rule(
        &self,
        m: &SipMessage<'_>,
        from: &NameAddr<'_>,
        to: &NameAddr<'_>,
    ) -> Option<RuleAction> {
        if self.rules.no_sip_rules() {
            return None;
        }
        // Cut as the record keeps them: a pattern's cost stays bounded.
        self.rules
            .lookup_sip(&calliper_rules::SipFacts {
                method: "INVITE",
                from_user: from.user.map(cut),
                from_domain: Some(cut(from.host)),
                to_user: to.user.map(cut),
                to_domain: Some(cut(to.host)),
                user_agent: m.user_agent.map(cut),
            })
            .cloned()
    }

    /// Applies the action a network rule chose for the packet being handled
    /// (once: its SIP message or its new stream takes it).
    pub(crate) fn apply_packet_rule(&mut self, idx: Idx) {
        if let Some(a) = self.packet_rule.take() {
            self.apply_rule(idx, a);
        }
    }

    /// Applies a rule's action to a call (`ignore` from a SIP rule: the
    /// call is followed but not reported).
    pub(crate) fn apply_rule(&mut self, idx: Idx, action: RuleAction) {
        let Some(call) = self.calls.get_mut(idx) else {
            return;
        };
        match action {
            RuleAction::Track => {}
            RuleAction::Ignore => {
                if !call.ignored {
                    call.ignored = true;
                    self.counters.rule_ignored_calls += 1;
                }
            }
            RuleAction::Record => call.record_payload = true,
            RuleAction::Label(l) => {
                if !call.labels.contains(&l) && call.labels.len() < MAX_LABELS_PER_CALL {
                    // A boxed slice (16 bytes, not a vector's 24): labels are rare.
                    let mut labels = std::mem::take(&mut call.labels).into_vec();
                    labels.push(l);
                    call.labels = labels.into_boxed_slice();
                }
            }
        }
    }

    /// Updates a call from one of its messages; returns the side that sent
    /// the message (whose SDP, if any, describes where that side receives).
    /// A response changes the call only if it answers one of the call's
    /// requests, and sets it up (answer, ringing, failure) only if that
    /// request was an establishing INVITE (`transactions`); one that does
    /// not is counted (`sip_response_unmatched`) and shown, nothing more.
    /// A request from an address that is none of the call's hops may not
    /// end it or describe its media (`sip_request_from_outsider`).
    pub(crate) fn update_call(
        &mut self,
        idx: Idx,
        now: i64,
        m: &SipMessage<'_>,
        src: IpAddr,
        dst: IpAddr,
    ) -> Option<Side> {
        let seed = self.key_seed;
        let call = self.calls.get_mut(idx)?;
        call.sip_messages += 1;
        let establishing = match call.admit(seed, m, src, dst) {
            Ok(establishing) => establishing,
            Err(Refused::Silently) => return None,
            Err(Refused::Anomaly(name)) => {
                call.anomalies += 1;
                self.counters.anomaly(name);
                return None;
            }
        };
        let from_tag = m.from.map(|f| NameAddr::parse(f).tag);
        let from_is_caller = match (call.text.get(Field::CallerTag), from_tag.flatten()) {
            (Some(ct), Some(ft)) => ct == cut(ft),
            _ => true,
        };
        Some(match m.start? {
            StartLine::Request { method, .. } => {
                let sender = if from_is_caller { Side::Caller } else { Side::Callee };
                call.apply_request(now, m, method, sender, establishing);
                sender
            }
            StartLine::Response { code, reason } => {
                let sender = if from_is_caller { Side::Callee } else { Side::Caller };
                call.apply_response(now, m, (code, reason), sender, establishing);
                sender
            }
        })
    }
}

/// `n` in decimal, written into `buf`.
pub(crate) fn decimal(mut n: u16, buf: &mut [u8; 5]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[at..]).unwrap_or("?")
}
