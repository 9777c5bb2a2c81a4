//! rtpengine's ng control protocol into an edge's core: bencode, every
//! command, SDP rewriting, and media against the calls the requests made.
//! Each record: kind (1 byte: even = control, odd = media), time step (1),
//! length (2), then the datagram; a media record's first two bytes pick the
//! edge port and the next two the source port.
#![no_main]
use calliper_fuzz::{be16, records};
use calliper_relay::ng::{bencode, sdp, Control, ControlConfig, Source};
use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;

fuzz_target!(|data: &[u8]| {
    let _ = bencode::parse(data);
    if let Ok(text) = std::str::from_utf8(data) {
        if sdp::audio(text).is_ok() {
            let out = sdp::rewrite(text, "192.0.2.1".parse().unwrap(), &[40000, 40002], false);
            // What the edge writes names its address on every audio stream.
            for a in sdp::audio(&out).expect("a rewritten body reads back") {
                assert!(a.rejected || a.rtp.ip().to_string() == "192.0.2.1", "{out}");
            }
        }
    }
    let mut c = Control::new(ControlConfig {
        ports: (40000, 40031),
        max_calls: 4,
        peers: vec!["127.0.0.1".parse().unwrap()],
        ..ControlConfig::default()
    });
    let mut now = 0i64;
    let mut bound = 0usize;
    for (h, d) in records(data, 4, be16(2)) {
        let kind = h[0];
        now += i64::from(h[1]) * 100_000_000;
        if kind % 2 == 0 {
            let proxy = SocketAddr::from(([127, 0, 0, 1], 5060));
            let reply = c.handle(now, proxy, d, &mut |p| {
                bound += 1;
                p % 8 != 6
            });
            if let Some(r) = reply {
                let space = r.iter().position(|&b| b == b' ').expect("cookie then reply");
                bencode::parse(&r[space + 1..]).expect("replies are bencode");
            }
        } else if d.len() >= 4 {
            let port = 40000 + u16::from_be_bytes([d[0], d[1]]) % 40;
            let src = SocketAddr::from(([127, 0, 0, 1], u16::from_be_bytes([d[2], d[3]])));
            let src = if kind % 4 == 1 { Source::Net(src) } else { Source::Peer(src) };
            let _ = c.forward(now, port, src, d);
        }
        c.expire(now);
        let _ = c.take_released();
        assert!(c.calls() <= 4);
    }
});
