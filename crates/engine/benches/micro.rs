//! Micro-benchmarks of the per-packet path: decode, SIP and SDP parsing,
//! stream update, and the engine on RTP of 50 000 established calls (media
//! and stream lookups at a realistic table size), plus call setup through the
//! call table. Run: `cargo bench -p calliper-engine --bench micro`.

use calliper_engine::{Config, Engine, RawPacket};
use calliper_rtp::{ClockRate, Packet, StreamStats};
use calliper_wire::emit;
use divan::{black_box, Bencher};
use std::net::Ipv4Addr;

fn main() {
    divan::main();
}

/// Raw IPv4/UDP packet (LINKTYPE_RAW).
fn udp(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16, payload: &[u8]) -> Vec<u8> {
    emit::Ipv4 { id: 1, frag: 0x4000, ..emit::Ipv4::new(src, dst, calliper_wire::ipproto::UDP) }
        .emit(&emit::udp(sport, dport, payload))
}

fn ethernet(ip: &[u8]) -> Vec<u8> {
    emit::ethernet(&[], emit::ethertype::IPV4, ip)
}

/// G.729 RTP: 12-byte header, 20 bytes of payload.
fn rtp(seq: u16, ts: u32, ssrc: u32) -> Vec<u8> {
    emit::rtp(18, seq, ts, ssrc, &[0x55; 20])
}

fn caller(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0A00_0000 + i)
}
fn callee(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0B00_0000 + i)
}

fn sdp(ip: Ipv4Addr, port: u16) -> String {
    format!("v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 18 101\r\na=rtpmap:18 G729/8000\r\na=rtpmap:101 telephone-event/8000\r\na=ptime:20\r\n")
}

fn sip(first: &str, i: u32, cseq: &str, to_tag: bool, body: &str) -> Vec<u8> {
    format!(
        "{first}\r\nVia: SIP/2.0/UDP {a}:5060;branch=z9hG4bK{i}\r\nFrom: \"User {i}\" <sip:u{i}@{a}>;tag=a{i}\r\nTo: <sip:d{i}@{b}>{t}\r\nCall-ID: bench-{i}@calliper\r\nCSeq: {cseq}\r\nUser-Agent: bench\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        body.len(),
        a = caller(i),
        b = callee(i),
        t = if to_tag { format!(";tag=b{i}") } else { String::new() }
    )
    .into_bytes()
}

fn invite(i: u32) -> Vec<u8> {
    sip(
        &format!("INVITE sip:d{i}@{} SIP/2.0", callee(i)),
        i,
        "1 INVITE",
        false,
        &sdp(caller(i), 20_000),
    )
}

fn ok(i: u32) -> Vec<u8> {
    sip("SIP/2.0 200 OK", i, "1 INVITE", true, &sdp(callee(i), 30_000))
}

#[divan::bench(sample_size = 1000)]
fn decode_ethernet_ipv4_udp(b: Bencher) {
    let f = ethernet(&udp(caller(1), 20_000, callee(1), 30_000, &rtp(1, 160, 7)));
    b.bench(|| calliper_wire::decode(1, black_box(&f)).is_ok());
}

#[divan::bench(sample_size = 1000)]
fn sip_parse_invite_with_sdp(b: Bencher) {
    let m = invite(42);
    b.bench(|| calliper_sip::parse(black_box(&m), false).map(|m| m.len).ok());
}

#[divan::bench(sample_size = 1000)]
fn sdp_parse(b: Bencher) {
    let s = sdp(caller(1), 20_000);
    b.bench(|| calliper_sip::sdp::parse(black_box(s.as_bytes())).media.len());
}

#[divan::bench(sample_size = 1000)]
fn stream_update(b: Bencher) {
    let first =
        Packet { arrival_ns: 0, seq: 0, timestamp: 0, payload_type: 18, marker: false, bytes: 32 };
    let mut s = StreamStats::new(&first, ClockRate::Hz(8000));
    let mut n: u32 = 0;
    b.bench_local(|| {
        n = n.wrapping_add(1);
        let p = Packet {
            arrival_ns: n as i64 * 20_000_000 + (n % 7) as i64 * 100_000,
            seq: n as u16,
            timestamp: n.wrapping_mul(160),
            payload_type: 18,
            marker: false,
            bytes: 32,
        };
        s.update(black_box(&p), ClockRate::Hz(8000));
    });
}

