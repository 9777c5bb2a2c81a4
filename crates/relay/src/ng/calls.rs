//! The edge's calls, ports and replies ([`Control`]).

use super::bencode::{self, Value, Writer};
use super::sdp;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Replies kept for retransmitted requests, and for how long.
const COOKIES: usize = 4096;
const COOKIE_TTL_NS: i64 = 30_000_000_000;
/// Longest cookie taken (rtpengine's module sends about 20 bytes).
const MAX_COOKIE: usize = 64;
/// Most Call-IDs a `list` reply names.
const MAX_LISTED: usize = 1000;
/// Flags of Kamailio's `rtpengine` module (and OpenSIPS's) an edge takes:
/// it relays plain RTP/AVP symmetrically and keeps no other state for them.
const KNOWN_FLAGS: &[&str] = &[
    "trust-address",
    "SIP-source-address",
    "symmetric",
    "asymmetric",
    "port-latching",
    "strict-source",
    "media-handover",
    "no-rtcp-attribute",
    "full-rtcp-attribute",
    "loop-protect",
    "record-call",
];
/// Keys of a request the edge reads or knowingly leaves alone.
const KNOWN_KEYS: &[&str] = &[
    "command",
    "call-id",
    "from-tag",
    "to-tag",
    "sdp",
    "flags",
    "via-branch",
    "received-from",
    "replace",
    "direction",
    "ICE",
    "transport-protocol",
    "rtcp-mux",
    "supports",
    "delete-delay",
    "delete delay",
    "limit",
    "sip-message-type",
    "rtpp-flags",
];

/// An edge's settings (`[edge]` in the node file).
#[derive(Debug, Clone)]
pub struct ControlConfig {
    /// The address media is received on and written into SDP.
    pub address: IpAddr,
    /// Ports for media, inclusive: RTP on each even port, RTCP on the next.
    pub ports: (u16, u16),
    /// Calls held at once; an offer beyond is refused.
    pub max_calls: usize,
    /// A call with no request and no media for this long is ended.
    pub idle_timeout_ns: i64,
    /// Set non-audio media's port to 0 instead of leaving it as sent.
    pub refuse_other_media: bool,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            ports: (30000, 39999),
            max_calls: 10_000,
            idle_timeout_ns: 60_000_000_000,
            refuse_other_media: false,
        }
    }
}

/// What the edge counted: requests, refusals and media.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ControlCounters {
    /// Requests answered (retransmissions included).
    pub requests: u64,
    /// Retransmitted requests answered from the reply already given.
    pub retransmits: u64,
    /// Datagrams that were not `COOKIE DICT` (no reply: nothing to match).
    pub malformed: u64,
    /// Requests answered with an error.
    pub errors: u64,
    /// Offers, answers and deletes done.
    pub offers: u64,
    /// Answers done.
    pub answers: u64,
    /// Deletes done.
    pub deletes: u64,
    /// Offers refused: `max_calls` reached.
    pub calls_refused: u64,
    /// Streams refused: no media port free.
    pub ports_exhausted: u64,
    /// Calls ended with no request or media for `idle_timeout_ns`.
    pub calls_timed_out: u64,
    /// Flags and keys of requests the edge does not act on (named in the
    /// reply's `warning`).
    pub unknown_flags: u64,
    /// Media datagrams relayed, and their bytes.
    pub media_relayed: u64,
    /// Bytes of those.
    pub media_bytes: u64,
    /// Media from an address other than the one its party's SDP names.
    pub media_foreign_source: u64,
    /// Media with nowhere to go yet (no answer, on hold, refused stream).
    pub media_no_destination: u64,
}

/// Where a media datagram received on an edge port goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    /// The edge port to send it from (the one facing the receiver).
    pub from_port: u16,
    /// The receiver's address.
    pub to: SocketAddr,
}

/// One party of a call.
#[derive(Debug, Default)]
struct Party {
    tag: Option<Box<str>>,
    /// Where its audio goes, from its latest SDP.
    remote: Vec<sdp::Audio>,
    /// The RTP ports facing it (it sends to them; we send to it from them).
    local: Vec<u16>,
    /// Media received from it.
    packets: u64,
    bytes: u64,
}

#[derive(Debug)]
struct Call {
    parties: [Party; 2],
    created_ns: i64,
    last_ns: i64,
}

