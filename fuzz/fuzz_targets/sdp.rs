//! SDP parsing.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let sdp = calliper_sip::sdp::parse(data);
    assert!(sdp.media.len() <= calliper_sip::sdp::MAX_MEDIA);
});
