//! Call flows an operator's capture contains, built message by message:
//! forking with early media, CANCEL, authentication challenges, PRACK and
//! UPDATE, REFER, NAT.

use calliper_engine::{CallRecord, CallState, Config, Side, StreamDirection};
use calliper_testkit::probe::Probe;
use std::net::{Ipv4Addr, SocketAddrV4};

const MS: i64 = 1_000_000;
const CALLER: [u8; 4] = [10, 0, 0, 1];
const PROXY: [u8; 4] = [10, 0, 0, 2];

fn rtp(seq: u16, ssrc: u32) -> Vec<u8> {
    calliper_wire::emit::rtp(8, seq, seq as u32 * 160, ssrc, &[0xD5; 160])
}

fn sdp(ip: [u8; 4], port: u16) -> String {
    let ip = Ipv4Addr::from(ip);
    format!("v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\n")
}

/// A SIP message of call `id`; `to_tag` empty for none.
fn sip(first: &str, cseq: &str, to_tag: &str, body: &str) -> Vec<u8> {
    let tag = if to_tag.is_empty() { String::new() } else { format!(";tag={to_tag}") };
    let ct = if body.is_empty() { "" } else { "Content-Type: application/sdp\r\n" };
    format!(
        "{first}\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK{cseq_len}\r\nFrom: <sip:alice@a.example>;tag=caller\r\nTo: <sip:bob@b.example>{tag}\r\nCall-ID: flow@test\r\nCSeq: {cseq}\r\n{ct}Content-Length: {}\r\n\r\n{body}",
        body.len(),
        cseq_len = cseq.len()
    )
    .into_bytes()
}

/// The caller's request `method` to bob, CSeq `n method`.
fn req(method: &str, n: u32, to_tag: &str, body: &str) -> Vec<u8> {
    let first = format!("{method} sip:bob@b.example SIP/2.0");
    sip(&first, &format!("{n} {method}"), to_tag, body)
}

/// A response `status` to the request of CSeq `cseq`.
fn resp(status: &str, cseq: &str, to_tag: &str, body: &str) -> Vec<u8> {
    sip(&format!("SIP/2.0 {status}"), cseq, to_tag, body)
}

/// A call flow fed to the in-process probe, 10 ms between messages and
/// 20 ms between media packets.
struct Run {
    probe: Probe,
    t: i64,
}

/// An address of `ip`'s, at `port`.
fn at(ip: [u8; 4], port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(ip.into(), port)
}

impl Run {
    fn new() -> Run {
        Run { probe: Probe::new(Config::default(), 1), t: 1_700_000_000_000_000_000 }
    }
    /// Caller to proxy.
    fn up(&mut self, m: Vec<u8>) {
        self.t += 10 * MS;
        self.probe.udp(self.t, at(CALLER, 5060), at(PROXY, 5060), &m);
    }
    /// Proxy to caller.
    fn down(&mut self, m: Vec<u8>) {
        self.t += 10 * MS;
        self.probe.udp(self.t, at(PROXY, 5060), at(CALLER, 5060), &m);
    }
    fn media(&mut self, src: ([u8; 4], u16), dst: ([u8; 4], u16), ssrc: u32, n: u16) {
        for seq in 0..n {
            self.t += 20 * MS;
            let (from, to) = (at(src.0, src.1), at(dst.0, dst.1));
            self.probe.udp(self.t, from, to, &rtp(seq, ssrc));
        }
    }
    /// The one call the flow made.
    fn call(self) -> CallRecord {
        let out = self.probe.finish();
        let calls: Vec<&CallRecord> = out.calls().collect();
        assert_eq!(calls.len(), 1, "{calls:?}");
        calls[0].clone()
    }
}

