//! The parts of SDP (RFC 4566, RFC 3264) a probe needs: where each medium is
//! received, which payload types it carries and in which direction.

use crate::text::{split_on, split_once_on};
use std::net::IpAddr;

/// Most media sections we keep from one SDP body.
pub const MAX_MEDIA: usize = 16;
/// Most payload types we keep per media section.
pub const MAX_FORMATS: usize = 32;

/// Media direction attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    /// `a=sendrecv` (the default).
    #[default]
    SendRecv,
    /// `a=sendonly`.
    SendOnly,
    /// `a=recvonly`.
    RecvOnly,
    /// `a=inactive`.
    Inactive,
}

impl Direction {
    /// The attribute's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::SendRecv => "sendrecv",
            Direction::SendOnly => "sendonly",
            Direction::RecvOnly => "recvonly",
            Direction::Inactive => "inactive",
        }
    }
}

/// One `a=rtpmap` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpMap<'a> {
    /// Payload type.
    pub payload_type: u8,
    /// Encoding name.
    pub encoding: &'a str,
    /// Clock rate (0 if absent or unparsable).
    pub clock_rate: u32,
}

/// One `m=` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Media<'a> {
    /// Media type (`audio`, `video`, `image`).
    pub kind: &'a str,
    /// Port media is received on (0 = rejected/disabled).
    pub port: u16,
    /// Transport (`RTP/AVP`, `RTP/SAVP`, `udptl`).
    pub proto: &'a str,
    /// Receiving address: media-level `c=`, else session-level.
    pub addr: Option<IpAddr>,
    /// Payload types in preference order.
    pub formats: Vec<u8>,
    /// `a=rtpmap` entries (media-level).
    pub rtpmaps: Vec<RtpMap<'a>>,
    /// `a=ptime` in ms.
    pub ptime: Option<u32>,
    /// Effective direction (media-level, else session-level, else sendrecv).
    pub direction: Direction,
    /// Explicit `a=rtcp` port (RFC 3605).
    pub rtcp_port: Option<u16>,
    /// An `a=crypto` line (RFC 4568 SDES keys for SRTP).
    pub crypto: bool,
}

impl<'a> Media<'a> {
    /// SRTP: a secure profile (`RTP/SAVP`, `RTP/SAVPF`,
    /// `UDP/TLS/RTP/SAVPF`) or SDES keys. Headers stay clear (RFC 3711), so
    /// loss and jitter are measured, but payloads and RTCP reports are
    /// encrypted.
    pub fn encrypted(&self) -> bool {
        self.crypto || self.proto.to_ascii_uppercase().contains("SAVP")
    }

    /// The rtpmap for a payload type, if signalled.
    pub fn rtpmap(&self, pt: u8) -> Option<&RtpMap<'a>> {
        self.rtpmaps.iter().find(|m| m.payload_type == pt)
    }
}

/// A parsed SDP body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sdp<'a> {
    /// Session-level connection address.
    pub session_addr: Option<IpAddr>,
    /// Media sections (at most [`MAX_MEDIA`]).
    pub media: Vec<Media<'a>>,
    /// Lines we could not understand (counted, not fatal).
    pub bad_lines: u32,
}

impl Sdp<'_> {
    /// Whether this description puts the call on hold: some audio offered
    /// send-only, inactive or to 0.0.0.0 (RFC 3264 §8.4, and the older
    /// RFC 2543 way); None when it has no active audio.
    pub fn audio_hold(&self) -> Option<bool> {
        self.media
            .iter()
            .filter(|m| m.kind.eq_ignore_ascii_case("audio") && m.port != 0)
            .map(|m| {
                matches!(m.direction, Direction::SendOnly | Direction::Inactive)
                    || m.addr.is_some_and(|a| a.is_unspecified())
            })
            .reduce(|a, b| a || b)
    }

    /// Whether it offers fax over T.38 (`m=image` with a port).
    pub fn t38(&self) -> bool {
        self.media.iter().any(|m| m.kind.eq_ignore_ascii_case("image") && m.port != 0)
    }
}

fn parse_connection(v: &str) -> Option<IpAddr> {
    // c=IN IP4 192.0.2.1[/ttl[/n]]
    let mut it = v.split_ascii_whitespace();
    let (_net, _atype, addr) = (it.next()?, it.next()?, it.next()?);
    split_once_on(addr, b'/').map_or(addr, |(a, _)| a).parse().ok()
}

fn parse_direction(a: &str) -> Option<Direction> {
    Some(match a {
        "sendrecv" => Direction::SendRecv,
        "sendonly" => Direction::SendOnly,
        "recvonly" => Direction::RecvOnly,
        "inactive" => Direction::Inactive,
        _ => return None,
    })
}

