//! Records from analysis state: stream records, codecs resolved through
//! rtpmaps, a call's DTMF digits.

use super::*;

/// Digits of all streams of a call in order of arrival.
pub(crate) fn dtmf_digits(streams: &[StreamRecord]) -> String {
    let mut events: Vec<(i64, char)> = streams
        .iter()
        .flat_map(|s| s.dtmf.iter().filter_map(|e| Some((e.start_ns, e.digit?))))
        .collect();
    events.sort_unstable();
    events.into_iter().map(|e| e.1).collect()
}

/// The record of `call`, ended so (`ending`), with its streams' records,
/// its last activity (SIP or media), and the engine's clock and capture
/// drop total now; the caller summarises its quality.
pub(crate) fn call_record(
    call: Call,
    ending: Ending,
    streams: Vec<StreamRecord>,
    last_activity: i64,
    (now, capture_dropped): (i64, u32),
) -> Box<CallRecord> {
    let state = if ending == Ending::Evicted {
        CallState::Evicted
    } else if let Some(s) = call.closing {
        s
    } else if call.answer_ns.is_some() {
        CallState::Answered
    } else if call.final_status.is_some_and(|c| c >= 300) {
        CallState::Failed
    } else {
        CallState::NoFinalResponse
    };
    let end_ns = call.end_ns.unwrap_or(last_activity.max(call.invite_ns));
    let ms = |a: i64, b: i64| (i128::from(b) - i128::from(a)) as f64 / 1e6;
    let setup_delay_ms = call.srd_to_ns.map(|t| ms(call.srd_from_ns, t.get()));
    let bye_ns = call.end_ns.filter(|_| call.ended_by_bye());
    let disconnect_delay_ms =
        bye_ns.zip(call.bye_answer_ns).map(|(bye, answer)| ms(bye, answer.get()).max(0.0));
    Box::new(CallRecord {
        serial: call.serial,
        call_id: call.text.call_id().into(),
        from: call.text.party(true),
        to: call.text.party(false),
        caller_user_agent: call.text.get(Field::CallerUa).map(String::from),
        callee_user_agent: call.text.get(Field::CalleeUa).map(String::from),
        caller_ip: call.caller.0,
        caller_port: call.caller.1,
        callee_ip: call.callee.0,
        callee_port: call.callee.1,
        invite_ns: call.invite_ns,
        first_provisional_ns: call.first_provisional_ns.map(NonZeroI64::get),
        ringing_ns: call.ringing_ns.map(NonZeroI64::get),
        answer_ns: call.answer_ns,
        end_ns,
        duration_ms: call.answer_ns.map_or(0.0, |a| ms(a, end_ns).max(0.0)),
        setup_delay_ms,
        setup_delay_to_failure: setup_delay_ms.is_some() && call.srd_failed,
        disconnect_delay_ms,
        final_status: call.final_status,
        final_reason: call.text.get(Field::FinalReason).map(String::from),
        state,
        hangup_by: call.hangup_by,
        hangup_reason: call.text.get(Field::HangupReason).map(String::from),
        sip_messages: call.sip_messages,
        invites: call.invites,
        rtcp_packets: call.rtcp_packets as u64,
        t38_packets: call.t38_packets as u64,
        anomalies: call.anomalies,
        dtmf_digits: dtmf_digits(&streams),
        worst_mos: None,
        worst_interval_mos: None,
        mos_scale: None,
        labels: call.labels.iter().map(|l| l.to_string()).collect(),
        record_payload: call.record_payload,
        capture_dropped: capture_dropped.wrapping_sub(call.capture_dropped_at_start) as u64,
        // A call in its grace after BYE, CANCEL or failure has ended.
        ongoing: ending == Ending::Open && call.closing.is_none(),
        held_until_ns: now.max(end_ns),
        streams,
        agent_reports: call.agent_reports.map_or_else(Vec::new, |r| r.0),
    })
}

/// Resolves a payload type through a media description's rtpmaps, else the static table.
pub(crate) fn resolve(desc: Option<&MediaDesc>, pt: u8) -> Codec {
    let map = desc.and_then(|d| d.rtpmaps.iter().find(|r| r.payload_type == pt));
    Codec::resolve(pt, map.map(|r| (r.name(), r.clock_rate)))
}

