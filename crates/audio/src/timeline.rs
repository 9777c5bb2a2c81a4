//! One direction of a call as the listener heard it: each packet decoded
//! and placed by its RTP timestamp, packets the receiver's jitter buffer
//! would have played too late left out (the adaptive model of
//! `calliper_rtp::playout`, the one the record's MOS takes), and what is
//! missing filled: a lost packet by its predecessor repeated at half
//! strength for one packet (a simple concealment), then silence; comfort
//! noise (RFC 3389) by noise at the level it gives; DTMF events (RFC 4733)
//! marked.
//!
//! Timestamps place packets, but arrival times anchor them: a packet whose
//! timestamp puts it more than [`RESYNC_TICKS`] away from where its arrival
//! does (a sender restarting its timestamps after a hold, a jump) starts a
//! new stretch where it arrived, as a receiver's buffer resynchronises.
//!
//! The timeline is bounded ([`MAX_SECONDS`], or less with
//! [`Timeline::limit_seconds`]): a timestamp jump beyond it is counted and
//! the packet left out, never a huge allocation.

use crate::{g711, g722, opus};
use calliper_rtp::playout::Playout;

/// Longest timeline kept, seconds (four hours).
pub const MAX_SECONDS: u64 = 4 * 3600;
/// How far (seconds) a packet's timestamp may place it from its arrival
/// before the timeline follows the arrival instead.
pub const RESYNC_SECONDS: i64 = 1;

/// What a stream carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// G.711 µ-law.
    Pcmu,
    /// G.711 A-law.
    Pcma,
    /// G.722 at 64 kbit/s.
    G722,
    /// Opus (any bandwidth, mono output).
    Opus,
    /// G.729 (Annex A, B), decoded only with the `g729` feature.
    G729,
}

impl Codec {
    /// The codec of a stream's payload type, given its codec's name as
    /// resolved from SDP or the static table (`PCMU`, `opus`...), if it is
    /// one decoded here.
    pub fn from_name(name: &str) -> Option<Codec> {
        [
            ("PCMU", Codec::Pcmu),
            ("PCMA", Codec::Pcma),
            ("G722", Codec::G722),
            ("opus", Codec::Opus),
            ("G729", Codec::G729),
        ]
        .into_iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, c)| c)
        .filter(|&c| c != Codec::G729 || cfg!(feature = "g729"))
    }

    /// Output samples per second.
    pub fn rate(self) -> u32 {
        match self {
            Codec::G722 => 16_000,
            Codec::Opus => opus::RATE,
            _ => 8_000,
        }
    }

    /// RTP timestamp ticks per second (G.722's is 8 kHz, RFC 3551;
    /// Opus's 48 kHz, RFC 7587).
    pub fn clock(self) -> u32 {
        match self {
            Codec::Opus => opus::RATE,
            _ => 8_000,
        }
    }

    /// Output samples per RTP timestamp tick.
    fn samples_per_tick(self) -> usize {
        (self.rate() / self.clock()) as usize
    }
}

/// What went into a timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineStats {
    /// Voice packets decoded into it.
    pub played: u64,
    /// Voice packets the jitter buffer would have played too late.
    pub late: u64,
    /// Samples concealed (a missing packet's predecessor repeated).
    pub concealed_samples: u64,
    /// Samples of silence (gaps past concealment).
    pub silent_samples: u64,
    /// Comfort noise packets honoured.
    pub comfort_noise: u64,
    /// Packets beyond the timeline's bound, or arriving before its start.
    pub out_of_range: u64,
    /// Packets whose timestamp disagreed with their arrival (a restart, a
    /// jump): placed by arrival, a new stretch from there.
    pub resyncs: u64,
    /// Packets of another payload type (not this codec, comfort noise or
    /// an event).
    pub other_payload: u64,
    /// Packets the decoder refused (not valid for its codec).
    pub undecodable: u64,
    /// Packets not decoded because the stream had already decoded twice
    /// what its timeline holds.
    pub over_budget: u64,
}