/// Parses an SDP body. Tolerant: unknown or broken lines are counted and skipped.
pub fn parse(body: &[u8]) -> Sdp<'_> {
    let text = match std::str::from_utf8(body) {
        Ok(t) => t,
        // Keep the valid prefix: a binary tail must not hide the media lines before it.
        Err(e) => std::str::from_utf8(&body[..e.valid_up_to()]).unwrap_or(""),
    };
    let mut p = Parser::default();
    // `trim_end` also takes the CR of a CRLF line end.
    for line in split_on(text, b'\n') {
        let line = line.trim_end();
        let Some((k, v)) = split_once_on(line, b'=') else {
            if !line.is_empty() {
                p.sdp.bad_lines += 1;
            }
            continue;
        };
        match k {
            "c" => p.connection(v),
            "m" => p.media_line(v),
            "a" => p.attribute(v),
            _ => {}
        }
    }
    p.finish()
}

/// The description so far, and what the lines before decided for the next.
#[derive(Default)]
struct Parser<'a> {
    sdp: Sdp<'a>,
    /// `a=sendonly` and the like at session level,
    session_dir: Option<Direction>,
    /// and in the current media section.
    media_dir: Option<Direction>,
    /// The current media section was refused (malformed, or past
    /// [`MAX_MEDIA`]): its lines change nothing (malformed ones are still
    /// counted).
    skip_media: bool,
}

impl<'a> Parser<'a> {
    /// `c=`: the current media's address, or the session's.
    fn connection(&mut self, v: &str) {
        let addr = parse_connection(v);
        if addr.is_none() {
            self.sdp.bad_lines += 1;
        }
        if self.skip_media {
        } else if let Some(m) = self.sdp.media.last_mut() {
            m.addr = addr.or(m.addr);
        } else {
            self.sdp.session_addr = addr;
        }
    }

    /// `m=`: ends the current media section and starts the next.
    fn media_line(&mut self, v: &'a str) {
        self.end_media();
        if self.sdp.media.len() >= MAX_MEDIA {
            self.skip_media = true;
            self.sdp.bad_lines += 1;
            return;
        }
        let mut it = v.split_ascii_whitespace();
        let (Some(kind), Some(port), Some(proto)) = (it.next(), it.next(), it.next()) else {
            self.sdp.bad_lines += 1;
            self.skip_media = true;
            return;
        };
        let port = split_once_on(port, b'/').map_or(port, |(p, _)| p);
        let Ok(port) = port.parse::<u16>() else {
            self.sdp.bad_lines += 1;
            self.skip_media = true;
            return;
        };
        self.skip_media = false;
        let formats = it
            .filter_map(|f| f.parse::<u8>().ok())
            .filter(|&f| f < 128)
            .take(MAX_FORMATS)
            .collect();
        self.sdp.media.push(Media {
            kind,
            port,
            proto,
            addr: self.sdp.session_addr,
            formats,
            rtpmaps: Vec::new(),
            ptime: None,
            direction: Direction::SendRecv,
            rtcp_port: None,
            crypto: false,
        });
    }

    /// `a=`: a direction, or an attribute of the current media.
    fn attribute(&mut self, v: &'a str) {
        let (name, value) = split_once_on(v, b':').unwrap_or((v, ""));
        if self.skip_media {
            return;
        }
        if let Some(d) = parse_direction(name) {
            if self.sdp.media.is_empty() {
                self.session_dir = Some(d);
            } else {
                self.media_dir = Some(d);
            }
            return;
        }
        let Some(m) = self.sdp.media.last_mut() else {
            return;
        };
        match name {
            "rtpmap" => self.sdp.bad_lines += u32::from(!add_rtpmap(m, value)),
            "ptime" => m.ptime = value.trim().parse().ok(),
            "crypto" => m.crypto = true,
            "rtcp" => {
                m.rtcp_port = value.split_ascii_whitespace().next().and_then(|p| p.parse().ok())
            }
            _ => {}
        }
    }

    /// The current media section's direction: its own, else the session's.
    fn end_media(&mut self) {
        if let Some(m) = self.sdp.media.last_mut() {
            m.direction = self.media_dir.or(self.session_dir).unwrap_or_default();
        }
        self.media_dir = None;
    }

    fn finish(mut self) -> Sdp<'a> {
        self.end_media();
        let mut sdp = self.sdp;
        // A session-level c= after the m= lines is malformed, but apply it where missing.
        if let Some(addr) = sdp.session_addr {
            for m in sdp.media.iter_mut().filter(|m| m.addr.is_none()) {
                m.addr = Some(addr);
            }
        }
        sdp
    }
}

/// Adds an `a=rtpmap` value (`PT encoding/rate[/channels]`) to `m`, up to
/// [`MAX_FORMATS`]; false when it is malformed.
fn add_rtpmap<'a>(m: &mut Media<'a>, value: &'a str) -> bool {
    let Some((pt, enc)) = split_once_on(value, b' ') else {
        return false;
    };
    let Ok(pt) = pt.trim().parse::<u8>() else {
        return false;
    };
    let enc = enc.trim();
    let (encoding, rate) = split_once_on(enc, b'/').unwrap_or((enc, ""));
    let rate = split_once_on(rate, b'/').map_or(rate, |(r, _)| r);
    let clock_rate = rate.parse().unwrap_or(0);
    if m.rtpmaps.len() < MAX_FORMATS && pt < 128 {
        m.rtpmaps.push(RtpMap { payload_type: pt, encoding, clock_rate });
    }
    true
}
