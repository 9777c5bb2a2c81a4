//! A call's voice as two channels, caller and callee: the stored call says
//! which streams it had (addresses, ports, SSRC, direction, codec); the
//! packets of a capture are matched to them, each stream decoded into its
//! timeline, and each direction's timelines mixed into its channel at their
//! first packets' arrival. Shared by `calliper export audio` and the
//! console's player; what each stream gave, or why it was left out, comes
//! back as notes to show.

use crate::timeline::{Codec, Timeline, TimelineStats, MAX_SECONDS};
use calliper_model::stored::{StoredCall, StoredStream};
use calliper_wire::rtp::{looks_like_rtcp, RtpHeader};
use std::collections::HashMap;
use std::net::IpAddr;

/// Most streams of one call decoded at once: each timeline may hold up to
/// its stored span of audio, and a database can claim any number.
pub const MAX_DECODED: usize = 32;

/// The flow of a stream: addresses, ports, SSRC.
type Key = (IpAddr, u16, IpAddr, u16, u32);
/// Most DTMF events of streams of their own kept for the notes.
pub const MAX_DTMF: usize = 1000;
/// Slack around a stream's call (its INVITE to its end, or the stream's
/// own first and last packet where they lie outside) within which a packet
/// of its flow is taken as its own: the record was measured from the same
/// packets, so only a clock stepped back or reordered capture times fall
/// outside it. Another call on the same addresses, ports and SSRC (a SIPp
/// scenario replayed, a phone reusing its ports) lies further away.
pub const WINDOW_SLACK_NS: i64 = 10_000_000_000;

/// The times (ns since the epoch) a stream's packets may arrive at.
#[derive(Clone, Copy)]
struct Window {
    from_ns: i64,
    to_ns: i64,
}

impl Window {
    fn of(call: &StoredCall, s: &StoredStream) -> Window {
        Window {
            from_ns: s.first_ns.min(call.invite_ns).saturating_sub(WINDOW_SLACK_NS),
            to_ns: s.last_ns.max(call.end_ns).saturating_add(WINDOW_SLACK_NS),
        }
    }

    fn holds(self, ts_ns: i64) -> bool {
        (self.from_ns..=self.to_ns).contains(&ts_ns)
    }
}

/// What a stream's packets go to.
enum Target {
    /// The voice stream decoded at this index.
    Voice(usize),
    /// RFC 4733 events on an SSRC of their own, from this side (true:
    /// the caller), the last event's timestamp (one mark per event), and
    /// the stream's index in [`CallAudio::event_streams`].
    Events(bool, Option<u32>, usize),
}

/// A DTMF event: when it arrived, from which side, which (RFC 4733 code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dtmf {
    /// Arrival, ns since the epoch.
    arrival_ns: i64,
    /// From the caller.
    caller: bool,
    /// 0-9, 10 = *, 11 = #, 12-15 = A-D.
    event: u8,
}

/// One stream being decoded: its direction (true: caller to callee), its
/// timeline and a name for the notes.
struct Decoding {
    caller: bool,
    timeline: Timeline,
    name: String,
    /// When its first packet arrived.
    first_ns: Option<i64>,
}

/// A call's streams being decoded from a capture's packets.
pub struct CallAudio {
    decodings: Vec<Decoding>,
    index: HashMap<Key, (Window, Target)>,
    /// Events of streams of their own, in arrival order.
    dtmf: Vec<Dtmf>,
    /// Streams of events of their own: name and events seen.
    event_streams: Vec<(String, u64)>,
    /// The voice streams decoded: side and SSRC.
    legs: Vec<(bool, u32)>,
    /// The stored streams' span (ns): bounds the channels.
    span_ns: i64,
    /// Packets matched to a stream.
    pub matched: u64,
    /// Packets of a stream's flow (addresses, ports, SSRC) outside its
    /// time: another call's, left out.
    pub outside: u64,
    /// What was left out and why, then what each stream gave.
    pub notes: Vec<String>,
}

/// Two channels at one rate, and what went into them.
pub struct Mixed {
    /// Samples per second.
    pub rate: u32,
    /// The caller's side.
    pub left: Vec<i16>,
    /// The callee's side.
    pub right: Vec<i16>,
    /// What each stream gave, and any cut, and the DTMF events.
    pub notes: Vec<String>,
}

