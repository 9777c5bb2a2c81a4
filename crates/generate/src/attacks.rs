//! The hostile traffic `--flood` and `--hostile` mix into a capture.

use crate::rng::Rng;
use std::net::Ipv4Addr;

/// The server the attacks target, and the source of the hostile messages
/// (the addresses the messages themselves name).
pub(crate) const VICTIM: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub(crate) const HOSTILE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 66);

/// The 407 a proxy that authenticates answers a flood INVITE with: a scan
/// against such a proxy leaves a challenged call per INVITE.
pub(crate) fn challenge(invite: &str) -> String {
    let header =
        |name: &str| invite.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_string();
    format!(
        "SIP/2.0 407 Proxy Authentication Required\r\n{}\r\n{}\r\n{};tag=p1\r\n{}\r\nCSeq: 1 INVITE\r\nProxy-Authenticate: Digest realm=\"x\", nonce=\"1\"\r\nContent-Length: 0\r\n\r\n",
        header("Via:"),
        header("From:"),
        header("To:"),
        header("Call-ID:")
    )
}

/// One forged INVITE of a flood: random Call-ID, random source, with SDP.
pub(crate) fn flood_invite(rng: &mut Rng) -> (Ipv4Addr, String) {
    let r = rng.next();
    let src = Ipv4Addr::from(0x6440_0000 | (r as u32 & 0x003F_FFFF)); // 100.64.0.0/10
    let id = format!("{:016x}{:016x}", rng.next(), rng.next());
    let port = 10_000 + (r >> 32) as u16 % 50_000 / 2 * 2;
    let body = format!(
        "v=0\r\no=- 1 1 IN IP4 {src}\r\ns=-\r\nc=IN IP4 {src}\r\nt=0 0\r\nm=audio {port} RTP/AVP 0\r\n"
    );
    let msg = format!(
        "INVITE sip:victim@192.0.2.1 SIP/2.0\r\nVia: SIP/2.0/UDP {src}:5060;branch=z9hG4bK{id}\r\nFrom: <sip:x@{src}>;tag={r:x}\r\nTo: <sip:victim@192.0.2.1>\r\nCall-ID: {id}\r\nCSeq: 1 INVITE\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    (src, msg)
}

/// One hostile message of kind `k % 5`.
pub(crate) fn hostile_message(rng: &mut Rng, k: u64) -> Vec<u8> {
    let id = format!("hostile-{:016x}", rng.next());
    let head = |extra: &str, cl: &str| {
        format!(
            "INVITE sip:victim@192.0.2.1 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.66;branch=z9hG4bK{id}\r\nFrom: <sip:x@192.0.2.66>;tag=1\r\nTo: <sip:victim@192.0.2.1>\r\nCall-ID: {id}\r\nCSeq: 1 INVITE\r\n{extra}Content-Length: {cl}\r\n\r\n"
        )
    };
    match k % 5 {
        0 => {
            let extra: String = (0..3000).map(|i| format!("X-{i}: a\r\n")).collect();
            head(&extra, "0").into_bytes()
        }
        1 => head("", "99999999999999999999").into_bytes(),
        2 => {
            let long = "c".repeat(10_000);
            head("", "0").replace(&id, &long).into_bytes()
        }
        3 => {
            let media: String =
                (0..2000).map(|i| format!("m=audio {} RTP/AVP 0\r\n", 2000 + 2 * i)).collect();
            let body = format!("v=0\r\nc=IN IP4 192.0.2.66\r\n{media}");
            let mut m = head("Content-Type: application/sdp\r\n", &body.len().to_string());
            m.push_str(&body);
            m.into_bytes()
        }
        _ => {
            let mut m = b"INVITE ".to_vec();
            m.extend((0..1400).map(|_| rng.next() as u8));
            m
        }
    }
}
