//! Zero heap allocations per packet in steady state: after warm-up, analysing
//! an RTP packet of a known stream, or in-dialog SIP, allocates nothing. Counted with a global
//! allocator wrapper over a generated capture.

use calliper_capture::CaptureReader;
use calliper_engine::{Config, Engine};
use calliper_wire::Transport;
use std::sync::atomic::Ordering;

use crate::common;
use crate::tracking::ALLOCATIONS;

/// 400 calls arriving within about a second, holding ~30 s: a steady state.
fn steady_capture() -> Vec<u8> {
    common::generated_capture(
        "alloc",
        "--calls 400 --concurrent 20000 --hold-mean 30 --loss 1 --seed 3",
    )
}

pub(crate) fn rtp_packets_allocate_nothing_after_warm_up() {
    let data = steady_capture();

    let mut engine = Engine::new(Config::default());
    let mut reader = CaptureReader::new(&data[..]).unwrap();
    let (mut start, mut rtp, mut rtp_allocating, mut other, mut other_allocs) =
        (None, 0u64, 0u64, 0u64, 0u64);
    let mut first_offender = None;
    while let Some(p) = reader.next_packet().unwrap() {
        let t0 = *start.get_or_insert(p.ts_ns);
        let is_rtp = matches!(
            calliper_wire::decode(p.link_type, p.data).map(|f| f.transport),
            Ok(Transport::Udp { dport, .. }) if dport != 5060
        );
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        engine.packet(p.ts_ns, p.link_type, p.data);
        let allocs = ALLOCATIONS.load(Ordering::Relaxed) - before;
        // A packet that ends a call (by time) builds its record: not steady state.
        let emitted = engine.drain().count() > 0;
        if p.ts_ns - t0 < 5_000_000_000 || emitted {
            continue;
        }
        if is_rtp {
            rtp += 1;
            if allocs > 0 {
                rtp_allocating += 1;
                first_offender.get_or_insert((p.ts_ns - t0, allocs));
            }
        } else {
            other += 1;
            other_allocs += allocs;
        }
    }
    eprintln!(
        "steady state: {rtp} RTP packets, {rtp_allocating} allocating; {other} other packets, {other_allocs} allocations"
    );
    assert!(rtp > 500_000, "only {rtp} steady-state RTP packets");
    assert_eq!(rtp_allocating, 0, "first at {first_offender:?} (ns since start, allocations)");
    // In-dialog SIP (BYE, its 200) of established calls allocates nothing either.
    assert!(other > 0);
    assert_eq!(other_allocs, 0);
}

/// The same through the batched path the CLI uses (`Engine::packets`, 64
/// packets per call): a steady-state batch allocates nothing either.
pub(crate) fn batches_allocate_nothing_after_warm_up() {
    let data = steady_capture();
    let mut engine = Engine::new(Config::default());
    let mut reader = CaptureReader::new(&data[..]).unwrap();
    let (mut start, mut packets, mut allocating) = (None, 0u64, 0u64);
    loop {
        let batch = reader.next_batch(64).unwrap();
        if batch.is_empty() {
            break;
        }
        let mut raw = [calliper_engine::RawPacket::default(); 64];
        for (r, p) in raw.iter_mut().zip(batch.iter()) {
            *r = p.into();
        }
        let n = batch.len();
        let first = raw[0].ts_ns;
        let t0 = *start.get_or_insert(first);
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        engine.packets(&raw[..n]);
        let allocs = ALLOCATIONS.load(Ordering::Relaxed) - before;
        let emitted = engine.drain().count() > 0;
        if first - t0 < 5_000_000_000 || emitted {
            continue;
        }
        packets += n as u64;
        allocating += (allocs > 0) as u64;
    }
    eprintln!("steady state: {packets} packets in batches, {allocating} batches allocating");
    assert!(packets > 500_000, "only {packets} steady-state packets");
    assert_eq!(allocating, 0);
}