impl CallAudio {
    /// A timeline for each stream with a decodable codec, a side and
    /// valid addresses; every stream left out is named, with why.
    pub fn new(call: &StoredCall, name: impl Fn(&str) -> String) -> CallAudio {
        let mut a = CallAudio {
            decodings: Vec::new(),
            index: HashMap::new(),
            dtmf: Vec::new(),
            event_streams: Vec::new(),
            legs: Vec::new(),
            span_ns: call
                .streams
                .iter()
                .map(|s| s.last_ns)
                .max()
                .unwrap_or(0)
                .saturating_sub(call.streams.iter().map(|s| s.first_ns).min().unwrap_or(0)),
            matched: 0,
            outside: 0,
            notes: Vec::new(),
        };
        // Last seen first: of a relayed voice's legs, the one nearest its
        // listener (the relay's way out) is what was heard.
        let mut streams: Vec<&StoredStream> = call.streams.iter().collect();
        streams.sort_by_key(|s| std::cmp::Reverse(s.first_ns));
        for s in streams {
            let name = name(&format!(
                "{}:{} -> {}:{} ssrc {:#010x}",
                s.src, s.src_port, s.dst, s.dst_port, s.ssrc
            ));
            let codec = s.codec.as_deref().and_then(Codec::from_name);
            let usable = match (codec.zip(s.payload_type), key(s), side(&s.direction)) {
                _ if a.decodings.len() >= MAX_DECODED => {
                    Err("more streams than are decoded for one call (32)")
                }
                // A relay (rtpengine) passes media on with its SSRC: the
                // same voice on another leg would be heard twice.
                (Some(_), Some(_), Some(caller)) if a.legs.contains(&(caller, s.ssrc)) => {
                    Err("the same media on another leg (relayed with its SSRC): the leg nearest its listener is played")
                }
                (Some(codec), Some(k), Some(caller)) if !a.index.contains_key(&k) => {
                    Ok((codec, k, caller))
                }
                (None, Some(k), Some(caller))
                    if s.codec
                        .as_deref()
                        .is_some_and(|c| c.eq_ignore_ascii_case("telephone-event"))
                        && !a.index.contains_key(&k) =>
                {
                    let events = Target::Events(caller, None, a.event_streams.len());
                    a.index.insert(k, (Window::of(call, s), events));
                    a.event_streams.push((name, 0));
                    continue;
                }
                (None, ..) => Err("a codec not decoded here (G.711, G.722, Opus are): silent"),
                (_, None, _) => Err("addresses that do not parse"),
                (_, _, None) => Err("no side of the call (direction unknown)"),
                _ => Err("a second record of the same flow"),
            };
            let ((codec, pt), k, caller) = match usable {
                Ok(stream) => stream,
                Err(why) => {
                    a.notes.push(format!("stream {name}: left out: {why}"));
                    continue;
                }
            };
            a.index.insert(k, (Window::of(call, s), Target::Voice(a.decodings.len())));
            a.legs.push((caller, s.ssrc));
            a.decodings.push(Decoding {
                caller,
                // Room for the stream's span as stored, and some slack.
                timeline: Timeline::new(codec, pt, Some(101)).limit_seconds(
                    (s.last_ns.saturating_sub(s.first_ns).max(0) / 1_000_000_000) as u64 + 10,
                ),
                name,
                first_ns: None,
            });
        }
        a
    }

    /// Whether any stream is to be decoded.
    pub fn is_empty(&self) -> bool {
        self.decodings.is_empty()
    }

    /// The most memory decoding can take (bytes): every timeline full, and
    /// both channels at the highest rate for the stored span and 10 s.
    /// The stored call is input too: a caller with less memory to give
    /// refuses a call whose bound is over it before decoding.
    pub fn memory_bound(&self) -> usize {
        let timelines: usize = self.decodings.iter().map(|d| d.timeline.max_samples()).sum();
        let rate = self.decodings.iter().map(|d| d.timeline.rate()).max().unwrap_or(8000) as usize;
        let seconds = (self.span_ns.max(0) / 1_000_000_000 + 10).min(MAX_SECONDS as i64) as usize;
        2 * timelines + 2 * 2 * seconds * rate
    }

