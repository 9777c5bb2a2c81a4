//! Tolerant zero-copy SIP (RFC 3261) and SDP (RFC 4566) parsing.
//!
//! [`parse`] reads one message from the start of a buffer and returns views
//! into it: no header is copied. Unknown headers are skipped, compact forms
//! (`i`, `f`, `t`, `v`, `m`, `c`, `l`) are understood, folded lines are
//! tolerated. Limits on header count and line length keep hostile input from
//! costing more than a linear scan. For stream transports, [`SipError::Incomplete`]
//! says more bytes are needed and `SipMessage::len` says how many bytes the
//! message used, so the caller can frame by Content-Length.

mod name_addr;
#[doc(hidden)]
pub mod reference;
pub mod sdp;
mod text;

use name_addr::{uri_start, UriStart};
pub use name_addr::{via_branch, NameAddr};
use text::{find_byte, lines};

/// Most headers we read in one message; more is an anomaly, not a crash.
pub const MAX_HEADERS: usize = 256;
/// Longest header section we wait for on a stream (RFC 3261 sets no limit).
pub const MAX_MESSAGE: usize = 65535;
/// Largest Content-Length we accept. Bodies over 64 KiB only travel over TCP;
/// a larger claim is a framing error or an attack.
pub const MAX_BODY: usize = 1 << 20;

/// The start line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartLine<'a> {
    /// A request: method and Request-URI.
    Request {
        /// Method token (`INVITE`, `BYE`, ...).
        method: &'a str,
        /// Request-URI.
        uri: &'a str,
    },
    /// A response: status code and reason phrase.
    Response {
        /// Status code, 100..=699.
        code: u16,
        /// Reason phrase.
        reason: &'a str,
    },
}

/// A parsed SIP message; every field borrows the input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SipMessage<'a> {
    /// Request or status line.
    pub start: Option<StartLine<'a>>,
    /// Call-ID.
    pub call_id: Option<&'a str>,
    /// From header value.
    pub from: Option<&'a str>,
    /// To header value.
    pub to: Option<&'a str>,
    /// CSeq number.
    pub cseq: Option<u32>,
    /// CSeq method.
    pub cseq_method: Option<&'a str>,
    /// Topmost Via.
    pub via: Option<&'a str>,
    /// Contact.
    pub contact: Option<&'a str>,
    /// User-Agent.
    pub user_agent: Option<&'a str>,
    /// Server (the User-Agent of responses).
    pub server: Option<&'a str>,
    /// Content-Type.
    pub content_type: Option<&'a str>,
    /// Content-Length as sent.
    pub content_length: Option<usize>,
    /// Reason header (RFC 3326), e.g. on BYE or CANCEL.
    pub reason_header: Option<&'a str>,
    /// Expires header (registrations).
    pub expires: Option<&'a str>,
    /// Authorization or Proxy-Authorization present: the request carries
    /// credentials (a challenge to it means they were refused).
    pub authorization: bool,
    /// The whole message as captured, start line to end of body (the
    /// console's ladder and the recorder keep it).
    pub raw: &'a [u8],
    /// Message body.
    pub body: &'a [u8],
    /// Headers in the message.
    pub header_count: usize,
    /// Bytes this message occupies in the input (start line to end of body).
    pub len: usize,
    /// Content-Length promised more body than the datagram holds.
    pub body_truncated: bool,
    /// Content-Length was not a number or exceeded [`MAX_BODY`]; on a
    /// datagram the rest of it was taken as the body.
    pub bad_content_length: bool,
}

impl<'a> SipMessage<'a> {
    /// The method of a request, or of the CSeq for a response.
    pub fn method(&self) -> Option<&'a str> {
        match self.start {
            Some(StartLine::Request { method, .. }) => Some(method),
            _ => self.cseq_method,
        }
    }

    /// Status code of a response.
    pub fn status(&self) -> Option<u16> {
        match self.start {
            Some(StartLine::Response { code, .. }) => Some(code),
            _ => None,
        }
    }

    /// True when the body is SDP.
    pub fn has_sdp(&self) -> bool {
        !self.body.is_empty()
            && self.content_type.map_or(self.body.starts_with(b"v=0"), |c| {
                c.trim().to_ascii_lowercase().starts_with("application/sdp")
            })
    }
}

