//! Link, IP, tunnel, UDP and TCP decoding, the short path for plain UDP
//! over IPv4, and the skim at fixed offsets: the first byte picks the link
//! type.
#![no_main]
use libfuzzer_sys::fuzz_target;

const LINKS: [u16; 8] = [1, 101, 113, 276, 0, 108, 12, 228];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, frame)) = data.split_first() else {
        return;
    };
    let link = LINKS[pick as usize % LINKS.len()];
    // The short path returns what the decoder does, or nothing.
    if let Some(plain) = calliper_wire::decode_plain(link, frame) {
        assert_eq!(calliper_wire::decode(link, frame), Ok(plain));
    }
    // The skim reads what the short path does, or nothing.
    if let Some(s) = calliper_wire::skim_udp4(link, frame) {
        let plain = calliper_wire::decode_plain(link, frame).expect("skimmed but not plain");
        let v4 = |a: std::net::IpAddr| match a {
            std::net::IpAddr::V4(v) => u32::from(v),
            std::net::IpAddr::V6(_) => panic!("skimmed an IPv6 frame"),
        };
        assert_eq!((v4(plain.src), v4(plain.dst), plain.vlan), (s.src, s.dst, None));
        assert_eq!(plain.udp(), Some((s.sport, s.dport, s.payload)));
    }
    if let Ok(f) = calliper_wire::decode(link, frame) {
        // Payloads must lie inside the frame.
        let within = |p: &[u8]| {
            let (a, b) = (frame.as_ptr() as usize, p.as_ptr() as usize);
            p.is_empty() || (b >= a && b + p.len() <= a + frame.len())
        };
        match f.transport {
            calliper_wire::Transport::Udp { payload, .. }
            | calliper_wire::Transport::Tcp { payload, .. }
            | calliper_wire::Transport::Fragment { payload, .. }
            | calliper_wire::Transport::Other { payload, .. } => assert!(within(payload)),
        }
    }
});