    /// Takes one captured frame: an RTP packet of one of the streams goes
    /// into its timeline; anything else is passed over.
    pub fn packet(&mut self, ts_ns: i64, link_type: u16, data: &[u8]) {
        let Ok(frame) = calliper_wire::decode(link_type, data) else {
            return;
        };
        let Some((sport, dport, payload)) = frame.udp() else {
            return;
        };
        let Ok(rtp) = RtpHeader::parse(payload) else {
            return;
        };
        if looks_like_rtcp(payload) {
            return;
        }
        let start = rtp.header_len as usize;
        let voice = &payload[start..start + rtp.payload_len as usize];
        let Some((window, target)) =
            self.index.get_mut(&(frame.src, sport, frame.dst, dport, rtp.ssrc))
        else {
            return;
        };
        if !window.holds(ts_ns) {
            self.outside += 1;
            return;
        }
        let i = match target {
            Target::Voice(i) => *i,
            Target::Events(caller, last, stream) => {
                self.matched += 1;
                // RFC 4733: an event's packets share its timestamp.
                if *last != Some(rtp.timestamp) && !voice.is_empty() && self.dtmf.len() < MAX_DTMF {
                    *last = Some(rtp.timestamp);
                    self.event_streams[*stream].1 += 1;
                    self.dtmf.push(Dtmf { arrival_ns: ts_ns, caller: *caller, event: voice[0] });
                }
                return;
            }
        };
        self.matched += 1;
        let d = &mut self.decodings[i];
        d.first_ns.get_or_insert(ts_ns);
        d.timeline.push(ts_ns, rtp.seq, rtp.timestamp, rtp.marker, rtp.payload_type, voice);
    }

    /// Mixes each direction's timelines into its channel, placed by their
    /// first packet's arrival after the earliest, at the highest rate of
    /// them (the others repeated up to it). The channels hold the call's
    /// streams' stored span and 10 s, at most [`MAX_SECONDS`]; what lies
    /// beyond is cut and noted.
    pub fn mix(self) -> Mixed {
        let mut notes = self.notes;
        if self.outside > 0 {
            notes.push(format!(
                "{} packets on the call's addresses, ports and SSRCs but outside its time (another call's, or a clock stepped): left out",
                self.outside
            ));
        }
        let start = self.decodings.iter().filter_map(|d| d.first_ns).min().unwrap_or(0);
        let rate = self.decodings.iter().map(|t| t.timeline.rate()).max().unwrap_or(8000);
        let seconds = (self.span_ns.max(0) / 1_000_000_000 + 10).min(MAX_SECONDS as i64) as usize;
        let mut m = Mixer {
            start,
            rate,
            seconds,
            limit: seconds * rate as usize,
            left: Vec::new(),
            right: Vec::new(),
            marks: Vec::new(),
            notes,
        };
        for d in self.decodings {
            m.add(d);
        }
        let start = if start == 0 { self.dtmf.first().map_or(0, |d| d.arrival_ns) } else { start };
        m.marks.extend(
            self.dtmf.iter().map(|d| {
                (d.arrival_ns.saturating_sub(start).max(0) as f64 / 1e9, d.caller, d.event)
            }),
        );
        for (name, events) in &self.event_streams {
            m.notes.push(format!("stream {name}: {events} DTMF events on an SSRC of their own"));
        }
        m.finish()
    }
}

/// Two channels being mixed from a call's decoded streams.
struct Mixer {
    /// The earliest stream's first packet (ns since the epoch): time 0.
    start: i64,
    /// The channels' rate: the highest of the streams'.
    rate: u32,
    /// The channels' length: in seconds, and in samples.
    seconds: usize,
    limit: usize,
    left: Vec<i16>,
    right: Vec<i16>,
    /// DTMF marks (seconds into the WAV, side, event): the voice streams'
    /// own, placed by their samples, then those of event streams.
    marks: Vec<(f64, bool, u8)>,
    notes: Vec<String>,
}