/// The ng control endpoint's state: calls, ports, replies given.
pub struct Control {
    cfg: ControlConfig,
    calls: HashMap<Box<str>, Call>,
    /// RTP port → (call, party facing, stream index).
    owners: HashMap<u16, (Box<str>, usize, usize)>,
    /// Even ports not in use, least recently freed first.
    free: VecDeque<u16>,
    cookies: HashMap<Vec<u8>, Vec<u8>>,
    cookie_order: VecDeque<(i64, Vec<u8>)>,
    /// Ports freed since [`Control::take_released`] last ran.
    released: Vec<u16>,
    /// What was counted.
    pub counters: ControlCounters,
}

/// A request's failure, said in the reply's `error-reason`.
type Refusal = String;

impl Control {
    /// An edge with no calls.
    pub fn new(cfg: ControlConfig) -> Control {
        let first = cfg.ports.0.saturating_add(cfg.ports.0 % 2);
        let free = (first..cfg.ports.1)
            .step_by(2)
            .filter(|p| p.checked_add(1).is_some_and(|r| r <= cfg.ports.1))
            .collect();
        Control {
            cfg,
            calls: HashMap::new(),
            owners: HashMap::new(),
            free,
            cookies: HashMap::new(),
            cookie_order: VecDeque::new(),
            released: Vec::new(),
            counters: ControlCounters::default(),
        }
    }

    /// Calls held.
    pub fn calls(&self) -> usize {
        self.calls.len()
    }

    /// Answers one control datagram (None: not a request, no reply).
    /// `bind` opens an even port and the next for media, false when the
    /// system refuses them (another program holds one).
    pub fn handle(
        &mut self,
        now: i64,
        datagram: &[u8],
        bind: &mut dyn FnMut(u16) -> bool,
    ) -> Option<Vec<u8>> {
        let space = datagram
            .iter()
            .take(MAX_COOKIE + 1)
            .position(|&b| b == b' ');
        let Some(space) = space.filter(|&s| s > 0) else {
            self.counters.malformed += 1;
            return None;
        };
        let (cookie, doc) = (&datagram[..space], &datagram[space + 1..]);
        self.counters.requests += 1;
        if let Some(reply) = self.cookies.get(cookie) {
            self.counters.retransmits += 1;
            return Some(reply.clone());
        }
        let body = match bencode::parse(doc) {
            Ok(v @ Value::Dict(_)) => self.command(now, &v, bind),
            Ok(_) => Err("the request is not a dictionary".into()),
            Err(e) => Err(e.to_string()),
        };
        let body = body.unwrap_or_else(|reason| {
            self.counters.errors += 1;
            let mut w = Writer::default();
            w.dict(None)
                .text("error-reason", &reason)
                .text("result", "error")
                .end();
            w.out
        });
        let mut reply = cookie.to_vec();
        reply.push(b' ');
        reply.extend_from_slice(&body);
        self.remember(now, cookie, &reply);
        Some(reply)
    }

    /// Keeps `reply` for a retransmission of the request with `cookie`.
    fn remember(&mut self, now: i64, cookie: &[u8], reply: &[u8]) {
        while let Some((t, c)) = self.cookie_order.front() {
            if now - t < COOKIE_TTL_NS && self.cookies.len() < COOKIES {
                break;
            }
            self.cookies.remove(c);
            self.cookie_order.pop_front();
        }
        self.cookies.insert(cookie.to_vec(), reply.to_vec());
        self.cookie_order.push_back((now, cookie.to_vec()));
    }

