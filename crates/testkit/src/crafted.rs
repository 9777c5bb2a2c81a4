//! Captures crafted from protocol headers (`wire::emit`): a pcap written
//! in memory, the frames and SIP messages tests build calls from, and the
//! capture that reproduced each hostile-input failure (see
//! docs/hostile-input.md), so the regression tests feed the real thing
//! rather than hand-edited bytes. (The command's tests know it as
//! `common::hostile`.)

use calliper_capture::pcap_out::{file_header, record_header, Resolution};
use calliper_wire::emit;
use std::net::Ipv4Addr;

/// A pcap (Ethernet, ns timestamps) being written in memory.
pub struct Pcap {
    pub bytes: Vec<u8>,
    pub packets: u64,
}

impl Default for Pcap {
    fn default() -> Self {
        let bytes = file_header(1, 262_144, Resolution::Nanos).to_vec();
        Pcap { bytes, packets: 0 }
    }
}

impl Pcap {
    /// Appends an Ethernet frame carrying an IPv4 packet.
    pub fn ipv4(&mut self, ts_ns: i64, ip: &[u8]) {
        self.ethernet(ts_ns, emit::ethertype::IPV4, ip);
    }

    /// Appends an Ethernet frame of `ethertype` carrying `ip`.
    fn ethernet(&mut self, ts_ns: i64, ethertype: u16, ip: &[u8]) {
        let f = emit::ethernet(&[], ethertype, ip);
        let len = f.len() as u32;
        self.bytes.extend_from_slice(&record_header(ts_ns, len, len, Resolution::Nanos));
        self.bytes.extend_from_slice(&f);
        self.packets += 1;
    }

    /// Appends a UDP datagram (a fresh IP ID each, as a sender's stack
    /// gives, so equal datagrams are not taken for a capture's copies).
    pub fn udp(&mut self, ts_ns: i64, src: Endpoint, dst: Endpoint, payload: &[u8]) {
        let id = self.packets as u16;
        let ip = ipv4(src.0, dst.0, 17, id, 0, &udp(src.1, dst.1, payload));
        self.ipv4(ts_ns, &ip);
    }

    /// Writes the capture to a file in the system's temporary directory.
    pub fn save(&self, name: &str) -> std::path::PathBuf {
        let p = crate::captures::scratch(&format!("{name}.pcap"));
        std::fs::write(&p, &self.bytes).unwrap();
        p
    }
}

/// An IPv4 address and port.
pub type Endpoint = (Ipv4Addr, u16);

/// A UDP header and payload.
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    emit::udp(sport, dport, payload)
}

/// An IPv4 header (`frag`: flags and offset field) and payload.
pub fn ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    id: u16,
    frag: u16,
    payload: &[u8],
) -> Vec<u8> {
    emit::Ipv4 { id, frag, ..emit::Ipv4::new(src, dst, proto) }.emit(payload)
}

/// A TCP header (data offset 5, window 65535) and payload.
pub fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    emit::tcp(sport, dport, seq, flags, payload)
}

/// An RTP packet.
pub fn rtp(pt: u8, seq: u16, ts: u32, ssrc: u32, payload: &[u8]) -> Vec<u8> {
    emit::rtp(pt, seq, ts, ssrc, payload)
}

pub const CALLER: Endpoint = (Ipv4Addr::new(10, 0, 0, 1), 5060);
pub const CALLEE: Endpoint = (Ipv4Addr::new(10, 0, 0, 2), 5060);
pub const CALLER_RTP: Endpoint = (Ipv4Addr::new(10, 0, 0, 1), 40000);
pub const CALLEE_RTP: Endpoint = (Ipv4Addr::new(10, 0, 0, 2), 30000);
pub const SEC: i64 = 1_000_000_000;
/// 2023-11-14, a plausible capture time.
pub const T0: i64 = 1_700_000_000 * SEC;