/// The same payload type's registered codec name, without allocating
/// (None for a name not in the registry, which has no E-model values).
pub(crate) fn canonical_codec(desc: Option<&MediaDesc>, pt: u8) -> Option<&'static str> {
    let map = desc.and_then(|d| d.rtpmaps.iter().find(|r| r.payload_type == pt));
    calliper_rtp::codec::canonical(pt, map.map(|r| (r.name(), r.clock_rate)))
}

pub(crate) fn stream_record(s: &Stream, desc: Option<&MediaDesc>) -> StreamRecord {
    let st = &s.stats;
    let expected = st.seq.expected();
    let lost = st.seq.lost();
    let mut r = StreamRecord {
        src: s.key.src,
        src_port: s.key.sport,
        dst: s.key.dst,
        dst_port: s.key.dport,
        ssrc: s.key.ssrc,
        direction: s.direction,
        payload_type: st.payload_type,
        codec: resolve(desc, st.payload_type).name,
        first_ns: st.first_ns,
        last_ns: st.last_ns,
        packets: st.packets,
        bytes: st.bytes,
        expected,
        lost,
        loss_percent: if expected == 0 { 0.0 } else { lost as f64 * 100.0 / expected as f64 },
        duplicates: st.seq.duplicates as u64,
        out_of_order: st.seq.out_of_order as u64,
        seq_resets: st.seq.resets as u64,
        seq_outages: st.seq.outages as u64,
        event_packets: st.event_packets.into(),
        event_end_repeats: s.dtmf.as_ref().map_or(0, |d| d.end_repeats as u64),
        mean_jitter_ms: st.ws.mean_jitter,
        max_jitter_ms: st.ws.max_jitter,
        segment_mean_jitter_ms: st.segments.as_ref().map(|s| s.mean_jitter),
        segment_max_jitter_ms: st.segments.as_ref().map(|s| s.max_jitter),
        restarts_ns: st.segments.as_ref().map_or_else(Vec::new, |s| s.restarts_ns.clone()),
        min_delta_ms: st.ws.min_delta(),
        mean_delta_ms: st.ws.mean_delta,
        max_delta_ms: st.ws.max_delta,
        wireshark_expected: st.ws.expected(),
        wireshark_lost: st.ws.lost(),
        burst_ratio: st.seq.burst_ratio(),
        r_factor: None,
        mos: None,
        mos_scale: None,
        unscored: None,
        worst_interval_mos: st.worst_interval_mos.map(f64::from),
        packet_ms: st.packet_ms(s.last_clock),
        rtt_ms: s.rtcp.rtt_ms(),
        delay_ms: None,
        delay_inputs: None,
        jitter_buffers: Vec::new(),
        encrypted: desc.is_some_and(|d| d.encrypted),
        dtmf: s.dtmf.as_ref().map_or(Vec::new(), |d| d.events.clone()),
        rtcp_reports: s.rtcp.reports,
        rtcp_max_fraction_lost: s.rtcp.max_fraction_lost as f64 * 100.0 / 256.0,
        rtcp_cumulative_lost: s.rtcp.cumulative_lost as i64,
        rtcp_max_jitter_ms: s.rtcp.max_jitter_ms as f64,
        rtcp_xr: s.rtcp.xr.as_ref().map(|x| xr_voip(&x.1, x.0)),
    };
    r.estimate_quality(&st.playout.models());
    r
}

/// XR VoIP metrics in the record's units: /256 fractions as percentages,
/// MOS ×10 as MOS, 127 (unavailable) as none.
fn xr_voip(m: &calliper_wire::rtcp::VoipMetrics, reports: u32) -> calliper_model::XrVoip {
    let pct = |v: u8| f64::from(v) * 100.0 / 256.0;
    let mos = |v: u8| (v != 127).then(|| f64::from(v) / 10.0);
    calliper_model::XrVoip {
        reports,
        loss_percent: pct(m.loss_rate),
        discard_percent: pct(m.discard_rate),
        burst_density_percent: pct(m.burst_density),
        gap_density_percent: pct(m.gap_density),
        round_trip_ms: m.round_trip_ms,
        end_system_delay_ms: m.end_system_delay_ms,
        r_factor: (m.r_factor != 127).then_some(m.r_factor),
        mos_lq: mos(m.mos_lq),
        mos_cq: mos(m.mos_cq),
        jb_nominal_ms: m.jb_nominal_ms,
        jb_maximum_ms: m.jb_maximum_ms,
    }
}
