//! RTCP reports (HEP type 5, JSON as rtpengine sends them) and quality
//! reports (type 34) from capture agents, summed into the call their
//! correlation id (the Call-ID) names: the quality of media the probe may
//! never see itself. A report for no open call is counted, not kept.

use super::*;
use calliper_model::agent::{AgentReport, AgentReportKind};
use calliper_wire::hep::{kind, Hep};
use serde::Deserialize;
use std::ops::Not;

/// Reporting pairs kept per call; reports of more are counted as the
/// anomaly `hep_report_table_full`.
pub(crate) const MAX_AGENT_REPORTS: usize = 16;

/// A call's reports from agents (boxed in the call: a pointer, not a
/// vector, for the calls that have none).
#[derive(Default)]
pub(crate) struct AgentReports(pub(crate) Vec<AgentReport>);

/// An RTCP packet as JSON (rtpengine's `homer_*` handlers): the reporter's
/// SSRC and its report blocks; other fields are not read.
#[derive(Deserialize)]
struct RtcpJson {
    ssrc: Option<u32>,
    #[serde(default)]
    report_blocks: Vec<BlockJson>,
}

#[derive(Deserialize)]
struct BlockJson {
    source_ssrc: u32,
    #[serde(default)]
    fraction_lost: u8,
    #[serde(default)]
    packets_lost: i64,
    #[serde(default)]
    ia_jitter: u32,
}

/// A quality report's figures (Homer's field names, as `--hep` sends them).
#[derive(Deserialize)]
#[allow(non_snake_case)]
struct QualityJson {
    MOS: Option<f64>,
    SSRC: Option<u32>,
    TOTAL_PK: Option<u64>,
    EXPECTED_PK: Option<u64>,
    PACKET_LOSS: Option<i64>,
}

/// RFC 3550's cumulative lost is a signed 24-bit field; agents print it
/// unsigned (rtpengine) or signed. Anything outside 24 bits is not one.
fn signed24(v: i64) -> Option<i64> {
    match v {
        0x80_0000..=0xFF_FFFF => Some(v - 0x100_0000),
        -0x80_0000..=0x7F_FFFF => Some(v),
        _ => None,
    }
}

impl Engine {
    /// A HEP RTCP or quality report, taken at time `at`.
    pub(crate) fn hep_report(&mut self, at: i64, h: &Hep<'_>) {
        let call = h
            .correlation_id
            .and_then(|c| std::str::from_utf8(c).ok())
            .and_then(|id| self.call_ids.get(id, &self.calls));
        let Some(call) = call else {
            self.counters.hep_reports_uncorrelated += 1;
            return;
        };
        let base = AgentReport {
            kind: AgentReportKind::Rtcp,
            src: h.src,
            src_port: h.sport,
            dst: h.dst,
            dst_port: h.dport,
            ssrc: None,
            source_ssrc: None,
            reports: 0,
            first_ns: at,
            last_ns: at,
            max_fraction_lost_percent: None,
            cumulative_lost: None,
            max_jitter_units: None,
            mos: None,
            min_mos: None,
            packets: None,
            expected: None,
            lost: None,
        };
        // Reports refused for want of room, each counted (every block is
        // tried: one may match an entry the call already has).
        let refused = match h.kind {
            kind::RTCP_JSON => match serde_json::from_slice::<RtcpJson>(h.payload) {
                Ok(r) => r
                    .report_blocks
                    .iter()
                    .filter(|b| {
                        let key = AgentReport {
                            ssrc: r.ssrc,
                            source_ssrc: Some(b.source_ssrc),
                            ..base.clone()
                        };
                        self.agent_report(call, key, |e| {
                            let percent = f64::from(b.fraction_lost) * 100.0 / 256.0;
                            e.max_fraction_lost_percent = Some(
                                e.max_fraction_lost_percent.map_or(percent, |m| m.max(percent)),
                            );
                            if let Some(lost) = signed24(b.packets_lost) {
                                e.cumulative_lost = Some(lost);
                            }
                            e.max_jitter_units = Some(
                                e.max_jitter_units.map_or(b.ia_jitter, |m| m.max(b.ia_jitter)),
                            );
                        })
                        .not()
                    })
                    .count(),
                Err(_) => return self.counters.anomaly("hep_bad_report"),
            },
            _ => match serde_json::from_slice::<QualityJson>(h.payload) {
                Ok(q) => {
                    let key = AgentReport { kind: AgentReportKind::Quality, ssrc: q.SSRC, ..base };
                    self.agent_report(call, key, |e| {
                        // A MOS is 1 to 5: anything else is not one.
                        if let Some(m) = q.MOS.filter(|m| (1.0..=5.0).contains(m)) {
                            e.mos = Some(m);
                            e.min_mos = Some(e.min_mos.map_or(m, |x| x.min(m)));
                        }
                        (e.packets, e.expected, e.lost) =
                            (q.TOTAL_PK, q.EXPECTED_PK, q.PACKET_LOSS);
                    })
                    .not() as usize
                }
                Err(_) => return self.counters.anomaly("hep_bad_report"),
            },
        };
        if refused > 0 {
            self.counters.count_anomalies("hep_report_table_full", refused as u64);
        }
    }

