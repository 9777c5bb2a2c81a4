use super::bencode::{self, Value};
use super::Source::{Net, Peer};
use super::{sdp, Control, ControlConfig, Forward};
use std::net::{IpAddr, SocketAddr};

/// Bencode and SDP, read and written.
mod formats;

const OFFER_SDP: &str = "v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
m=audio 30000 RTP/AVP 8 101\r\na=rtpmap:8 PCMA/8000\r\na=rtcp:30001\r\n\
m=video 30002 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n";

const ANSWER_SDP: &str = "v=0\r\no=- 2 2 IN IP4 10.0.0.2\r\ns=-\r\nc=IN IP4 10.0.0.2\r\nt=0 0\r\n\
m=audio 20000 RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\nm=video 0 RTP/AVP 96\r\n";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// `COOKIE bencode` of the request dictionary `items` (keys as given).
fn request(cookie: &str, items: &[(&str, &str)], flags: &[&str]) -> Vec<u8> {
    let mut w = bencode::Writer::default();
    w.dict(None);
    for (k, v) in items {
        w.text(k, v);
    }
    if !flags.is_empty() {
        w.list("flags");
        for f in flags {
            w.bytes(f.as_bytes());
        }
        w.end();
    }
    w.end();
    [format!("{cookie} ").into_bytes(), w.out].concat()
}

/// The reply's dictionary (after the cookie, which must be `cookie`).
fn reply<'a>(cookie: &str, r: &'a [u8]) -> Value<'a> {
    let (c, doc) = r.split_at(cookie.len() + 1);
    assert_eq!(c, format!("{cookie} ").as_bytes());
    bencode::parse(doc).unwrap()
}

/// Where the proxy's requests come from.
fn proxy() -> SocketAddr {
    addr("127.0.0.1:5060")
}

fn edge_config() -> ControlConfig {
    ControlConfig {
        address: "192.0.2.7".parse().unwrap(),
        ports: (40000, 40009),
        max_calls: 2,
        idle_timeout_ns: 60_000_000_000,
        refuse_other_media: false,
        peers: vec![],
    }
}

fn edge() -> Control {
    Control::new(edge_config())
}

const S: i64 = 1_000_000_000;

