//! The console against the attacker review of round three
//! (docs/hostile-input.md): a client holding connections, a refused
//! client keeping its connection, framing, and a call padded to outgrow
//! the answer's budget.

use crate::common;
use crate::server;

use calliper_testkit::probe::of_type;
use common::hostile::{self, call_setup, Pcap, CALLEE, CALLER, SEC, T0};
use server::{analyze, sample_db, temp, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::time::Duration;

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    // SAFETY: a socket of our own, bound and connected by address structs
    // built here; its descriptor is handed to TcpStream, which owns it.
    #[allow(unsafe_code)]
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let addr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(ip) },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let src = addr(from, 0);
        assert_eq!(libc::bind(fd, &src as *const _ as *const libc::sockaddr, len), 0);
        let dst = addr([127, 0, 0, 1], to.port());
        assert_eq!(libc::connect(fd, &dst as *const _ as *const libc::sockaddr, len), 0);
        TcpStream::from_raw_fd(fd)
    }
}

/// Whether the server closed `s` (a read ends) within two seconds.
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
}

#[test]
fn one_client_holding_connections_does_not_lock_out_others() {
    let s = Server::sample("hold.db");
    // 300 idle connections from one address: past 32 they are closed at once.
    let mut held: Vec<TcpStream> = (0..300).map(|_| connect_from([127, 0, 0, 2], s.addr)).collect();
    assert!(closed(held.last_mut().unwrap()), "the 300th connection was kept");
    // Another client is served meanwhile.
    let r = server::try_request(s.addr, "GET", "/api/calls", &[], b"").expect("locked out");
    assert_eq!(r.status, 200);
    let metrics = s.get("/metrics", &[]).text();
    let refused =
        server::metric(&metrics, "calliper_console_connections_refused_total{why=\"per_client\"}");
    assert!(refused >= 268.0, "{metrics}");
    drop(held);
}

#[test]
fn a_refused_client_loses_its_connection() {
    let db = sample_db("refused.db");
    let token = "a-token-long-enough-for-the-console";
    let s = Server::start(&db, "127.0.0.1:0", &[], &[("CALLIPER_TOKEN", token)]);
    let mut c = connect_from([127, 0, 0, 3], s.addr);
    // Keep-alive asked; no token given.
    c.write_all(b"GET /api/calls HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut head = [0u8; 64];
    let n = c.read(&mut head).unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 401"));
    assert!(closed(&mut c), "the connection stayed open after the 401");
    let ok = s.get("/api/calls", &[("Authorization", &format!("Bearer {token}"))]);
    assert_eq!(ok.status, 200);
}

#[test]
fn frames_and_other_sites_fetches_are_refused() {
    let s = Server::sample("frames.db");
    let frame = |site: &str, dest: &str| {
        s.get(
            "/api/calls/1/audio",
            &[("Sec-Fetch-Site", site), ("Sec-Fetch-Mode", "navigate"), ("Sec-Fetch-Dest", dest)],
        )
        .status
    };
    assert_eq!(frame("cross-site", "iframe"), 403);
    assert_eq!(frame("same-origin", "iframe"), 403);
    assert_eq!(frame("cross-site", "embed"), 403);
    // A top-level navigation from elsewhere (a link) is the console's own page.
    let page = s.get(
        "/",
        &[
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Mode", "navigate"),
            ("Sec-Fetch-Dest", "document"),
        ],
    );
    assert_eq!(page.status, 200);
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert!(page.header("content-security-policy").unwrap().contains("frame-ancestors 'none'"));
}

/// An answered call followed by `infos` INFOs of `body` bytes each of `pad`.
fn padded_call(infos: u32, body: usize, pad: char) -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "padded", "");
    let text = pad.to_string().repeat(body);
    for n in 0..infos {
        let cseq = format!("{} INFO", n + 2);
        let extra = format!("Content-Type: text/plain\r\nX-Pad: {text}\r\n");
        let m = hostile::sip("INFO sip:bob@10.0.0.2 SIP/2.0", "padded", &cseq, true, &extra);
        p.udp(T0 + SEC + i64::from(n) * SEC / 100, CALLER, CALLEE, &m);
    }
    p
}