/// An INVITE (from [`CALLER`]) or its 200 OK (from [`CALLEE`]) with an SDP
/// offering `media` (extra `a=` lines) at the sender's RTP address.
pub fn invite_or_ok(call_id: &str, ok: bool, media: &str) -> Vec<u8> {
    let (start, rtp) = if ok {
        ("SIP/2.0 200 OK".to_string(), CALLEE_RTP)
    } else {
        ("INVITE sip:bob@10.0.0.2 SIP/2.0".to_string(), CALLER_RTP)
    };
    let sdp = format!(
        "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0 96 101\r\n{media}",
        ip = rtp.0,
        port = rtp.1
    );
    format!(
        "{start}\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1\r\nFrom: <sip:alice@10.0.0.1>;tag=a\r\nTo: <sip:bob@10.0.0.2>{to_tag}\r\nCall-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len(),
        to_tag = if ok { ";tag=b" } else { "" },
    )
    .into_bytes()
}

/// A call set up with `media` in both SDPs: INVITE then 200 OK.
pub fn call_setup(p: &mut Pcap, call_id: &str, media: &str) {
    p.udp(T0, CALLER, CALLEE, &invite_or_ok(call_id, false, media));
    p.udp(T0 + SEC / 10, CALLEE, CALLER, &invite_or_ok(call_id, true, media));
}

/// `a=rtpmap:96 abé/8000` (a non-ASCII encoding name), then RTP of type 96.
pub fn non_ascii_rtpmap() -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "non-ascii", "a=rtpmap:96 ab\u{e9}/8000\r\n");
    for i in 0..5u16 {
        let t = T0 + SEC + i as i64 * 20_000_000;
        p.udp(t, CALLER_RTP, CALLEE_RTP, &rtp(96, i, i as u32 * 160, 7, &[0; 160]));
    }
    p
}

/// A UDP datagram inside `levels` of fragmented IPv4 datagrams, each level
/// an IP-in-IP packet fragmented in two: every level's second piece comes
/// first, at the top level, then the outermost first piece; each
/// reassembled datagram holds the next level's first piece.
pub fn nested_fragments(levels: u16) -> Pcap {
    let (a, b) = (CALLER.0, CALLEE.0);
    // Innermost: a SIP-port datagram.
    let mut payload = udp(5060, 5060, b"OPTIONS sip:x SIP/2.0\r\n\r\n");
    let mut proto = 17;
    let mut seconds = Vec::new();
    for level in (0..levels).rev() {
        let id = level.wrapping_add(1);
        // This level's datagram: its first 8 payload bytes and the rest.
        let (head, tail) = payload.split_at(8.min(payload.len()));
        let first = ipv4(a, b, proto, id, 0x2000, head);
        seconds.push(ipv4(a, b, proto, id, 1, tail));
        payload = first;
        proto = 4;
    }
    let mut p = Pcap::default();
    let mut t = T0;
    for s in &seconds {
        p.ipv4(t, s);
        t += 10_000;
    }
    // The outermost first piece goes as it is: it is a fragment itself.
    p.ipv4(t, &payload);
    p
}

/// `n` datagrams to the SIP port, each with a method token never seen before.
pub fn invented_methods(n: u32) -> Pcap {
    let mut p = Pcap::default();
    for i in 0..n {
        let m = format!(
            "X{i:07}Y sip:bob@10.0.0.2 SIP/2.0\r\nCall-ID: m{i}\r\nCSeq: 1 X{i:07}Y\r\nContent-Length: 0\r\n\r\n"
        );
        p.udp(T0 + i as i64 * 10_000, CALLER, CALLEE, m.as_bytes());
    }
    p
}

/// An SCTP packet with one DATA chunk (`flags`: B = 2, E = 1).
pub fn sctp(sport: u16, flags: u8, tsn: u32, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&5060u16.to_be_bytes());
    t.extend_from_slice(&[0; 8]);
    t.extend_from_slice(&[0, flags]);
    t.extend_from_slice(&(16 + payload.len() as u16).to_be_bytes());
    t.extend_from_slice(&tsn.to_be_bytes());
    t.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

