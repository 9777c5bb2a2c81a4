//! The documented memory bound holds: with small caps, input built to fill
//! every table to its cap with the largest entries input can make (long
//! header texts, the most SDP media and rtpmaps per call, DTMF events in
//! every stream, fragments, TCP and SCTP buffers, records not yet taken),
//! the engine's peak heap stays under `Config::memory_bound` — and every
//! cap was really reached.

use crate::common::hostile::{self, ipv4, rtp, sctp, tcp, Pcap, SEC, T0};
use crate::tracking::{LIVE, PEAK};
use calliper_capture::CaptureReader;
use calliper_engine::defrag::DefragConfig;
use calliper_engine::tcp::TcpConfig;
use calliper_engine::{Config, Engine};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;

fn config() -> Config {
    Config {
        max_calls: 200,
        max_unanswered: 200,
        max_streams: 1500,
        max_media: 2000,
        max_candidates: 1500,
        call_idle_timeout_ns: 3600 * SEC,
        stream_idle_timeout_ns: 3600 * SEC,
        unanswered_timeout_ns: 3600 * SEC,
        defrag: DefragConfig { max_datagrams: 64, max_bytes: 1 << 20, ..DefragConfig::default() },
        tcp: TcpConfig { max_flows: 16, max_bytes: 4 << 20, ..TcpConfig::default() },
        ..Config::default()
    }
}

/// A host of call `i`: 10.(i / 250).(i % 250).x
fn host(i: u32, x: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, (i / 250) as u8, (i % 250) as u8, x)
}

/// An SDP with 16 media sections of 32 payload types each, at `ip`, ports from `base`.
fn big_sdp(ip: Ipv4Addr, base: u16) -> String {
    let mut s = format!("v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n");
    for m in 0..16u16 {
        s += &format!("m=audio {} RTP/AVP", base + 2 * m);
        for pt in 96..128 {
            s += &format!(" {pt}");
        }
        s += "\r\n";
        // Names differ per section and SDP, so each is a description of its own.
        for pt in 96..127 {
            s += &format!("a=rtpmap:{pt} n{base}-{m}-{pt}/8000\r\n");
        }
        s += "a=rtpmap:127 telephone-event/8000\r\n";
    }
    s
}

fn sip(start: &str, call: u32, cseq: u32, sdp: &str) -> Vec<u8> {
    let long = "x".repeat(1000);
    format!(
        "{start}\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK{cseq}\r\nFrom: \"{long}\" <sip:{long}@a>;tag=t{long}\r\nTo: \"{long}\" <sip:{long}@b>{to_tag}\r\nCall-ID: {call:0>500}\r\nCSeq: {cseq} INVITE\r\nUser-Agent: {long}\r\nServer: {long}\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len(),
        // The initial INVITE has no To tag; its answer and re-INVITEs do.
        to_tag = if start.starts_with("INVITE") && cseq == 1 { "" } else { ";tag=u" },
    )
    .into_bytes()
}