    /// Adds one report to the call's entry with `key`'s kind, addresses and
    /// SSRCs (made if there is room); false when there was none.
    fn agent_report(
        &mut self,
        call: Idx,
        key: AgentReport,
        update: impl FnOnce(&mut AgentReport),
    ) -> bool {
        let Some(c) = self.calls.get_mut(call) else {
            return true;
        };
        let reports = &mut c.agent_reports.get_or_insert_with(Default::default).0;
        let same = |e: &AgentReport| {
            (e.kind, e.src, e.src_port, e.dst, e.dst_port, e.ssrc, e.source_ssrc)
                == (
                    key.kind,
                    key.src,
                    key.src_port,
                    key.dst,
                    key.dst_port,
                    key.ssrc,
                    key.source_ssrc,
                )
        };
        let at = match reports.iter().position(same) {
            Some(i) => i,
            None if reports.len() < MAX_AGENT_REPORTS => {
                reports.push(key.clone());
                reports.len() - 1
            }
            None => return false,
        };
        let entry = &mut reports[at];
        entry.reports = entry.reports.saturating_add(1);
        entry.first_ns = entry.first_ns.min(key.first_ns);
        entry.last_ns = entry.last_ns.max(key.last_ns);
        update(entry);
        self.counters.hep_reports += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::signed24;

    #[test]
    fn cumulative_lost_is_signed_24_bit() {
        assert_eq!(signed24(5), Some(5));
        assert_eq!(signed24(0xFF_FFFF), Some(-1));
        assert_eq!(signed24(0x80_0000), Some(-0x80_0000));
        assert_eq!(signed24(-3), Some(-3));
        assert_eq!(signed24(1 << 24), None);
        assert_eq!(signed24(-(1 << 24)), None);
    }
}

#[cfg(test)]
mod call_tests {
    use super::MAX_AGENT_REPORTS;
    use crate::{Config, Engine, Record};
    use calliper_model::agent::AgentReportKind;
    use calliper_wire::hep::{kind, Hep};

    const T: i64 = 1_700_000_000_000_000_000;

    fn hep(kind: u8, payload: &[u8], at: i64) -> Vec<u8> {
        let ends = ("192.0.2.1", "192.0.2.2");
        let id = Some(&b"rtcp-1@192.0.2.1"[..]);
        let m = crate::framing::tests::hep_message(kind, payload, at, ends, id, false);
        // Ports as an RTCP datagram's, not SIP's.
        let h = Hep::parse(&m).unwrap();
        Hep { sport: 30_001, dport: 40_001, ..h }.emit().unwrap()
    }

    /// The call record `e` writes when its input ends.
    fn finished_call(e: &mut Engine) -> Box<calliper_model::CallRecord> {
        e.finish();
        e.drain()
            .find_map(|r| match r {
                Record::Call(c) => Some(c),
                _ => None,
            })
            .expect("the call's record")
    }

    /// An engine reading HEP, with the call `rtcp-1@192.0.2.1` open (its
    /// INVITE arrived as HEP at `T`).
    fn engine_with_call() -> Engine {
        let mut e = Engine::new(Config { hep_port: Some(9060), ..Config::default() });
        let invite = b"INVITE sip:b@192.0.2.2 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK1\r\nFrom: <sip:a@192.0.2.1>;tag=1\r\nTo: <sip:b@192.0.2.2>\r\nCall-ID: rtcp-1@192.0.2.1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
        e.hep_datagram(T, &hep(kind::SIP, invite, T));
        e
    }

