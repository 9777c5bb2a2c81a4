//! RTP header, RTCP compound packets, DTMF events and stream statistics.
#![no_main]
use calliper_rtp::{ClockRate, Packet, StreamStats};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = calliper_wire::rtp::RtpHeader::parse(data) {
        assert!(h.header_len as usize + h.payload_len as usize + h.padding as usize <= data.len());
    }
    for r in calliper_wire::rtcp::reports(data).flatten() {
        for b in r.blocks() {
            assert!((-(1 << 23)..(1 << 23)).contains(&b.cumulative_lost));
        }
    }
    // Treat the input as a run of 8-byte (seq, timestamp, arrival step) records.
    let mut stats: Option<StreamStats> = None;
    let mut dtmf = calliper_rtp::dtmf::DtmfTracker::default();
    let mut t = 0i64;
    for c in data.chunks_exact(8) {
        t += u16::from_be_bytes([c[6], c[7]]) as i64 * 100_000;
        let p = Packet {
            arrival_ns: t,
            seq: u16::from_be_bytes([c[0], c[1]]),
            timestamp: u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            payload_type: 8,
            marker: false,
            bytes: 172,
        };
        match stats.as_mut() {
            None => stats = Some(StreamStats::new(&p, ClockRate::Hz(8000))),
            Some(s) => s.update(&p, ClockRate::Hz(8000)),
        }
        dtmf.update(t, p.timestamp, c, 8000);
    }
    if let Some(s) = stats {
        assert!(s.seq.lost() <= s.seq.expected());
    }
});
