//! The edge's calls, ports and replies ([`Control`]).

use super::bencode::{self, Value, Writer};
use super::replies::Replies;
use super::sdp;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Longest cookie taken (rtpengine's module sends about 20 bytes).
const MAX_COOKIE: usize = 64;
/// Longest Call-ID and tag taken.
const MAX_ID: usize = 256;
/// Bytes of Call-IDs a `list` reply names at most (it must fit a datagram).
const MAX_LIST_BYTES: usize = 60_000;
/// A freed port is not given out again for this long, so a call's late
/// packets never reach the next call on the port.
const PORT_QUARANTINE_NS: i64 = 30_000_000_000;
/// Ports tried per stream before "Ran out of ports" (a system out of file
/// descriptors refuses them all: no need to try the whole range).
const BIND_ATTEMPTS: usize = 16;
/// Flags of Kamailio's `rtpengine` module (and OpenSIPS's) that describe
/// what the edge does anyway: it trusts the SDP's address, relays
/// symmetrically, latches onto the first source and then holds to it.
const KNOWN_FLAGS: &[&str] =
    &["trust-address", "symmetric", "port-latching", "strict-source", "full-rtcp-attribute"];
/// Keys of a request the edge reads, or that carry nothing for it to do.
const KNOWN_KEYS: &[&str] = &[
    "command",
    "call-id",
    "from-tag",
    "to-tag",
    "sdp",
    "flags",
    "via-branch",
    "supports",
    "sip-message-type",
    "delete-delay",
    "delete delay",
    "limit",
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
    /// A call with no request and no media relayed for this long is ended.
    pub idle_timeout_ns: i64,
    /// Set non-audio media's port to 0 instead of leaving it as sent.
    pub refuse_other_media: bool,
    /// Other edges' addresses: media for them crosses the overlay, by
    /// node, so it is sent to their SDP port without latching.
    pub peers: Vec<IpAddr>,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            ports: (30000, 39999),
            max_calls: 10_000,
            idle_timeout_ns: 60_000_000_000,
            refuse_other_media: false,
            peers: Vec::new(),
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
    /// Offers done.
    pub offers: u64,
    /// Answers done.
    pub answers: u64,
    /// Deletes done.
    pub deletes: u64,
    /// Offers refused: `max_calls` reached.
    pub calls_refused: u64,
    /// Streams refused: no media port free.
    pub ports_exhausted: u64,
    /// Ports the system would not bind (another program's, or no file
    /// descriptors left).
    pub ports_unbindable: u64,
    /// Calls ended with no request or media for `idle_timeout_ns`.
    pub calls_timed_out: u64,
    /// Flags and keys of requests the edge does not act on (named in the
    /// reply's `warning`).
    pub unknown_flags: u64,
    /// Media datagrams handed to a socket to relay.
    pub media_relayed: u64,
    /// Bytes of those.
    pub media_bytes: u64,
    /// Media from an address other than its party's (the SDP's address,
    /// then the address and port it was first received from).
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
pub(super) struct Party {
    pub(super) tag: Option<Box<str>>,
    /// Where its audio goes, from its latest SDP.
    pub(super) remote: Vec<sdp::Audio>,
    /// The first source each stream's RTP and RTCP came from: afterwards
    /// the only source taken, and where the other party's media goes.
    pub(super) latched: Vec<[Option<SocketAddr>; 2]>,
    /// The RTP ports facing it (it sends to them; we send to it from
    /// them); 0 for a refused stream.
    pub(super) local: Vec<u16>,
    /// Media received from it, RTP and RTCP: packets and bytes.
    pub(super) received: [(u64, u64); 2],
    /// Its RTP by sequence number, per audio stream: what never arrived.
    pub(super) rtp_seq: Vec<calliper_rtp::SeqTracker>,
}

#[derive(Debug)]
pub(super) struct Call {
    pub(super) parties: [Party; 2],
    pub(super) created_ns: i64,
    pub(super) last_ns: i64,
}

/// The ng control endpoint's state: calls, ports, replies given.
pub struct Control {
    pub(super) cfg: ControlConfig,
    pub(super) calls: HashMap<Box<str>, Call>,
    /// RTP port → (call, party facing, stream index).
    pub(super) owners: HashMap<u16, (Box<str>, usize, usize)>,
    /// Even ports not in use, by when they were freed (oldest first).
    free: VecDeque<(u16, i64)>,
    replies: Replies,
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
            .map(|p| (p, i64::MIN))
            .collect();
        Control {
            cfg,
            calls: HashMap::new(),
            owners: HashMap::new(),
            free,
            replies: Replies::default(),
            released: Vec::new(),
            counters: ControlCounters::default(),
        }
    }

    /// Calls held.
    pub fn calls(&self) -> usize {
        self.calls.len()
    }

    /// Answers one control datagram from `from` (None: not a request, no
    /// reply). `bind` opens an even port and the next for media, false
    /// when the system refuses them.
    pub fn handle(
        &mut self,
        now: i64,
        from: SocketAddr,
        datagram: &[u8],
        bind: &mut dyn FnMut(u16) -> bool,
    ) -> Option<Vec<u8>> {
        let space = datagram.iter().take(MAX_COOKIE + 1).position(|&b| b == b' ');
        let Some(space) = space.filter(|&s| s > 0) else {
            self.counters.malformed += 1;
            return None;
        };
        let (cookie, doc) = (&datagram[..space], &datagram[space + 1..]);
        self.counters.requests += 1;
        if let Some(reply) = self.replies.get(now, from.ip(), cookie, doc) {
            self.counters.retransmits += 1;
            return Some(reply.to_vec());
        }
        let body = match bencode::parse(doc) {
            Ok(v @ Value::Dict(_)) => self.command(now, &v, bind),
            Ok(_) => Err("the request is not a dictionary".into()),
            Err(e) => Err(e.to_string()),
        };
        let body = body.unwrap_or_else(|reason| {
            self.counters.errors += 1;
            let mut w = Writer::default();
            w.dict(None).text("error-reason", &reason).text("result", "error").end();
            w.out
        });
        let mut reply = cookie.to_vec();
        reply.push(b' ');
        reply.extend_from_slice(&body);
        self.replies.keep(now, from.ip(), cookie, doc, &reply);
        Some(reply)
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
            Some("delete") => self.delete(now, req, &mut w)?,
            Some("query") => self.query(now, required(req, "call-id")?, &mut w)?,
            Some("list") => self.list(req, &mut w),
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
    /// its SDP rewritten to name the ports facing the other party. Nothing
    /// changes when it is refused.
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
        self.check_destinations(&audio)?;
        // The sender: the From tag's party in an offer (a late offer in a
        // reply comes with the tags swapped), the To tag's in an answer.
        let sender_tag = if offer { from_tag } else { required(req, "to-tag")? };
        let new = !self.calls.contains_key(id);
        if new && !offer {
            return Err("Unknown call-id".into());
        }
        if new && self.calls.len() >= self.cfg.max_calls {
            self.counters.calls_refused += 1;
            // rtpengine's words: Kamailio then tries its next node.
            return Err("Parallel session limit reached".into());
        }
        let sender = match self.calls.get(id) {
            Some(call) => party_of(call, sender_tag, offer).ok_or("a third tag in one call")?,
            None => 0,
        };
        let other = 1 - sender;
        let have = self.calls.get(id).map_or(0, |c| c.parties[other].local.len());
        let mut ports = Vec::new();
        for a in audio.iter().skip(have) {
            let port = if a.rejected {
                0
            } else if let Some(p) = self.allocate(now, bind) {
                p
            } else {
                self.counters.ports_exhausted += 1;
                self.give_back(&ports);
                return Err("Ran out of ports".into());
            };
            ports.push(port);
        }
        let call = self.calls.entry(id.into()).or_insert_with(|| Call {
            parties: Default::default(),
            created_ns: now,
            last_ns: now,
        });
        call.last_ns = now;
        let party = &mut call.parties[sender];
        party.tag = Some(sender_tag.into());
        party.latched = vec![[None, None]; audio.len()];
        party.remote = audio;
        for (k, &port) in ports.iter().enumerate() {
            if port != 0 {
                self.owners.insert(port, (id.into(), other, have + k));
            }
        }
        let call = self.calls.get_mut(id).expect("inserted above");
        call.parties[other].local.extend(ports);
        if offer {
            self.counters.offers += 1;
        } else {
            self.counters.answers += 1;
        }
        let local = &call.parties[other].local;
        Ok(sdp::rewrite(body, self.cfg.address, local, self.cfg.refuse_other_media))
    }

    /// Refuses an SDP whose media would go where no party can be: the
    /// loopback, unspecified, multicast or broadcast address, or the edge
    /// itself (unless the edge is on loopback, as in a test on one host).
    fn check_destinations(&self, audio: &[sdp::Audio]) -> Result<(), Refusal> {
        let edge_on_loopback = self.cfg.address.is_loopback();
        for a in audio.iter().filter(|a| !a.rejected) {
            for ip in [a.rtp.ip(), a.rtcp.ip()] {
                let own = ip == self.cfg.address && !edge_on_loopback;
                let nowhere = match ip {
                    IpAddr::V4(v4) => v4.is_broadcast() || v4.is_multicast(),
                    IpAddr::V6(v6) => v6.is_multicast(),
                };
                if own || nowhere || (ip.is_loopback() && !edge_on_loopback) {
                    return Err(format!("SDP: media may not go to {ip}"));
                }
                if ip.is_ipv4() != self.cfg.address.is_ipv4() && !ip.is_unspecified() {
                    return Err(format!(
                        "SDP: {ip} is not of the edge's address family ({})",
                        self.cfg.address
                    ));
                }
            }
        }
        Ok(())
    }

    /// An even port (and the next) bound for media, not freed within
    /// [`PORT_QUARANTINE_NS`].
    fn allocate(&mut self, now: i64, bind: &mut dyn FnMut(u16) -> bool) -> Option<u16> {
        let mut tried = 0;
        for _ in 0..self.free.len() {
            let (port, freed) = self.free.pop_front()?;
            if freed != i64::MIN && now - freed < PORT_QUARANTINE_NS {
                // Still quarantined: to the back, in its turn.
                self.free.push_back((port, freed));
                continue;
            }
            if tried == BIND_ATTEMPTS {
                self.free.push_front((port, freed));
                return None;
            }
            tried += 1;
            if bind(port) {
                return Some(port);
            }
            self.counters.ports_unbindable += 1;
            self.free.push_back((port, now));
        }
        None
    }

    /// Ports taken for a refused request, given back (never used: no
    /// quarantine).
    fn give_back(&mut self, ports: &[u16]) {
        for &p in ports.iter().filter(|&&p| p != 0) {
            self.free.push_back((p, i64::MIN));
            self.released.push(p);
        }
    }

    pub(super) fn free_ports(&mut self, call: Call, now: i64) {
        for party in call.parties {
            for port in party.local.into_iter().filter(|&p| p != 0) {
                self.owners.remove(&port);
                self.free.push_back((port, now));
                self.released.push(port);
            }
        }
    }

    /// The even ports given up since the last call: close their sockets.
    pub fn take_released(&mut self) -> Vec<u16> {
        std::mem::take(&mut self.released)
    }

    /// `delete`: the call, or nothing when the To tag names a party it
    /// does not have (Kamailio deletes a failed fork's branch so).
    fn delete(&mut self, now: i64, req: &Value<'_>, w: &mut Writer) -> Result<(), Refusal> {
        let id = required(req, "call-id")?;
        w.dict(None).text("result", "ok");
        let branch = req.str("to-tag");
        let gone = match self.calls.get(id) {
            None => true,
            Some(c) => branch.is_some_and(|t| c.parties[1].tag.as_deref().is_some_and(|p| p != t)),
        };
        if gone {
            // As rtpengine: not an error (a proxy deletes on every failure).
            w.text("warning", "Call-ID not found or tags didn't match");
        } else if let Some(call) = self.calls.remove(id) {
            self.counters.deletes += 1;
            self.free_ports(call, now);
        }
        w.end();
        Ok(())
    }

    /// `list`: Call-IDs, at most `limit` and what fits one datagram.
    fn list(&self, req: &Value<'_>, w: &mut Writer) {
        let limit = match req.get("limit") {
            Some(Value::Int(n)) => (*n).clamp(0, 1000) as usize,
            _ => 1000,
        };
        w.dict(None).list("calls");
        let mut bytes = 0;
        for id in self.calls.keys().take(limit) {
            bytes += id.len() + 6;
            if bytes > MAX_LIST_BYTES {
                break;
            }
            w.bytes(id.as_bytes());
        }
        w.end().text("result", "ok").end();
    }

    /// `query`: the call's age and the media received from each party,
    /// with totals for RTP and RTCP as Kamailio's `$rtpstat` reads them.
    fn query(&self, now: i64, id: &str, w: &mut Writer) -> Result<(), Refusal> {
        let call = self.calls.get(id).ok_or("Unknown call-id")?;
        w.dict(None)
            .int("created", call.created_ns / 1_000_000_000)
            .int("last signal", call.last_ns / 1_000_000_000)
            .text("result", "ok")
            .dict(Some("tags"));
        let mut parties: Vec<&Party> = call.parties.iter().filter(|p| p.tag.is_some()).collect();
        parties.sort_by(|a, b| a.tag.cmp(&b.tag));
        for party in parties {
            let tag = party.tag.as_deref().unwrap_or("");
            let (packets, bytes) = party.received[0];
            w.dict(Some(tag))
                .int("bytes", saturating(bytes))
                .int("lost", saturating(party.rtp_seq.iter().map(|s| s.lost()).sum()))
                .int("packets", saturating(packets))
                .text("tag", tag)
                .end();
        }
        w.end().dict(Some("totals"));
        for (name, kind) in [("RTCP", 1), ("RTP", 0)] {
            let (packets, bytes) = call
                .parties
                .iter()
                .fold((0, 0), |(p, b), x| (p + x.received[kind].0, b + x.received[kind].1));
            w.dict(Some(name))
                .int("bytes", saturating(bytes))
                .int("errors", 0)
                .int("packets", saturating(packets))
                .end();
        }
        w.end().int("uptime", (now - call.created_ns) / 1_000_000_000).end();
        Ok(())
    }
}

/// `key`'s text in a request, or a refusal naming it.
fn required<'a>(req: &Value<'a>, key: &str) -> Result<&'a str, Refusal> {
    let v =
        req.str(key).filter(|v| !v.is_empty()).ok_or_else(|| format!("no {key} in the request"))?;
    if v.len() > MAX_ID && key != "sdp" {
        return Err(format!("{key} longer than {MAX_ID} bytes"));
    }
    Ok(v)
}

/// The party sending with `tag`: the one with that tag, else a party
/// without one. An answer with a new tag (another fork answered) replaces
/// the answering party: the latest answer wins.
fn party_of(call: &Call, tag: &str, offer: bool) -> Option<usize> {
    if let Some(i) = call.parties.iter().position(|p| p.tag.as_deref() == Some(tag)) {
        return Some(i);
    }
    if let Some(i) = call.parties.iter().position(|p| p.tag.is_none()) {
        return Some(i);
    }
    (!offer).then_some(1)
}

fn saturating(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}