/// Why bytes are not (yet) a SIP message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SipError {
    /// The first line is not a SIP request or status line.
    NotSip,
    /// The headers (or, on a stream, the body) end beyond the buffer;
    /// `needed` is the whole message's length once the headers say it.
    Incomplete {
        /// Bytes from the start of the buffer to the end of the message.
        needed: Option<usize>,
    },
    /// More than [`MAX_HEADERS`] headers.
    TooManyHeaders,
    /// Content-Length is not a number or exceeds [`MAX_BODY`].
    BadContentLength,
    /// A required header (Call-ID, CSeq) is missing.
    MissingHeader(&'static str),
}

impl SipError {
    /// A stable short name for counters.
    pub fn name(&self) -> &'static str {
        match self {
            SipError::NotSip => "sip_not_sip",
            SipError::Incomplete { .. } => "sip_incomplete",
            SipError::TooManyHeaders => "sip_too_many_headers",
            SipError::BadContentLength => "sip_bad_content_length",
            SipError::MissingHeader(_) => "sip_missing_header",
        }
    }
}

/// The SIP methods known by name (RFC 3261 and its extensions): they start
/// messages on any port, and the engine counts each by name (any other
/// token as one kind).
pub const METHODS: &[&str] = &[
    "INVITE",
    "ACK",
    "BYE",
    "CANCEL",
    "OPTIONS",
    "REGISTER",
    "PRACK",
    "UPDATE",
    "INFO",
    "REFER",
    "NOTIFY",
    "SUBSCRIBE",
    "MESSAGE",
    "PUBLISH",
];

/// Cheap test of whether a payload starts like SIP (used to find SIP on any port).
pub fn looks_like_sip(b: &[u8]) -> bool {
    let b = trim_leading_crlf(b);
    if b.starts_with(b"SIP/2.0 ") {
        return true;
    }
    METHODS.iter().any(|m| b.len() > m.len() && b.starts_with(m.as_bytes()) && b[m.len()] == b' ')
        && first_line(b).is_some_and(|l| l.ends_with(b" SIP/2.0"))
}

fn trim_leading_crlf(mut b: &[u8]) -> &[u8] {
    while let [b'\r' | b'\n', rest @ ..] = b {
        b = rest;
    }
    b
}

fn first_line(b: &[u8]) -> Option<&[u8]> {
    let end = memchr::memchr(b'\n', b)?;
    let line = &b[..end];
    Some(line.strip_suffix(b"\r").unwrap_or(line))
}

fn to_str(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

fn parse_start_line(line: &[u8]) -> Result<StartLine<'_>, SipError> {
    let line = match std::str::from_utf8(line) {
        Ok(s) => s,
        // A reason phrase in Latin-1 (`486 Occup\xe9`) keeps its status:
        // the phrase is cut where it stops being UTF-8.
        Err(e) if line.starts_with(b"SIP/2.0 ") => {
            std::str::from_utf8(&line[..e.valid_up_to()]).map_err(|_| SipError::NotSip)?
        }
        Err(_) => return Err(SipError::NotSip),
    };
    if let Some(rest) = line.strip_prefix("SIP/2.0 ") {
        let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
        let code: u16 = code.parse().map_err(|_| SipError::NotSip)?;
        if !(100..=699).contains(&code) {
            return Err(SipError::NotSip);
        }
        return Ok(StartLine::Response { code, reason: reason.trim() });
    }
    let mut parts = line.split(' ');
    let (Some(method), Some(uri), Some("SIP/2.0"), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(SipError::NotSip);
    };
    if method.is_empty()
        || !method.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    {
        return Err(SipError::NotSip);
    }
    Ok(StartLine::Request { method, uri })
}