/// A DTMF event: where it started in the timeline and which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DtmfMark {
    /// Sample index.
    pub at: usize,
    /// RFC 4733 event code (0-9, 10 = *, 11 = #, 12-15 = A-D).
    pub event: u8,
}

/// The timeline of one stream being built.
pub struct Timeline {
    codec: Codec,
    voice_payload_type: u8,
    events_payload_type: Option<u8>,
    g722: g722::Decoder,
    opus: opus::Decoder,
    #[cfg(feature = "g729")]
    g729: crate::g729::Decoder,
    playout: Playout,
    /// The latest timestamp seen, and its place in ticks from the first
    /// packet (extended past wraps, moved by resynchronisations).
    latest: Option<(u32, i64)>,
    /// The first packet's arrival.
    origin_ns: i64,
    samples: Vec<i16>,
    /// The last decoded packet's samples, for concealment.
    last: Vec<i16>,
    comfort_level: Option<u8>,
    noise_seed: u32,
    scratch: Vec<i16>,
    /// DTMF events, in order.
    pub dtmf: Vec<DtmfMark>,
    last_event_ts: Option<u32>,
    /// Longest timeline, RTP timestamp ticks.
    limit_ticks: i64,
    /// Samples decoded so far (bounded: [`TimelineStats::over_budget`]).
    decoded: usize,
    /// Counters.
    pub stats: TimelineStats,
}

impl Timeline {
    /// A timeline for `codec` sent as `voice_payload_type`; RFC 4733
    /// events come as `events_payload_type`.
    pub fn new(codec: Codec, voice_payload_type: u8, events_payload_type: Option<u8>) -> Timeline {
        Timeline {
            codec,
            voice_payload_type,
            events_payload_type,
            g722: g722::Decoder::new(),
            opus: opus::Decoder::default(),
            #[cfg(feature = "g729")]
            g729: crate::g729::Decoder::default(),
            playout: Playout::default(),
            latest: None,
            origin_ns: 0,
            samples: Vec::new(),
            last: Vec::new(),
            comfort_level: None,
            noise_seed: 1,
            scratch: Vec::new(),
            dtmf: Vec::new(),
            last_event_ts: None,
            limit_ticks: MAX_SECONDS as i64 * i64::from(codec.clock()),
            decoded: 0,
            stats: TimelineStats::default(),
        }
    }

    /// Bounds the timeline to `seconds` (at most [`MAX_SECONDS`]): a
    /// stream known to last a minute needs no room for hours.
    pub fn limit_seconds(mut self, seconds: u64) -> Timeline {
        self.limit_ticks = seconds.min(MAX_SECONDS) as i64 * i64::from(self.codec.clock());
        self
    }

    /// Takes one RTP packet of the stream, in arrival order.
    pub fn push(
        &mut self,
        arrival_ns: i64,
        seq: u16,
        ts: u32,
        marker: bool,
        pt: u8,
        payload: &[u8],
    ) {
        let Some(at) = self.position(ts, arrival_ns) else {
            self.stats.out_of_range += 1;
            return;
        };
        if Some(pt) == self.events_payload_type {
            // RFC 4733: one mark per event (its packets share a timestamp).
            if self.last_event_ts != Some(ts) && !payload.is_empty() {
                self.dtmf.push(DtmfMark { at, event: payload[0] });
                self.last_event_ts = Some(ts);
            }
            return;
        }
        if pt == 13 {
            // RFC 3389: the level, in -dBov, of the noise to play until
            // the next voice packet.
            self.comfort_level = payload.first().map(|l| l & 0x7F);
            self.stats.comfort_noise += 1;
            return;
        }
        if pt != self.voice_payload_type {
            self.stats.other_payload += 1;
            return;
        }
        let late_before = self.playout.adaptive_late();
        self.playout.update(arrival_ns, seq, ts, marker, self.codec.clock());
        if self.playout.adaptive_late() != late_before {
            self.stats.late += 1;
            return;
        }
        // Decoding is the cost: a stream decodes at most twice the samples
        // its timeline can hold (packets laid over one another, a hostile
        // recording's thousands of packets on one timestamp, are not all
        // decoded).
        if self.decoded >= 2 * self.max_samples() {
            self.stats.over_budget += 1;
            return;
        }
        if !self.decode(payload) {
            self.stats.undecodable += 1;
            return;
        }
        self.decoded += self.scratch.len();
        self.place(at);
    }

