//! The ring on `lo`, and what is refused before any system call.

use super::socket::interface_filter;
use super::*;

#[test]
fn filter_accepts_listed_interfaces_only() {
    let p = interface_filter(&[3, 7]);
    // ld; jeq 3 → accept; jeq 7 → accept; ret 0; ret all.
    assert_eq!(p.len(), 5);
    assert_eq!((p[1].k, p[1].jt as usize), (3, 2));
    assert_eq!((p[2].k, p[2].jt as usize), (7, 1));
    assert_eq!(p[1 + p[1].jt as usize + 1].k, u32::MAX);
    assert_eq!(p[2 + p[2].jt as usize + 1].k, u32::MAX);
    assert_eq!(p[3].k, 0);
}

#[test]
fn bad_names_and_sizes_are_refused_clearly() {
    for name in ["", "../etc", "no-such-if0", "a/b", "x".repeat(16).as_str()] {
        let e = interface_index(name).unwrap_err();
        assert!(matches!(e, LiveError::NoInterface { .. }), "{name}: {e}");
        assert!(e.to_string().contains("there are:"), "{e}");
    }
    for (size, count) in [(3000, 4), (1 << 20, 0), (1 << 28, 1), (1 << 27, 1 << 10)] {
        let cfg = LiveConfig {
            interfaces: vec!["lo".into()],
            block_size: size,
            block_count: count,
            ..LiveConfig::default()
        };
        assert!(matches!(LiveCapture::open(&cfg), Err(LiveError::Config(_))), "{size} {count}");
    }
}

/// Datagrams sent to 127.0.0.1 come out of the ring once each, whole,
/// in order, with the current time. Needs CAP_NET_RAW; skipped only when
/// `CALLIPER_SKIP` names `live`.
#[test]
fn loopback_datagrams_arrive_once_in_order() {
    let cfg = LiveConfig {
        interfaces: vec!["lo".into()],
        block_size: 1 << 16,
        block_count: 4,
        block_timeout_ms: 5,
        ..LiveConfig::default()
    };
    let mut ring = match LiveCapture::open(&cfg) {
        Err(LiveError::NotPermitted) if calliper_testkit::skip_asked("live") => return,
        r => r.expect("open a ring on lo (needs CAP_NET_RAW; CALLIPER_SKIP=live skips)"),
    };
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = rx.local_addr().unwrap().port();
    let start =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as i64;
    for i in 0..300u32 {
        tx.send_to(&i.to_be_bytes(), ("127.0.0.1", port)).unwrap();
    }
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while seen.len() < 300 && std::time::Instant::now() < deadline {
        ring.next_block(50, |pkts| {
            for p in pkts {
                // Ethernet (14) + IPv4 (20) + UDP (8) + 4 bytes.
                let d = p.data;
                if d.len() == 46 && u16::from_be_bytes([d[36], d[37]]) == port {
                    assert_eq!(p.link_type, linktype::ETHERNET);
                    assert!(p.ts_ns >= start - 1_000_000_000, "time {} < {start}", p.ts_ns);
                    seen.push(u32::from_be_bytes([d[42], d[43], d[44], d[45]]));
                }
            }
        })
        .unwrap();
    }
    assert_eq!(seen, (0..300).collect::<Vec<_>>());
    let s = ring.stats().unwrap();
    assert!(s.received >= 300, "{s:?}");
    assert_eq!(ring.malformed(), 0);
}
