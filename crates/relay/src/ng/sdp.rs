//! The SDP an edge rewrites (RFC 4566): where each audio stream of a party
//! is sent, and the same body with the edge's address and ports in their
//! place, as rtpengine does for an offer or an answer. Lines are kept
//! byte for byte except those naming the audio's address and ports.

use std::net::{IpAddr, SocketAddr};

/// Most audio streams one body may carry.
pub const MAX_AUDIO: usize = 16;
/// Most media sections of any kind (what is kept is copied per section).
pub const MAX_MEDIA: usize = 32;

/// Where a party receives one audio stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Audio {
    /// RTP: the `m=` port at the `c=` address.
    pub rtp: SocketAddr,
    /// RTCP: `a=rtcp` (RFC 3605), else the RTP port + 1.
    pub rtcp: SocketAddr,
    /// Port 0: the stream is refused or removed; nothing is relayed.
    pub rejected: bool,
}

/// One line split into its type and value (`c=IN IP4 x` → (`c`, `IN IP4 x`)).
fn split(line: &str) -> Option<(&str, &str)> {
    line.split_once('=')
}

/// An `m=` value's media, port (a `/count` dropped) and the rest; the
/// one reading of it, so what is relayed and what is rewritten agree.
fn media_line(value: &str) -> Option<(&str, u16, &str)> {
    let v = value.trim_start();
    let (media, after) = v.split_once(char::is_whitespace)?;
    let after = after.trim_start();
    let (port, rest) = after.split_once(char::is_whitespace).unwrap_or((after, ""));
    let port = port.split('/').next()?.parse().ok()?;
    Some((media, port, rest.trim_start()))
}

/// The address of a `c=` value (`IN IP4 192.0.2.1`, a multicast TTL
/// dropped); the family must be the address's, and nothing may follow.
fn connection(value: &str) -> Option<IpAddr> {
    let mut f = value.split_whitespace();
    let (net, family, addr) = (f.next()?, f.next()?, f.next()?);
    if net != "IN" || f.next().is_some() {
        return None;
    }
    let addr: IpAddr = addr.split('/').next()?.parse().ok()?;
    let matches = matches!((family, addr), ("IP4", IpAddr::V4(_)) | ("IP6", IpAddr::V6(_)));
    matches.then_some(addr)
}

/// A media section as read: audio or not, its own address, its port and
/// its `a=rtcp` (port and address).
type Section = (bool, Option<IpAddr>, u16, Option<(u16, Option<IpAddr>)>);

/// Where each audio stream goes, in `m=` order; Err names what is wrong.
pub fn audio(sdp: &str) -> Result<Vec<Audio>, &'static str> {
    let mut session_addr = None;
    let mut media: Vec<Section> = Vec::new();
    for line in sdp.lines() {
        let Some((kind, value)) = split(line.trim_end()) else {
            continue;
        };
        match (kind, media.last_mut()) {
            ("m", _) => {
                let (media_type, port, _) = media_line(value).ok_or("an m= line without a port")?;
                let is_audio = media_type == "audio";
                if is_audio && media.iter().filter(|m| m.0).count() >= MAX_AUDIO {
                    return Err("more audio streams than an edge relays in one call");
                }
                if media.len() >= MAX_MEDIA {
                    return Err("more media sections than an edge takes");
                }
                media.push((is_audio, None, port, None));
            }
            // The first session-level c= counts, as when rewriting.
            ("c", None) => {
                let addr = connection(value).ok_or("a bad c= line")?;
                session_addr = session_addr.or(Some(addr));
            }
            ("c", Some(m)) => m.1 = Some(connection(value).ok_or("a bad c= line")?),
            ("a", Some(m)) => {
                if let Some(rtcp) = value.strip_prefix("rtcp:") {
                    let mut f = rtcp.split_whitespace();
                    let port = f.next().and_then(|p| p.parse().ok()).ok_or("a bad a=rtcp")?;
                    let addr = f.nth(2).and_then(|a| a.parse().ok());
                    m.3 = Some((port, addr));
                }
            }
            _ => {}
        }
    }
    media
        .into_iter()
        .filter(|m| m.0)
        .map(|(_, addr, port, rtcp)| {
            let addr = addr.or(session_addr).ok_or("an audio stream without an address")?;
            let (rtcp_port, rtcp_addr) = rtcp.unwrap_or((port.wrapping_add(1), None));
            Ok(Audio {
                rtp: SocketAddr::new(addr, port),
                rtcp: SocketAddr::new(rtcp_addr.unwrap_or(addr), rtcp_port),
                rejected: port == 0,
            })
        })
        .collect()
}