#[test]
fn an_offer_and_answer_relay_media_both_ways_then_delete_frees_the_ports() {
    let mut c = edge();
    let mut bound = vec![];
    let mut bind = |p: u16| {
        bound.push(p);
        true
    };
    let ping = c.handle(0, proxy(), b"c0 d7:command4:pinge", &mut bind).unwrap();
    assert_eq!(ping, b"c0 d6:result4:ponge");
    let offer = request(
        "c1",
        &[("command", "offer"), ("call-id", "x@y"), ("from-tag", "ft"), ("sdp", OFFER_SDP)],
        &["trust-address", "no-such-flag"],
    );
    let r = c.handle(S, proxy(), &offer, &mut bind).unwrap();
    let v = reply("c1", &r);
    assert_eq!(v.str("result"), Some("ok"), "{v:?}");
    assert_eq!(v.str("warning"), Some("ignored: no-such-flag"));
    let to_callee = sdp::audio(v.str("sdp").unwrap()).unwrap();
    assert_eq!(to_callee[0].rtp, addr("192.0.2.7:40000"));
    // The same cookie again: the same reply, no second allocation.
    assert_eq!(c.handle(2 * S, proxy(), &offer, &mut bind).unwrap(), r);
    assert_eq!(c.counters.retransmits, 1);
    let answer = request(
        "c2",
        &[
            ("command", "answer"),
            ("call-id", "x@y"),
            ("from-tag", "ft"),
            ("to-tag", "tt"),
            ("sdp", ANSWER_SDP),
        ],
        &[],
    );
    let v2 = c.handle(3 * S, proxy(), &answer, &mut bind).unwrap();
    let to_caller = sdp::audio(reply("c2", &v2).str("sdp").unwrap()).unwrap();
    assert_eq!(to_caller[0].rtp, addr("192.0.2.7:40002"));
    assert_eq!(bound, [40000, 40002]);
    // Caller to the port facing it, out of the port facing the callee.
    let f = c.forward(4 * S, 40002, Net(addr("10.0.0.1:30000")), &[0; 172]);
    assert_eq!(f, Some(Forward { from_port: 40000, to: addr("10.0.0.2:20000") }));
    let back = c.forward(4 * S, 40000, Net(addr("10.0.0.2:20000")), &[0; 172]);
    assert_eq!(back, Some(Forward { from_port: 40002, to: addr("10.0.0.1:30000") }));
    let rtcp = c.forward(4 * S, 40001, Net(addr("10.0.0.2:20001")), &[0; 80]);
    assert_eq!(rtcp, Some(Forward { from_port: 40003, to: addr("10.0.0.1:30001") }));
    // Not the party's address: dropped, never reflected.
    assert_eq!(c.forward(4 * S, 40002, Net(addr("10.6.6.6:30000")), &[0; 172]), None);
    assert_eq!(c.counters.media_foreign_source, 1);
    // The caller's RTP across the sequence numbers' wrap, 0 missing, 7
    // before 4 to 6 (reordered, not lost): one lost.
    for seq in [65534u16, 65535, 1, 2, 3, 7, 4, 5, 6] {
        let mut rtp = vec![0x80, 8];
        rtp.extend_from_slice(&seq.to_be_bytes());
        rtp.resize(172, 0);
        assert!(c.forward(4 * S, 40002, Net(addr("10.0.0.1:30000")), &rtp).is_some());
    }
    assert_eq!(c.counters.media_relayed, 12);
    let q = request("c3", &[("command", "query"), ("call-id", "x@y")], &[]);
    let qr = c.handle(5 * S, proxy(), &q, &mut |_| true).unwrap();
    let qv = reply("c3", &qr);
    let totals = qv.get("totals").unwrap();
    let packets = |kind: &str| totals.get(kind).and_then(|t| t.get("packets")).cloned();
    assert_eq!((packets("RTP"), packets("RTCP")), (Some(Value::Int(11)), Some(Value::Int(1))));
    // Per party: what never arrived from it (65534 to 7 is ten numbers,
    // nine arrived); the callee's one datagram was not RTP.
    let lost =
        |tag: &str| qv.get("tags").and_then(|t| t.get(tag)).and_then(|p| p.get("lost")).cloned();
    assert_eq!((lost("ft"), lost("tt")), (Some(Value::Int(1)), Some(Value::Int(0))));
    let del = request("c4", &[("command", "delete"), ("call-id", "x@y"), ("from-tag", "ft")], &[]);
    let dr = c.handle(6 * S, proxy(), &del, &mut |_| true).unwrap();
    assert_eq!(reply("c4", &dr).str("result"), Some("ok"));
    let mut released = c.take_released();
    released.sort();
    assert_eq!(released, [40000, 40002]);
    assert_eq!(c.forward(7 * S, 40002, Net(addr("10.0.0.1:30000")), &[0; 172]), None);
    // Deleting it again is not an error (rtpengine's behaviour).
    let again = request("c5", &[("command", "delete"), ("call-id", "x@y")], &[]);
    let ar = c.handle(8 * S, proxy(), &again, &mut |_| true).unwrap();
    assert_eq!(reply("c5", &ar).str("result"), Some("ok"));
    assert!(reply("c5", &ar).str("warning").is_some());
    assert_eq!(c.calls(), 0);
}

