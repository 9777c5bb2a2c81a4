//! Probe state per concurrent call: the heap the engine holds (bytes
//! reserved, spare capacity included), measured with a global allocator that
//! tracks live bytes, while 5 000 generated G.729
//! calls are up at once. A budget, so state growth is caught here rather than
//! at 50 000 calls in a benchmark (where BENCHMARKS.md reports RSS).

use calliper_capture::CaptureReader;
use calliper_engine::{Config, Engine};
use std::sync::atomic::Ordering;

use crate::common;
use crate::tracking::LIVE;

pub(crate) fn state_per_concurrent_call_stays_within_budget() {
    let data = common::generated_capture(
        "memory",
        "--calls 20000 --concurrent 5000 --warm-start --duration 2 --codecs g729:1 --seed 9",
    );

    // Fixed tables sized at start (the duplicate filter's 4 MiB) are not per call.
    let mut engine = Engine::new(Config::default());
    let before = LIVE.load(Ordering::Relaxed);
    let mut reader = CaptureReader::new(&data[..]).unwrap();
    while let Some(p) = reader.next_packet().unwrap() {
        engine.packet(p.ts_ns, p.link_type, p.data);
        engine.drain().for_each(drop);
    }
    let calls = engine.active_calls();
    let per_call = (LIVE.load(Ordering::Relaxed) - before) as f64 / calls as f64;
    eprintln!("{calls} calls up: {per_call:.0} heap bytes per call");
    assert!(calls >= 5_000, "{calls} calls up");
    // 3 565 bytes before rtpmap names went inline and per-call lists lost
    // their doubling headroom; 3 424 after; 3 250 with the 8-byte stream
    // index (and fixed tables no longer counted). Reserved, not resident: the
    // slabs' and tables' spare capacity counts here (at 5 043 calls the call
    // slab has room for 8 192); RSS is in BENCHMARKS.md. 3 562 with the
    // jitter-buffer simulation and RTCP round trip in every stream (128 B
    // each, two streams per call).
    // 3 627 with RFC 6076's disconnect delay in calls (8 B) and the RTCP XR
    // pointer in streams (16 B with padding). 3 731 with the transactions
    // responses are matched to and the call's hops (64 B: hostile input,
    // round three; BENCHMARKS.md).
    assert!(per_call < 3_750.0, "{per_call:.0} bytes per call");
}
