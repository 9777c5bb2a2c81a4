//! Marks on a call's re-INVITEs and UPDATEs for the ladder: hold, resume,
//! T.38 and codec changes, read from each offer's SDP with the parsers and
//! the hold rule the engine uses (`calliper_sip`, `Sdp::audio_hold`), so
//! the page and the call's held/resumed events agree: hold is one state
//! for the call, changed only by an offer after the answer, as the engine
//! keeps it; T.38 and codec changes are compared per hop (the pair of
//! addresses that carried them), so a proxy's copy is marked on each leg.
//! A retransmission changes nothing. A message the database cut (16 KiB)
//! is not read: its SDP may be partial.

use calliper_rtp::Codec;
use calliper_sip::sdp;
use serde_json::Value;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// What an offer said (hold: None without active audio, which neither
/// holds nor resumes).
struct Offer {
    hold: Option<bool>,
    t38: bool,
    codec: Option<String>,
}

/// Adds `marks` (a list of short words) to each message of `detail` that
/// changed its hop's media: `hold`, `resume`, `T.38`, `audio again`,
/// `codec PCMA → G729`. The first offer on a hop only sets what the next
/// is compared with.
pub(crate) fn mark(detail: &mut Value) {
    let Some(messages) = detail.get_mut("messages").and_then(Value::as_array_mut) else {
        return;
    };
    let mut hops: HashMap<(String, String), Offer> = HashMap::new();
    let (mut answered, mut held) = (false, false);
    for m in messages {
        // The answer: a 2xx to the INVITE (the engine's answer_ns).
        let status = m["status"].as_u64().unwrap_or(0);
        if m["cseq_method"] == "INVITE" && (200..300).contains(&status) {
            answered = true;
        }
        let method = m["method"].as_str().unwrap_or_default();
        let cut = m["truncated"] == true || m["truncated"].as_i64().is_some_and(|t| t != 0);
        if !matches!(method, "INVITE" | "UPDATE") || cut {
            continue;
        }
        let Some(offer) = m["message"].as_str().and_then(offer_of) else {
            continue;
        };
        let mut marks = Vec::new();
        if let (true, Some(hold)) = (answered, offer.hold) {
            if hold != held {
                held = hold;
                marks.push(if hold { "hold" } else { "resume" }.to_string());
            }
        }
        let mut ends = [endpoint(m, "src"), endpoint(m, "dst")];
        ends.sort();
        let [a, b] = ends;
        match hops.entry((a, b)) {
            Entry::Occupied(mut before) => {
                marks.extend(changes(before.get(), &offer));
                before.insert(offer);
            }
            Entry::Vacant(first) => {
                first.insert(offer);
            }
        }
        if !marks.is_empty() {
            m["marks"] = marks.into();
        }
    }
}

fn endpoint(m: &Value, side: &str) -> String {
    format!("{}:{}", m[side].as_str().unwrap_or_default(), m[format!("{side}_port")])
}

/// The offer in a message's SDP body (by its Content-Type, as the engine
/// reads it), if it has one with media.
fn offer_of(message: &str) -> Option<Offer> {
    let parsed = calliper_sip::parse(message.as_bytes(), false).ok()?;
    if !parsed.has_sdp() {
        return None;
    }
    let sdp = sdp::parse(parsed.body);
    if sdp.media.is_empty() {
        return None;
    }
    let codec =
        sdp.media.iter().find(|m| m.kind.eq_ignore_ascii_case("audio") && m.port != 0).and_then(
            |m| {
                let pt = *m.formats.first()?;
                let map = m.rtpmap(pt).map(|r| (r.encoding, r.clock_rate));
                Some(Codec::resolve(pt, map).name)
            },
        );
    Some(Offer { hold: sdp.audio_hold(), t38: sdp.t38(), codec })
}

/// What changed from one offer to the next on a hop.
fn changes(before: &Offer, after: &Offer) -> Vec<String> {
    let mut marks = Vec::new();
    if after.t38 != before.t38 {
        marks.push(if after.t38 { "T.38" } else { "audio again" }.to_string());
    }
    if let (Some(a), Some(b)) = (&before.codec, &after.codec) {
        if a != b {
            marks.push(format!("codec {a} → {b}"));
        }
    }
    marks
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn invite(sdp: &str) -> Value {
        json!({"method": "INVITE", "src": "10.0.0.1", "src_port": 5060, "dst": "10.0.0.2", "dst_port": 5060, "truncated": 0,
               "message": format!("INVITE sip:b SIP/2.0\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\nContent-Type: application/sdp\r\n\r\n{sdp}")})
    }

    const AUDIO: &str = "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 4000 RTP/AVP 8 101\r\na=rtpmap:101 telephone-event/8000\r\n";

    /// Hold and resume only after the answer, once each (a retransmission
    /// changes nothing), not from a cut message nor from a body that is not
    /// SDP; codec and T.38 changes per hop.
    #[test]
    fn hold_resume_t38_and_codec_are_marked_once() {
        let hold = AUDIO.to_string() + "a=sendonly\r\n";
        let g729 = "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 4000 RTP/AVP 18\r\n";
        let fax = "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 0 RTP/AVP 8\r\nm=image 4002 udptl t38\r\n";
        let ok = json!({"status": 200, "cseq_method": "INVITE", "src": "10.0.0.2", "src_port": 5060, "dst": "10.0.0.1", "dst_port": 5060});
        let mut cut = invite(AUDIO);
        cut["truncated"] = json!(1);
        let mut not_sdp = invite(AUDIO);
        not_sdp["message"] =
            json!(not_sdp["message"].as_str().unwrap().replace("application/sdp", "text/plain"));
        let mut detail = json!({"messages": [
            invite(&hold), ok, invite(&hold), invite(&hold), cut, not_sdp, invite(AUDIO), invite(g729), invite(fax)
        ]});
        mark(&mut detail);
        let marks: Vec<Value> =
            detail["messages"].as_array().unwrap().iter().map(|m| m["marks"].clone()).collect();
        let n = Value::Null;
        let want = [
            &n,
            &n,
            &json!(["hold"]),
            &n,
            &n,
            &n,
            &json!(["resume"]),
            &json!(["codec PCMA → G729"]),
            &json!(["T.38"]),
        ];
        assert_eq!(marks.iter().collect::<Vec<_>>(), want);
    }
}