    /// rtpengine's RTCP JSON (its `homer_*` format strings, spacing and
    /// all) and a quality report are summed into the call they name; a
    /// report naming no call is counted; bad JSON is an anomaly.
    #[test]
    fn reports_join_the_call_they_name() {
        let mut e = engine_with_call();
        let rr = |lost: u32, fraction: u8, jitter: u32| {
            format!(
                "{{ \"sender_information\":{{\"ntp_timestamp_sec\":1,\"ntp_timestamp_usec\":2,\"octets\":3,\"rtp_timestamp\":4, \"packets\":5}},\"ssrc\":1111,\"type\":200,\"report_count\":1,\"report_blocks\":[{{\"source_ssrc\":2222,\"highest_seq_no\":9,\"fraction_lost\":{fraction},\"ia_jitter\":{jitter},\"packets_lost\":{lost},\"lsr\":0,\"dlsr\":0}}] }}"
            )
        };
        e.hep_datagram(T + 1_000, &hep(kind::RTCP_JSON, rr(3, 64, 40).as_bytes(), T + 1_000));
        e.hep_datagram(
            T + 2_000,
            &hep(kind::RTCP_JSON, rr(0xFF_FFFF, 0, 10).as_bytes(), T + 2_000),
        );
        let q = br#"{"CORRELATION_ID":"rtcp-1@192.0.2.1","MOS":4.1,"SSRC":2222,"TOTAL_PK":100,"EXPECTED_PK":102,"PACKET_LOSS":2,"TYPE":"PERIODIC"}"#;
        e.hep_datagram(T + 3_000, &hep(kind::QUALITY_JSON, q, T + 3_000));
        e.hep_datagram(T + 4_000, &hep(kind::QUALITY_JSON, b"{\"MOS\": [", T + 4_000));
        let mut other = hep(kind::RTCP_JSON, rr(1, 1, 1).as_bytes(), T + 5_000);
        let at = other.windows(6).position(|w| w == b"rtcp-1").unwrap();
        other[at..at + 6].copy_from_slice(b"rtcp-9");
        e.hep_datagram(T + 5_000, &other);
        let call = finished_call(&mut e);
        let r = &call.agent_reports;
        assert_eq!(r.len(), 2, "{r:?}");
        let rtcp = &r[0];
        assert_eq!(rtcp.kind, AgentReportKind::Rtcp);
        assert_eq!((rtcp.ssrc, rtcp.source_ssrc, rtcp.reports), (Some(1111), Some(2222), 2));
        assert_eq!(rtcp.max_fraction_lost_percent, Some(25.0));
        assert_eq!(rtcp.cumulative_lost, Some(-1), "the last report's, 24-bit signed");
        assert_eq!(rtcp.max_jitter_units, Some(40));
        assert_eq!((rtcp.first_ns, rtcp.last_ns), (T + 1_000, T + 2_000));
        assert_eq!((rtcp.src_port, rtcp.dst_port), (30_001, 40_001));
        let quality = &r[1];
        assert_eq!(quality.kind, AgentReportKind::Quality);
        assert_eq!((quality.mos, quality.min_mos), (Some(4.1), Some(4.1)));
        assert_eq!(
            (quality.packets, quality.expected, quality.lost),
            (Some(100), Some(102), Some(2))
        );
        assert_eq!(e.counters.hep_reports, 3);
        assert_eq!(e.counters.hep_reports_uncorrelated, 1);
        assert_eq!(e.counters.anomalies.get("hep_bad_report"), Some(&1));
    }

    /// A full table refuses each report it cannot keep, counted one by one,
    /// and still sums a later block of a pair it has.
    #[test]
    fn a_full_table_counts_each_refused_block() {
        let mut e = engine_with_call();
        let block = |ssrc: u32| {
            format!(
                "{{\"source_ssrc\":{ssrc},\"fraction_lost\":0,\"packets_lost\":0,\"ia_jitter\":0}}"
            )
        };
        // 18 pairs (two beyond the table), then pair 1 again.
        let blocks: Vec<String> = (1..=18).chain([1]).map(block).collect();
        let rr = format!("{{\"ssrc\":7,\"report_blocks\":[{}]}}", blocks.join(","));
        e.hep_datagram(T + 1_000, &hep(kind::RTCP_JSON, rr.as_bytes(), T + 1_000));
        let q = br#"{"MOS":7.5,"SSRC":1}"#;
        e.hep_datagram(T + 2_000, &hep(kind::QUALITY_JSON, q, T + 2_000));
        assert_eq!(e.counters.anomalies.get("hep_report_table_full"), Some(&3));
        assert_eq!(e.counters.hep_reports, 17);
        let call = finished_call(&mut e);
        assert_eq!(call.agent_reports.len(), MAX_AGENT_REPORTS);
        assert_eq!(call.agent_reports[0].reports, 2);
    }
}
