//! SIP parsing, datagram and stream framing, and header values (name-addr
//! against the grammar's reference reading).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for stream in [false, true] {
        if let Ok(m) = calliper_sip::parse(data, stream) {
            assert!(m.len <= data.len());
            assert!(m.body.len() <= data.len());
            for v in [m.from, m.to, m.contact].into_iter().flatten() {
                same_as_reference(v);
            }
        }
    }
    let _ = calliper_sip::looks_like_sip(data);
    if let Ok(v) = std::str::from_utf8(data) {
        same_as_reference(v);
    }
});

/// The display name and URI agree with the grammar's reference reading.
fn same_as_reference(v: &str) {
    let na = calliper_sip::NameAddr::parse(v);
    let (display, uri) = calliper_sip::reference::display_and_uri(v);
    assert_eq!((na.display, na.uri), (display.as_deref(), uri.as_str()), "{v:?}");
}
