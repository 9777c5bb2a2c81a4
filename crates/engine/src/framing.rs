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

impl Engine {
    /// A HEP3 datagram: its SIP is handled as if captured, with the
    /// addresses, ports and time the HEP agent gives.
    pub(crate) fn hep_datagram(&mut self, now: i64, payload: &[u8]) {
        let h = match calliper_wire::hep::Hep::parse(payload) {
            Ok(h) => h,
            Err(e) => return self.counters.anomaly(e.name()),
        };
        self.counters.hep += 1;
        if h.kind != calliper_wire::hep::kind::SIP || h.compressed {
            self.counters.hep_unread += 1;
            return;
        }
        let at = if (now.saturating_sub(HEP_MAX_AGE_NS)..=now.saturating_add(HEP_MAX_AHEAD_NS))
            .contains(&h.ts_ns)
        {
            h.ts_ns.min(now)
        } else {
            self.counters.anomaly("hep_clock_skew");
            now
        };
        self.sip_transport = match h.ip_protocol {
            6 => SipTransport::Tcp,
            132 => SipTransport::Sctp,
            _ => SipTransport::Udp,
        };
        let flow = Flow {
            src: h.src,
            sport: h.sport,
            dst: h.dst,
            dport: h.dport,
        };
        self.sip_via_hep = true;
        self.sip_datagram(at, &flow, h.payload);
        self.sip_via_hep = false;
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
