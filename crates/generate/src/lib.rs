//! Synthetic captures of many concurrent calls with a known truth, for
//! benchmarks, tests and fuzz targets (`calliper generate` is a thin
//! command around it).
//!
//! Calls arrive as a Poisson process; hold times follow an inverse Gaussian
//! (μ = 117 s, λ = 19 by default, as measured in an operator network); each
//! call picks a codec from a weighted mix and sends 20 ms packets both ways
//! with seeded random or bursty (Gilbert) loss. Addresses come from the
//! benchmarking range 198.18.0.0/15 (RFC 2544). The truth has one JSON line
//! per stream with the packets sent and dropped. The same spec gives the
//! same bytes.

mod attacks;
mod calls;
mod rng;
mod spec;

use attacks::{challenge, flood_invite, hostile_message, HOSTILE, VICTIM};
use calliper_capture::pcap_out::{self, Resolution};
use calliper_wire::emit;
use calls::{ends, rtp_port, sip_message, Call, Loss};
use rng::Rng;
use spec::Codec;
pub use spec::Spec;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Write};
use std::net::Ipv4Addr;

const MS: i64 = 1_000_000;
/// When the first call starts (2023-11-14).
const T0: i64 = 1_700_000_000 * 1_000_000_000;

/// Why a capture could not be made.
#[derive(Debug)]
pub enum Error {
    /// A parameter out of range (the message names its option).
    Spec(String),
    /// Writing the capture or the truth failed.
    Io(io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Spec(m) => f.write_str(m),
            Error::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// What a generation made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Made {
    /// Frames written.
    pub packets: u64,
    /// Calls started (fewer than asked when `duration` cut the capture).
    pub calls: u64,
}

/// Writes the capture as a pcap (Ethernet, microsecond times) to `out`, and
/// the truth to `truth`.
pub fn write_pcap(
    spec: &Spec,
    out: &mut dyn Write,
    truth: Option<&mut dyn Write>,
) -> Result<Made, Error> {
    out.write_all(&pcap_out::file_header(1, 65535, Resolution::Micros))?;
    let mut record = |ts_ns: i64, frame: &[u8]| {
        let len = frame.len() as u32;
        out.write_all(&pcap_out::record_header(ts_ns, len, len, Resolution::Micros))?;
        out.write_all(frame)
    };
    generate(spec, &mut record, truth)
}

/// Hands each Ethernet frame of the capture, in capture order, to `frame`
/// (capture time in ns, bytes), and the truth to `truth`: a line per stream
/// of each call that ended (a call cut off by `duration` has none).
pub fn generate(
    spec: &Spec,
    frame: &mut dyn FnMut(i64, &[u8]) -> io::Result<()>,
    truth: Option<&mut dyn Write>,
) -> Result<Made, Error> {
    let mix = spec.checked_mix().map_err(Error::Spec)?;
    let attacks = spec.flood + spec.hostile;
    let mut run = Run {
        spec,
        total_w: mix.iter().map(|(_, w)| w).sum(),
        mix,
        rng: Rng(spec.seed),
        calls: Vec::new(),
        agenda: Agenda::default(),
        late: BinaryHeap::new(),
        hostile_sent: 0,
        hostile_every: (attacks / spec.hostile.max(1)).max(1),
        rtp: vec![0u8; 12 + 160],
        out: Out { frame, truth, packets: 0 },
    };
    run.run()?;
    Ok(Made { packets: run.out.packets, calls: run.calls.len() as u64 })
}

/// What happens next to a call (or the attack traffic).
enum Ev {
    Invite(u32),
    Sip(u32, u8),
    Rtp(u32, u8),
    /// The n-th flood or hostile message.
    Flood(u32),
    /// A sender report from one side of a call.
    Rtcp(u32, u8),
}

/// (time, insertion order, call, event kind, argument).
type Scheduled = (i64, u64, u32, u8, u8);

/// Events by time (earliest first), ties in the order they were scheduled.
#[derive(Default)]
struct Agenda {
    heap: BinaryHeap<Reverse<Scheduled>>,
    order: u64,
}

impl Agenda {
    fn push(&mut self, t: i64, ev: Ev) {
        self.order += 1;
        let (kind, i, arg) = match ev {
            Ev::Invite(i) => (0u8, i, 0u8),
            Ev::Sip(i, k) => (1, i, k),
            Ev::Rtp(i, d) => (2, i, d),
            Ev::Flood(i) => (3, i, 0),
            Ev::Rtcp(i, d) => (4, i, d),
        };
        self.heap.push(Reverse((t, self.order, i, kind, arg)));
    }
}

/// Where frames go.
struct Out<'f, 't> {
    frame: &'f mut dyn FnMut(i64, &[u8]) -> io::Result<()>,
    truth: Option<&'t mut dyn Write>,
    packets: u64,
}

impl Out<'_, '_> {
    /// An Ethernet/IPv4/UDP frame. A fresh IP ID per packet, as a sender's
    /// stack gives: a deliberate duplicate is then not mistaken for a
    /// capture's copy. DF set.
    fn udp(
        &mut self,
        t: i64,
        src: Ipv4Addr,
        sport: u16,
        dst: Ipv4Addr,
        dport: u16,
        payload: &[u8],
    ) -> io::Result<()> {
        let ip = emit::Ipv4 {
            id: self.packets as u16,
            frag: 0x4000,
            ..emit::Ipv4::new(src, dst, calliper_wire::ipproto::UDP)
        }
        .emit(&emit::udp(sport, dport, payload));
        (self.frame)(t, &emit::ethernet(&[], emit::ethertype::IPV4, &ip))?;
        self.packets += 1;
        Ok(())
    }
}

/// A packet written later than generated (held back, or a duplicate copy).
type Late = Reverse<(i64, Ipv4Addr, Ipv4Addr, u16, Vec<u8>)>;

/// One generation under way.
struct Run<'s, 'f, 't> {
    spec: &'s Spec,
    mix: Vec<(Codec, f64)>,
    total_w: f64,
    rng: Rng,
    calls: Vec<Option<Call>>,
    agenda: Agenda,
    late: BinaryHeap<Late>,
    hostile_sent: u64,
    hostile_every: u64,
    /// The RTP packet being built (reused).
    rtp: Vec<u8>,
    out: Out<'f, 't>,
}