/// An engine holding `calls` answered calls and the RTP frames of both
/// directions of every call.
fn established(calls: u32) -> (Engine, Vec<Vec<u8>>) {
    let mut e = Engine::new(Config::default());
    let mut t = 1_000_000_000;
    for i in 0..calls {
        t += 1000;
        e.packet(t, 101, &udp(caller(i), 5060, callee(i), 5060, &invite(i)));
        e.packet(t + 10, 101, &udp(callee(i), 5060, caller(i), 5060, &ok(i)));
    }
    let mut frames = Vec::with_capacity(2 * calls as usize);
    for i in 0..calls {
        frames.push(udp(caller(i), 20_000, callee(i), 30_000, &rtp(0, 0, i)));
        frames.push(udp(callee(i), 30_000, caller(i), 20_000, &rtp(0, 0, !i)));
    }
    (e, frames)
}

/// One RTP packet through the whole engine (decode, duplicate filter, stream
/// lookup among 100 000 streams, statistics), streams visited round-robin
/// as on a loaded link: every lookup is a cache miss.
#[divan::bench(args = [1_000, 50_000], sample_size = 10_000)]
fn engine_rtp_packet(b: Bencher, calls: u32) {
    let (mut e, mut frames) = established(calls);
    let mut t: i64 = 2_000_000_000;
    let mut i = 0usize;
    let mut round: u16 = 0;
    b.bench_local(|| {
        let f = &mut frames[i];
        // Next sequence number and timestamp for this stream.
        let seq = u16::from_be_bytes([f[30], f[31]]).wrapping_add(1);
        f[30..32].copy_from_slice(&seq.to_be_bytes());
        f[32..36].copy_from_slice(&(seq as u32 * 160).to_be_bytes());
        t += 400;
        e.packet(t, 101, black_box(f));
        i += 1;
        if i == frames.len() {
            i = 0;
            round = round.wrapping_add(1);
        }
    });
}

/// The same, 64 packets at a time through [`Engine::packets`], which
/// prefetches the next packets' index slots and streams: the time is per
/// batch of 64, so divide (divan's items/s shows the packet rate).
#[divan::bench(args = [1_000, 50_000], sample_size = 200)]
fn engine_rtp_packets_64(b: Bencher, calls: u32) {
    let (mut e, mut frames) = established(calls);
    let mut t: i64 = 2_000_000_000;
    let mut i = 0usize;
    b.counter(divan::counter::ItemsCount::new(64usize)).bench_local(|| {
        let start = i;
        let n = frames.len();
        for k in 0..64 {
            let f = &mut frames[(start + k) % n];
            let seq = u16::from_be_bytes([f[30], f[31]]).wrapping_add(1);
            f[30..32].copy_from_slice(&seq.to_be_bytes());
            f[32..36].copy_from_slice(&(seq as u32 * 160).to_be_bytes());
        }
        let mut raw = [RawPacket::default(); 64];
        for (k, r) in raw.iter_mut().enumerate() {
            t += 400;
            *r = RawPacket {
                ts_ns: t,
                link_type: 101,
                data: &frames[(start + k) % n],
                ..RawPacket::default()
            };
        }
        e.packets(black_box(&raw));
        i = (start + 64) % n;
    });
}

/// New calls through the call table: INVITE and 200 OK, both with SDP
/// (20 000 calls per iteration).
#[divan::bench(sample_size = 1, sample_count = 20)]
fn call_setup_invite_and_200(b: Bencher) {
    let packets: Vec<(Vec<u8>, Vec<u8>)> = (0..20_000u32)
        .map(|i| {
            (
                udp(caller(i), 5060, callee(i), 5060, &invite(i)),
                udp(callee(i), 5060, caller(i), 5060, &ok(i)),
            )
        })
        .collect();
    b.with_inputs(|| Engine::new(Config::default())).bench_local_values(|mut e| {
        let mut t = 1_000_000_000;
        for (inv, ok) in &packets {
            t += 1000;
            e.packet(t, 101, inv);
            e.packet(t + 10, 101, ok);
        }
        e
    });
}
