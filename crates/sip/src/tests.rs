//! Parser tests with real messages (from the SIPp captures in testdata) and
//! hostile variants.

use super::sdp::{self, Direction};
use super::*;

/// The first INVITE of `sipp_calls.pcap`, byte for byte.
const SIPP_INVITE: &[u8] = b"INVITE sip:1000@127.0.2.1:5060 SIP/2.0\r\n\
Via: SIP/2.0/UDP 127.0.1.1:5061;branch=z9hG4bK-9472-1-0\r\n\
From: sipp <sip:sipp@127.0.1.1:5061>;tag=9472SIPpTag091\r\n\
To: 1000 <sip:1000@127.0.2.1:5060>\r\n\
Call-ID: 1-9472@127.0.1.1\r\n\
CSeq: 1 INVITE\r\n\
Contact: sip:sipp@127.0.1.1:5061\r\n\
Max-Forwards: 70\r\n\
Subject: Performance Test\r\n\
Content-Type: application/sdp\r\n\
Content-Length:   189\r\n\
\r\n\
v=0\r\n\
o=user1 53655765 2353687637 IN IP4 127.0.1.1\r\n\
s=-\r\n\
c=IN IP4 127.0.1.1\r\n\
t=0 0\r\n\
m=audio 30000 RTP/AVP 8 101\r\n\
a=rtpmap:8 PCMA/8000\r\n\
a=rtpmap:101 telephone-event/8000\r\n\
a=fmtp:101 0-11,16\r\n";

#[test]
fn real_invite() {
    let m = parse(SIPP_INVITE, false).unwrap();
    assert_eq!(
        m.start,
        Some(StartLine::Request { method: "INVITE", uri: "sip:1000@127.0.2.1:5060" })
    );
    assert_eq!(m.call_id, Some("1-9472@127.0.1.1"));
    assert_eq!((m.cseq, m.cseq_method), (Some(1), Some("INVITE")));
    assert_eq!(m.content_length, Some(189));
    assert_eq!(m.body.len(), 189);
    assert_eq!(m.len, SIPP_INVITE.len());
    assert!(m.has_sdp());
    let from = NameAddr::parse(m.from.unwrap());
    assert_eq!(from.display, Some("sipp"));
    assert_eq!(from.user, Some("sipp"));
    assert_eq!(from.tag, Some("9472SIPpTag091"));
    let to = NameAddr::parse(m.to.unwrap());
    assert_eq!(
        (to.uri, to.user, to.host, to.tag),
        ("sip:1000@127.0.2.1:5060", Some("1000"), "127.0.2.1:5060", None)
    );
    let s = sdp::parse(m.body);
    assert_eq!(s.media.len(), 1);
    let a = &s.media[0];
    assert_eq!((a.kind, a.port, a.addr), ("audio", 30000, Some("127.0.1.1".parse().unwrap())));
    assert_eq!(a.formats, vec![8, 101]);
    assert_eq!(a.rtpmap(101).unwrap().encoding, "telephone-event");
    assert_eq!(a.rtpmap(8).unwrap().clock_rate, 8000);
    assert_eq!(a.direction, Direction::SendRecv);
}

#[test]
fn response_and_compact_forms() {
    let msg = b"SIP/2.0 180 Ringing\r\nv: SIP/2.0/UDP h;branch=z9\r\nf: <sip:a@h>;tag=1\r\nt: \"Bob B\" <sip:b@h>;tag=2\r\ni: abc\r\nCSeq: 7 INVITE\r\nl: 0\r\n\r\n";
    let m = parse(msg, false).unwrap();
    assert_eq!(m.status(), Some(180));
    assert_eq!(m.method(), Some("INVITE"));
    assert_eq!(m.call_id, Some("abc"));
    let to = NameAddr::parse(m.to.unwrap());
    assert_eq!((to.display, to.tag), (Some("Bob B"), Some("2")));
    assert!(m.body.is_empty());
}

#[test]
fn two_messages_in_one_stream_buffer() {
    let one = b"BYE sip:a@h SIP/2.0\r\nCall-ID: x\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n";
    let mut buf = one.to_vec();
    buf.extend_from_slice(SIPP_INVITE);
    let m = parse(&buf, true).unwrap();
    assert_eq!(m.len, one.len());
    let m2 = parse(&buf[m.len..], true).unwrap();
    assert_eq!(m2.call_id, Some("1-9472@127.0.1.1"));
    // Cut inside the second body: a stream says incomplete, and how long
    // the whole message is.
    assert_eq!(
        parse(&buf[m.len..buf.len() - 10], true),
        Err(SipError::Incomplete { needed: Some(buf.len() - m.len) })
    );
    // A datagram takes the short body and flags it.
    let d = parse(&buf[m.len..buf.len() - 10], false).unwrap();
    assert!(d.body_truncated);
}

