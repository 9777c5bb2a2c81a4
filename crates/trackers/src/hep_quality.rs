//! Per-stream quality reports sent as HEP3 type 34 (JSON, as Homer reads
//! RTP statistics), with the MOS × 100 in chunk 0x20: one per stream per
//! reporting interval (`PERIODIC`, from the interval reports) and one per
//! stream when its call's record is final (`HANGUP`). Each carries the
//! Call-ID as correlation id; interval reports name their call by serial,
//! so the Call-IDs of open calls are kept by serial (bounded by
//! [`MAX_CALLS`]; intervals of a call not kept are counted, not sent).

use calliper_model::event::{StreamId, StreamInterval};
use calliper_model::{CallRecord, StreamDirection, StreamRecord};
use calliper_wire::hep::{self, Hep};
use serde_json::json;
use std::collections::HashMap;

/// Open calls whose Call-IDs are kept for their interval reports (about
/// 100 bytes each, up to 600 with the longest Call-ID the engine keeps).
pub const MAX_CALLS: usize = 200_000;

/// Call-IDs of open calls by serial.
#[derive(Default)]
pub(crate) struct CallIds {
    ids: HashMap<u64, Box<str>>,
}

impl CallIds {
    /// A call started: kept unless [`MAX_CALLS`] are (its intervals are
    /// then not reported).
    pub(crate) fn started(&mut self, serial: u64, call_id: &str) {
        if self.ids.len() < MAX_CALLS {
            self.ids.insert(serial, call_id.into());
        }
    }

    /// A call's record is final: its intervals are all reported.
    pub(crate) fn ended(&mut self, serial: u64) {
        self.ids.remove(&serial);
    }

    pub(crate) fn get(&self, serial: u64) -> Option<&str> {
        self.ids.get(&serial).map(|s| &**s)
    }
}

/// One report's figures.
struct Report<'a> {
    kind: &'static str,
    call_id: &'a str,
    stream: StreamId,
    ts_ns: i64,
    codec: &'a str,
    direction: Option<StreamDirection>,
    mos: Option<f64>,
    r_factor: Option<f64>,
    jitter_ms: f64,
    max_jitter_ms: Option<f64>,
    lost: i64,
    packets: u64,
    expected: u64,
}

/// The message reporting one interval of a call's stream.
pub(crate) fn periodic(i: &StreamInterval<'_>, call_id: &str, f: &HepFields) -> Option<Vec<u8>> {
    Report {
        kind: "PERIODIC",
        call_id,
        stream: i.stream,
        ts_ns: i.reported_ns,
        codec: i.codec,
        direction: None,
        mos: i.mos,
        r_factor: i.r_factor,
        jitter_ms: i.figures.jitter_ms,
        max_jitter_ms: None,
        lost: i.figures.lost,
        packets: u64::from(i.figures.packets),
        expected: u64::from(i.figures.expected),
    }
    .emit(f)
}

/// The message reporting a stream of a call whose record is final.
pub(crate) fn hangup(c: &CallRecord, s: &StreamRecord, f: &HepFields) -> Option<Vec<u8>> {
    Report {
        kind: "HANGUP",
        call_id: &c.call_id,
        stream: StreamId {
            src: s.src,
            src_port: s.src_port,
            dst: s.dst,
            dst_port: s.dst_port,
            ssrc: s.ssrc,
        },
        ts_ns: s.last_ns,
        codec: &s.codec,
        direction: Some(s.direction),
        mos: s.mos,
        r_factor: s.r_factor,
        jitter_ms: s.mean_jitter_ms,
        max_jitter_ms: Some(s.max_jitter_ms),
        lost: s.lost as i64,
        packets: s.packets,
        expected: s.expected,
    }
    .emit(f)
}

/// What every message carries from the options.
pub(crate) struct HepFields<'a> {
    pub(crate) capture_id: u32,
    pub(crate) auth_key: Option<&'a [u8]>,
}

impl Report<'_> {
    /// The HEP message, or None when too long for HEP's 16-bit length.
    fn emit(&self, f: &HepFields) -> Option<Vec<u8>> {
        let s = &self.stream;
        let mut body = json!({
            "CORRELATION_ID": self.call_id,
            "RTP_SIP_CALL_ID": self.call_id,
            "TYPE": self.kind,
            "REPORT_NAME": format!("{}:{} -> {}:{} ssrc {:#010x}", s.src, s.src_port, s.dst, s.dst_port, s.ssrc),
            "SRC_IP": s.src.to_string(),
            "SRC_PORT": s.src_port,
            "DST_IP": s.dst.to_string(),
            "DST_PORT": s.dst_port,
            "SSRC": s.ssrc,
            "CODEC_NAME": self.codec,
            "MOS": self.mos,
            "RFACTOR": self.r_factor,
            "JITTER": self.jitter_ms,
            "PACKET_LOSS": self.lost,
            "TOTAL_PK": self.packets,
            "EXPECTED_PK": self.expected,
        });
        if let Some(m) = self.max_jitter_ms {
            body["MAX_JITTER"] = m.into();
        }
        // Homer's DIR: 0 from the caller, 1 from the callee.
        match self.direction {
            Some(StreamDirection::CallerToCallee) => body["DIR"] = 0.into(),
            Some(StreamDirection::CalleeToCaller) => body["DIR"] = 1.into(),
            _ => {}
        }
        let payload = serde_json::to_vec(&body).ok()?;
        let (src, dst) = ((s.src, s.src_port), (s.dst, s.dst_port));
        Hep {
            capture_id: f.capture_id,
            auth_key: f.auth_key,
            correlation_id: Some(self.call_id.as_bytes()),
            mos: self.mos.map(|m| (m * 100.0).round().clamp(0.0, 500.0) as u16),
            ..Hep::udp(hep::kind::QUALITY_JSON, src, dst, self.ts_ns, &payload)
        }
        .emit()
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of open calls stops at its cap (the call beyond it is not
    /// kept, so its intervals are counted, not sent) and frees at the end.
    #[test]
    fn call_ids_are_bounded() {
        let mut c = CallIds::default();
        for serial in 0..MAX_CALLS as u64 {
            c.started(serial, "x");
        }
        c.started(u64::MAX, "beyond");
        assert_eq!(c.get(u64::MAX), None);
        assert_eq!(c.get(7), Some("x"));
        c.ended(7);
        assert_eq!(c.get(7), None);
        c.started(u64::MAX, "now");
        assert_eq!(c.get(u64::MAX), Some("now"));
    }
}
