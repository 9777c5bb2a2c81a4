//! SIP framing: datagrams, SIP over TCP (Content-Length framing with
//! resynchronisation), over WebSocket (RFC 7118) and carried in HEP3.

use super::*;

impl Engine {
    /// Frames SIP over WebSocket (RFC 7118): skips the HTTP upgrade, then
    /// unmasks each message and reads it as one SIP message.
    pub(crate) fn websocket_stream(&mut self, now: i64, key: Flow, flow: lru::Idx) {
        self.sip_transport = SipTransport::WebSocket;
        let (mut buf, _) = self.tcp.take_buffer(flow);
        let mut used = 0;
        if self.tcp.tag(flow) == websocket::TAG_HANDSHAKE {
            match memchr::memmem::find(&buf, b"\r\n\r\n") {
                Some(end) => {
                    used = end + 4;
                    self.tcp.set_tag(flow, websocket::TAG_FRAMES);
                }
                None if buf.len() > calliper_sip::MAX_MESSAGE => {
                    self.counters.anomaly("websocket_bad_handshake");
                    used = buf.len();
                }
                None => {}
            }
        }
        let mut message = std::mem::take(&mut self.ws_scratch);
        if self.tcp.tag(flow) == websocket::TAG_FRAMES {
            loop {
                match websocket::frame(&buf[used..]) {
                    Ok(Some(f)) => {
                        used += f.len;
                        // Text or binary, unfragmented: one SIP message.
                        if f.fin && (f.opcode == 1 || f.opcode == 2) {
                            message.clear();
                            f.unmask_into(&buf[used - f.len..used], &mut message);
                            match calliper_sip::parse(&message, false) {
                                Ok(m) => self.sip_message(now, &key, &m),
                                Err(e) => self.counters.anomaly(e.name()),
                            }
                        } else if f.opcode < 3 {
                            self.counters.anomaly("websocket_fragmented_message");
                        }
                    }
                    Ok(None) => break,
                    Err(websocket::FrameTooLarge) => {
                        self.counters.anomaly("websocket_frame_too_large");
                        used = buf.len();
                        break;
                    }
                }
            }
        }
        self.ws_scratch = message;
        buf.drain(..used);
        self.tcp.put_buffer(flow, buf);
    }

    /// Frames and handles the SIP messages buffered in a TCP flow.
    pub(crate) fn sip_stream(&mut self, now: i64, key: Flow, flow: lru::Idx) {
        if !self.tcp.ready(flow) {
            return;
        }
        self.sip_transport = SipTransport::Tcp;
        let (mut buf, mut resync) = self.tcp.take_buffer(flow);
        let mut used = 0;
        let mut wait = 0;
        loop {
            // CRLF keep-alives (RFC 5626) sit between messages.
            while used < buf.len() && matches!(buf[used], b'\r' | b'\n') {
                used += 1;
            }
            let rest = &buf[used..];
            if rest.is_empty() {
                break;
            }
            if resync && !calliper_sip::looks_like_sip(rest) {
                match find_message_start(rest) {
                    Some(at) => {
                        self.counters.anomaly("sip_tcp_resync");
                        used += at;
                        continue;
                    }
                    None => {
                        // Keep a possible partial start line for the next segment.
                        used = buf.len().saturating_sub(MAX_START_LINE).max(used);
                        break;
                    }
                }
            }
            resync = false;
            match calliper_sip::parse(rest, true) {
                Ok(m) => {
                    let len = m.len.clamp(1, rest.len());
                    self.sip_message(now, &key, &m);
                    used += len;
                }
                Err(calliper_sip::SipError::Incomplete { needed }) => {
                    // Parse again only once the rest of it is here (after
                    // the drain below, the message starts the buffer).
                    wait = needed.unwrap_or(0);
                    break;
                }
                Err(e) => {
                    self.counters.anomaly(e.name());
                    resync = true;
                    used += 1;
                }
            }
        }
        buf.drain(..used);
        self.tcp.put_buffer(flow, buf);
        self.tcp.set_wait(flow, wait);
        if resync {
            self.tcp.mark_resync(flow);
        }
    }

