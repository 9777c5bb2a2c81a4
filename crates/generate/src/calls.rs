//! One generated call: its addresses, its SIP dialog, its RTP and RTCP, and
//! the truth it leaves.

use crate::rng::Rng;
use crate::spec::Codec;
use std::io::{self, Write};
use std::net::Ipv4Addr;

/// Gilbert loss state per stream.
pub(crate) struct Loss {
    p_good_to_bad: f64,
    b: f64,
    last_lost: bool,
}

impl Loss {
    pub(crate) fn new(avg: f64, b: f64) -> Loss {
        // With b = P(loss | loss), stationary loss avg: p = avg (1 - b) / (1 - avg).
        let p = if b > 0.0 { avg * (1.0 - b) / (1.0 - avg) } else { avg };
        Loss { p_good_to_bad: p, b, last_lost: false }
    }

    pub(crate) fn drop(&mut self, rng: &mut Rng) -> bool {
        let p = if self.last_lost && self.b > 0.0 { self.b } else { self.p_good_to_bad };
        self.last_lost = rng.uniform() < p;
        self.last_lost
    }
}

/// A call, each array indexed by direction (0: from the caller).
pub(crate) struct Call {
    pub(crate) codec: Codec,
    pub(crate) start: i64,
    pub(crate) answer: i64,
    pub(crate) end: i64,
    pub(crate) seq: [u16; 2],
    pub(crate) ts: [u32; 2],
    pub(crate) ssrc: [u32; 2],
    pub(crate) sent: [u64; 2],
    pub(crate) dropped: [u64; 2],
    pub(crate) duplicated: [u64; 2],
    pub(crate) reordered: [u64; 2],
    /// The previous packet was held back (never hold two in a row, so each
    /// held packet is exactly one out-of-order arrival).
    pub(crate) held_prev: [bool; 2],
    pub(crate) loss: [Loss; 2],
}

pub(crate) fn caller_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, (i >> 8) as u8, i as u8)
}

pub(crate) fn callee_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, (i >> 8) as u8, i as u8)
}

pub(crate) fn rtp_port(i: u32) -> u16 {
    10000 + 2 * ((i >> 16) % 20000) as u16
}

/// Call `i`'s (source, destination): from the caller, or from the callee.
pub(crate) fn ends(i: u32, from_callee: bool) -> (Ipv4Addr, Ipv4Addr) {
    if from_callee {
        (callee_ip(i), caller_ip(i))
    } else {
        (caller_ip(i), callee_ip(i))
    }
}

impl Call {
    /// Builds the next RTP packet of direction `d` in `rtp` and counts it sent.
    pub(crate) fn next_rtp(&mut self, d: usize, rtp: &mut Vec<u8>) {
        rtp.truncate(12);
        rtp[0] = 0x80;
        rtp[1] = self.codec.pt;
        rtp[2..4].copy_from_slice(&self.seq[d].to_be_bytes());
        rtp[4..8].copy_from_slice(&self.ts[d].to_be_bytes());
        rtp[8..12].copy_from_slice(&self.ssrc[d].to_be_bytes());
        rtp.resize(12 + self.codec.payload, 0xD5);
        self.seq[d] = self.seq[d].wrapping_add(1);
        self.ts[d] = self.ts[d].wrapping_add(self.codec.ts_step);
        self.sent[d] += 1;
    }