/// Parses one SIP message at the start of `buf`.
///
/// `stream` says the bytes come from TCP: then a body shorter than
/// Content-Length is [`SipError::Incomplete`]; on UDP it is taken as it is and
/// flagged `body_truncated`.
pub fn parse(buf: &[u8], stream: bool) -> Result<SipMessage<'_>, SipError> {
    let skipped = buf.len() - trim_leading_crlf(buf).len();
    let b = &buf[skipped..];
    let Some(hdr_end) = header_end(b) else {
        // No blank line: a datagram may still be a complete body-less message
        // missing its final CRLF; a stream needs more bytes.
        if stream || first_line(b).is_none() {
            return Err(if b.len() > MAX_MESSAGE {
                SipError::NotSip
            } else {
                SipError::Incomplete { needed: None }
            });
        }
        return parse_headers(b, b.len(), b.len(), skipped, false);
    };
    parse_headers(b, hdr_end.0, hdr_end.1, skipped, stream)
}

/// The first blank line within the first [`MAX_MESSAGE`] bytes: (end of
/// the header section, start of the body). CRLF and bare LF line ends both
/// count. One pass, never past the header cap, so a stream that never
/// sends a blank line costs a bounded scan per attempt.
fn header_end(b: &[u8]) -> Option<(usize, usize)> {
    let window = &b[..b.len().min(MAX_MESSAGE + 4)];
    memchr::memchr_iter(b'\n', window).find_map(|i| {
        let head = if i > 0 && window[i - 1] == b'\r' { i - 1 } else { i };
        match window.get(i + 1..) {
            Some([b'\n', ..]) => Some((head, i + 2)),
            Some([b'\r', b'\n', ..]) => Some((head, i + 3)),
            _ => None,
        }
    })
}

fn parse_headers(
    b: &[u8],
    head_len: usize,
    body_start: usize,
    skipped: usize,
    stream: bool,
) -> Result<SipMessage<'_>, SipError> {
    let head = &b[..head_len];
    let mut lines = lines(head);
    let start = parse_start_line(lines.next().ok_or(SipError::NotSip)?)?;
    let mut m = SipMessage { start: Some(start), ..Default::default() };
    let mut last: Option<(&[u8], &[u8])> = None;
    for line in lines {
        if matches!(line.first(), Some(b' ' | b'\t')) {
            // Folded continuation (RFC 3261 §7.3.1): a From, To or Contact
            // takes it into its value (the URI may be on it); other
            // headers keep their first line's value.
            if let Some((name, value)) = last.as_mut() {
                if is_name_addr(name) {
                    *value = joined(b, value, line);
                }
            }
            continue;
        }
        if let Some((name, value)) = last.take() {
            apply(&mut m, name, value);
        }
        m.header_count += 1;
        if m.header_count > MAX_HEADERS {
            return Err(SipError::TooManyHeaders);
        }
        if let Some(colon) = find_byte(b':', line) {
            last = Some((trim(&line[..colon]), trim(&line[colon + 1..])));
        }
    }
    if let Some((name, value)) = last {
        apply(&mut m, name, value);
    }
    if m.bad_content_length && stream {
        // Without a length a stream cannot be framed.
        return Err(SipError::BadContentLength);
    }
    let available = b.len() - body_start;
    let body_len = match m.content_length {
        Some(cl) if cl > available => {
            if stream {
                return Err(SipError::Incomplete { needed: Some(skipped + body_start + cl) });
            }
            m.body_truncated = true;
            available
        }
        Some(cl) => cl,
        None if stream => 0,
        None => available,
    };
    m.body = &b[body_start..body_start + body_len];
    m.raw = &b[..body_start + body_len];
    m.len = skipped + body_start + body_len;
    Ok(m)
}

/// From, To and Contact, long and compact.
fn is_name_addr(name: &[u8]) -> bool {
    matches!(header_of(name), Some(Header::From | Header::To | Header::Contact))
}