impl Mixer {
    /// Places a stream's samples on its side's channel, repeated up to the
    /// channels' rate, from its first packet's arrival.
    fn add(&mut self, d: Decoding) {
        let Decoding { caller, timeline, name, first_ns } = d;
        let Some(first) = first_ns else {
            self.notes.push(format!("stream {name}: no packets in the capture"));
            return;
        };
        let dtmf = timeline.dtmf.len();
        let begins = first.saturating_sub(self.start).max(0) as f64 / 1e9;
        self.marks.extend(
            timeline
                .dtmf
                .iter()
                .map(|m| (begins + m.at as f64 / f64::from(timeline.rate()), caller, m.event)),
        );
        let (samples, own_rate, s) = timeline.finish();
        self.notes.push(played_note(&name, &s, own_rate, dtmf));
        let (rate, limit) = (self.rate, self.limit);
        let up = (rate / own_rate) as usize;
        let offset = (first.saturating_sub(self.start).max(0) as u128 * u128::from(rate)
            / 1_000_000_000)
            .min(limit as u128) as usize;
        let end = (offset + samples.len() * up).min(limit);
        if offset + samples.len() * up > limit {
            self.notes.push(format!(
                "stream {name}: cut at {} s, the call's stored span and 10 s (it starts {:.1} s in)",
                self.seconds,
                offset as f64 / f64::from(rate)
            ));
        }
        let channel = if caller { &mut self.left } else { &mut self.right };
        if channel.len() < end {
            channel.resize(end, 0);
        }
        for (at, x) in channel[offset..end]
            .iter_mut()
            .zip(samples.iter().flat_map(|&x| std::iter::repeat_n(x, up)))
        {
            *at = at.saturating_add(x);
        }
    }

    /// The channels, with a note per side listing its DTMF events in time.
    fn finish(mut self) -> Mixed {
        self.marks.sort_by(|a, b| a.0.total_cmp(&b.0));
        let seconds = self.left.len().max(self.right.len()) as f64 / f64::from(self.rate);
        for (caller, side) in [(true, "caller"), (false, "callee")] {
            let listed: Vec<String> = self
                .marks
                .iter()
                .filter(|m| m.1 == caller)
                .map(|&(at, _, event)| {
                    let after = if at > seconds { " (after the voice ended)" } else { "" };
                    format!("{} at {at:.2} s{after}", dtmf_name(event))
                })
                .collect();
            if !listed.is_empty() {
                self.notes.push(format!("DTMF from the {side}: {}", listed.join(", ")));
            }
        }
        Mixed { rate: self.rate, left: self.left, right: self.right, notes: self.notes }
    }
}

/// What a stream's decoding gave, for the notes.
fn played_note(name: &str, s: &TimelineStats, own_rate: u32, dtmf: usize) -> String {
    format!(
        "stream {name}: {} packets played, {} late for the jitter buffer, {} ms concealed, {} ms silent, {} comfort noise, {} DTMF events, {} timestamp resyncs, {} out of range, {} of another payload type, {} undecodable, {} over the decoding budget",
        s.played,
        s.late,
        s.concealed_samples * 1000 / u64::from(own_rate),
        s.silent_samples * 1000 / u64::from(own_rate),
        s.comfort_noise,
        dtmf,
        s.resyncs,
        s.out_of_range,
        s.other_payload,
        s.undecodable,
        s.over_budget
    )
}

/// An RFC 4733 event's key: 0-9, *, #, A-D (others by number).
fn dtmf_name(event: u8) -> String {
    match event {
        0..=9 => event.to_string(),
        10 => "*".into(),
        11 => "#".into(),
        12..=15 => char::from(b'A' + event - 12).to_string(),
        _ => format!("event {event}"),
    }
}

fn key(s: &StoredStream) -> Option<Key> {
    Some((s.src.parse().ok()?, s.src_port, s.dst.parse().ok()?, s.dst_port, s.ssrc))
}

fn side(direction: &str) -> Option<bool> {
    match direction {
        "caller_to_callee" => Some(true),
        "callee_to_caller" => Some(false),
        _ => None,
    }
}
