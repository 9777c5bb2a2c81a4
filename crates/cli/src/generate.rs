//! `calliper generate`: a synthetic capture of many concurrent calls with a
//! known truth, for benchmarks and tests.
//!
//! Calls arrive as a Poisson process; hold times follow an inverse Gaussian
//! (μ = 117 s, λ = 19 by default, as measured in an operator network); each
//! call picks a codec from a weighted mix and sends 20 ms packets both ways
//! with seeded random or bursty (Gilbert) loss. Addresses come from the
//! benchmarking range 198.18.0.0/15 (RFC 2544). The truth file has one JSON
//! line per stream with the packets sent and dropped.

mod attacks;
mod rng;

use anyhow::{bail, Context, Result};
use attacks::{challenge, flood_invite, hostile_message, HOSTILE, VICTIM};
use calliper_capture::pcap_out::{self, Resolution};
use calliper_wire::emit;
use rng::Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufWriter, Write};
use std::net::Ipv4Addr;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// Output pcap file.
    #[arg(long, short)]
    output: PathBuf,
    /// Per-stream truth (JSON lines): sent and dropped packets.
    #[arg(long)]
    truth: Option<PathBuf>,
    /// Calls to generate.
    #[arg(long, default_value_t = 1000)]
    calls: u64,
    /// Mean concurrent calls in steady state (sets the arrival rate).
    #[arg(long, default_value_t = 100.0)]
    concurrent: f64,
    /// Mean hold time, seconds (inverse Gaussian μ).
    #[arg(long, default_value_t = 117.0)]
    hold_mean: f64,
    /// Inverse Gaussian shape λ, seconds.
    #[arg(long, default_value_t = 19.0)]
    hold_shape: f64,
    /// Codec mix as name:weight, from pcmu, pcma, g729, g722.
    #[arg(long, default_value = "pcmu:30,pcma:20,g729:40,g722:10")]
    codecs: String,
    /// Average packet loss, percent.
    #[arg(long, default_value_t = 1.0)]
    loss: f64,
    /// Burstiness b = P(loss | previous lost); 0 gives independent loss.
    #[arg(long, default_value_t = 0.0)]
    burst: f64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Percent of RTP packets sent twice (the copy 1 ms later, with its own IP ID).
    #[arg(long, default_value_t = 0.0)]
    duplicate: f64,
    /// Percent of RTP packets held back 30 ms, so they arrive after the next one.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Also send this many INVITEs with random Call-IDs that are never
    /// answered (an INVITE flood), mixed into the calls.
    #[arg(long, default_value_t = 0)]
    flood: u64,
    /// Start in steady state: the first --concurrent calls arrive within the
    /// first second instead of over one mean hold time.
    #[arg(long)]
    warm_start: bool,
    /// Stop writing after this many seconds of traffic (calls still up are
    /// cut off without BYE), for benchmark captures of a fixed length.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// The server answers each flood INVITE with 407 (a scan against a proxy
    /// that authenticates), 1 ms later.
    #[arg(long)]
    flood_challenged: bool,
    /// Flood INVITEs per second.
    #[arg(long, default_value_t = 20_000.0)]
    flood_rate: f64,
    /// Also send this many hostile messages: thousands of headers, absurd
    /// Content-Lengths, huge Call-IDs, thousands of SDP media lines, binary junk.
    #[arg(long, default_value_t = 0)]
    hostile: u64,
}

#[derive(Clone, Copy)]
struct CodecSpec {
    name: &'static str,
    pt: u8,
    payload: usize,
    ts_step: u32,
}

fn codec(name: &str) -> Result<CodecSpec> {
    Ok(match name {
        "pcmu" => CodecSpec {
            name: "PCMU",
            pt: 0,
            payload: 160,
            ts_step: 160,
        },
        "pcma" => CodecSpec {
            name: "PCMA",
            pt: 8,
            payload: 160,
            ts_step: 160,
        },
        "g729" => CodecSpec {
            name: "G729",
            pt: 18,
            payload: 20,
            ts_step: 160,
        },
        "g722" => CodecSpec {
            name: "G722",
            pt: 9,
            payload: 160,
            ts_step: 160,
        },
        other => bail!("unknown codec {other:?} (use pcmu, pcma, g729, g722)"),
    })
}