impl Run<'_, '_, '_> {
    fn run(&mut self) -> io::Result<()> {
        self.agenda.push(T0, Ev::Invite(0));
        if self.spec.flood + self.spec.hostile > 0 {
            self.agenda.push(T0, Ev::Flood(0));
        }
        let stop = self.spec.duration.map_or(i64::MAX, |d| T0 + (d * 1e9) as i64);
        while let Some(Reverse((t, _, i, kind, arg))) = self.agenda.heap.pop() {
            if t > stop {
                break;
            }
            while self.late.peek().is_some_and(|l| l.0 .0 <= t) {
                if let Some(Reverse((lt, src, dst, port, bytes))) = self.late.pop() {
                    self.out.udp(lt, src, port, dst, port, &bytes)?;
                }
            }
            match kind {
                0 => self.invite(t, i),
                1 => self.sip(t, i, arg)?,
                3 => self.attack(t, i)?,
                4 => self.rtcp(t, i, arg)?,
                _ => self.rtp(t, i, arg)?,
            }
        }
        while let Some(Reverse((lt, src, dst, port, bytes))) = self.late.pop() {
            self.out.udp(lt, src, port, dst, port, &bytes)?;
        }
        Ok(())
    }

    /// Call `i` starts: its codec, hold time and numbering; the next call's
    /// arrival.
    fn invite(&mut self, t: i64, i: u32) {
        let spec = self.spec;
        let mut pick = self.rng.uniform() * self.total_w;
        let mut codec = self.mix[0].0;
        for (c, wgt) in &self.mix {
            if pick < *wgt {
                codec = *c;
                break;
            }
            pick -= wgt;
        }
        let rng = &mut self.rng;
        let hold = rng.inverse_gaussian(spec.hold_mean, spec.hold_shape).max(0.5);
        let answer = t + 1000 * MS;
        let call = Call {
            codec,
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
                Loss::new(spec.loss / 100.0, spec.burst),
                Loss::new(spec.loss / 100.0, spec.burst),
            ],
        };
        self.calls.push(Some(call));
        self.agenda.push(t, Ev::Sip(i, 0));
        if (i as u64) + 1 < spec.calls {
            let gap = if spec.warm_start && ((i as u64) + 1) < spec.concurrent as u64 {
                1.0 / spec.concurrent
            } else {
                self.rng.exp(spec.hold_mean / spec.concurrent)
            };
            self.agenda.push(t + (gap * 1e9) as i64, Ev::Invite(i + 1));
        }
    }

    /// Message `arg` of call `i`'s dialog, and what it sets off.
    fn sip(&mut self, t: i64, i: u32, arg: u8) -> io::Result<()> {
        let Some(c) = self.calls[i as usize].as_ref() else {
            return Ok(());
        };
        let (from_caller, msg) = sip_message(i, arg, c);
        let (src, dst) = ends(i, !from_caller);
        self.out.udp(t, src, 5060, dst, 5060, msg.as_bytes())?;
        let (answer, end, start) = (c.answer, c.end, c.start);
        let a = &mut self.agenda;
        match arg {
            0 => a.push(start + MS, Ev::Sip(i, 1)),
            1 => a.push(start + 50 * MS, Ev::Sip(i, 2)),
            2 => a.push(answer, Ev::Sip(i, 3)),
            3 => {
                a.push(answer + MS, Ev::Sip(i, 4));
                a.push(answer + 20 * MS, Ev::Rtp(i, 0));
                a.push(answer + 21 * MS, Ev::Rtp(i, 1));
                a.push(answer + 5000 * MS, Ev::Rtcp(i, 0));
                a.push(answer + 5001 * MS, Ev::Rtcp(i, 1));
            }
            4 => {}
            5 => a.push(end + 2 * MS, Ev::Sip(i, 6)),
            _ => {
                let c = self.calls[i as usize].take().expect("call alive");
                if let Some(tw) = self.out.truth.as_mut() {
                    c.write_truth(i, tw)?;
                }
            }
        }
        Ok(())
    }

    /// The `i`-th flood INVITE (with its 407 if asked) or hostile message:
    /// hostile messages are spread evenly through the flood.
    fn attack(&mut self, t: i64, i: u32) -> io::Result<()> {
        let spec = self.spec;
        let k = i as u64;
        if self.hostile_sent < spec.hostile && k.is_multiple_of(self.hostile_every) {
            let m = hostile_message(&mut self.rng, self.hostile_sent);
            self.hostile_sent += 1;
            self.out.udp(t, HOSTILE, 5060, VICTIM, 5060, &m)?;
        } else {
            let (src, m) = flood_invite(&mut self.rng);
            self.out.udp(t, src, 5060, VICTIM, 5060, m.as_bytes())?;
            if spec.flood_challenged {
                let answer = challenge(&m);
                self.out.udp(t + MS, VICTIM, 5060, src, 5060, answer.as_bytes())?;
            }
        }
        if k + 1 < spec.flood + spec.hostile {
            let gap = (1e9 / spec.flood_rate) as i64;
            self.agenda.push(t + gap, Ev::Flood(i + 1));
        }
        Ok(())
    }

    /// RTCP every 5 s from each side (RTP port + 1): a sender report with
    /// one block about the stream it receives.
    fn rtcp(&mut self, t: i64, i: u32, arg: u8) -> io::Result<()> {
        let Some(c) = self.calls[i as usize].as_ref() else {
            return Ok(());
        };
        if t >= c.end {
            return Ok(());
        }
        let p = c.sender_report(t, arg as usize);
        let (src, dst) = ends(i, arg == 1);
        let port = rtp_port(i) + 1;
        self.out.udp(t, src, port, dst, port, &p)?;
        self.agenda.push(t + 5000 * MS, Ev::Rtcp(i, arg));
        Ok(())
    }

    /// The next RTP packet of call `i` in direction `arg` (0: from the
    /// caller): lost, held back, sent, or sent twice.
    fn rtp(&mut self, t: i64, i: u32, arg: u8) -> io::Result<()> {
        let spec = self.spec;
        let Some(c) = self.calls[i as usize].as_mut() else {
            return Ok(());
        };
        let d = arg as usize;
        if t >= c.end {
            if d == 0 {
                self.agenda.push(c.end + MS, Ev::Sip(i, 5));
            }
            return Ok(());
        }
        c.next_rtp(d, &mut self.rtp);
        // The first and last packets always arrive, so expected is known from the truth.
        let last = t + 20 * MS >= c.end;
        let dropped = c.sent[d] > 1 && !last && c.loss[d].drop(&mut self.rng);
        let port = rtp_port(i);
        let (src, dst) = ends(i, d == 1);
        let first = c.sent[d] == 1;
        let hold = !dropped
            && !first
            && !last
            && !c.held_prev[d]
            && spec.reorder > 0.0
            && self.rng.uniform() * 100.0 < spec.reorder;
        c.held_prev[d] = hold;
        if dropped {
            c.dropped[d] += 1;
        } else if hold {
            c.reordered[d] += 1;
            self.late.push(Reverse((t + 30 * MS, src, dst, port, self.rtp.clone())));
        } else {
            self.out.udp(t, src, port, dst, port, &self.rtp)?;
            if spec.duplicate > 0.0 && self.rng.uniform() * 100.0 < spec.duplicate {
                c.duplicated[d] += 1;
                self.late.push(Reverse((t + MS, src, dst, port, self.rtp.clone())));
            }
        }
        self.agenda.push(t + 20 * MS, Ev::Rtp(i, arg));
        Ok(())
    }
}