/// The span of `msg` from `value` to the end of `line` (both within it),
/// trimmed: a header value with its folded continuation.
fn joined<'a>(msg: &'a [u8], value: &'a [u8], line: &[u8]) -> &'a [u8] {
    let at = |s: &[u8]| (s.as_ptr() as usize).wrapping_sub(msg.as_ptr() as usize);
    let (start, end) = (at(value), at(line).saturating_add(line.len()));
    msg.get(start..end).map_or(value, trim)
}

/// The headers a message's fields come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Header {
    CallId,
    From,
    To,
    CSeq,
    Via,
    Contact,
    UserAgent,
    Server,
    ContentType,
    ContentLength,
    Reason,
    Expires,
    Authorization,
}

/// Which header a name is (any case), if it is one a field comes from:
/// the long names and compact forms of RFC 3261 §7.3.3. Matched on the
/// name lowered into a small buffer (a scan of a table of names cost 200
/// instructions a header).
fn header_of(name: &[u8]) -> Option<Header> {
    const LONGEST: usize = "Proxy-Authorization".len();
    let mut lower = [0u8; LONGEST];
    let lower = lower.get_mut(..name.len())?;
    for (l, c) in lower.iter_mut().zip(name) {
        *l = c.to_ascii_lowercase();
    }
    Some(match &*lower {
        b"call-id" | b"i" => Header::CallId,
        b"from" | b"f" => Header::From,
        b"to" | b"t" => Header::To,
        b"cseq" => Header::CSeq,
        b"via" | b"v" => Header::Via,
        b"contact" | b"m" => Header::Contact,
        b"user-agent" => Header::UserAgent,
        b"server" => Header::Server,
        b"content-type" | b"c" => Header::ContentType,
        b"content-length" | b"l" => Header::ContentLength,
        b"reason" => Header::Reason,
        b"expires" => Header::Expires,
        b"authorization" | b"proxy-authorization" => Header::Authorization,
        _ => return None,
    })
}

/// Fills the message's field from one header line. The name is matched
/// first, so a header no field comes from costs no UTF-8 check.
fn apply<'a>(m: &mut SipMessage<'a>, name: &'a [u8], value: &'a [u8]) {
    let Some(header) = header_of(name) else {
        return;
    };
    let v = match to_str(value) {
        Some(v) => v,
        // A display name in Latin-1 does not cost the URI: a name-addr that
        // is not UTF-8 is read from the `<` the grammar finds (outside quotes).
        None if is_name_addr(name) => match uri_start(value) {
            UriStart::At(lt) => match to_str(&value[lt..]) {
                Some(v) => v,
                None => return,
            },
            _ => return,
        },
        None => return,
    };
    match header {
        Header::CallId => _ = m.call_id.get_or_insert(v),
        Header::From => _ = m.from.get_or_insert(v),
        Header::To => _ = m.to.get_or_insert(v),
        Header::CSeq => {
            let (num, method) = v.split_once(|c: char| c.is_ascii_whitespace()).unwrap_or((v, ""));
            m.cseq = num.trim().parse().ok();
            m.cseq_method = Some(method.trim());
        }
        Header::Via => _ = m.via.get_or_insert(v),
        Header::Contact => _ = m.contact.get_or_insert(v),
        Header::UserAgent => _ = m.user_agent.get_or_insert(v),
        Header::Server => _ = m.server.get_or_insert(v),
        Header::ContentType => _ = m.content_type.get_or_insert(v),
        Header::ContentLength => match v.parse::<usize>() {
            Ok(n) if n <= MAX_BODY => m.content_length = Some(n),
            _ => m.bad_content_length = true,
        },
        Header::Reason => _ = m.reason_header.get_or_insert(v),
        Header::Expires => _ = m.expires.get_or_insert(v),
        Header::Authorization => m.authorization = true,
    }
}

#[cfg(test)]
mod tests;
