//! Captures that try to make the numbers lie (hostile input, round three):
//! forged answers, foreign media, outages, silent calls and display names,
//! each built from protocol headers by [`super::hostile`].

use super::hostile::{
    call_setup, rtp, Endpoint, Pcap, CALLEE, CALLEE_RTP, CALLER, CALLER_RTP, SEC, T0,
};
use std::net::Ipv4Addr;

/// A scanner and the server it probes.
pub const SCANNER: Endpoint = (Ipv4Addr::new(192, 0, 2, 66), 5060);
pub const VICTIM: Endpoint = (Ipv4Addr::new(192, 0, 2, 1), 5060);
/// A host that appears in no SDP.
pub const FOREIGN_RTP: Endpoint = (Ipv4Addr::new(10, 0, 9, 9), 7777);

/// A request or response between the scanner and the server, with the
/// scanner's Via (a response copies it).
fn scan_message(start: &str, n: u32, to_tag: bool) -> Vec<u8> {
    format!(
        "{start}\r\nVia: SIP/2.0/UDP 192.0.2.66:5060;branch=z9hG4bKscan{n}\r\n\
         From: <sip:100@192.0.2.66>;tag=s{n}\r\nTo: <sip:{n}@192.0.2.1>{tag}\r\n\
         Call-ID: scan-{n}\r\nCSeq: 1 INVITE\r\nUser-Agent: handmade/1\r\nContent-Length: 0\r\n\r\n",
        tag = if to_tag { ";tag=v" } else { "" },
    )
    .into_bytes()
}

/// The server's real answer to attempt `n` (sent at `t`): 404.
fn server_refuses(p: &mut Pcap, t: i64, n: u32) {
    let refusal = scan_message("SIP/2.0 404 Not Found", n, true);
    p.udp(t + SEC / 50, VICTIM, SCANNER, &refusal);
}

/// `attempts` INVITEs from a scanner, each followed by the scanner's own
/// 200 OK (sent the INVITE's way) and then the server's real 404.
pub fn fake_answers(attempts: u32) -> Pcap {
    let mut p = Pcap::default();
    for n in 0..attempts {
        let t = T0 + i64::from(n) * SEC / 5;
        p.udp(
            t,
            SCANNER,
            VICTIM,
            &scan_message(&format!("INVITE sip:{n}@192.0.2.1 SIP/2.0"), n, false),
        );
        p.udp(t + SEC / 100, SCANNER, VICTIM, &scan_message("SIP/2.0 200 OK", n, true));
        server_refuses(&mut p, t, n);
    }
    p
}

/// 20 ms G.711 packets from `from` to `to` for `seconds`, starting at
/// `start`; `lost(i)` drops packet i (its number and time still advance).
pub fn voice(
    p: &mut Pcap,
    from: Endpoint,
    to: Endpoint,
    ssrc: u32,
    start: i64,
    seconds: u16,
    lost: impl Fn(u16) -> bool,
) {
    for i in 0..seconds * 50 {
        if !lost(i) {
            let t = start + i64::from(i) * SEC / 50;
            p.udp(t, from, to, &rtp(0, 1000 + i, 8000 + u32::from(i) * 160, ssrc, &[0xD5; 160]));
        }
    }
}

/// A clean call (both ways, 10 s) and, during it, a host named by no SDP
/// sending lossy RTP (every third packet lost) to the callee's media port.
pub fn foreign_media() -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "foreign-media", "");
    voice(&mut p, CALLER_RTP, CALLEE_RTP, 1, T0 + SEC, 10, |_| false);
    voice(&mut p, CALLEE_RTP, CALLER_RTP, 2, T0 + SEC, 10, |_| false);
    voice(&mut p, FOREIGN_RTP, CALLEE_RTP, 3, T0 + 2 * SEC, 8, |i| i % 3 == 0);
    p
}

/// A call whose caller's media stops for 60 s (3 000 packets), numbers
/// and timestamps advancing as a sender's do through an outage.
pub fn outage() -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "outage", "");
    voice(&mut p, CALLER_RTP, CALLEE_RTP, 1, T0 + SEC, 64, |i| (100..3100).contains(&i));
    voice(&mut p, CALLEE_RTP, CALLER_RTP, 2, T0 + SEC, 64, |_| false);
    p
}

/// OPTIONS ping number `n` from the caller: Call-ID `ping-N`.
fn ping(n: i64) -> Vec<u8> {
    super::hostile::sip(
        "OPTIONS sip:10.0.0.2 SIP/2.0",
        &format!("ping-{n}"),
        "1 OPTIONS",
        false,
        "",
    )
}

/// A call answered (INVITE, 200, ACK) with no RTP and no BYE, then other
/// signalling for `later_s` seconds (an OPTIONS ping every 10 s).
pub fn silent_call(later_s: i64) -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "silent", "");
    let ack = super::hostile::sip("ACK sip:bob@10.0.0.2 SIP/2.0", "silent", "1 ACK", true, "");
    p.udp(T0 + SEC / 5, CALLER, CALLEE, &ack);
    for s in (10..=later_s).step_by(10) {
        p.udp(T0 + s * SEC, CALLER, CALLEE, &ping(s));
    }
    p
}