fn hostile_everything() -> Pcap {
    let mut p = Pcap::default();
    let mut t = T0;
    let mut tick = || {
        t += 1_000;
        t
    };
    // Calls beyond the cap (evicted into records), each with 4 SDPs of 16
    // media: 64 descriptions and 128 media addresses per call.
    for i in 0..300u32 {
        let (a, b) = ((host(i, 1), 5060), (host(i, 2), 5060));
        p.udp(tick(), a, b, &sip("INVITE sip:b@b SIP/2.0", i, 1, &big_sdp(a.0, 20_000)));
        p.udp(tick(), b, a, &sip("SIP/2.0 200 OK", i, 1, &big_sdp(b.0, 30_000)));
        for k in 2..5 {
            let base = 20_000 + 100 * k as u16;
            p.udp(tick(), a, b, &sip("INVITE sip:b@b SIP/2.0", i, k, &big_sdp(a.0, base)));
        }
    }
    // Streams beyond the cap, each with the most DTMF events: 8 senders
    // (SSRCs) to one media address of each of the 200 calls left.
    for i in 100..300u32 {
        for ssrc in 0..8u32 {
            for ev in 0..70u16 {
                let payload = [1, 0x80 | 10, 0, 160];
                let body = rtp(127, ev, ev as u32 * 800, ssrc, &payload);
                // From the callee's address: a source the call does not
                // name would be refused as foreign media.
                p.udp(tick(), (host(i, 2), 7000), (host(i, 1), 20_000), &body);
            }
        }
    }
    // Fragments: first pieces of 16 KB datagrams, beyond the datagram and byte caps.
    let piece = vec![0u8; 16_000];
    for id in 0..100u16 {
        p.ipv4(tick(), &ipv4(hostile::CALLER.0, hostile::CALLEE.0, 17, id, 0x2000, &piece));
    }
    // TCP: more flows than the cap, each a SIP message that never ends and
    // out-of-order segments behind a gap.
    let chunk = vec![b'a'; 60_000];
    for f in 0..24u16 {
        let (src, dst) = (host(f as u32, 7), host(f as u32, 8));
        let head = b"INVITE sip:b@b SIP/2.0\r\nCall-ID: tcp\r\nContent-Length: 1000000\r\n\r\n";
        p.ipv4(tick(), &ipv4(src, dst, 6, 0, 0, &tcp(40_000 + f, 5060, 0, 0x02, b"")));
        p.ipv4(tick(), &ipv4(src, dst, 6, 0, 0, &tcp(40_000 + f, 5060, 1, 0x18, head)));
        let mut seq = 1 + head.len() as u32;
        for _ in 0..8 {
            p.ipv4(tick(), &ipv4(src, dst, 6, 0, 0, &tcp(40_000 + f, 5060, seq, 0x18, &chunk)));
            seq += chunk.len() as u32;
        }
        for k in 0..70u32 {
            let s = seq + 1000 + k * 10;
            p.ipv4(tick(), &ipv4(src, dst, 6, 0, 0, &tcp(40_000 + f, 5060, s, 0x18, b"z")));
        }
    }
    // SCTP: never-finished messages beyond the byte cap.
    let big = vec![b's'; 60_000];
    for i in 0..400u16 {
        let seg = sctp(10_000 + i, 2, 1, &big);
        p.ipv4(tick(), &ipv4(hostile::CALLER.0, hostile::CALLEE.0, 132, i, 0, &seg));
    }
    // Records are taken only once everything has been seen.
    p.udp(T0 + SEC, hostile::CALLER, hostile::CALLEE, b"OPTIONS sip:x SIP/2.0\r\n\r\n");
    p
}

pub(crate) fn peak_heap_stays_under_the_documented_bound() {
    let capture = hostile_everything();
    let cfg = config();
    let bound = cfg.memory_bound();
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let mut engine = Engine::new(cfg);
    let mut reader = CaptureReader::new(&capture.bytes[..]).unwrap();
    // The records of evicted calls pile up undrained until the end.
    while let Some(pk) = reader.next_packet().unwrap() {
        engine.packet(pk.ts_ns, pk.link_type, pk.data);
    }
    let peak = (PEAK.load(Ordering::Relaxed) - base) as usize;
    let c = engine.counters().clone();
    let records = engine.drain().count();
    eprintln!("peak heap {peak} bytes, bound {} bytes: {:?}", bound.total(), bound.parts);
    // Every cap was reached.
    assert!(c.calls_evicted > 0, "calls: {c:?}");
    assert!(c.media_refused > 0, "media: {c:?}");
    assert!(c.streams_refused > 0, "streams: {c:?}");
    assert!(c.defrag.evicted > 0, "fragments: {:?}", c.defrag);
    assert!(c.tcp_reassembly.flows_evicted > 0, "tcp: {:?}", c.tcp_reassembly);
    assert!(c.sctp.partial_expired > 0, "sctp: {:?}", c.sctp);
    assert!(c.anomalies.contains_key("sip_field_truncated"), "{:?}", c.anomalies);
    assert!(c.anomalies.contains_key("sdp_too_many_media_per_call"), "{:?}", c.anomalies);
    assert!(records >= 100, "{records} records");
    assert!(
        peak <= bound.total(),
        "peak heap {peak} over the bound {}: {:?}",
        bound.total(),
        bound.parts
    );
}