    pub(crate) fn sip_datagram(&mut self, now: i64, flow: &Flow, payload: &[u8]) {
        match calliper_sip::parse(payload, false) {
            Ok(m) => {
                if m.body_truncated {
                    self.counters.anomaly("sip_content_length_exceeds_datagram");
                }
                if m.bad_content_length {
                    self.counters.anomaly("sip_bad_content_length");
                }
                self.sip_message(now, flow, &m)
            }
            Err(e) => self.counters.anomaly(e.name()),
        }
    }
}

/// How far before its packet a HEP message's own time may be (an agent
/// sends what it captured, seconds later at most), and how far after (its
/// clock a little ahead): outside, the packet's time is used instead
/// (`hep_clock_skew`). A time after the packet's is taken as the packet's,
/// so no HEP message moves a call's activity past the capture clock.
const HEP_MAX_AGE_NS: i64 = 60_000_000_000;
const HEP_MAX_AHEAD_NS: i64 = 1_000_000_000;

use calliper_wire::hep::{kind, Hep};

impl Engine {
    /// A HEP3 datagram: its SIP is handled as if captured, with the
    /// addresses, ports and time the HEP agent gives; its RTCP and quality
    /// reports go to the call they name (`agent_reports`).
    pub(crate) fn hep_datagram(&mut self, now: i64, datagram: &[u8]) {
        let h = match Hep::parse(datagram) {
            Ok(h) => h,
            Err(e) => return self.counters.anomaly(e.name()),
        };
        self.counters.hep += 1;
        let report = [kind::RTCP_JSON, kind::QUALITY_JSON].contains(&h.kind);
        if h.kind != kind::SIP && !report {
            self.counters.hep_unread += 1;
            return;
        }
        let mut inflated = std::mem::take(&mut self.hep_inflated);
        if h.compressed {
            if let Err(anomaly) = inflate(h.payload, &mut inflated) {
                self.hep_inflated = inflated;
                return self.counters.anomaly(anomaly);
            }
        }
        let payload = if h.compressed { &inflated[..] } else { h.payload };
        let at = if (now.saturating_sub(HEP_MAX_AGE_NS)..=now.saturating_add(HEP_MAX_AHEAD_NS))
            .contains(&h.ts_ns)
        {
            h.ts_ns.min(now)
        } else {
            self.counters.anomaly("hep_clock_skew");
            now
        };
        // Never before the previous HEP message: within the window an
        // agent could otherwise date a response before its request (or a
        // feed mix its own clock and arrival time in one call).
        // The floor itself never ahead of this packet's time: a capture
        // clock stepped back would otherwise pin every later message to it.
        let at = at.max(self.hep_floor_ns.min(now));
        self.hep_floor_ns = at;
        if report {
            self.hep_report(at, &Hep { payload, ..h });
        } else {
            self.hep_sip(at, &h, payload);
        }
        self.hep_inflated = inflated;
    }

    /// The SIP message a HEP datagram carries, as if captured.
    fn hep_sip(&mut self, at: i64, h: &Hep<'_>, sip: &[u8]) {
        self.sip_transport = match h.ip_protocol {
            6 => SipTransport::Tcp,
            132 => SipTransport::Sctp,
            _ => SipTransport::Udp,
        };
        let flow = Flow { src: h.src, sport: h.sport, dst: h.dst, dport: h.dport };
        self.sip_via_hep = true;
        self.sip_datagram(at, &flow, sip);
        self.sip_via_hep = false;
    }
}

/// The most bytes a compressed HEP payload may inflate to: HEP's own
/// limit on a message, so compression cannot carry more than plain HEP.
pub(crate) const HEP_INFLATED_MAX: usize = 0xFFFF;

/// How many times its size a compressed payload may grow (SIP compresses
/// three to six times; a crafted stream a thousand), with a floor for
/// short messages: so inflating costs in proportion to what was sent.
const HEP_INFLATE_RATIO: usize = 32;
const HEP_INFLATE_FLOOR: usize = 4096;

