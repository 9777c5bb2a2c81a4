//! What an engine is configured with: its caps and timeouts, which
//! datagrams are SIP, where batches end, and which shard owns which media.

use super::*;

/// Tells SIP from media: by configured port, else (optionally) by its start line.
#[derive(Debug, Clone)]
pub struct SipClassifier {
    /// `sip_ports` as a bitmap: two bit tests per datagram instead of list scans.
    ports: Box<[u64; 1024]>,
    any_port: bool,
    hep_port: Option<u16>,
}

impl SipClassifier {
    /// From the configured ports and detection switch.
    pub fn new(cfg: &Config) -> SipClassifier {
        let mut ports = Box::new([0u64; 1024]);
        for &p in &cfg.sip_ports {
            ports[p as usize >> 6] |= 1 << (p & 63);
        }
        SipClassifier { ports, any_port: cfg.sip_any_port, hep_port: cfg.hep_port }
    }

    /// Either port is a configured SIP port.
    pub fn port(&self, sport: u16, dport: u16) -> bool {
        let bit = |p: u16| self.ports[p as usize >> 6] & (1 << (p & 63)) != 0;
        bit(sport) || bit(dport)
    }

    /// The datagram is HEP3 sent to the configured HEP port.
    #[inline]
    pub fn is_hep(&self, dport: u16, payload: &[u8]) -> bool {
        self.hep_port == Some(dport) && payload.starts_with(calliper_wire::hep::MAGIC)
    }

    /// The datagram is SIP.
    pub fn is_sip(&self, sport: u16, dport: u16, payload: &[u8]) -> bool {
        if self.port(sport, dport) {
            // Keep-alives (CRLF) and RTP mistakenly on a SIP port are not SIP.
            return payload.first().is_some_and(|b| b.is_ascii_alphabetic());
        }
        // Cheap first test: RTP starts with 0x80.., SIP with a letter.
        self.any_port
            && payload.first().is_some_and(|b| b.is_ascii_uppercase())
            && calliper_sip::looks_like_sip(payload)
    }
}

/// Packets per batch: calls change activity lists and expire only at batch
/// ends (see [`Engine::end_batch`]). Each end is a barrier between shards,
/// so ends are kept rare (at 5 M packets/s, one per 13 ms of capture).
pub const BATCH: u32 = 65536;
/// A batch also ends when capture time has moved this far (ns), so timeouts
/// keep a 100 ms granularity however slow the traffic.
pub const BATCH_NS: i64 = 100_000_000;

/// Decides where batches end: before the packet that would make a batch
/// longer than [`BATCH`] packets or [`BATCH_NS`] of capture time. The reader
/// of a sharded run and a single engine use the same rule, so their batch
/// ends fall on the same packets.
#[derive(Debug, Clone)]
pub struct Batcher {
    packets: u32,
    start_ns: i64,
}

impl Default for Batcher {
    fn default() -> Self {
        Batcher { packets: 0, start_ns: i64::MIN }
    }
}

impl Batcher {
    /// True when a batch should end at `now_ns` though no packet came
    /// (the batch has lasted [`BATCH_NS`]); the next batch starts then.
    pub fn due(&mut self, now_ns: i64) -> bool {
        if self.start_ns == i64::MIN || now_ns.saturating_sub(self.start_ns) < BATCH_NS {
            return false;
        }
        self.packets = 0;
        self.start_ns = now_ns;
        true
    }