#[test]
fn forked_call_keeps_early_media_of_both_branches() {
    let mut r = Run::new();
    r.up(req("INVITE", 1, "", &sdp(CALLER, 4000)));
    r.down(resp("100 Trying", "1 INVITE", "", ""));
    // Two branches answer with early media from different gateways.
    r.down(resp("183 Session Progress", "1 INVITE", "fork1", &sdp([10, 0, 1, 1], 6000)));
    r.down(resp("183 Session Progress", "1 INVITE", "fork2", &sdp([10, 0, 2, 1], 7000)));
    r.media(([10, 0, 1, 1], 6000), (CALLER, 4000), 111, 20);
    r.media(([10, 0, 2, 1], 7000), (CALLER, 4000), 222, 20);
    r.down(resp("200 OK", "1 INVITE", "fork2", &sdp([10, 0, 2, 1], 7000)));
    r.up(req("ACK", 1, "fork2", ""));
    r.media(([10, 0, 2, 1], 7000), (CALLER, 4000), 222, 10);
    r.up(req("BYE", 2, "fork2", ""));
    r.down(resp("200 OK", "2 BYE", "fork2", ""));
    let c = r.call();
    assert_eq!(c.final_status, Some(200));
    assert_eq!(c.state, CallState::Completed);
    assert!(c.ringing_ns.is_some());
    let ssrcs: Vec<(u32, u64, StreamDirection)> =
        c.streams.iter().map(|s| (s.ssrc, s.packets, s.direction)).collect();
    assert_eq!(
        ssrcs,
        vec![
            (111, 20, StreamDirection::CalleeToCaller),
            (222, 30, StreamDirection::CalleeToCaller)
        ]
    );
}

#[test]
fn cancel_before_answer_ends_cancelled_with_487() {
    let mut r = Run::new();
    r.up(req("INVITE", 1, "", &sdp(CALLER, 4000)));
    r.down(resp("180 Ringing", "1 INVITE", "b", ""));
    r.up(req("CANCEL", 1, "", ""));
    r.down(resp("200 OK", "1 CANCEL", "b", ""));
    r.down(resp("487 Request Terminated", "1 INVITE", "b", ""));
    r.up(req("ACK", 1, "b", ""));
    let c = r.call();
    assert_eq!(c.final_status, Some(487));
    assert_eq!(c.state, CallState::Cancelled);
    assert_eq!(c.hangup_by, Some(Side::Caller));
    assert_eq!(c.duration_ms, 0.0);
}

#[test]
fn challenge_and_retry_on_the_same_call_id_is_one_answered_call() {
    for code in ["401 Unauthorized", "407 Proxy Authentication Required"] {
        let mut r = Run::new();
        r.up(req("INVITE", 1, "", &sdp(CALLER, 4000)));
        r.down(resp(code, "1 INVITE", "x", ""));
        r.up(req("ACK", 1, "x", ""));
        r.up(req("INVITE", 2, "", &sdp(CALLER, 4000)));
        r.down(resp("100 Trying", "2 INVITE", "", ""));
        r.down(resp("200 OK", "2 INVITE", "b", &sdp(PROXY, 8000)));
        r.up(req("ACK", 2, "b", ""));
        r.media((CALLER, 4000), (PROXY, 8000), 5, 10);
        r.up(req("BYE", 3, "b", ""));
        let c = r.call();
        assert_eq!(c.final_status, Some(200), "{code}");
        assert_eq!(c.state, CallState::Completed, "{code}");
        assert_eq!(c.invites, 2);
        assert_eq!(c.streams.len(), 1);
    }
}