    /// Decodes a voice payload into `scratch`; false where the codec's
    /// decoder refuses it.
    fn decode(&mut self, payload: &[u8]) -> bool {
        self.scratch.clear();
        match self.codec {
            Codec::Pcmu => g711::decode(g711::Law::Mu, payload, &mut self.scratch),
            Codec::Pcma => g711::decode(g711::Law::A, payload, &mut self.scratch),
            Codec::G722 => self.g722.decode(payload, &mut self.scratch),
            Codec::Opus => return self.opus.decode(payload, &mut self.scratch),
            #[cfg(feature = "g729")]
            Codec::G729 => return self.g729.decode(payload, &mut self.scratch),
            // `from_name` gives no G.729 without the feature.
            #[cfg(not(feature = "g729"))]
            Codec::G729 => return false,
        }
        true
    }

    /// Writes the decoded samples (`scratch`) at sample index `at`,
    /// concealing any gap before it, unless they run past the bound.
    fn place(&mut self, at: usize) {
        let end = at + self.scratch.len();
        if end > self.max_samples() {
            self.stats.out_of_range += 1;
            return;
        }
        self.fill_gap_to(at);
        if self.samples.len() < end {
            self.samples.resize(end, 0);
        }
        // A packet reordered but in time overwrites its concealment.
        self.samples[at..end].copy_from_slice(&self.scratch);
        // The packet is kept for concealment; its buffer is reused next time.
        std::mem::swap(&mut self.last, &mut self.scratch);
        self.comfort_level = None;
        self.stats.played += 1;
    }

    /// Output samples per second.
    pub fn rate(&self) -> u32 {
        self.codec.rate()
    }

    /// The most samples it can hold (its bound).
    pub fn max_samples(&self) -> usize {
        self.limit_ticks as usize * self.codec.samples_per_tick()
    }

    /// The samples, their rate and what went into them.
    pub fn finish(self) -> (Vec<i16>, u32, TimelineStats) {
        (self.samples, self.codec.rate(), self.stats)
    }

    /// The sample index of a packet of timestamp `ts` arriving at
    /// `arrival_ns`, the first packet's at 0.
    fn position(&mut self, ts: u32, arrival_ns: i64) -> Option<usize> {
        let (latest_ts, latest) = *self.latest.get_or_insert_with(|| {
            self.origin_ns = arrival_ns;
            (ts, 0)
        });
        let clock = i64::from(self.codec.clock());
        let since = arrival_ns.saturating_sub(self.origin_ns);
        let by_arrival =
            (since / 1_000_000_000 * clock + since % 1_000_000_000 * clock / 1_000_000_000).max(-1);
        let mut place = latest + i64::from(ts.wrapping_sub(latest_ts) as i32);
        let resync = (place - by_arrival).abs() > RESYNC_SECONDS * clock;
        if resync {
            place = by_arrival;
        }
        if !(0..self.limit_ticks).contains(&place) {
            return None;
        }
        self.stats.resyncs += resync as u64;
        if resync || place > latest {
            self.latest = Some((ts, place));
        }
        Some(place as usize * self.codec.samples_per_tick())
    }

