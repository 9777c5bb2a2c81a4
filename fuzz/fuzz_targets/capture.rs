//! The capture reader on arbitrary files: errors, never panics or overreads;
//! reading in batches gives exactly the packets and error of reading one by one.
#![no_main]
use libfuzzer_sys::fuzz_target;

type Seen = (Vec<(i64, u16, Vec<u8>)>, Option<String>);

fn one_by_one(data: &[u8]) -> Option<Seen> {
    let mut r = calliper_capture::CaptureReader::new(data).ok()?;
    let mut v = Vec::new();
    loop {
        match r.next_packet() {
            Ok(Some(p)) => {
                assert!(p.data.len() <= calliper_capture::MAX_RECORD);
                v.push((p.ts_ns, p.link_type, p.data.to_vec()));
                if v.len() > 100_000 {
                    return Some((v, None));
                }
            }
            Ok(None) => return Some((v, None)),
            Err(e) => return Some((v, Some(e.to_string()))),
        }
    }
}

fn batched(data: &[u8], max: usize) -> Option<Seen> {
    let mut r = calliper_capture::CaptureReader::new(data).ok()?;
    let mut v = Vec::new();
    loop {
        match r.next_batch(max) {
            Ok(b) if b.is_empty() => return Some((v, None)),
            Ok(b) => {
                v.extend(b.iter().map(|p| (p.ts_ns, p.link_type, p.data.to_vec())));
                if v.len() > 100_000 {
                    v.truncate(100_001);
                    return Some((v, None));
                }
            }
            Err(e) => return Some((v, Some(e.to_string()))),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let want = one_by_one(data);
    if want.as_ref().is_some_and(|w| w.0.len() <= 100_000) {
        assert_eq!(batched(data, 5), want);
    }
});