#[test]
fn refusals_are_ng_errors_with_a_reason_and_are_counted() {
    let mut c = edge();
    let error = |c: &mut Control, cookie: &str, req: Vec<u8>| -> String {
        let r = c.handle(S, proxy(), &req, &mut |_| true).unwrap();
        let v = reply(cookie, &r);
        assert_eq!(v.str("result"), Some("error"), "{v:?}");
        v.str("error-reason").unwrap().to_string()
    };
    let answer_first = request(
        "a",
        &[
            ("command", "answer"),
            ("call-id", "nope"),
            ("from-tag", "f"),
            ("to-tag", "t"),
            ("sdp", ANSWER_SDP),
        ],
        &[],
    );
    assert_eq!(error(&mut c, "a", answer_first), "Unknown call-id");
    assert!(error(&mut c, "b", request("b", &[("command", "offer")], &[])).contains("call-id"));
    assert!(error(&mut c, "c", request("c", &[("command", "dance")], &[])).contains("dance"));
    assert!(error(&mut c, "d", b"d not bencode".to_vec()).starts_with("bencode"));
    let bad_sdp = request(
        "e",
        &[
            ("command", "offer"),
            ("call-id", "1"),
            ("from-tag", "f"),
            ("sdp", "m=audio x RTP/AVP 0"),
        ],
        &[],
    );
    assert!(error(&mut c, "e", bad_sdp).starts_with("SDP"));
    // Calls and ports are capped: 5 even ports, 2 calls.
    for (i, cookie) in ["f", "g"].iter().enumerate() {
        let id = i.to_string();
        let offer = request(
            cookie,
            &[("command", "offer"), ("call-id", &id), ("from-tag", "f"), ("sdp", OFFER_SDP)],
            &[],
        );
        assert!(c.handle(S, proxy(), &offer, &mut |_| true).is_some());
    }
    let third = request(
        "h",
        &[("command", "offer"), ("call-id", "3"), ("from-tag", "f"), ("sdp", OFFER_SDP)],
        &[],
    );
    assert_eq!(error(&mut c, "h", third), "Parallel session limit reached");
    assert_eq!(c.counters.calls_refused, 1);
    // No reply at all to a datagram without a cookie.
    assert_eq!(c.handle(S, proxy(), b"d7:command4:pinge", &mut |_| true), None);
    assert_eq!(c.counters.malformed, 1);
    assert_eq!(c.counters.errors, 6);
}

#[test]
fn ports_the_system_refuses_are_skipped_and_running_out_is_an_error() {
    let mut c = edge();
    let offer = |cookie: &str, id: &str| {
        request(
            cookie,
            &[("command", "offer"), ("call-id", id), ("from-tag", "f"), ("sdp", OFFER_SDP)],
            &[],
        )
    };
    let r = c.handle(S, proxy(), &offer("a", "1"), &mut |p| p != 40000).unwrap();
    let port = sdp::audio(reply("a", &r).str("sdp").unwrap()).unwrap()[0].rtp.port();
    assert_eq!(port, 40002);
    let r = c.handle(S, proxy(), &offer("b", "2"), &mut |_| false).unwrap();
    assert_eq!(reply("b", &r).str("error-reason"), Some("Ran out of ports"));
    assert_eq!(c.counters.ports_exhausted, 1);
}

#[test]
fn idle_calls_end_and_give_back_their_ports() {
    let mut c = edge();
    let offer = request(
        "a",
        &[("command", "offer"), ("call-id", "1"), ("from-tag", "f"), ("sdp", OFFER_SDP)],
        &[],
    );
    c.handle(S, proxy(), &offer, &mut |_| true).unwrap();
    c.expire(30 * S);
    assert_eq!(c.calls(), 1);
    c.expire(61 * S);
    assert_eq!((c.calls(), c.counters.calls_timed_out), (0, 1));
    assert_eq!(c.take_released(), [40000]);
}

fn offer_of(cookie: &str, id: &str, sdp: &str) -> Vec<u8> {
    request(cookie, &[("command", "offer"), ("call-id", id), ("from-tag", "ft"), ("sdp", sdp)], &[])
}

fn answer_of(cookie: &str, id: &str, to_tag: &str, sdp: &str) -> Vec<u8> {
    let items = [
        ("command", "answer"),
        ("call-id", id),
        ("from-tag", "ft"),
        ("to-tag", to_tag),
        ("sdp", sdp),
    ];
    request(cookie, &items, &[])
}

/// Call `x` offered by the caller (tag ft) and answered with `to_tag`.
fn established(c: &mut Control, to_tag: &str) {
    let ok = |r: Option<Vec<u8>>| r.is_some_and(|r| !r.windows(5).any(|w| w == b"error"));
    assert!(ok(c.handle(S, proxy(), &offer_of("o", "x", OFFER_SDP), &mut |_| true)));
    let answer = answer_of("a", "x", to_tag, ANSWER_SDP);
    assert!(ok(c.handle(S, proxy(), &answer, &mut |_| true)));
}

