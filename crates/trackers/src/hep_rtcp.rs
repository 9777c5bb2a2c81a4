//! RTCP seen on a call's media, sent as HEP3 type 5: one JSON object per
//! sender or receiver report, in the form rtpengine's `--homer` sends
//! (`ssrc`, `type` 200 or 201, `report_count`, `report_blocks` with
//! `source_ssrc`, `highest_seq_no`, `fraction_lost`, `ia_jitter`,
//! `packets_lost`, `lsr`, `dlsr`, and an SR's `sender_information`), the
//! Call-ID as correlation id and the datagram's addresses, ports and time.

use crate::hep_quality::HepFields;
use calliper_model::event::RtcpPacket;
use calliper_wire::hep::{self, Hep};
use calliper_wire::rtcp::{parts, Part};
use serde_json::json;

/// Reports sent per datagram (a compound holds an SR or RR and perhaps a
/// few more; one of a thousand empty reports would otherwise become a
/// thousand messages).
pub(crate) const MAX_REPORTS: usize = 8;

/// The HEP messages for one RTCP datagram (None for one too long for HEP,
/// which cannot happen for a datagram's reports).
pub(crate) fn messages<'a>(
    p: &'a RtcpPacket<'a>,
    f: &'a HepFields<'a>,
) -> impl Iterator<Item = Option<Vec<u8>>> + 'a {
    // A malformed part ends the reading, as it does for the analysis; past
    // MAX_REPORTS a crafted compound of empty reports is not multiplied.
    parts(p.bytes).map_while(Result::ok).take(MAX_REPORTS).filter_map(move |part| {
        let Part::Report(r) = part else {
            return None;
        };
        let blocks: Vec<_> = r
            .blocks()
            .map(|b| {
                json!({
                    "source_ssrc": b.ssrc,
                    "highest_seq_no": b.highest_seq,
                    "fraction_lost": b.fraction_lost,
                    "ia_jitter": b.jitter,
                    "packets_lost": b.cumulative_lost,
                    "lsr": b.lsr,
                    "dlsr": b.dlsr,
                })
            })
            .collect();
        let mut body = json!({
            "ssrc": r.reporter,
            "type": if r.sender.is_some() { 200 } else { 201 },
            "report_count": blocks.len(),
            "report_blocks": blocks,
        });
        if let Some((ntp, rtp_ts, packets, octets)) = r.sender {
            body["sender_information"] = json!({
                "ntp_timestamp_sec": ntp >> 32,
                "ntp_timestamp_usec": ntp & 0xFFFF_FFFF,
                "octets": octets,
                "rtp_timestamp": rtp_ts,
                "packets": packets,
            });
        }
        let payload = serde_json::to_vec(&body).ok()?;
        Some(
            Hep {
                capture_id: f.capture_id,
                auth_key: f.auth_key,
                correlation_id: Some(p.call_id.as_bytes()),
                ..Hep::udp(hep::kind::RTCP_JSON, p.src, p.dst, p.ts_ns, &payload)
            }
            .emit()
            .ok(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compound of twenty empty receiver reports gives MAX_REPORTS
    /// messages, not twenty.
    #[test]
    fn a_crafted_compound_is_not_multiplied() {
        let bytes: Vec<u8> = (0..20u8).flat_map(|i| [0x80, 201, 0, 1, 0, 0, 0, i]).collect();
        let p = RtcpPacket {
            ts_ns: 1,
            call: 1,
            call_id: "c",
            src: ("192.0.2.1".parse().unwrap(), 4001),
            dst: ("192.0.2.2".parse().unwrap(), 5001),
            bytes: &bytes,
        };
        let f = HepFields { capture_id: 1, auth_key: None };
        let sent: Vec<_> = messages(&p, &f).collect();
        assert_eq!(sent.len(), MAX_REPORTS);
        assert!(sent.iter().all(Option::is_some));
    }
}
