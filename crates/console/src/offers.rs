//! Marks on a call's re-INVITEs and UPDATEs for the ladder: hold, resume,
//! T.38 and codec changes, read from each offer's SDP with the same parser
//! and hold rule the engine uses (`calliper_sip::sdp`), so the page and
//! the call's events cannot disagree. Offers are compared per hop (the
//! pair of addresses that carried them): a proxy's copy of a re-INVITE is
//! marked on each leg, and a retransmission changes nothing.

use calliper_rtp::Codec;
use calliper_sip::sdp;
use serde_json::Value;
use std::collections::HashMap;

/// What the last offer on a hop said.
struct Offer {
    hold: bool,
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
    for m in messages {
        let method = m["method"].as_str().unwrap_or_default();
        if !matches!(method, "INVITE" | "UPDATE") {
            continue;
        }
        let Some(offer) = m["message"].as_str().and_then(offer_of) else {
            continue;
        };
        let mut ends = [endpoint(m, "src"), endpoint(m, "dst")];
        ends.sort();
        let [a, b] = ends;
        let marks = match hops.get_mut(&(a.clone(), b.clone())) {
            Some(before) => {
                let marks = changes(before, &offer);
                *before = offer;
                marks
            }
            None => {
                hops.insert((a, b), offer);
                Vec::new()
            }
        };
        if !marks.is_empty() {
            m["marks"] = marks.into();
        }
    }
}

fn endpoint(m: &Value, side: &str) -> String {
    format!(
        "{}:{}",
        m[side].as_str().unwrap_or_default(),
        m[format!("{side}_port")]
    )
}

/// The offer in a message's SDP body, if it has one with media.
fn offer_of(message: &str) -> Option<Offer> {
    let body = message
        .split_once("\r\n\r\n")
        .or_else(|| message.split_once("\n\n"))?
        .1;
    let parsed = sdp::parse(body.as_bytes());
    if parsed.media.is_empty() {
        return None;
    }
    let codec = parsed
        .media
        .iter()
        .find(|m| m.kind.eq_ignore_ascii_case("audio") && m.port != 0)
        .and_then(|m| {
            let pt = *m.formats.first()?;
            let map = m.rtpmap(pt).map(|r| (r.encoding, r.clock_rate));
            Some(Codec::resolve(pt, map).name)
        });
    Some(Offer {
        hold: parsed.audio_hold().unwrap_or(false),
        t38: parsed.t38(),
        codec,
    })
}

/// What changed from one offer to the next on a hop.
fn changes(before: &Offer, after: &Offer) -> Vec<String> {
    let mut marks = Vec::new();
    if after.t38 != before.t38 {
        marks.push(if after.t38 { "T.38" } else { "audio again" }.to_string());
    }
    if after.hold != before.hold {
        marks.push(if after.hold { "hold" } else { "resume" }.to_string());
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
        json!({"method": "INVITE", "src": "10.0.0.1", "src_port": 5060, "dst": "10.0.0.2", "dst_port": 5060,
               "message": format!("INVITE sip:b SIP/2.0\r\nContent-Type: application/sdp\r\n\r\n{sdp}")})
    }

    const AUDIO: &str = "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 4000 RTP/AVP 8 101\r\na=rtpmap:101 telephone-event/8000\r\n";

    #[test]
    fn hold_resume_t38_and_codec_are_marked_once() {
        let hold = AUDIO.to_string() + "a=sendonly\r\n";
        let g729 = "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 4000 RTP/AVP 18\r\n";
        let fax = "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 0 RTP/AVP 8\r\nm=image 4002 udptl t38\r\n";
        let mut detail = json!({"messages": [invite(AUDIO), invite(&hold), invite(&hold), invite(AUDIO), invite(g729), invite(fax)]});
        mark(&mut detail);
        let marks: Vec<Value> = detail["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["marks"].clone())
            .collect();
        assert_eq!(
            marks,
            vec![
                Value::Null,
                json!(["hold"]),
                Value::Null,
                json!(["resume"]),
                json!(["codec PCMA → G729"]),
                json!(["T.38"])
            ]
        );
    }
}