/// An INVITE whose From display name is a quoted URI.
pub fn display_name_uri() -> Pcap {
    let mut p = Pcap::default();
    let invite = "INVITE sip:bob@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKd\r\n\
         From: \"<sip:boss@corp.example>\" <sip:attacker@evil.example>;tag=a\r\nTo: <sip:bob@10.0.0.2>\r\n\
         Call-ID: display\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
    p.udp(T0, CALLER, CALLEE, invite.as_bytes());
    p
}

/// `n` OPTIONS pings `gap_s` seconds apart (a capture whose clock jumps).
pub fn quiet_gaps(n: i64, gap_s: i64) -> Pcap {
    let mut p = Pcap::default();
    for i in 0..n {
        p.udp(T0 + i * gap_s * SEC, CALLER, CALLEE, &ping(i));
    }
    p
}

/// A call with 5 s of media each way, for a rule that ignores one direction's flow.
pub fn call_with_media() -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "ruled", "");
    voice(&mut p, CALLER_RTP, CALLEE_RTP, 1, T0 + SEC, 5, |_| false);
    voice(&mut p, CALLEE_RTP, CALLER_RTP, 2, T0 + SEC, 5, |_| false);
    p
}

/// Time of the anomalous packet of [`anomaly_mid_group`].
pub const ANOMALY_AT: i64 = T0 + 1_234_567_000;

/// Packets 1 ms apart with, among them, a SIP message without a Call-ID
/// (anomaly `sip_missing_call_id`) at [`ANOMALY_AT`].
pub fn anomaly_mid_group() -> Pcap {
    let mut p = Pcap::default();
    for i in 0..20 {
        p.udp(ANOMALY_AT - 10 * SEC / 1000 + i * SEC / 1000, CALLER, CALLEE, &ping(i));
        if i == 9 {
            let bad = b"OPTIONS sip:10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bKx\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n";
            p.udp(ANOMALY_AT, CALLER, CALLEE, bad);
        }
    }
    p
}

/// A third host, in no SDP and no transaction of the call.
pub const THIRD: Endpoint = (Ipv4Addr::new(10, 7, 7, 7), 5060);

/// A scan whose scanner answers copies of its own (the attacker review's
/// bypass): per attempt, its INVITE to the server; a re-INVITE in the same
/// Call-ID from its second port to its first, tags swapped, answered 200;
/// a copy of its INVITE to a third host, answered 200 by that host; then
/// the server's real 404.
pub fn self_answered_copies(attempts: u32) -> Pcap {
    let mut p = Pcap::default();
    let second = (SCANNER.0, 5071);
    for n in 0..attempts {
        let t = T0 + i64::from(n) * SEC / 5;
        let invite = format!("INVITE sip:{n}@192.0.2.1 SIP/2.0");
        p.udp(t, SCANNER, VICTIM, &scan_message(&invite, n, false));
        let swapped = format!(
            "INVITE sip:100@192.0.2.66 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.66:5071;branch=z9hG4bKre{n}\r\n\
             From: <sip:{n}@192.0.2.1>;tag=v\r\nTo: <sip:100@192.0.2.66>;tag=s{n}\r\n\
             Call-ID: scan-{n}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
        );
        p.udp(t + SEC / 200, second, SCANNER, swapped.as_bytes());
        let ok = swapped.replacen("INVITE sip:100@192.0.2.66 SIP/2.0", "SIP/2.0 200 OK", 1);
        p.udp(t + SEC / 150, SCANNER, second, ok.as_bytes());
        p.udp(t + SEC / 120, SCANNER, THIRD, &scan_message(&invite, n, false));
        p.udp(t + SEC / 110, THIRD, SCANNER, &scan_message("SIP/2.0 200 OK", n, true));
        server_refuses(&mut p, t, n);
    }
    p
}

/// A call with 10 s of media both ways and, 4 s in, a BYE with the
/// dialog's tags from a host that took no part in it.
pub fn outsider_bye() -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "outsider-bye", "");
    voice(&mut p, CALLER_RTP, CALLEE_RTP, 1, T0 + SEC, 10, |_| false);
    voice(&mut p, CALLEE_RTP, CALLER_RTP, 2, T0 + SEC, 10, |_| false);
    let bye =
        super::hostile::sip("BYE sip:bob@10.0.0.2 SIP/2.0", "outsider-bye", "2 BYE", true, "");
    p.udp(T0 + 4 * SEC, THIRD, CALLEE, &bye);
    p
}