/// `associations` SCTP associations each starting a 60 000-byte message
/// that never ends, then one packet `later_s` seconds on.
pub fn sctp_partial_flood(associations: u16, later_s: i64) -> Pcap {
    let mut p = Pcap::default();
    let piece = vec![b'x'; 60_000];
    for i in 0..associations {
        let seg = sctp(10_000 + i, 2, 1, &piece);
        p.ipv4(T0 + i as i64 * 1000, &ipv4(CALLER.0, CALLEE.0, 132, i, 0, &seg));
    }
    let seg = sctp(9_999, 3, 1, b"");
    p.ipv4(T0 + later_s * SEC, &ipv4(CALLER.0, CALLEE.0, 132, 0, 0, &seg));
    p
}

/// One call whose caller sends one DTMF digit with a 16 kHz event clock:
/// `duration` units of 1/16 000 s.
pub fn dtmf_16k(duration: u16) -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "dtmf-16k", "a=rtpmap:101 telephone-event/16000\r\n");
    for (i, end) in [(0u16, false), (1, false), (2, true)] {
        let d = if end { duration } else { duration / 2 };
        let ev = [5, if end { 0x80 } else { 0 } | 10, (d >> 8) as u8, d as u8];
        let t = T0 + SEC + i as i64 * 50_000_000;
        p.udp(t, CALLER_RTP, CALLEE_RTP, &rtp(101, i, 16_000, 9, &ev));
    }
    p
}

/// One call whose caller's media address sends `ssrcs` streams (SSRC churn).
pub fn ssrc_churn(ssrcs: u32) -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "churn", "");
    for s in 0..ssrcs {
        for i in 0..3u16 {
            let t = T0 + SEC + (s as i64 * 3 + i as i64) * 1_000_000;
            p.udp(t, CALLER_RTP, CALLEE_RTP, &rtp(0, i, i as u32 * 160, s, &[0; 160]));
        }
    }
    p
}

/// `calls` calls whose RTP starts a second before their INVITE and 200 OK
/// (each call its own addresses), interleaved with as many streams that no
/// call describes: the shard owning a call's stream adopts it when the SDP
/// has come, dated by the packet that does it, while other shards' media
/// passes by (a shard's clock must not run ahead of its own packets).
pub fn media_before_its_sdp(calls: u8) -> Pcap {
    let mut p = Pcap::default();
    let sip = |call: u8, ok: bool, rtp: Endpoint| {
        let sdp = format!(
            "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n",
            ip = rtp.0,
            port = rtp.1
        );
        let start = if ok { "SIP/2.0 200 OK" } else { "INVITE sip:bob@10.4.0.1 SIP/2.0" };
        format!(
            "{start}\r\nVia: SIP/2.0/UDP 10.3.0.1:5060;branch=z9hG4bK{call}\r\nFrom: <sip:alice@10.3.0.1>;tag=a\r\nTo: <sip:bob@10.4.0.1>{tag}\r\nCall-ID: early-{call}\r\nCSeq: 1 INVITE\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
            sdp.len(),
            tag = if ok { ";tag=b" } else { "" },
        )
        .into_bytes()
    };
    for step in 0..150u16 {
        let t = T0 + step as i64 * 20_000_000;
        for c in 0..calls {
            let at = t + c as i64 * 100_000;
            let (a, b) =
                ((Ipv4Addr::new(10, 3, 0, c), 20_000), (Ipv4Addr::new(10, 4, 0, c), 30_000));
            if step == 50 {
                let (sa, sb) = ((a.0, 5060), (b.0, 5060));
                p.udp(at + 10_000, sa, sb, &sip(c, false, a));
                p.udp(at + 20_000, sb, sa, &sip(c, true, b));
            }
            p.udp(at + 30_000, a, b, &rtp(0, step, step as u32 * 160, c as u32, &[0; 160]));
            let (x, y) =
                ((Ipv4Addr::new(10, 5, 0, c), 40_000), (Ipv4Addr::new(10, 6, 0, c), 40_002));
            p.udp(at + 60_000, x, y, &rtp(0, step, step as u32 * 160, 1000 + c as u32, &[0; 160]));
        }
    }
    p
}