#[test]
fn hostile_inputs_are_errors_not_panics() {
    assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false), Err(SipError::NotSip));
    assert_eq!(parse(b"SIP/2.0 999 Nope\r\n\r\n", false), Err(SipError::NotSip));
    let mut many = b"OPTIONS sip:a SIP/2.0\r\n".to_vec();
    for i in 0..1000 {
        many.extend(format!("X-H{i}: v\r\n").bytes());
    }
    many.extend(b"\r\n");
    assert_eq!(parse(&many, false), Err(SipError::TooManyHeaders));
    // A datagram with an impossible Content-Length is still read (flagged);
    // a stream cannot be framed without one.
    let big_cl = b"INVITE sip:a SIP/2.0\r\nContent-Length: 99999999999\r\n\r\nv=0";
    let m = parse(big_cl, false).unwrap();
    assert!(m.bad_content_length);
    assert_eq!(m.body, b"v=0");
    assert_eq!(parse(big_cl, true), Err(SipError::BadContentLength));
    let neg_cl = b"INVITE sip:a SIP/2.0\r\nContent-Length: -5\r\n\r\n";
    assert!(parse(neg_cl, false).unwrap().bad_content_length);
    // Every prefix of a real message parses or errs.
    for n in 0..SIPP_INVITE.len() {
        let _ = parse(&SIPP_INVITE[..n], false);
        let _ = parse(&SIPP_INVITE[..n], true);
        let _ = sdp::parse(&SIPP_INVITE[..n]);
    }
}

#[test]
fn detection() {
    assert!(looks_like_sip(SIPP_INVITE));
    assert!(looks_like_sip(b"\r\nSIP/2.0 200 OK\r\n"));
    assert!(!looks_like_sip(b"INVITE me to dinner\r\n"));
    assert!(!looks_like_sip(&[0x80, 0x08, 0, 1]));
}

#[test]
fn sdp_hold_and_ipv6_and_media_level_connection() {
    let body = b"v=0\r\no=- 1 2 IN IP6 2001:db8::1\r\ns=-\r\nc=IN IP6 2001:db8::1\r\nt=0 0\r\na=sendonly\r\n\
m=audio 4000 RTP/AVP 0 18\r\na=ptime:20\r\n\
m=video 5000 RTP/AVP 96\r\nc=IN IP4 192.0.2.7/127\r\na=rtpmap:96 H264/90000\r\na=inactive\r\n\
m=audio 0 RTP/AVP 0\r\nbogus line\r\n";
    let s = sdp::parse(body);
    assert_eq!(s.media.len(), 3);
    assert_eq!(s.media[0].addr, Some("2001:db8::1".parse().unwrap()));
    assert_eq!(s.media[0].direction, Direction::SendOnly);
    assert_eq!(s.media[0].ptime, Some(20));
    assert_eq!(s.media[1].addr, Some("192.0.2.7".parse().unwrap()));
    assert_eq!(s.media[1].direction, Direction::Inactive);
    assert_eq!(s.media[2].port, 0);
    assert_eq!(s.bad_lines, 1);
}

/// SRTP: a secure profile or SDES keys (`a=crypto`) at media level.
#[test]
fn sdp_srtp_profiles_and_crypto_lines() {
    let body = b"v=0\r\nc=IN IP4 192.0.2.1\r\n\
m=audio 4000 RTP/AVP 0\r\n\
m=audio 4002 RTP/SAVP 0\r\n\
m=audio 4004 UDP/TLS/RTP/SAVPF 111\r\n\
m=audio 4006 RTP/AVP 0\r\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\n";
    let s = sdp::parse(body);
    let encrypted: Vec<bool> = s.media.iter().map(|m| m.encrypted()).collect();
    assert_eq!(encrypted, [false, true, true, true]);
}