    /// Fills what lies between the timeline's end and `at` (a gap): the
    /// last packet once at half strength, or comfort noise, then silence.
    fn fill_gap_to(&mut self, at: usize) {
        let start = self.samples.len();
        if at <= start {
            return;
        }
        self.samples.resize(at, 0);
        let gap = &mut self.samples[start..at];
        if let Some(level) = self.comfort_level {
            // White noise of RMS 32768 · 10^(-level/20); uniform noise's RMS
            // is its peak over √3.
            let peak = 32768.0 * 10f64.powf(-f64::from(level) / 20.0) * 3f64.sqrt();
            for s in gap.iter_mut() {
                self.noise_seed = self.noise_seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let u = f64::from(self.noise_seed >> 8) / f64::from(1u32 << 24) * 2.0 - 1.0;
                *s = (u * peak).clamp(-32768.0, 32767.0) as i16;
            }
            return;
        }
        let concealed = self.last.len().min(gap.len());
        for (s, &l) in gap.iter_mut().zip(&self.last) {
            *s = l / 2;
        }
        self.stats.concealed_samples += concealed as u64;
        self.stats.silent_samples += (gap.len() - concealed) as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// A PCMU packet of 160 samples whose bytes are all `b`.
    fn pcmu(b: u8) -> Vec<u8> {
        vec![b; 160]
    }

    #[test]
    fn packets_land_by_timestamp_and_a_loss_is_concealed_then_silent() {
        let mut t = Timeline::new(Codec::Pcmu, 0, Some(101));
        for k in 0..10u16 {
            if k == 4 || k == 5 {
                continue; // lost
            }
            let b = 0x80 + k as u8; // a different level per packet
            t.push(k as i64 * 20 * MS, k, k as u32 * 160, k == 0, 0, &pcmu(b));
        }
        let (samples, rate, stats) = t.finish();
        assert_eq!(rate, 8000);
        assert_eq!(samples.len(), 10 * 160);
        let level = |k: u8| g711::ulaw_to_linear(0x80 + k);
        assert!(samples[..160].iter().all(|&s| s == level(0)));
        assert!(samples[3 * 160..4 * 160].iter().all(|&s| s == level(3)));
        // Packet 4: packet 3 at half strength; packet 5: silence.
        assert!(samples[4 * 160..5 * 160].iter().all(|&s| s == level(3) / 2));
        assert!(samples[5 * 160..6 * 160].iter().all(|&s| s == 0));
        assert!(samples[6 * 160..7 * 160].iter().all(|&s| s == level(6)));
        assert_eq!((stats.played, stats.concealed_samples, stats.silent_samples), (8, 160, 160));
    }

    #[test]
    fn a_packet_the_jitter_buffer_plays_late_is_left_out() {
        let mut t = Timeline::new(Codec::Pcma, 8, None);
        for k in 0..100u16 {
            // Packet 50 arrives 400 ms late: past the adaptive buffer's delay.
            let arrival = k as i64 * 20 * MS + if k == 50 { 400 * MS } else { 0 };
            t.push(arrival, k, k as u32 * 160, k == 0, 8, &[0xD5; 160]);
        }
        let (samples, _, stats) = t.finish();
        assert_eq!(stats.late, 1);
        assert_eq!(stats.played, 99);
        assert_eq!(samples.len(), 100 * 160);
    }

    #[test]
    fn g722_takes_two_samples_per_tick() {
        let mut t = Timeline::new(Codec::G722, 9, None);
        for k in 0..5u16 {
            t.push(k as i64 * 20 * MS, k, 1000 + k as u32 * 160, false, 9, &[0x55; 160]);
        }
        let (samples, rate, _) = t.finish();
        assert_eq!((samples.len(), rate), (5 * 320, 16_000));
    }

    #[test]
    fn opus_runs_on_a_48_khz_clock_with_a_dynamic_payload_type() {
        let mut enc =
            ::opus::Encoder::new(48_000, ::opus::Channels::Mono, ::opus::Application::Voip)
                .unwrap();
        let mut t = Timeline::new(Codec::Opus, 111, Some(101));
        let mut packet = [0u8; 400];
        let n = enc.encode(&[1000i16; 960], &mut packet).unwrap();
        // Packets 0, 1 and 3 of 20 ms (960 ticks); 2 is lost.
        for k in [0u16, 1, 3] {
            t.push(k as i64 * 20 * MS, k, 7 + k as u32 * 960, false, 111, &packet[..n]);
        }
        t.push(80 * MS, 4, 7 + 4 * 960, false, 0, &[0xFF; 160]);
        t.push(100 * MS, 5, 7 + 5 * 960, false, 111, &[0xFF, 0xFF, 0xFF]);
        let (samples, rate, stats) = t.finish();
        assert_eq!((samples.len(), rate), (4 * 960, 48_000));
        assert_eq!(stats.played, 3);
        assert_eq!(stats.concealed_samples, 960, "the lost packet");
        assert_eq!((stats.other_payload, stats.undecodable), (1, 1));
    }

    #[test]
    fn comfort_noise_fills_the_silence_at_its_level_and_dtmf_is_marked() {
        let mut t = Timeline::new(Codec::Pcmu, 0, Some(101));
        t.push(0, 0, 0, true, 0, &pcmu(0xFF));
        // Comfort noise at -30 dBov, then voice again after 1 s.
        t.push(20 * MS, 1, 160, false, 13, &[30]);
        // A DTMF '5' (its three end packets share the timestamp).
        for _ in 0..3 {
            t.push(500 * MS, 2, 4000, true, 101, &[5, 0x80, 0, 160]);
        }
        t.push(1000 * MS, 3, 8000, true, 0, &pcmu(0xFF));
        assert_eq!(t.dtmf, [DtmfMark { at: 4000, event: 5 }]);
        let (samples, _, stats) = t.finish();
        let noise = &samples[160..8000];
        let rms =
            (noise.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>() / noise.len() as f64).sqrt();
        let want = 32768.0 * 10f64.powf(-1.5);
        assert!((rms / want - 1.0).abs() < 0.05, "rms {rms} want {want}");
        assert_eq!(stats.comfort_noise, 1);
    }

    #[test]
    fn a_timestamp_jump_follows_the_arrival_and_the_bound_holds() {
        // A timestamp jumping by 2^31 arrives 20 ms after the first: placed
        // where it arrived, not hours away, and the next follows it. A
        // packet arriving past the bound is counted, not allocated.
        let mut t = Timeline::new(Codec::Pcmu, 0, None).limit_seconds(60);
        t.push(0, 0, 0, true, 0, &pcmu(0xFF));
        t.push(20 * MS, 1, 0x7FFF_FFFF, false, 0, &pcmu(0xFF));
        t.push(40 * MS, 2, 0x8000_009F, false, 0, &pcmu(0xFF));
        t.push(3_600_000 * MS, 3, 0x8000_013F, false, 0, &pcmu(0xFF));
        let (samples, _, stats) = t.finish();
        assert_eq!(samples.len(), 3 * 160);
        assert_eq!((stats.resyncs, stats.out_of_range), (1, 1));
    }

    #[test]
    fn packets_piled_on_one_place_are_decoded_only_up_to_a_budget() {
        // A hostile stream: every packet on timestamp 0, 20 ms apart. A
        // one-second timeline decodes at most two seconds of them.
        let mut t = Timeline::new(Codec::Pcmu, 0, None).limit_seconds(1);
        for k in 0..1000u16 {
            t.push(i64::from(k) * MS, k, 0, false, 0, &pcmu(0xFF));
        }
        let (samples, _, stats) = t.finish();
        assert_eq!(stats.played, 100, "2 × 8 000 samples of 160");
        assert!(stats.over_budget > 0);
        assert_eq!(stats.played + stats.over_budget + stats.late + stats.out_of_range, 1000);
        assert!(samples.len() <= 8000);
    }

    #[test]
    fn a_restart_after_a_hold_starts_where_it_arrived() {
        // 1 s of speech, a 3 s hold, then timestamps from 0 again.
        let mut t = Timeline::new(Codec::Pcma, 8, None);
        for k in 0..50u16 {
            t.push(k as i64 * 20 * MS, k, k as u32 * 160, k == 0, 8, &[0xAA; 160]);
        }
        for k in 0..50u16 {
            let at = (4000 + k as i64 * 20) * MS;
            t.push(at, 7000 + k, k as u32 * 160, k == 0, 8, &[0xD5; 160]);
        }
        let (samples, _, stats) = t.finish();
        assert_eq!(stats.resyncs, 1);
        assert_eq!(samples.len(), 5 * 8000);
        // The speech before the hold is still there, the second part after it.
        assert!(samples[..8000].iter().all(|&s| s == g711::alaw_to_linear(0xAA)));
        assert!(samples[4 * 8000..].iter().all(|&s| s == g711::alaw_to_linear(0xD5)));
    }
}