#[test]
fn a_call_padded_past_the_answer_budget_is_truncated_not_an_error() {
    // 4 900 INFOs (within the 5 000 messages a detail holds) of 16 KiB
    // each as stored: about 78 MiB, over the 64 MiB an answer may take.
    // Padded with a control character, each byte is a 6-byte escape in the
    // answer: the budget counts the answer as sent.
    for (pad, name) in [('x', "padded"), ('\u{1}', "padded-escaped")] {
        let pcap = padded_call(4900, 15_000, pad).save(name);
        let db = temp(&format!("{name}.db"));
        let _ = std::fs::remove_file(&db);
        analyze(&pcap, &db);
        std::fs::remove_file(&pcap).ok();
        let s = Server::on(&db);
        let r = s.get("/api/calls/1", &[]);
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        assert!(r.body.len() < 65 << 20, "{name}: a {} byte answer", r.body.len());
        let call = r.json();
        let truncated = call["truncated"].as_array().unwrap();
        assert!(truncated.iter().any(|t| t == "messages"), "{name}: {truncated:?}");
        assert!(!truncated.iter().any(|t| t == "alerts"), "{name}: padding hid the alerts");
        let shown = call["messages"].as_array().unwrap().len();
        assert!((500..4902).contains(&shown), "{name}: {shown} messages");
    }
}

/// Streams without a call that carry a call's SSRC in its time are listed
/// with the call (issue 37 item 15): exactly those the run's own JSON
/// lines show, both ways.
#[test]
fn a_call_lists_the_streams_without_a_call_that_share_its_ssrcs() {
    let pcap = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/heplify__rtp_rtcp_sip_ipv4_udp.pcap");
    let db = temp("related.db");
    let _ = std::fs::remove_file(&db);
    let lines = common::calliper_jsonl(&pcap, &["--db", db.to_str().unwrap()]);
    let orphans: Vec<&serde_json::Value> = of_type(&lines, "stream").collect();
    let s = Server::on(&db);
    let calls = s.get("/api/calls", &[]).json()["calls"].as_array().unwrap().clone();
    let mut linked = 0;
    for c in &calls {
        let d = s.get(&format!("/api/calls/{}", c["id"]), &[]).json();
        let ssrcs: Vec<i64> =
            d["streams"].as_array().unwrap().iter().map(|s| s["ssrc"].as_i64().unwrap()).collect();
        let (from, to) =
            (d["invite_ns"].as_i64().unwrap() - 64 * SEC, d["end_ns"].as_i64().unwrap() + 64 * SEC);
        let key = |s: &serde_json::Value| {
            (s["ssrc"].as_i64(), s["first_ns"].as_i64(), s["src_port"].as_i64())
        };
        let mut want: Vec<_> = orphans
            .iter()
            .filter(|o| ssrcs.contains(&o["ssrc"].as_i64().unwrap()))
            .filter(|o| (from..=to).contains(&o["first_ns"].as_i64().unwrap()))
            .map(|o| key(o))
            .collect();
        let mut got: Vec<_> = d["related_streams"].as_array().unwrap().iter().map(key).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "call {}", c["call_id"]);
        linked += got.len();
    }
    assert!(linked >= 2, "the capture's two relayed legs are linked ({linked})");
    // The text report links the same streams, after the calls.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--progress", "never"])
        .arg(&pcap)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let noted = text
        .lines()
        .filter(|l| {
            l.starts_with("stream without call")
                && l.contains("its SSRC is in call 12013223@200.57.7.195")
        })
        .count();
    assert_eq!(noted, linked, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let last_call = lines.iter().rposition(|l| l.starts_with("call ")).unwrap();
    let first_orphan = text.lines().position(|l| l.starts_with("stream without call")).unwrap();
    assert!(first_orphan > last_call, "orphans come after the calls");
}
