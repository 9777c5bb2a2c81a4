//! SIP parsing, datagram and stream framing, and header values.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for stream in [false, true] {
        if let Ok(m) = calliper_sip::parse(data, stream) {
            assert!(m.len <= data.len());
            assert!(m.body.len() <= data.len());
            for v in [m.from, m.to, m.contact].into_iter().flatten() {
                let _ = calliper_sip::NameAddr::parse(v);
            }
        }
    }
    let _ = calliper_sip::looks_like_sip(data);
});