/// The first source of each stream is latched: then only it is taken, and
/// it is where the other party's media goes (a party behind NAT sends
/// from another port than its SDP names).
#[test]
fn sources_are_latched_and_media_follows_them() {
    let mut c = edge();
    established(&mut c, "tt");
    // The callee sends from port 29999, not its SDP's 20000.
    let f = c.forward(2 * S, 40000, Net(addr("10.0.0.2:29999")), &[0; 100]).unwrap();
    assert_eq!(f.to, addr("10.0.0.1:30000"));
    let back = c.forward(2 * S, 40002, Net(addr("10.0.0.1:30000")), &[0; 100]).unwrap();
    assert_eq!(back.to, addr("10.0.0.2:29999"), "to where the callee sends from");
    // Same address, another port: not the latched source.
    assert_eq!(c.forward(2 * S, 40000, Net(addr("10.0.0.2:20000")), &[0; 100]), None);
    // Port 0 is taken only from another edge over the overlay.
    assert_eq!(c.forward(2 * S, 40002, Net(addr("10.0.0.1:0")), &[0; 100]), None);
    assert_eq!(c.counters.media_foreign_source, 2);
    // A new SDP from the callee starts its latching again.
    c.handle(3 * S, proxy(), &answer_of("3", "x", "tt", ANSWER_SDP), &mut |_| true).unwrap();
    let f = c.forward(4 * S, 40000, Net(addr("10.0.0.2:20000")), &[0; 100]);
    assert!(f.is_some());
}

#[test]
fn sdp_that_aims_media_nowhere_or_bloats_is_refused() {
    let mut c = edge();
    let mut reason = |cookie: &str, sdp: &str| {
        let r = c.handle(S, proxy(), &offer_of(cookie, cookie, sdp), &mut |_| true).unwrap();
        reply(cookie, &r).str("error-reason").map(String::from)
    };
    let with = |c: &str| format!("v=0\r\nc=IN IP4 {c}\r\nm=audio 4000 RTP/AVP 0\r\n");
    for bad in ["127.0.0.1", "224.0.0.5", "255.255.255.255", "192.0.2.7"] {
        let why = reason(bad, &with(bad)).unwrap_or_else(|| panic!("{bad} taken"));
        assert!(why.contains(bad), "{why}");
    }
    let v6 = "v=0\r\nc=IN IP6 2001:db8::1\r\nm=audio 4000 RTP/AVP 0\r\n";
    assert!(reason("v6", v6).unwrap().contains("family"));
    // Junk after the address would be copied into every kept section.
    let junk = format!("v=0\r\nc=IN IP4 10.0.0.1 {}\r\nm=x 1 y\r\n", "j".repeat(1000));
    assert_eq!(reason("junk", &junk).as_deref(), Some("SDP: a bad c= line"));
    let many: String = (0..=sdp::MAX_MEDIA).map(|_| "m=x 1 y\r\n").collect();
    let many = format!("v=0\r\nc=IN IP4 10.0.0.1\r\n{many}");
    assert!(reason("many", &many).unwrap().contains("media sections"));
    // Nothing was kept of the refused offers.
    assert_eq!(c.calls(), 0);
}

#[test]
fn a_refused_offer_leaves_no_call_and_no_port_behind() {
    let mut c = edge();
    let two_audio =
        "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 4000 RTP/AVP 0\r\nm=audio 4002 RTP/AVP 0\r\n";
    let mut n = 0;
    // The second port is refused by the system: the offer fails whole.
    let r = c
        .handle(S, proxy(), &offer_of("1", "x", two_audio), &mut |_| {
            n += 1;
            n == 1
        })
        .unwrap();
    assert_eq!(reply("1", &r).str("error-reason"), Some("Ran out of ports"));
    assert_eq!(c.calls(), 0);
    assert_eq!(c.take_released(), [40000], "the port taken is given back");
    // Refused streams take no port.
    let refused = "v=0\r\nc=IN IP4 10.0.0.1\r\nm=audio 0 RTP/AVP 0\r\nm=audio 4002 RTP/AVP 0\r\n";
    let mut bound = vec![];
    let r = c
        .handle(S, proxy(), &offer_of("2", "y", refused), &mut |p| {
            bound.push(p);
            true
        })
        .unwrap();
    let a = sdp::audio(reply("2", &r).str("sdp").unwrap()).unwrap();
    assert!(a[0].rejected && !a[1].rejected);
    assert_eq!(bound.len(), 1);
}