/// A caller behind NAT (SIP from a public address, SDP with its private
/// one) whose media comes from that public address, and a host at another
/// public address sending to the callee's media port.
pub fn natted_caller_and_a_stranger() -> Pcap {
    let public = Ipv4Addr::new(203, 0, 113, 5);
    let mut p = Pcap::default();
    let invite = String::from_utf8(super::hostile::invite_or_ok("nat", false, ""))
        .unwrap()
        .replace("c=IN IP4 10.0.0.1", "c=IN IP4 192.168.1.10");
    p.udp(T0, (public, 5060), CALLEE, invite.as_bytes());
    let ok = super::hostile::invite_or_ok("nat", true, "");
    p.udp(T0 + SEC / 10, CALLEE, (public, 5060), &ok);
    voice(&mut p, (public, 61_000), CALLEE_RTP, 1, T0 + SEC, 5, |_| false);
    voice(&mut p, CALLEE_RTP, (public, 61_000), 2, T0 + SEC, 5, |_| false);
    voice(&mut p, (Ipv4Addr::new(203, 0, 113, 77), 7000), CALLEE_RTP, 3, T0 + SEC, 5, |i| {
        i % 2 == 0
    });
    p
}

/// An outsider on the caller's network.
pub const OUTSIDER: Endpoint = (Ipv4Addr::new(10, 0, 0, 66), 5060);

/// A call A→B (10 s of media, the callee hangs up) into which an outsider
/// sends legs of its own: INVITEs to itself (answered 200 and 486 by
/// itself), INVITEs to six other addresses, a BYE to the caller and lossy
/// RTP to the caller's media port.
pub fn outsider_legs() -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "legs", "");
    let leg = |n: u32, to: Endpoint| {
        format!(
            "INVITE sip:x@{ip} SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.66;branch=z9hG4bKleg{n}\r\n\
             From: <sip:alice@10.0.0.1>;tag=a\r\nTo: <sip:bob@10.0.0.2>\r\nCall-ID: legs\r\n\
             CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
            ip = to.0
        )
    };
    for n in 0..4 {
        let m = leg(n, OUTSIDER);
        let t = T0 + SEC / 20 + i64::from(n) * SEC / 1000;
        p.udp(t, OUTSIDER, OUTSIDER, m.as_bytes());
        let status = if n % 2 == 0 { "SIP/2.0 200 OK" } else { "SIP/2.0 486 Busy Here" };
        let answer = m.replacen(&format!("INVITE sip:x@{} SIP/2.0", OUTSIDER.0), status, 1);
        p.udp(t + SEC / 2000, OUTSIDER, OUTSIDER, answer.as_bytes());
    }
    for n in 1..=6u8 {
        let to = (Ipv4Addr::new(10, 9, 9, n), 5060);
        p.udp(
            T0 + SEC / 20 + i64::from(n) * SEC / 100,
            OUTSIDER,
            to,
            leg(10 + u32::from(n), to).as_bytes(),
        );
    }
    voice(&mut p, CALLER_RTP, CALLEE_RTP, 1, T0 + SEC, 10, |_| false);
    voice(&mut p, CALLEE_RTP, CALLER_RTP, 2, T0 + SEC, 10, |_| false);
    voice(&mut p, (OUTSIDER.0, 7000), CALLER_RTP, 3, T0 + 2 * SEC, 5, |i| i % 2 == 0);
    let bye = super::hostile::sip("BYE sip:alice@10.0.0.1 SIP/2.0", "legs", "2 BYE", true, "");
    p.udp(T0 + 3 * SEC, OUTSIDER, CALLER, &bye);
    let hangup =
        "BYE sip:alice@10.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.2;branch=z9hG4bKbye\r\n\
         From: <sip:bob@10.0.0.2>;tag=b\r\nTo: <sip:alice@10.0.0.1>;tag=a\r\nCall-ID: legs\r\n\
         CSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n";
    p.udp(T0 + 11 * SEC, CALLEE, CALLER, hangup.as_bytes());
    p
}

/// A call with lossy media (every third packet of the caller's lost) and,
/// 2.9 s in, an outsider's call of its own whose SDP offers T.38 at the
/// caller's media address.
pub fn sdp_of_another_call() -> Pcap {
    let mut p = Pcap::default();
    call_setup(&mut p, "victim", "");
    voice(&mut p, CALLER_RTP, CALLEE_RTP, 1, T0 + SEC, 10, |i| i % 3 == 0);
    voice(&mut p, CALLEE_RTP, CALLER_RTP, 2, T0 + SEC, 10, |_| false);
    let sdp = "v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\nm=image 40000 udptl t38\r\n";
    let invite = format!(
        "INVITE sip:bob@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.66;branch=z9hG4bKx\r\n\
         From: <sip:x@10.0.0.66>;tag=x\r\nTo: <sip:bob@10.0.0.2>\r\nCall-ID: thief\r\nCSeq: 1 INVITE\r\n\
         Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    );
    p.udp(T0 + 2_900_000_000, OUTSIDER, CALLEE, invite.as_bytes());
    p
}