/// `n` RTP streams without signalling, each between its own address pair
/// and `packets` long, interleaved.
pub fn orphan_streams(n: u16, packets: u16) -> Pcap {
    let mut p = Pcap::default();
    for i in 0..packets {
        for s in 0..n {
            let src = (Ipv4Addr::new(10, 1, (s >> 8) as u8, s as u8), 20_000);
            let dst = (Ipv4Addr::new(10, 2, (s >> 8) as u8, s as u8), 30_000);
            let t = T0 + i as i64 * 20_000_000 + s as i64 * 1000;
            p.udp(t, src, dst, &rtp(8, i, i as u32 * 160, s as u32, &[0; 160]));
        }
    }
    p
}

/// An IPv6 header and payload.
pub fn ipv6(src: [u8; 16], dst: [u8; 16], proto: u8, payload: &[u8]) -> Vec<u8> {
    emit::ipv6(src.into(), dst.into(), proto, payload)
}

impl Pcap {
    /// Appends an Ethernet frame carrying an IPv6 packet.
    pub fn ipv6(&mut self, ts_ns: i64, ip: &[u8]) {
        self.ethernet(ts_ns, emit::ethertype::IPV6, ip);
    }
}

/// RTP from `n` IPv6 sources in the /64 whose high half cancelled the
/// stream-key hash's constant (5899:65cc:7537:4cc3::/64), same ports and SSRC.
pub fn v6_hash_flood(n: u32) -> Pcap {
    let mut p = Pcap::default();
    let mut src = [0u8; 16];
    src[..8].copy_from_slice(&0x5899_65CC_7537_4CC3u64.to_be_bytes());
    let mut dst = [0u8; 16];
    dst[0] = 0xfd;
    dst[15] = 1;
    for i in 0..n {
        src[8..].copy_from_slice(&(i as u64).to_be_bytes());
        let body = udp(30_000, 40_000, &rtp(0, 1, 160, 0x1234, &[0; 20]));
        // 10 µs apart: sparse enough that the duplicate filter (seeded per
        // process) never overflows, so runs compare exactly.
        p.ipv6(T0 + i as i64 * 10_000, &ipv6(src, dst, 17, &body));
    }
    p
}

/// SIP over TCP: a 60 000-byte header section (under the cap) announcing a
/// body of `body` bytes, then the body one byte per segment.
pub fn tcp_slow_body(body: u32) -> Pcap {
    let mut p = Pcap::default();
    let (a, b) = (CALLER.0, CALLEE.0);
    let mut head = String::from(
        "INVITE sip:bob@10.0.0.2 SIP/2.0\r\nCall-ID: slow\r\nCSeq: 1 INVITE\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:b@x>\r\n",
    );
    for _ in 0..150 {
        head += &format!("X-Pad:{}\r\n", " ".repeat(390));
    }
    head += &format!("Content-Length: {body}\r\n\r\n");
    let mut t = T0;
    let mut seg = |p: &mut Pcap, seq: u32, flags: u8, data: &[u8]| {
        t += 10_000;
        p.ipv4(t, &ipv4(a, b, 6, seq as u16, 0, &tcp(40_000, 5060, seq, flags, data)));
    };
    seg(&mut p, 0, 0x02, b"");
    let mut seq = 1;
    for chunk in head.as_bytes().chunks(1400) {
        seg(&mut p, seq, 0x18, chunk);
        seq += chunk.len() as u32;
    }
    for _ in 0..body {
        seg(&mut p, seq, 0x18, b"v");
        seq += 1;
    }
    p
}

/// `n` RTP streams without signalling between one pair of addresses (one
/// SSRC each, three continuing packets): all on one shard.
pub fn candidates_one_pair(n: u32) -> Pcap {
    let mut p = Pcap::default();
    for s in 0..n {
        for i in 0..3u16 {
            let t = T0 + (s as i64 * 3 + i as i64) * 10_000;
            p.udp(t, CALLER_RTP, CALLEE_RTP, &rtp(8, i, i as u32 * 160, s, &[0; 20]));
        }
    }
    p
}