/// Gilbert loss state per stream.
struct Loss {
    p_good_to_bad: f64,
    b: f64,
    last_lost: bool,
}

impl Loss {
    fn new(avg: f64, b: f64) -> Loss {
        // With b = P(loss | loss), stationary loss avg: p = avg (1 - b) / (1 - avg).
        let p = if b > 0.0 {
            avg * (1.0 - b) / (1.0 - avg)
        } else {
            avg
        };
        Loss {
            p_good_to_bad: p,
            b,
            last_lost: false,
        }
    }
    fn drop(&mut self, rng: &mut Rng) -> bool {
        let p = if self.last_lost && self.b > 0.0 {
            self.b
        } else {
            self.p_good_to_bad
        };
        self.last_lost = rng.uniform() < p;
        self.last_lost
    }
}

enum Ev {
    Invite(u32),
    Sip(u32, u8),
    Rtp(u32, u8),
    /// The n-th flood or hostile message.
    Flood(u32),
    /// A sender report from one side of a call.
    Rtcp(u32, u8),
}

struct Call {
    codec: CodecSpec,
    start: i64,
    answer: i64,
    end: i64,
    seq: [u16; 2],
    ts: [u32; 2],
    ssrc: [u32; 2],
    sent: [u64; 2],
    dropped: [u64; 2],
    duplicated: [u64; 2],
    reordered: [u64; 2],
    /// The previous packet was held back (never hold two in a row, so each
    /// held packet is exactly one out-of-order arrival).
    held_prev: [bool; 2],
    loss: [Loss; 2],
}

fn caller_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, (i >> 8) as u8, i as u8)
}
fn callee_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, (i >> 8) as u8, i as u8)
}
fn rtp_port(i: u32) -> u16 {
    10000 + 2 * ((i >> 16) % 20000) as u16
}

struct Writer<W: Write> {
    w: W,
    packets: u64,
}

impl<W: Write> Writer<W> {
    fn udp(
        &mut self,
        ts_ns: i64,
        src: Ipv4Addr,
        sport: u16,
        dst: Ipv4Addr,
        dport: u16,
        payload: &[u8],
    ) -> Result<()> {
        // A fresh IP ID per packet, as a sender's stack gives: a deliberate
        // duplicate is then not mistaken for a capture's copy. DF set.
        let ip = emit::Ipv4 {
            id: self.packets as u16,
            frag: 0x4000,
            ..emit::Ipv4::new(src, dst, calliper_wire::ipproto::UDP)
        }
        .emit(&emit::udp(sport, dport, payload));
        let f = emit::ethernet(&[], emit::ethertype::IPV4, &ip);
        let len = f.len() as u32;
        self.w.write_all(&pcap_out::record_header(
            ts_ns,
            len,
            len,
            Resolution::Micros,
        ))?;
        self.w.write_all(&f)?;
        self.packets += 1;
        Ok(())
    }
}

fn sdp(ip: Ipv4Addr, port: u16, c: &CodecSpec) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP {pt} 101\r\na=rtpmap:{pt} {name}/8000\r\na=rtpmap:101 telephone-event/8000\r\na=ptime:20\r\na=sendrecv\r\n",
        pt = c.pt,
        name = c.name
    )
}

fn sip(i: u32, kind: u8, c: &Call) -> (bool, String) {
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
        3 => (
            false,
            hdr("SIP/2.0 200 OK", "1 INVITE", &sdp(b, rtp_port(i), &c.codec)),
        ),
        4 => (true, hdr(&format!("ACK sip:d{i}@{b} SIP/2.0"), "1 ACK", "")),
        5 => (true, hdr(&format!("BYE sip:d{i}@{b} SIP/2.0"), "2 BYE", "")),
        _ => (false, hdr("SIP/2.0 200 OK", "2 BYE", "")),
    }
}

const MS: i64 = 1_000_000;