#[test]
fn cookies_answer_only_the_same_request_from_the_same_proxy() {
    let mut c = edge();
    let offer = offer_of("k", "x", OFFER_SDP);
    let first = c.handle(S, proxy(), &offer, &mut |_| true).unwrap();
    assert_eq!(c.handle(2 * S, proxy(), &offer, &mut |_| true).unwrap(), first);
    assert_eq!((c.counters.retransmits, c.counters.offers), (1, 1));
    // The same cookie with another request is a new request: a short
    // datagram cannot draw out a long kept reply.
    let ping = c.handle(2 * S, proxy(), b"k d7:command4:pinge", &mut |_| true).unwrap();
    assert_eq!(ping, b"k d6:result4:ponge");
    // The same request from elsewhere is not a retransmission either.
    c.handle(2 * S, addr("127.0.0.2:5060"), &offer, &mut |_| true).unwrap();
    assert_eq!((c.counters.retransmits, c.counters.offers), (1, 2));
    // After 30 s a reply is gone.
    let again = offer_of("m", "x", OFFER_SDP);
    c.handle(3 * S, proxy(), &again, &mut |_| true).unwrap();
    c.handle(40 * S, proxy(), &again, &mut |_| true).unwrap();
    assert_eq!((c.counters.retransmits, c.counters.offers), (1, 4));
}

#[test]
fn forks_and_branch_deletes_follow_the_to_tag() {
    let mut c = edge();
    established(&mut c, "fork1");
    // Another fork answers: it becomes the answering party.
    let fork2 = ANSWER_SDP.replace("10.0.0.2", "10.0.0.3");
    c.handle(S, proxy(), &answer_of("3", "x", "fork2", &fork2), &mut |_| true).unwrap();
    let f = c.forward(2 * S, 40002, Net(addr("10.0.0.1:30000")), &[0; 100]).unwrap();
    assert_eq!(f.to.ip(), "10.0.0.3".parse::<IpAddr>().unwrap());
    // A failed fork's branch delete leaves the call.
    let del = |cookie: &str, tag: &str| {
        request(
            cookie,
            &[("command", "delete"), ("call-id", "x"), ("from-tag", "ft"), ("to-tag", tag)],
            &[],
        )
    };
    c.handle(3 * S, proxy(), &del("4", "fork1"), &mut |_| true).unwrap();
    assert_eq!(c.calls(), 1);
    c.handle(3 * S, proxy(), &del("5", "fork2"), &mut |_| true).unwrap();
    assert_eq!(c.calls(), 0);
}

#[test]
fn identifiers_and_lists_are_bounded() {
    let mut c = edge();
    let long = "i".repeat(300);
    let r = c.handle(S, proxy(), &offer_of("1", &long, OFFER_SDP), &mut |_| true).unwrap();
    assert!(reply("1", &r).str("error-reason").unwrap().contains("longer than"));
    let list = c.handle(S, proxy(), b"2 d7:command4:liste", &mut |_| true).unwrap();
    assert_eq!(reply("2", &list).get("calls"), Some(&Value::List(vec![])));
}

/// A party that is another edge (a configured peer) is heard only over the
/// overlay, from exactly the port its SDP names, and never latched: the
/// network's datagrams claiming its address are refused, and another
/// call's port at that edge cannot inject.
#[test]
fn a_peer_edge_is_heard_only_over_the_overlay_at_its_sdp_port() {
    let mut c =
        Control::new(ControlConfig { peers: vec!["10.0.0.2".parse().unwrap()], ..edge_config() });
    established(&mut c, "tt");
    // The callee here is the peer edge 10.0.0.2, port 20000.
    assert_eq!(c.forward(2 * S, 40000, Net(addr("10.0.0.2:20000")), &[0; 100]), None);
    assert_eq!(c.forward(2 * S, 40000, Peer(addr("10.0.0.2:20002")), &[0; 100]), None);
    let f = c.forward(2 * S, 40000, Peer(addr("10.0.0.2:20000")), &[0; 100]).unwrap();
    assert_eq!(f.to, addr("10.0.0.1:30000"));
    // The caller latches; media for the peer goes to its SDP address.
    let f = c.forward(2 * S, 40002, Net(addr("10.0.0.1:30000")), &[0; 100]).unwrap();
    assert_eq!(f.to, addr("10.0.0.2:20000"));
    assert_eq!(c.counters.media_foreign_source, 2);
}