#[test]
fn header_end_is_found_in_one_bounded_pass() {
    // Bare LF, CRLF and mixed blank lines all end the headers.
    for msg in [
        "OPTIONS sip:a SIP/2.0\nCall-ID: x\nCSeq: 1 OPTIONS\n\n",
        "OPTIONS sip:a SIP/2.0\r\nCall-ID: x\r\nCSeq: 1 OPTIONS\r\n\r\n",
        "OPTIONS sip:a SIP/2.0\r\nCall-ID: x\r\nCSeq: 1 OPTIONS\n\r\n",
    ] {
        let m = parse(msg.as_bytes(), true).unwrap();
        assert_eq!((m.call_id, m.len), (Some("x"), msg.len()), "{msg:?}");
    }
    // A header section beyond the cap is refused even if a blank line follows.
    let mut big = b"OPTIONS sip:a SIP/2.0\r\n".to_vec();
    while big.len() <= MAX_MESSAGE {
        big.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    big.extend_from_slice(b"Call-ID: x\r\nCSeq: 1 OPTIONS\r\n\r\n");
    assert_eq!(parse(&big, true), Err(SipError::NotSip));
}

/// A display name cannot stand in for the URI (RFC 3261 §25.1): quoted
/// text is text, whatever it looks like; the reading agrees with the
/// grammar's reference reading.
#[test]
fn display_names() {
    let cases: &[(&str, Option<&str>, &str, Option<&str>)] = &[
        (
            "\"<sip:boss@corp.example>\" <sip:attacker@evil.example>;tag=1",
            Some("<sip:boss@corp.example>"),
            "sip:attacker@evil.example",
            Some("attacker"),
        ),
        (
            "\"a \\\"<sip:boss@x>\\\" b\" <sip:eve@y>",
            Some("a \\\"<sip:boss@x>\\\" b"),
            "sip:eve@y",
            Some("eve"),
        ),
        ("Bob Smith <sip:bob@h>", Some("Bob Smith"), "sip:bob@h", Some("bob")),
        ("sip:carol@h;tag=3", None, "sip:carol@h", Some("carol")),
        ("\"never closed <sip:boss@x>", None, "", None),
        ("\"quoted\" sip:boss@x", None, "", None),
        ("<sip:dave@h>", None, "sip:dave@h", Some("dave")),
        // As a real phone wrote it (suricata's sip-compact-form capture).
        (
            "\\\"arik\\\" <sip:816666@voip.brurjula.net>;tag=1",
            Some("\\\"arik\\\""),
            "sip:816666@voip.brurjula.net",
            Some("816666"),
        ),
        (
            "x\"<sip:boss@corp>\" <sip:eve@y>",
            Some("x\"<sip:boss@corp>\""),
            "sip:eve@y",
            Some("eve"),
        ),
        ("x\"<sip:boss@corp>\"", None, "", None),
        ("sip:a@h;+sip.instance=\"<urn:x>\"", None, "sip:a@h", Some("a")),
    ];
    for &(v, display, uri, user) in cases {
        let na = NameAddr::parse(v);
        assert_eq!((na.display, na.uri, na.user), (display, uri, user), "{v}");
        let (rd, ru) = reference::display_and_uri(v);
        assert_eq!((rd.as_deref(), ru.as_str()), (display, uri), "reference: {v}");
    }
    assert_eq!(NameAddr::parse(cases[0].0).tag, Some("1"));
}

#[test]
fn via_branches() {
    assert_eq!(
        via_branch("SIP/2.0/UDP 10.0.0.1:5060;rport;branch=z9hG4bK-1;received=1.2.3.4"),
        Some("z9hG4bK-1")
    );
    assert_eq!(via_branch("SIP/2.0/UDP h;BRANCH= z9 "), Some("z9"));
    assert_eq!(via_branch("SIP/2.0/UDP h"), None);
    assert_eq!(via_branch("SIP/2.0/UDP h;branch="), None);
}

/// Every string of up to 7 characters from the grammar's special
/// characters reads the same as the reference reading.
#[test]
fn name_addr_agrees_with_reference_exhaustively() {
    const ALPHABET: [char; 8] = ['"', '\\', '<', '>', ';', 'a', ' ', 'é'];
    for len in 0..=7u32 {
        for n in 0..ALPHABET.len().pow(len) {
            let (mut n, mut v) = (n, String::new());
            for _ in 0..len {
                v.push(ALPHABET[n % ALPHABET.len()]);
                n /= ALPHABET.len();
            }
            let na = NameAddr::parse(&v);
            let (display, uri) = reference::display_and_uri(&v);
            assert_eq!((na.display, na.uri), (display.as_deref(), uri.as_str()), "{v:?}");
        }
    }
}

/// A From folded over two lines, or with a Latin-1 display name, still
/// names its URI; a Latin-1 reason phrase keeps its status.
#[test]
fn folded_and_latin1_name_addrs_keep_their_uri() {
    let msg = |from: &[u8]| {
        let mut m = b"INVITE sip:b@h SIP/2.0\r\nFrom:".to_vec();
        m.extend_from_slice(from);
        m.extend_from_slice(
            b"\r\nTo: <sip:b@h>\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
        );
        m
    };
    for (from, user) in [
        (&b"\r\n <sip:attacker@evil.example>;tag=1"[..], "attacker"),
        (b" \"<sip:boss@corp.example>\" \r\n\t<sip:attacker@evil.example>;tag=1", "attacker"),
        (b" \"Jos\xe9\" <sip:jose@a.example>;tag=1", "jose"),
    ] {
        let m = msg(from);
        let parsed = parse(&m, false).unwrap();
        let na = NameAddr::parse(parsed.from.unwrap());
        assert_eq!(
            (na.user, na.tag),
            (Some(user), Some("1")),
            "{:?}",
            String::from_utf8_lossy(from)
        );
    }
    let busy =
        b"SIP/2.0 486 Occup\xe9\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(parse(busy, false).unwrap().status(), Some(486));
}

/// A Latin-1 display name holding a URI in quotes does not become the URI.
#[test]
fn latin1_display_names_cannot_stand_in_for_the_uri() {
    for from in [
        &b"\"\xe9<sip:boss@corp.example>\" <sip:attacker@evil.example>;tag=1"[..],
        b"Ren\xe9 \\<sip:boss@corp.example> <sip:attacker@evil.example>;tag=1",
    ] {
        let mut m = b"INVITE sip:b@h SIP/2.0\r\nFrom: ".to_vec();
        m.extend_from_slice(from);
        m.extend_from_slice(b"\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n");
        let parsed = parse(&m, false).unwrap();
        let na = NameAddr::parse(parsed.from.unwrap());
        assert_eq!(na.user, Some("attacker"), "{:?}", String::from_utf8_lossy(from));
    }
}