/// One answered call whose caller's SDP address receives from `senders`
/// different ports of the callee's address (so from every shard; a source
/// the call does not name would be refused as foreign media).
pub fn streams_per_call(senders: u32) -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "many-senders", "");
    for s in 0..senders {
        let src = (CALLEE_RTP.0, 7000 + s as u16);
        for i in 0..5u16 {
            let t = T0 + SEC + (s as i64 * 5 + i as i64) * 100_000;
            p.udp(t, src, CALLER_RTP, &rtp(0, i, i as u32 * 160, s, &[0; 20]));
        }
    }
    p
}

/// The same Call-ID used by two calls started at the same capture time
/// (the first pushed out by `--max-calls 1`), each with its own media.
pub fn call_id_reuse() -> Pcap {
    let mut p = Pcap::default();
    // Senders at the address the call's own SDP names (a source the call
    // does not name would be refused as foreign media).
    let sender = |host: u8| (Ipv4Addr::new(10, 0, 0, host), 30_000);
    let invite = |id: &str, user: &str, host: u8, port: u16| {
        let ip = Ipv4Addr::new(10, 0, 0, host);
        let sdp = format!(
            "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n"
        );
        format!(
            "INVITE sip:x@y SIP/2.0\r\nFrom: <sip:{user}@a>;tag={user}\r\nTo: <sip:b@b>\r\nCall-ID: {id}\r\nCSeq: 1 INVITE\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
            sdp.len()
        )
        .into_bytes()
    };
    // Ten RTP packets to the call's media at 10.0.0.`host`:`port`.
    let media = |p: &mut Pcap, host: u8, port: u16, ssrc: u32| {
        for i in 0..10u16 {
            let to = (Ipv4Addr::new(10, 0, 0, host), port);
            p.udp(T0, sender(host), to, &rtp(0, i, i as u32 * 160, ssrc, &[0; 20]));
        }
    };
    p.udp(T0, CALLER, CALLEE, &invite("X", "alice", 1, 20_000));
    media(&mut p, 1, 20_000, 0xA11CE);
    p.udp(T0, CALLER, CALLEE, &invite("Y", "carol", 3, 22_000));
    p.udp(T0, CALLER, CALLEE, &invite("X", "mallory", 5, 24_000));
    media(&mut p, 5, 24_000, 0xBADD);
    p.udp(T0, CALLER, CALLEE, &invite("Z", "zed", 7, 26_000));
    p
}