    /// The reply's dictionary for a request.
    fn command(
        &mut self,
        now: i64,
        req: &Value<'_>,
        bind: &mut dyn FnMut(u16) -> bool,
    ) -> Result<Vec<u8>, Refusal> {
        let mut w = Writer::default();
        match req.str("command") {
            Some("ping") => {
                w.dict(None).text("result", "pong").end();
            }
            Some(c @ ("offer" | "answer")) => {
                let ignored = self.ignored(req);
                let sdp = self.exchange(now, req, c == "offer", bind)?;
                w.dict(None).text("result", "ok").text("sdp", &sdp);
                if !ignored.is_empty() {
                    w.text("warning", &format!("ignored: {}", ignored.join(" ")));
                }
                w.end();
            }
            Some("delete") => {
                // As rtpengine: deleting what is gone is not an error (the
                // proxy may delete on every failure reply of a call).
                let id = required(req, "call-id")?;
                w.dict(None).text("result", "ok");
                match self.calls.remove(id) {
                    Some(call) => {
                        self.counters.deletes += 1;
                        self.free_ports(call);
                    }
                    None => {
                        w.text("warning", "Call-ID not found or tags didn't match");
                    }
                }
                w.end();
            }
            Some("query") => self.query(now, required(req, "call-id")?, &mut w)?,
            Some("list") => {
                let limit = match req.get("limit") {
                    Some(Value::Int(n)) => (*n).clamp(0, MAX_LISTED as i64) as usize,
                    _ => MAX_LISTED,
                };
                w.dict(None).list("calls");
                for id in self.calls.keys().take(limit) {
                    w.bytes(id.as_bytes());
                }
                w.end().text("result", "ok").end();
            }
            Some(other) => return Err(format!("Unrecognized command: {other:.40}")),
            None => return Err("no command".into()),
        }
        Ok(w.out)
    }

    /// Flags and keys of `req` the edge does not act on, counted.
    fn ignored(&mut self, req: &Value<'_>) -> Vec<String> {
        let mut out = Vec::new();
        if let Value::Dict(items) = req {
            for (k, v) in items {
                let key = String::from_utf8_lossy(k);
                if !KNOWN_KEYS.contains(&key.as_ref()) {
                    out.push(format!("{key:.40}"));
                }
                if *k == b"flags" {
                    let Value::List(flags) = v else { continue };
                    for f in flags.iter().filter_map(Value::as_str) {
                        if !KNOWN_FLAGS.contains(&f) {
                            out.push(format!("{f:.40}"));
                        }
                    }
                }
            }
        }
        out.truncate(16);
        self.counters.unknown_flags += out.len() as u64;
        out
    }

    /// An offer or an answer: records the sender's addresses and returns
    /// its SDP rewritten to name the ports facing the other party.
    fn exchange(
        &mut self,
        now: i64,
        req: &Value<'_>,
        offer: bool,
        bind: &mut dyn FnMut(u16) -> bool,
    ) -> Result<String, Refusal> {
        let id = required(req, "call-id")?;
        let from_tag = required(req, "from-tag")?;
        let body = required(req, "sdp")?;
        let audio = sdp::audio(body).map_err(|e| format!("SDP: {e}"))?;
        // The sender: the From tag's party in an offer (a re-INVITE from
        // the callee carries the callee's tag there), the To tag's in an answer.
        let sender_tag = if offer {
            from_tag
        } else {
            required(req, "to-tag")?
        };
        if !self.calls.contains_key(id) {
            if !offer {
                return Err("Unknown call-id".into());
            }
            if self.calls.len() >= self.cfg.max_calls {
                self.counters.calls_refused += 1;
                // rtpengine's words: Kamailio then tries its next node.
                return Err("Parallel session limit reached".into());
            }
            let call = Call {
                parties: Default::default(),
                created_ns: now,
                last_ns: now,
            };
            self.calls.insert(id.into(), call);
        }
        let call = self.calls.get_mut(id).expect("inserted above");
        call.last_ns = now;
        let sender = party_of(call, sender_tag).ok_or("a third tag in one call")?;
        call.parties[sender].remote = audio;
        let other = 1 - sender;
        let wanted = call.parties[sender].remote.len();
        let have = call.parties[other].local.len();
        for index in have..wanted {
            let port = self.allocate(bind).ok_or_else(|| {
                self.counters.ports_exhausted += 1;
                "Ran out of ports".to_string()
            })?;
            let call = self.calls.get_mut(id).expect("held");
            call.parties[other].local.push(port);
            self.owners.insert(port, (id.into(), other, index));
        }
        if offer {
            self.counters.offers += 1;
        } else {
            self.counters.answers += 1;
        }
        let ports = &self.calls[id].parties[other].local;
        Ok(sdp::rewrite(
            body,
            self.cfg.address,
            ports,
            self.cfg.refuse_other_media,
        ))
    }

    /// An even port (and the next) bound for media.
    fn allocate(&mut self, bind: &mut dyn FnMut(u16) -> bool) -> Option<u16> {
        for _ in 0..self.free.len() {
            let port = self.free.pop_front()?;
            if bind(port) {
                return Some(port);
            }
            self.free.push_back(port);
        }
        None
    }

