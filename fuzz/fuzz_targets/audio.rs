//! Hostile RTP into the audio timeline of each codec (Opus: libopus): packets of any
//! timing, timestamp, payload type and size never panic, and the timeline
//! stays within its bound (a minute here). Each record: arrival step (2 bytes), sequence
//! (2), timestamp (4), marker and payload type (1), length (1), payload.
#![no_main]
use calliper_audio::timeline::{Codec, Timeline};
use calliper_fuzz::records;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (codec, pt) in [(Codec::Pcmu, 0), (Codec::Pcma, 8), (Codec::G722, 9), (Codec::Opus, 111)] {
        let mut t = Timeline::new(codec, pt, Some(101)).limit_seconds(60);
        let mut now = 0i64;
        for (h, payload) in records(data, 10, |h| usize::from(h[9])) {
            let step = u16::from_be_bytes([h[0], h[1]]) as i64;
            let seq = u16::from_be_bytes([h[2], h[3]]);
            let ts = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
            let (marker, pt) = (h[8] & 0x80 != 0, h[8] & 0x7F);
            now += step * 100_000;
            t.push(now, seq, ts, marker, pt, payload);
        }
        let (samples, rate, _) = t.finish();
        assert!(samples.len() as u64 <= 60 * rate as u64);
    }
});