/// 16 calls with RTP on odd ports and RTCP receiver reports on port + 1
/// (so RTP and RTCP address pairs can hash to different shards).
pub fn rtcp_on_odd_ports() -> Pcap {
    let mut p = Pcap::default();
    for c in 0..16u8 {
        let (a, b) = (Ipv4Addr::new(10, 0, c, 1), Ipv4Addr::new(10, 1, c, 1));
        let (ap, bp) = (20_001 + 2 * c as u16, 30_001 + 2 * c as u16);
        let sdp = |ip: Ipv4Addr, port: u16| {
            format!("v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n")
        };
        // The INVITE without a To tag, as an initial INVITE is.
        let msg = |start: &str, body: String| {
            let to_tag = if start.starts_with("SIP/") { ";tag=b" } else { "" };
            format!(
                "{start}\r\nFrom: <sip:a@a>;tag=a\r\nTo: <sip:b@b>{to_tag}\r\nCall-ID: rtcp-{c}\r\nCSeq: 1 INVITE\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        };
        let t = T0 + c as i64 * 1_000_000;
        p.udp(t, (a, 5060), (b, 5060), &msg("INVITE sip:b@b SIP/2.0", sdp(a, ap)));
        p.udp(t + 50_000_000, (b, 5060), (a, 5060), &msg("SIP/2.0 200 OK", sdp(b, bp)));
        for k in 0..100u16 {
            let tt = t + 100_000_000 + k as i64 * 20_000_000;
            let ssrc = 0x5000 + c as u32;
            p.udp(tt, (b, bp), (a, ap), &rtp(0, k, k as u32 * 160, ssrc, &[0; 20]));
            if k % 25 == 24 {
                let mut rr = vec![0x81, 201, 0, 7];
                rr.extend_from_slice(&0xAAAAu32.to_be_bytes());
                for w in [ssrc, 10 << 24 | 3, 1000 + k as u32, 40, 0, 0] {
                    rr.extend_from_slice(&w.to_be_bytes());
                }
                p.udp(tt + 1_000_000, (a, ap + 1), (b, bp + 1), &rr);
            }
        }
    }
    p
}

/// Two different INVITEs whose first 64 bytes and lengths are equal, 1 ms
/// apart, with IP ID 0 (as Linux gives unconnected UDP sockets).
pub fn equal_starting_invites() -> Pcap {
    let mut p = Pcap::default();
    for (i, id) in ["call-aaaa", "call-bbbb"].into_iter().enumerate() {
        let m = format!(
            "INVITE sip:bob@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK-same\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:b@y>\r\nCall-ID: {id}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
        );
        let ip = ipv4(CALLER.0, CALLEE.0, 17, 0, 0x4000, &udp(5060, 5060, m.as_bytes()));
        p.ipv4(T0 + i as i64 * 1_000_000, &ip);
    }
    p
}

/// A call refreshed by `refreshes` re-INVITEs with unchanged SDP (session
/// timers), then moved to new media addresses, which then carry RTP.
pub fn session_refresh_then_move(refreshes: u32) -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "refresh", "");
    let moved = (Ipv4Addr::new(10, 0, 0, 1), 41_000);
    for k in 0..=refreshes {
        let (addr, last) = if k == refreshes { (moved, true) } else { (CALLER_RTP, false) };
        let sdp = format!(
            "v=0\r\no=- 1 {k} IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n",
            ip = addr.0,
            port = addr.1
        );
        let m = format!(
            "INVITE sip:bob@10.0.0.2 SIP/2.0\r\nFrom: <sip:alice@10.0.0.1>;tag=a\r\nTo: <sip:bob@10.0.0.2>;tag=b\r\nCall-ID: refresh\r\nCSeq: {} INVITE\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
            k + 2,
            sdp.len()
        );
        p.udp(T0 + SEC + k as i64 * SEC, CALLER, CALLEE, m.as_bytes());
        if last {
            for i in 0..50u16 {
                let t = T0 + (refreshes as i64 + 2) * SEC + i as i64 * 20_000_000;
                p.udp(t, CALLEE_RTP, moved, &rtp(0, i, i as u32 * 160, 77, &[0; 20]));
            }
        }
    }
    p
}

/// A call whose Call-ID and reason phrase carry terminal escape sequences
/// and a bare CR.
pub fn control_characters() -> Pcap {
    let mut p = Pcap::default();
    let id = "evil\u{1b}[2J\u{1b}[31m\rcall legit";
    let m = format!(
        "INVITE sip:b@b SIP/2.0\r\nFrom: <sip:a@a>;tag=a\r\nTo: <sip:b@b>\r\nCall-ID: {id}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
    );
    p.udp(T0, CALLER, CALLEE, m.as_bytes());
    let r = format!(
        "SIP/2.0 486 Busy\u{1b}[0m\rHere\r\nFrom: <sip:a@a>;tag=a\r\nTo: <sip:b@b>;tag=b\r\nCall-ID: {id}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
    );
    p.udp(T0 + SEC, CALLEE, CALLER, r.as_bytes());
    p
}

/// A SIP message without body of `call_id` with CSeq `cseq` (From tag `a`,
/// To tag `b` when `to_tag`), from alice@example.com to bob@example.net;
/// `extra` is more header lines, each ending in CRLF (User-Agent
/// `handmade/1` unless `extra` has one).
pub fn sip(start: &str, call_id: &str, cseq: &str, to_tag: bool, extra: &str) -> Vec<u8> {
    let ua = if extra.contains("User-Agent:") { "" } else { "User-Agent: handmade/1\r\n" };
    format!(
        "{start}\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{call_id}{n}\r\n\
         From: <sip:alice@example.com>;tag=a\r\nTo: <sip:bob@example.net>{tag}\r\n\
         Call-ID: {call_id}\r\nCSeq: {cseq}\r\n{ua}{extra}Content-Length: 0\r\n\r\n",
        n = cseq.len(),
        tag = if to_tag { ";tag=b" } else { "" },
    )
    .into_bytes()
}
