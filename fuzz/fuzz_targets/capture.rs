//! The capture reader on arbitrary files: errors, never panics or overreads.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut r) = calliper_capture::CaptureReader::new(data) {
        let mut n = 0;
        while let Ok(Some(p)) = r.next_packet() {
            assert!(p.data.len() <= calliper_capture::MAX_RECORD);
            n += 1;
            if n > 100_000 {
                break;
            }
        }
    }
});