/// Inflates a compressed HEP payload (chunk 0x0010) into `out`: gzip
/// (RFC 1952, its CRC checked) when it starts with gzip's magic, else zlib
/// (RFC 1950), which captagent and Kamailio write. Reading stops one byte
/// past [`HEP_INFLATED_MAX`] or [`HEP_INFLATE_RATIO`] times the payload,
/// so a small bomb costs no more than that.
fn inflate(payload: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    use std::io::Read;
    out.clear();
    let most =
        payload.len().saturating_mul(HEP_INFLATE_RATIO).clamp(HEP_INFLATE_FLOOR, HEP_INFLATED_MAX);
    let limit = most as u64 + 1;
    let read = if payload.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(payload).take(limit).read_to_end(out)
    } else {
        flate2::read::ZlibDecoder::new(payload).take(limit).read_to_end(out)
    };
    match read {
        Err(_) => Err("hep_bad_compression"),
        Ok(n) if n > most => Err("hep_inflated_too_long"),
        Ok(_) => Ok(()),
    }
}

/// A SIP start line is shorter than this; resynchronisation keeps this many
/// trailing bytes in case one is cut in two.
pub(crate) const MAX_START_LINE: usize = 1024;

/// Offset of the next line that starts a SIP message, after the first byte.
pub(crate) fn find_message_start(buf: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', buf)
        .map(|i| i + 1)
        .find(|&i| i < buf.len() && calliper_sip::looks_like_sip(&buf[i..]))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use calliper_wire::hep::{kind, Hep};

    const MESSAGE: &[u8] = b"OPTIONS sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK1\r\nCall-ID: inflate-1@192.0.2.1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// `MESSAGE` compressed by another implementation (Python's `zlib` and
    /// `gzip` modules), the two forms agents send.
    fn by_python() -> [Vec<u8>; 2] {
        [
            hex("789cf30f08f1f4f70b5628ce2cb04aca4f7248ad48cc2dc849d54bcecf5508f60cd037d233e0e50acb4cb482f1f4435d02140c2d812c3d233d432b53033303eba4a2c4bce40cdb2acb0c7793246f435e2ee7c49c1c5d4f172b85ccbcb49cc492545d4307b816a06c706aa19582a1823fc46ea0407e5e496a5e89ae4f6a5e7a49869502d04a5e2e004aa02a6a"),
            hex("1f8b0800000000000203f30f08f1f4f70b5628ce2cb04aca4f7248ad48cc2dc849d54bcecf5508f60cd037d233e0e50acb4cb482f1f4435d02140c2d812c3d233d432b53033303eba4a2c4bce40cdb2acb0c7793246f435e2ee7c49c1c5d4f172b85ccbcb49cc492545d4307b816a06c706aa19582a1823fc46ea0407e5e496a5e89ae4f6a5e7a49869502d04a5e2e00d89855f79a000000"),
        ]
    }

    #[test]
    fn zlib_and_gzip_payloads_inflate_to_the_message() {
        let mut out = Vec::new();
        for compressed in by_python() {
            assert_eq!(inflate(&compressed, &mut out), Ok(()));
            assert_eq!(out, MESSAGE);
        }
    }

    /// Damage is refused, not read as something else: a flipped byte in the
    /// gzip body (its CRC no longer matches), a cut stream, plain text.
    #[test]
    fn damaged_payloads_are_refused() {
        let mut out = Vec::new();
        let [zlib, mut gzip] = by_python();
        let n = gzip.len();
        gzip[n - 12] ^= 0x01;
        for bad in [&gzip[..], &zlib[..zlib.len() / 2], MESSAGE] {
            assert_eq!(inflate(bad, &mut out), Err("hep_bad_compression"));
        }
    }

    /// A small payload that would inflate past HEP's own limit stops there.
    #[test]
    fn a_compression_bomb_stops_at_the_limit() {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&vec![b'A'; 4 << 20]).unwrap();
        let bomb = z.finish().unwrap();
        assert!(bomb.len() < 8 << 10, "{} bytes", bomb.len());
        let mut out = Vec::new();
        assert_eq!(inflate(&bomb, &mut out), Err("hep_inflated_too_long"));
        assert!(out.len() <= HEP_INFLATE_RATIO * bomb.len() + 1, "{}", out.len());
        // Under HEP's limit but far beyond the ratio: refused as well.
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&vec![b'A'; 60_000]).unwrap();
        let small = z.finish().unwrap();
        assert_eq!(inflate(&small, &mut out), Err("hep_inflated_too_long"));
    }

    /// A HEP message of `kind` carrying `payload` from `from` to `to` (port
    /// 5060 both), stamped `at`: the engine tests' one builder.
    pub(crate) fn hep_message(
        kind: u8,
        payload: &[u8],
        at: i64,
        (from, to): (&str, &str),
        correlation_id: Option<&[u8]>,
        compressed: bool,
    ) -> Vec<u8> {
        let (src, dst) = ((from.parse().unwrap(), 5060), (to.parse().unwrap(), 5060));
        Hep { capture_id: 1, correlation_id, compressed, ..Hep::udp(kind, src, dst, at, payload) }
            .emit()
            .unwrap()
    }

    /// HEP times never go back: a 200 stamped 30 s before its INVITE (inside
    /// the window) is taken at the INVITE's time, not before it.
    #[test]
    fn hep_times_never_go_back() {
        let msg = |start: &str, at: i64, from: &str, to: &str| {
            let to_tag = if start.starts_with("SIP/") { ";tag=2" } else { "" };
            let sip = format!("{start}\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK1\r\nFrom: <sip:a@192.0.2.1>;tag=1\r\nTo: <sip:b@192.0.2.2>{to_tag}\r\nCall-ID: back-1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n");
            hep_message(kind::SIP, sip.as_bytes(), at, (from, to), None, false)
        };
        let t = 1_700_000_000_000_000_000;
        let mut e = Engine::new(Config { hep_port: Some(9060), ..Config::default() });
        let (a, b) = ("192.0.2.1", "192.0.2.2");
        e.hep_datagram(t, &msg("INVITE sip:b@192.0.2.2 SIP/2.0", t, a, b));
        let early = t - 30_000_000_000;
        e.hep_datagram(t + 1_000_000, &msg("SIP/2.0 486 Busy Here", early, b, a));
        e.finish();
        let c = e
            .drain()
            .find_map(|r| match r {
                crate::Record::Call(c) => Some(c),
                _ => None,
            })
            .unwrap();
        assert_eq!(c.final_status, Some(486));
        assert_eq!((c.invite_ns, c.end_ns), (t, t));
        assert!(c.setup_delay_ms.is_none_or(|d| d >= 0.0), "{:?}", c.setup_delay_ms);
    }

    /// The floor follows a capture clock stepped back: after an hour's step
    /// a message is taken at its own time, not pinned an hour ahead.
    #[test]
    fn the_floor_follows_a_clock_stepped_back() {
        let mut e = Engine::new(Config { hep_port: Some(9060), ..Config::default() });
        let (t, back) = (1_700_000_000_000_000_000, 3_600_000_000_000);
        let ends = ("192.0.2.1", "192.0.2.2");
        let m =
            |at| hep_message(kind::SIP, b"OPTIONS sip:b SIP/2.0\r\n\r\n", at, ends, None, false);
        e.hep_datagram(t, &m(t));
        e.hep_datagram(t - back, &m(t - back));
        assert_eq!(e.hep_floor_ns, t - back);
    }

    /// Through the engine: a compressed SIP message counts as a SIP message
    /// of its call; a damaged one is an anomaly, not SIP.
    #[test]
    fn compressed_hep_is_read_as_sip() {
        let ends = ("192.0.2.1", "192.0.2.2");
        let hep = |payload: &[u8]| hep_message(kind::SIP, payload, 1_000_000_000, ends, None, true);
        let mut e = Engine::new(Config { hep_port: Some(9060), ..Config::default() });
        let [zlib, gzip] = by_python();
        for m in [hep(&zlib), hep(&gzip), hep(b"not compressed")] {
            e.hep_datagram(1_000_000_000, &m);
        }
        assert_eq!(e.counters.hep, 3);
        assert_eq!(e.counters.hep_unread, 0);
        assert_eq!(e.counters.sip_messages, 2);
        assert_eq!(e.counters.anomalies.get("hep_bad_compression"), Some(&1));
    }
}