    /// [`Self::boundary`] for packets in order when none of them ends a
    /// batch: then they are all taken and this is true; else none is
    /// (false), and the caller asks packet by packet. One test a reading
    /// instead of one a packet.
    #[inline]
    pub fn take_all(&mut self, batch: &[crate::RawPacket<'_>]) -> bool {
        let Some(first) = batch.first() else {
            return true;
        };
        let latest = batch.iter().fold(first.ts_ns, |t, p| t.max(p.ts_ns));
        let start_ns = if self.start_ns == i64::MIN { first.ts_ns } else { self.start_ns };
        if start_ns == i64::MIN {
            // `boundary` reads this time as "no batch yet": its way then.
            return false;
        }
        let fits = self.packets as usize + batch.len() <= BATCH as usize
            && latest.saturating_sub(start_ns) < BATCH_NS;
        if fits {
            self.start_ns = start_ns;
            self.packets += batch.len() as u32;
        }
        fits
    }

    /// Called for every packet, in order: true when a batch ends before it.
    pub fn boundary(&mut self, ts_ns: i64) -> bool {
        if self.start_ns == i64::MIN {
            self.start_ns = ts_ns;
        }
        let end = self.packets >= BATCH || ts_ns.saturating_sub(self.start_ns) >= BATCH_NS;
        if end {
            self.packets = 0;
            self.start_ns = ts_ns;
        }
        self.packets += 1;
        end
    }
}

/// Tunables. The defaults suit a capture file of an ordinary PBX or trunk.
#[derive(Debug, Clone)]
pub struct Config {
    /// UDP/TCP ports always treated as SIP.
    pub sip_ports: Vec<u16>,
    /// Also recognise SIP on any port by its start line.
    pub sip_any_port: bool,
    /// UDP port whose HEP3 datagrams are read as what they carry (SIP),
    /// so a capture of a HEP feed analyses like the traffic it copies
    /// ([`calliper_wire::hep`]); none (the default): HEP is left as UDP.
    /// Off unless asked for: a HEP feed crossing a monitored link would
    /// count its SIP twice, and anyone on the link can send HEP.
    pub hep_port: Option<u16>,
    /// Report RTP without signalling, found by a heuristic.
    pub rtp_heuristic: bool,
    /// A call with no SIP or media for this long ends (ns).
    pub call_idle_timeout_ns: i64,
    /// After BYE, CANCEL or a final failure, keep a call this long for
    /// late media and retries (ns).
    pub call_grace_ns: i64,
    /// After a 401/407 challenge to its INVITE, keep a call this long for
    /// the retry with credentials (ns): evicted before other calls.
    pub challenge_wait_ns: i64,
    /// An RTP stream without signalling ends after this much silence (ns).
    pub stream_idle_timeout_ns: i64,
    /// Most calls held at once; beyond it the least recently active is
    /// evicted, unanswered calls first.
    pub max_calls: usize,
    /// Most calls held whose INVITE has had no response at all.
    pub max_unanswered: usize,
    /// An INVITE with no response for this long has failed (ns; Timer B is 32 s).
    pub unanswered_timeout_ns: i64,
    /// Most RTP streams held at once; beyond it new streams are refused.
    pub max_streams: usize,
    /// Most media addresses held at once; beyond it SDP media are refused.
    pub max_media: usize,
    /// Most unconfirmed heuristic RTP candidates; beyond it the oldest is dropped.
    pub max_candidates: usize,
    /// Equal packets within this window are capture duplicates (ns; 0 keeps all).
    pub dedup_window_ns: i64,
    /// IP defragmentation caps.
    pub defrag: DefragConfig,
    /// TCP reassembly caps (signalling only).
    pub tcp: TcpConfig,
    /// Fault injection for tests of failure handling: panic once this many
    /// packets have been offered (in the last shard of a sharded run).
    #[doc(hidden)]
    pub fault_panic_after_packets: Option<u64>,
    /// Length of a stream's reporting interval (ns; intervals are aligned
    /// to multiples of it since the epoch).
    pub interval_ns: i64,
    /// The run's rules ([`calliper_rules`]): each engine (shard) takes a
    /// table of its own that follows every later change.
    pub rules: Option<calliper_rules::Rules>,
    /// Which calls' packets are recorded ([`crate::recording`]).
    pub record: crate::RecordingMode,
    /// Makes each engine's recording sink; none: nothing is recorded.
    pub record_sink: Option<crate::SinkFactory>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sip_ports: vec![5060, 5080],
            sip_any_port: true,
            hep_port: None,
            rtp_heuristic: true,
            call_idle_timeout_ns: 300 * SEC,
            call_grace_ns: 5 * SEC,
            challenge_wait_ns: 60 * SEC,
            stream_idle_timeout_ns: 60 * SEC,
            max_calls: 1_000_000,
            max_unanswered: 100_000,
            unanswered_timeout_ns: 32 * SEC,
            max_streams: 2_000_000,
            max_media: 4_000_000,
            max_candidates: 100_000,
            dedup_window_ns: 5_000_000,
            defrag: DefragConfig::default(),
            tcp: TcpConfig::default(),
            fault_panic_after_packets: None,
            interval_ns: 10 * SEC,
            rules: None,
            record: crate::RecordingMode::None,
            record_sink: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Engine::rtp_key` relies on this to skip the SIP test.
    #[test]
    fn rtp_is_never_sip() {
        let cfg = Config { sip_any_port: true, ..Config::default() };
        let sip = SipClassifier::new(&cfg);
        let mut payload = *b"\x80INVITE sip:a@b SIP/2.0\r\n\r\n";
        for first in 0x80..=0xBF {
            payload[0] = first;
            for (s, d) in [(5060, 5060), (5060, 40000), (40000, 5061), (40000, 40002)] {
                assert!(!sip.is_sip(s, d, &payload), "{first:#x} {s} {d}");
            }
        }
        // The test can fail: a letter first is SIP on a SIP port.
        payload[0] = b'I';
        assert!(sip.is_sip(5060, 40000, &payload));
    }

    /// The batch ends `boundary` finds packet by packet, and those found
    /// taking readings of `sizes` whole where `take_all` allows.
    fn ends_both_ways(
        times: &[i64],
        sizes: &mut impl FnMut() -> usize,
    ) -> (Vec<usize>, Vec<usize>) {
        let mut one = Batcher::default();
        let alone = (0..times.len()).filter(|&j| one.boundary(times[j])).collect();
        let (mut whole, mut ends, mut at) = (Batcher::default(), Vec::new(), 0);
        while at < times.len() {
            let reading: Vec<crate::RawPacket<'_>> = times[at..(at + sizes()).min(times.len())]
                .iter()
                .map(|&ts_ns| crate::RawPacket { ts_ns, ..Default::default() })
                .collect();
            if !whole.take_all(&reading) {
                let ended = reading.iter().enumerate().filter(|(_, p)| whole.boundary(p.ts_ns));
                ends.extend(ended.map(|(j, _)| at + j));
            }
            at += reading.len();
        }
        (ends, alone)
    }

    /// Readings taken whole by `take_all` (else packet by packet) end
    /// batches before the very packets `boundary` alone ends them before.
    #[test]
    fn take_all_ends_batches_where_boundary_does() {
        // The packet count: a reading whose last packet is the one past
        // BATCH must not be taken whole.
        let n = BATCH as usize;
        for last in [n - 1, n, n + 1, n + 2] {
            let times = vec![5; last + 1];
            let mut sizes = {
                let mut first = true;
                move || if std::mem::take(&mut first) { last - 3 } else { 4 }
            };
            let (ends, alone) = ends_both_ways(&times, &mut sizes);
            assert_eq!(ends, alone, "{last} packets");
        }
        // Times that run on, stall, step back, jump and sit at i64::MIN
        // (which `boundary` reads as "no batch yet").
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for trial in 0..200 {
            let mut ts = if trial % 2 == 0 { i64::MIN } else { 1_000_000_000 };
            let times: Vec<i64> = (0..3_000)
                .map(|_| {
                    let r = next();
                    ts = match r % 500 {
                        // A lone packet stamped i64::MIN; the others run on.
                        0 => return i64::MIN,
                        1..=15 => ts.saturating_sub(5_000_000),
                        16..=20 => ts.saturating_add(150_000_000),
                        _ => ts.saturating_add((r >> 8) as i64 % 3_000_000),
                    };
                    ts
                })
                .collect();
            let mut sizes = || (1 + next() % 64) as usize;
            let (ends, alone) = ends_both_ways(&times, &mut sizes);
            assert_eq!(ends, alone, "trial {trial}");
            assert!(alone.len() > 3, "trial {trial}: too few batch ends to prove anything");
        }
    }
}