    fn free_ports(&mut self, call: Call) {
        for party in call.parties {
            for port in party.local {
                self.owners.remove(&port);
                self.free.push_back(port);
                self.released.push(port);
            }
        }
    }

    /// The even ports given up since the last call: close their sockets.
    pub fn take_released(&mut self) -> Vec<u16> {
        std::mem::take(&mut self.released)
    }

    /// Where a datagram of `len` bytes from `src`, received on edge port
    /// `port`, goes (None: dropped, counted).
    pub fn forward(&mut self, now: i64, port: u16, src: SocketAddr, len: usize) -> Option<Forward> {
        let rtcp = port % 2 == 1;
        let (id, party, index) = self.owners.get(&(port - u16::from(rtcp)))?;
        let call = self.calls.get_mut(id)?;
        let (index, from) = (*index, *party);
        let sender = call.parties[from].remote.get(index);
        let expected = sender.map(|a| if rtcp { a.rtcp } else { a.rtp });
        if expected.is_none_or(|a| a.ip() != src.ip()) {
            self.counters.media_foreign_source += 1;
            return None;
        }
        call.last_ns = now;
        call.parties[from].packets += 1;
        call.parties[from].bytes += len as u64;
        let to = &call.parties[1 - from];
        let (dest, out) = (to.remote.get(index), to.local.get(index));
        let (Some(dest), Some(&out)) = (dest, out) else {
            self.counters.media_no_destination += 1;
            return None;
        };
        let (refused, dest) = (dest.rejected, if rtcp { dest.rtcp } else { dest.rtp });
        if refused || dest.port() == 0 || dest.ip().is_unspecified() {
            self.counters.media_no_destination += 1;
            return None;
        }
        self.counters.media_relayed += 1;
        self.counters.media_bytes += len as u64;
        Some(Forward {
            from_port: out + u16::from(rtcp),
            to: dest,
        })
    }

    /// Ends the calls idle for the configured timeout.
    pub fn expire(&mut self, now: i64) {
        let limit = self.cfg.idle_timeout_ns;
        let idle: Vec<Box<str>> = self
            .calls
            .iter()
            .filter(|(_, c)| now - c.last_ns >= limit)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            if let Some(call) = self.calls.remove(&id) {
                self.counters.calls_timed_out += 1;
                self.free_ports(call);
            }
        }
    }

    /// `query`: the call's age and the media received from each party.
    fn query(&self, now: i64, id: &str, w: &mut Writer) -> Result<(), Refusal> {
        let call = self.calls.get(id).ok_or("Unknown call-id")?;
        let (packets, bytes) = call
            .parties
            .iter()
            .fold((0, 0), |(p, b), x| (p + x.packets, b + x.bytes));
        w.dict(None)
            .int("created", call.created_ns / 1_000_000_000)
            .int("last signal", call.last_ns / 1_000_000_000)
            .text("result", "ok")
            .dict(Some("tags"));
        for party in call.parties.iter().filter(|p| p.tag.is_some()) {
            let tag = party.tag.as_deref().unwrap_or("");
            w.dict(Some(tag))
                .int("bytes", saturating(party.bytes))
                .int("packets", saturating(party.packets))
                .text("tag", tag)
                .end();
        }
        w.end().dict(Some("totals")).dict(Some("RTP"));
        w.int("bytes", saturating(bytes))
            .int("packets", saturating(packets))
            .end()
            .end();
        w.int("uptime", (now - call.created_ns) / 1_000_000_000)
            .end();
        Ok(())
    }
}

/// `key`'s text in a request, or a refusal naming it.
fn required<'a>(req: &Value<'a>, key: &str) -> Result<&'a str, Refusal> {
    req.str(key)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("no {key} in the request"))
}

/// The party with `tag`, giving it to a party without one (the first
/// offer names the caller; the first answer the callee).
fn party_of(call: &mut Call, tag: &str) -> Option<usize> {
    if let Some(i) = call
        .parties
        .iter()
        .position(|p| p.tag.as_deref() == Some(tag))
    {
        return Some(i);
    }
    let i = call.parties.iter().position(|p| p.tag.is_none())?;
    call.parties[i].tag = Some(tag.into());
    Some(i)
}

fn saturating(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}