#[test]
fn prack_and_update_move_the_media() {
    let mut r = Run::new();
    r.up(req("INVITE", 1, "", &sdp(CALLER, 4000)));
    r.down(resp("183 Session Progress", "1 INVITE", "b", &sdp(PROXY, 8000)));
    r.up(req("PRACK", 2, "b", ""));
    r.down(resp("200 OK", "2 PRACK", "b", ""));
    // UPDATE moves the caller's media before the answer.
    r.up(req("UPDATE", 3, "b", &sdp(CALLER, 4100)));
    r.down(resp("200 OK", "3 UPDATE", "b", &sdp(PROXY, 8000)));
    r.down(resp("200 OK", "1 INVITE", "b", ""));
    r.media((PROXY, 8000), (CALLER, 4100), 9, 10);
    // REFER and NOTIFY inside the dialog change nothing.
    r.down(sip("REFER sip:alice@a.example SIP/2.0", "1 REFER", "caller", ""));
    r.up(resp("202 Accepted", "1 REFER", "caller", ""));
    r.up(req("BYE", 4, "b", ""));
    let c = r.call();
    assert_eq!(c.state, CallState::Completed);
    assert_eq!(c.streams.len(), 1);
    assert_eq!(c.streams[0].dst_port, 4100);
    assert_eq!(c.streams[0].direction, StreamDirection::CalleeToCaller);
}

#[test]
fn media_from_behind_nat_is_tied_by_the_other_end() {
    // The caller's SDP gives its private address; its RTP arrives from the
    // NAT's public address, the one its signalling came from (paired
    // pooling), and the callee answers to that address.
    let public = (CALLER, 61000);
    let mut r = Run::new();
    r.up(req("INVITE", 1, "", &sdp([192, 168, 1, 10], 4000)));
    r.down(resp("200 OK", "1 INVITE", "b", &sdp(PROXY, 8000)));
    r.up(req("ACK", 1, "b", ""));
    r.media(public, (PROXY, 8000), 1, 10);
    r.media((PROXY, 8000), public, 2, 10);
    r.up(req("BYE", 2, "b", ""));
    let c = r.call();
    let dirs: Vec<(u32, StreamDirection)> =
        c.streams.iter().map(|s| (s.ssrc, s.direction)).collect();
    assert_eq!(
        dirs,
        vec![(1, StreamDirection::CallerToCallee), (2, StreamDirection::CalleeToCaller)]
    );
}

#[test]
fn two_legs_through_a_media_relaying_proxy_are_one_call_with_four_streams() {
    let callee = [10, 0, 0, 3];
    let relay = ([10, 0, 0, 2], 30000);
    let relay2 = ([10, 0, 0, 2], 30002);
    let mut r = Run::new();
    // Leg 1 caller -> proxy; leg 2 proxy -> callee with the SDP rewritten.
    r.up(req("INVITE", 1, "", &sdp(CALLER, 4000)));
    r.t += MS;
    let leg2 = sip("INVITE sip:bob@10.0.0.3 SIP/2.0", "1 INVITE", "", &sdp(relay2.0, relay2.1));
    r.probe.udp(r.t, at(PROXY, 5060), at(callee, 5060), &leg2);
    let ok2 = resp("200 OK", "1 INVITE", "b", &sdp(callee, 9000));
    r.probe.udp(r.t + MS, at(callee, 5060), at(PROXY, 5060), &ok2);
    r.down(resp("200 OK", "1 INVITE", "b", &sdp(relay.0, relay.1)));
    r.up(req("ACK", 1, "b", ""));
    r.media((CALLER, 4000), relay, 1, 10);
    r.media(relay2, (callee, 9000), 1, 10);
    r.media((callee, 9000), relay2, 2, 10);
    r.media(relay, (CALLER, 4000), 2, 10);
    r.up(req("BYE", 2, "b", ""));
    let c = r.call();
    assert_eq!(c.invites, 2);
    assert_eq!(c.state, CallState::Completed);
    let legs: Vec<(u16, u16, StreamDirection)> =
        c.streams.iter().map(|s| (s.src_port, s.dst_port, s.direction)).collect();
    assert_eq!(
        legs,
        vec![
            (4000, 30000, StreamDirection::CallerToCallee),
            (30002, 9000, StreamDirection::CallerToCallee),
            (9000, 30002, StreamDirection::CalleeToCaller),
            (30000, 4000, StreamDirection::CalleeToCaller),
        ]
    );
}