pub fn run(a: GenerateArgs) -> Result<()> {
    if !(0.0..=50.0).contains(&a.duplicate) || !(0.0..=50.0).contains(&a.reorder) {
        bail!("--duplicate and --reorder must be in [0, 50] percent");
    }
    if !(0.0..100.0).contains(&a.loss) || !(0.0..1.0).contains(&a.burst) {
        bail!("--loss must be in [0, 100) and --burst in [0, 1)");
    }
    if a.flood + a.hostile > u32::MAX as u64 || a.flood_rate <= 0.0 {
        bail!("--flood plus --hostile must fit in 32 bits and --flood-rate be positive");
    }
    if a.calls == 0
        || a.calls > u32::MAX as u64
        || a.concurrent <= 0.0
        || a.hold_mean <= 0.0
        || a.hold_shape <= 0.0
    {
        bail!("--calls, --concurrent, --hold-mean and --hold-shape must be positive");
    }
    let mut mix = Vec::new();
    for part in a.codecs.split(',') {
        let (name, w) = part.split_once(':').unwrap_or((part, "1"));
        let w: f64 = w
            .parse()
            .with_context(|| format!("bad weight in {part:?}"))?;
        mix.push((codec(name.trim())?, w));
    }
    let total_w: f64 = mix.iter().map(|(_, w)| w).sum();
    let mut rng = Rng(a.seed);
    let mean_interarrival = a.hold_mean / a.concurrent;
    let file = calliper_store::create_private(&a.output)
        .with_context(|| format!("cannot create {}", a.output.display()))?;
    let mut w = Writer {
        w: BufWriter::with_capacity(1 << 20, file),
        packets: 0,
    };
    w.w.write_all(&pcap_out::file_header(1, 65535, Resolution::Micros))?;
    let mut truth = match &a.truth {
        Some(p) => Some(BufWriter::new(
            calliper_store::create_private(p)
                .with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };

    let t0: i64 = 1_700_000_000 * 1_000_000_000;
    let mut calls: Vec<Option<Call>> = Vec::new();
    // (time, insertion order, call, event kind, argument): earliest first, ties in order.
    type Event = Reverse<(i64, u64, u32, u8, u8)>;
    let mut heap: BinaryHeap<Event> = BinaryHeap::new();
    let mut order = 0u64;
    let mut push = |heap: &mut BinaryHeap<_>, t: i64, ev: Ev| {
        order += 1;
        let (kind, i, arg) = match ev {
            Ev::Invite(i) => (0u8, i, 0u8),
            Ev::Sip(i, k) => (1, i, k),
            Ev::Rtp(i, d) => (2, i, d),
            Ev::Flood(i) => (3, i, 0),
            Ev::Rtcp(i, d) => (4, i, d),
        };
        heap.push(Reverse((t, order, i, kind, arg)));
    };
    push(&mut heap, t0, Ev::Invite(0));
    if a.flood + a.hostile > 0 {
        push(&mut heap, t0, Ev::Flood(0));
    }
    let flood_gap = (1e9 / a.flood_rate) as i64;
    let attacks = a.flood + a.hostile;
    let hostile_every = (attacks / a.hostile.max(1)).max(1);
    let mut hostile_sent = 0;
    let mut rtp = vec![0u8; 12 + 160];
    let stop = a.duration.map_or(i64::MAX, |d| t0 + (d * 1e9) as i64);
    // Packets written later than generated (held back, or a duplicate copy).
    type Late = Reverse<(i64, Ipv4Addr, Ipv4Addr, u16, Vec<u8>)>;
    let mut late: BinaryHeap<Late> = BinaryHeap::new();
    while let Some(Reverse((t, _, i, kind, arg))) = heap.pop() {
        if t > stop {
            break;
        }
        while late.peek().is_some_and(|l| l.0 .0 <= t) {
            if let Some(Reverse((lt, src, dst, port, bytes))) = late.pop() {
                w.udp(lt, src, port, dst, port, &bytes)?;
            }
        }
        match kind {
            0 => {
                let mut pick = rng.uniform() * total_w;
                let mut spec = mix[0].0;
                for (c, wgt) in &mix {
                    if pick < *wgt {
                        spec = *c;
                        break;
                    }
                    pick -= wgt;
                }
                let hold = rng.inverse_gaussian(a.hold_mean, a.hold_shape).max(0.5);
                let answer = t + 1000 * MS;
                let call = Call {
                    codec: spec,
                    start: t,
                    answer,
                    end: answer + (hold * 1e9) as i64,
                    seq: [rng.next() as u16, rng.next() as u16],
                    ts: [rng.next() as u32, rng.next() as u32],
                    ssrc: [rng.next() as u32, rng.next() as u32],
                    sent: [0; 2],
                    dropped: [0; 2],
                    duplicated: [0; 2],
                    reordered: [0; 2],
                    held_prev: [false; 2],
                    loss: [
                        Loss::new(a.loss / 100.0, a.burst),
                        Loss::new(a.loss / 100.0, a.burst),
                    ],
                };
                calls.push(Some(call));
                push(&mut heap, t, Ev::Sip(i, 0));
                if (i as u64) + 1 < a.calls {
                    let gap = if a.warm_start && ((i as u64) + 1) < a.concurrent as u64 {
                        1.0 / a.concurrent
                    } else {
                        rng.exp(mean_interarrival)
                    };
                    let next = t + (gap * 1e9) as i64;
                    push(&mut heap, next, Ev::Invite(i + 1));
                }
            }
            1 => {
                let Some(c) = calls[i as usize].as_ref() else {
                    continue;
                };
                let (from_caller, msg) = sip(i, arg, c);
                let (src, dst) = if from_caller {
                    (caller_ip(i), callee_ip(i))
                } else {
                    (callee_ip(i), caller_ip(i))
                };
                w.udp(t, src, 5060, dst, 5060, msg.as_bytes())?;
                let (answer, end, start) = (c.answer, c.end, c.start);
                match arg {
                    0 => push(&mut heap, start + MS, Ev::Sip(i, 1)),
                    1 => push(&mut heap, start + 50 * MS, Ev::Sip(i, 2)),
                    2 => push(&mut heap, answer, Ev::Sip(i, 3)),
                    3 => {
                        push(&mut heap, answer + MS, Ev::Sip(i, 4));
                        push(&mut heap, answer + 20 * MS, Ev::Rtp(i, 0));
                        push(&mut heap, answer + 21 * MS, Ev::Rtp(i, 1));
                        push(&mut heap, answer + 5000 * MS, Ev::Rtcp(i, 0));
                        push(&mut heap, answer + 5001 * MS, Ev::Rtcp(i, 1));
                    }
                    4 => {}
                    5 => push(&mut heap, end + 2 * MS, Ev::Sip(i, 6)),
                    _ => {
                        let c = calls[i as usize].take().expect("call alive");
                        if let Some(tw) = truth.as_mut() {
                            for d in 0..2 {
                                let (sip, dip) = if d == 0 {
                                    (caller_ip(i), callee_ip(i))
                                } else {
                                    (callee_ip(i), caller_ip(i))
                                };
                                writeln!(
                                    tw,
                                    "{{\"call_id\":\"gen-{i}@calliper\",\"src\":\"{sip}\",\"dst\":\"{dip}\",\"ssrc\":{},\"codec\":\"{}\",\"sent\":{},\"dropped\":{},\"duplicated\":{},\"reordered\":{}}}",
                                    c.ssrc[d], c.codec.name, c.sent[d], c.dropped[d], c.duplicated[d], c.reordered[d]
                                )?;
                            }
                        }
                    }
                }
            }
            4 => {
                // RTCP every 5 s from each side (RTP port + 1): a sender report
                // with one block about the stream it receives.
                let Some(c) = calls[i as usize].as_ref() else {
                    continue;
                };
                if t >= c.end {
                    continue;
                }
                let (d, o) = (arg as usize, 1 - arg as usize);
                let mut p = vec![0x81, 200, 0, 12];
                p.extend_from_slice(&c.ssrc[d].to_be_bytes());
                let ntp_sec = (t / 1_000_000_000 + 2_208_988_800) as u32;
                let ntp_frac = (((t % 1_000_000_000) as u64) << 32) / 1_000_000_000;
                p.extend_from_slice(&ntp_sec.to_be_bytes());
                p.extend_from_slice(&(ntp_frac as u32).to_be_bytes());
                p.extend_from_slice(&c.ts[d].to_be_bytes());
                p.extend_from_slice(&(c.sent[d] as u32).to_be_bytes());
                p.extend_from_slice(&((c.sent[d] * c.codec.payload as u64) as u32).to_be_bytes());
                p.extend_from_slice(&c.ssrc[o].to_be_bytes());
                // Fraction lost 0 (not tracked per interval), cumulative lost 24 bits.
                let lost = (c.dropped[o] as u32).min(0x7F_FFFF);
                p.extend_from_slice(&lost.to_be_bytes());
                p.extend_from_slice(&(c.seq[o] as u32).wrapping_sub(1).to_be_bytes());
                p.extend_from_slice(&[0; 12]); // jitter, LSR, DLSR
                let (src, dst) = if d == 0 {
                    (caller_ip(i), callee_ip(i))
                } else {
                    (callee_ip(i), caller_ip(i))
                };
                let port = rtp_port(i) + 1;
                w.udp(t, src, port, dst, port, &p)?;
                push(&mut heap, t + 5000 * MS, Ev::Rtcp(i, arg));
            }
            3 => {
                // Hostile messages are spread evenly through the flood.
                let k = i as u64;
                if hostile_sent < a.hostile && k.is_multiple_of(hostile_every) {
                    let m = hostile_message(&mut rng, hostile_sent);
                    hostile_sent += 1;
                    w.udp(t, HOSTILE, 5060, VICTIM, 5060, &m)?;
                } else {
                    let (src, m) = flood_invite(&mut rng);
                    w.udp(t, src, 5060, VICTIM, 5060, m.as_bytes())?;
                    if a.flood_challenged {
                        let answer = challenge(&m);
                        w.udp(t + MS, VICTIM, 5060, src, 5060, answer.as_bytes())?;
                    }
                }
                if k + 1 < attacks {
                    push(&mut heap, t + flood_gap, Ev::Flood(i + 1));
                }
            }
            _ => {
                let Some(c) = calls[i as usize].as_mut() else {
                    continue;
                };
                let d = arg as usize;
                if t >= c.end {
                    if d == 0 {
                        push(&mut heap, c.end + MS, Ev::Sip(i, 5));
                    }
                    continue;
                }
                let spec = c.codec;
                rtp.truncate(12);
                rtp[0] = 0x80;
                rtp[1] = spec.pt;
                rtp[2..4].copy_from_slice(&c.seq[d].to_be_bytes());
                rtp[4..8].copy_from_slice(&c.ts[d].to_be_bytes());
                rtp[8..12].copy_from_slice(&c.ssrc[d].to_be_bytes());
                rtp.resize(12 + spec.payload, 0xD5);
                c.seq[d] = c.seq[d].wrapping_add(1);
                c.ts[d] = c.ts[d].wrapping_add(spec.ts_step);
                c.sent[d] += 1;
                // The first and last packets always arrive, so expected is known from the truth.
                let last = t + 20 * MS >= c.end;
                let dropped = c.sent[d] > 1 && !last && c.loss[d].drop(&mut rng);
                let port = rtp_port(i);
                let (src, dst) = if d == 0 {
                    (caller_ip(i), callee_ip(i))
                } else {
                    (callee_ip(i), caller_ip(i))
                };
                let first = c.sent[d] == 1;
                let hold = !dropped
                    && !first
                    && !last
                    && !c.held_prev[d]
                    && a.reorder > 0.0
                    && rng.uniform() * 100.0 < a.reorder;
                c.held_prev[d] = hold;
                if dropped {
                    c.dropped[d] += 1;
                } else if hold {
                    c.reordered[d] += 1;
                    late.push(Reverse((t + 30 * MS, src, dst, port, rtp.clone())));
                } else {
                    w.udp(t, src, port, dst, port, &rtp)?;
                    if a.duplicate > 0.0 && rng.uniform() * 100.0 < a.duplicate {
                        c.duplicated[d] += 1;
                        late.push(Reverse((t + MS, src, dst, port, rtp.clone())));
                    }
                }
                push(&mut heap, t + 20 * MS, Ev::Rtp(i, arg));
            }
        }
    }
    while let Some(Reverse((lt, src, dst, port, bytes))) = late.pop() {
        w.udp(lt, src, port, dst, port, &bytes)?;
    }
    w.w.flush()?;
    if let Some(tw) = truth.as_mut() {
        tw.flush()?;
    }
    eprintln!(
        "calliper: wrote {} packets of {} calls to {}",
        w.packets,
        a.calls,
        a.output.display()
    );
    Ok(())
}