    /// Direction `d`'s sender report at `t`, with one block about the
    /// stream it receives.
    pub(crate) fn sender_report(&self, t: i64, d: usize) -> Vec<u8> {
        let o = 1 - d;
        let mut p = vec![0x81, 200, 0, 12];
        p.extend_from_slice(&self.ssrc[d].to_be_bytes());
        let ntp_sec = (t / 1_000_000_000 + 2_208_988_800) as u32;
        let ntp_frac = (((t % 1_000_000_000) as u64) << 32) / 1_000_000_000;
        p.extend_from_slice(&ntp_sec.to_be_bytes());
        p.extend_from_slice(&(ntp_frac as u32).to_be_bytes());
        p.extend_from_slice(&self.ts[d].to_be_bytes());
        p.extend_from_slice(&(self.sent[d] as u32).to_be_bytes());
        let octets = self.sent[d] * self.codec.payload as u64;
        p.extend_from_slice(&(octets as u32).to_be_bytes());
        p.extend_from_slice(&self.ssrc[o].to_be_bytes());
        // Fraction lost 0 (not tracked per interval), cumulative lost 24 bits.
        let lost = (self.dropped[o] as u32).min(0x7F_FFFF);
        p.extend_from_slice(&lost.to_be_bytes());
        p.extend_from_slice(&(self.seq[o] as u32).wrapping_sub(1).to_be_bytes());
        p.extend_from_slice(&[0; 12]); // jitter, LSR, DLSR
        p
    }

    /// The truth of call `i`: a JSON line per stream.
    pub(crate) fn write_truth(&self, i: u32, out: &mut dyn Write) -> io::Result<()> {
        for d in 0..2 {
            let (src, dst) = ends(i, d == 1);
            writeln!(
                out,
                "{{\"call_id\":\"gen-{i}@calliper\",\"src\":\"{src}\",\"dst\":\"{dst}\",\"ssrc\":{},\"codec\":\"{}\",\"sent\":{},\"dropped\":{},\"duplicated\":{},\"reordered\":{}}}",
                self.ssrc[d], self.codec.name, self.sent[d], self.dropped[d], self.duplicated[d], self.reordered[d]
            )?;
        }
        Ok(())
    }
}

fn sdp(ip: Ipv4Addr, port: u16, c: &Codec) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP {pt} 101\r\na=rtpmap:{pt} {name}/8000\r\na=rtpmap:101 telephone-event/8000\r\na=ptime:20\r\na=sendrecv\r\n",
        pt = c.pt,
        name = c.name
    )
}

/// Message `kind` of call `i`'s dialog (INVITE, 100, 180, 200, ACK, BYE,
/// 200), and whether the caller sends it.
pub(crate) fn sip_message(i: u32, kind: u8, c: &Call) -> (bool, String) {
    let (a, b) = (caller_ip(i), callee_ip(i));
    let hdr = |first: &str, cseq: &str, body: &str| {
        format!(
            "{first}\r\nVia: SIP/2.0/UDP {a}:5060;branch=z9hG4bK{i}{cseq_n}\r\nFrom: \"User {i}\" <sip:u{i}@{a}>;tag=a{i}\r\nTo: <sip:d{i}@{b}>{totag}\r\nCall-ID: gen-{i}@calliper\r\nCSeq: {cseq}\r\nUser-Agent: calliper-generate\r\n{ct}Content-Length: {len}\r\n\r\n{body}",
            cseq_n = cseq.len(),
            totag = if first.starts_with("INVITE") { "".into() } else { format!(";tag=b{i}") },
            ct = if body.is_empty() { "" } else { "Content-Type: application/sdp\r\n" },
            len = body.len()
        )
    };
    match kind {
        0 => (
            true,
            hdr(
                &format!("INVITE sip:d{i}@{b} SIP/2.0"),
                "1 INVITE",
                &sdp(a, rtp_port(i), &c.codec),
            ),
        ),
        1 => (false, hdr("SIP/2.0 100 Trying", "1 INVITE", "")),
        2 => (false, hdr("SIP/2.0 180 Ringing", "1 INVITE", "")),
        3 => (false, hdr("SIP/2.0 200 OK", "1 INVITE", &sdp(b, rtp_port(i), &c.codec))),
        4 => (true, hdr(&format!("ACK sip:d{i}@{b} SIP/2.0"), "1 ACK", "")),
        5 => (true, hdr(&format!("BYE sip:d{i}@{b} SIP/2.0"), "2 BYE", "")),
        _ => (false, hdr("SIP/2.0 200 OK", "2 BYE", "")),
    }
}