/// `IN IP4 addr` or `IN IP6 addr`.
fn connection_of(addr: IpAddr) -> String {
    match addr {
        IpAddr::V4(a) => format!("IN IP4 {a}"),
        IpAddr::V6(a) => format!("IN IP6 {a}"),
    }
}

/// The body with each audio stream moved to `address` and the RTP port
/// in `ports` (RTCP on the next port), in `m=` order; a refused stream
/// (port 0, or 0 in `ports`) stays refused. `sdp` must be one [`audio`]
/// accepted. Other media keep their own address, given a
/// `c=` line of their own when the session's is replaced, unless
/// `refuse_other` sets their port to 0.
pub fn rewrite(sdp: &str, address: IpAddr, ports: &[u16], refuse_other: bool) -> String {
    let eol = if sdp.contains("\r\n") { "\r\n" } else { "\n" };
    let lines: Vec<&str> = sdp.lines().map(str::trim_end).collect();
    // Which media sections have a c= line of their own.
    let mut own_c = Vec::new();
    for line in &lines {
        match split(line) {
            Some(("m", _)) => own_c.push(false),
            Some(("c", _)) => {
                if let Some(last) = own_c.last_mut() {
                    *last = true;
                }
            }
            _ => {}
        }
    }
    // Written from the parsed address, never copied raw: what follows the
    // address on the sender's line must not be repeated per section.
    let session_c = lines
        .iter()
        .take_while(|l| !l.starts_with("m="))
        .find_map(|l| l.strip_prefix("c="))
        .and_then(connection)
        .map(connection_of);
    let ours = connection_of(address);
    let mut out = String::with_capacity(sdp.len() + 64);
    let mut emit = |l: &str| {
        out.push_str(l);
        out.push_str(eol);
    };
    // The current section: None before the first m=, then (index among
    // all media, index among audio if audio).
    let mut section: Option<(usize, Option<usize>)> = None;
    let (mut media_seen, mut audio_seen) = (0, 0);
    for line in &lines {
        let (kind, value) = split(line).unwrap_or(("", ""));
        match (kind, section) {
            ("m", _) => {
                // A body `audio` accepted has only readable m= lines.
                let (media, port, rest) = media_line(value).unwrap_or(("", 0, ""));
                let refused = port == 0;
                if media == "audio" {
                    section = Some((media_seen, Some(audio_seen)));
                    match ports.get(audio_seen) {
                        Some(&p) if !refused && p != 0 => emit(&format!("m=audio {p} {rest}")),
                        _ => emit(&format!("m=audio 0 {rest}")),
                    }
                    audio_seen += 1;
                } else {
                    section = Some((media_seen, None));
                    if refuse_other && !media.is_empty() {
                        emit(&format!("m={media} 0 {rest}"));
                    } else {
                        emit(line);
                        if let (Some(c), false) = (&session_c, own_c[media_seen]) {
                            // The session's address, kept as this section's own.
                            emit(&format!("c={c}"));
                        }
                    }
                }
                media_seen += 1;
            }
            ("c", None) | ("c", Some((_, Some(_)))) => emit(&format!("c={ours}")),
            // A refused stream (port 0) keeps the sender's line.
            ("a", Some((_, Some(i)))) if value.starts_with("rtcp:") => match ports.get(i) {
                Some(&p) if p != 0 => emit(&format!("a=rtcp:{} {ours}", p.wrapping_add(1))),
                _ => emit(line),
            },
            _ => emit(line),
        }
    }
    out
}
