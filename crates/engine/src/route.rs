//! The reader's routing of a sharded run: which shard analyses a packet,
//! decided once, before any shard spends work on it.
//!
//! Media (UDP that is neither SIP nor RTCP) belongs to the shard its
//! address pair hashes to ([`Flow::shard`]). On the short decoding path
//! ([`calliper_wire::decode_plain`]: plain UDP over IPv4) the reader tells
//! that from the packet's first bytes, so the other shards skip it without
//! decoding it: it only moves their clocks, in capture order, so every
//! shard's clock is one engine's. The first shard, which keeps the traffic
//! table, is given the packet's traffic class and source as well. Anything else
//! (signalling, RTCP, IPv6, tunnels, fragments) reaches every shard as
//! before, and each decides with the same test ([`media_flow`]).

use super::*;

/// What the reader decided for a packet of a sharded run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Routing {
    /// Not decided: the shard decodes the packet and decides itself.
    #[default]
    Unknown,
    /// Media this shard owns.
    Owned,
    /// Another shard's media: it only moves the clock, as it would in one
    /// engine.
    Skipped,
    /// Another shard's media, for the shard that keeps the traffic table:
    /// it moves the clock and is counted in the table.
    Counted {
        /// Its traffic class (`traffic::class_of`).
        class: u8,
        /// Its IPv4 source.
        src: std::net::Ipv4Addr,
    },
}

/// Media on the short decoding path: its owner, traffic class and source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routed {
    /// The shard that analyses it.
    pub shard: u16,
    class: u8,
    src: std::net::Ipv4Addr,
}

impl Routed {
    /// How shard `index` is to take the packet.
    #[inline]
    pub fn for_shard(&self, index: usize) -> Routing {
        if self.shard as usize == index {
            Routing::Owned
        } else if index == 0 {
            Routing::Counted { class: self.class, src: self.src }
        } else {
            Routing::Skipped
        }
    }
}

/// Routes packets among `shards` shards as the shards themselves would.
pub struct Router {
    sip: SipClassifier,
    shards: u64,
}

impl Router {
    /// For a run of `shards` shards configured with `cfg`.
    pub fn new(cfg: &Config, shards: usize) -> Router {
        Router { sip: SipClassifier::new(cfg), shards: shards.max(1) as u64 }
    }

    /// The packet's owner when it is media on the short decoding path;
    /// `None` sends it to every shard. The commonest frame is read at fixed
    /// offsets ([`calliper_wire::skim_udp4`]), the rest decoded.
    #[inline]
    pub fn route(&self, link_type: u16, data: &[u8]) -> Option<Routed> {
        if let Some(u) = calliper_wire::skim_udp4(link_type, data) {
            return self.skimmed_owner(&u).map(|shard| Routed {
                shard: shard as u16,
                class: traffic::class_of_udp4(&self.sip, u.sport, u.dport, u.payload),
                src: u.src.into(),
            });
        }
        let f = calliper_wire::decode_plain(link_type, data)?;
        let IpAddr::V4(src) = f.src else {
            return None;
        };
        let flow = media_flow(&self.sip, &f)?;
        Some(Routed {
            shard: flow.shard(self.shards) as u16,
            class: traffic::class_of(&f, &self.sip),
            src,
        })
    }

    /// How shard `index` takes a packet: [`Router::route`], then
    /// [`Routed::for_shard`]. A shard reading the input itself decides this
    /// for every packet, most of them another shard's, so the skim's case
    /// is spelled out here: no traffic class unless this shard counts it.
    #[inline(always)]
    pub fn routing(&self, index: usize, link_type: u16, data: &[u8]) -> Routing {
        let Some(u) = calliper_wire::skim_udp4(link_type, data) else {
            return self.decoded_routing(index, link_type, data);
        };
        match self.skimmed_owner(&u) {
            None => Routing::Unknown,
            Some(shard) if shard == index as u64 => Routing::Owned,
            Some(_) if index == 0 => {
                let class = traffic::class_of_udp4(&self.sip, u.sport, u.dport, u.payload);
                Routing::Counted { class, src: u.src.into() }
            }
            Some(_) => Routing::Skipped,
        }
    }

    /// The shard owning a skimmed datagram, when it is media.
    #[inline(always)]
    fn skimmed_owner(&self, u: &calliper_wire::Udp4<'_>) -> Option<u64> {
        is_media(&self.sip, u.sport, u.dport, u.payload)
            .then(|| flow::shard_v4(u.src, u.sport, u.dst, u.dport, self.shards))
    }

    /// [`Router::routing`] of a frame the skim does not read.
    #[inline(never)]
    fn decoded_routing(&self, index: usize, link_type: u16, data: &[u8]) -> Routing {
        self.route(link_type, data).map_or(Routing::Unknown, |r| r.for_shard(index))
    }
}

/// The flow of a frame that is media: UDP that is neither SIP, HEP nor
/// RTCP (the very tests `transport` makes).
#[inline]
pub(crate) fn media_flow(sip: &SipClassifier, f: &Frame<'_>) -> Option<Flow> {
    let (sport, dport, payload) = f.udp()?;
    is_media(sip, sport, dport, payload).then(|| flow(f, sport, dport))
}

/// A UDP datagram is media: neither SIP, RTCP nor HEP. RTP's version bits
/// (a first byte of 0x80 to 0xBF) are never SIP's first byte (a letter)
/// nor HEP's ("HEP3"), so such a datagram needs only the RTCP test: the
/// SIP port lookup is spared for almost every packet.
#[inline(always)]
fn is_media(sip: &SipClassifier, sport: u16, dport: u16, payload: &[u8]) -> bool {
    if payload.first().is_some_and(|b| b >> 6 == 2) {
        return !looks_like_rtcp(payload);
    }
    !(sip.is_sip(sport, dport, payload) || sip.is_hep(dport, payload))
}

#[cfg(test)]
mod tests {
    use super::*;
    use calliper_wire::{emit, ipproto, linktype};

    const FAR: [u8; 4] = [10, 1, 0, 7];

    fn near(id: u16) -> [u8; 4] {
        [10, 0, 0, (id % 200) as u8]
    }

    fn udp4(src: [u8; 4], dst: [u8; 4], ports: (u16, u16), payload: &[u8], id: u16) -> Vec<u8> {
        let (sport, dport) = ports;
        let ip = emit::Ipv4 { id, ..emit::Ipv4::new(src.into(), dst.into(), ipproto::UDP) }
            .emit(&emit::udp(sport, dport, payload));
        emit::ethernet(&[], emit::ethertype::IPV4, &ip)
    }

    /// The shortcut for RTP's version bits decides as the three tests do,
    /// for every first byte, on SIP, HEP and other ports, with SIP found
    /// on any port or not.
    #[test]
    fn media_is_what_is_neither_sip_rtcp_nor_hep() {
        for any_port in [false, true] {
            let cfg = Config { sip_any_port: any_port, hep_port: Some(9060), ..Config::default() };
            let sip = SipClassifier::new(&cfg);
            for first in 0..=255u8 {
                for rest in [
                    &b"NVITE sip:a@b SIP/2.0\r\n\r\n"[..],
                    b"EP3\x00\x10",
                    &[201, 0, 1, 0, 0, 0, 7],
                ] {
                    let payload = [&[first][..], rest].concat();
                    for (sport, dport) in [(5060, 4000), (4000, 5060), (4000, 9060), (4000, 4002)] {
                        let full = !(sip.is_sip(sport, dport, &payload)
                            || looks_like_rtcp(&payload)
                            || sip.is_hep(dport, &payload));
                        assert_eq!(
                            is_media(&sip, sport, dport, &payload),
                            full,
                            "{payload:?} {sport} {dport}"
                        );
                    }
                }
            }
        }
    }

    /// The reader routes exactly the packets a shard would call media, to
    /// the shard that would own them, with the traffic class the first
    /// shard would count; everything else goes to every shard.
    #[test]
    fn the_reader_routes_as_the_shards_decide() {
        let cfg = Config::default();
        let sip = SipClassifier::new(&cfg);
        let rtp = emit::rtp(0, 1, 160, 7, &[0; 160]);
        let rtcp = [0x80, 201, 0, 1, 0, 0, 0, 7];
        let invite = b"INVITE sip:a@b SIP/2.0\r\n\r\n";
        let v6 = emit::ethernet(
            &[],
            emit::ethertype::IPV6,
            &emit::ipv6(
                "2001:db8::1".parse().unwrap(),
                "2001:db8::2".parse().unwrap(),
                ipproto::UDP,
                &emit::udp(4000, 4002, &rtp),
            ),
        );
        for shards in [2, 3, 4] {
            let router = Router::new(&cfg, shards);
            let mut seen = vec![0; shards];
            for id in 0..64u16 {
                let sport = 10_000 + 2 * id;
                let media = udp4(near(id), FAR, (sport, 20_000), &rtp, id);
                let f = calliper_wire::decode(linktype::ETHERNET, &media).unwrap();
                let r = router.route(linktype::ETHERNET, &media).unwrap();
                let owner = media_flow(&sip, &f).unwrap().shard(shards as u64);
                assert_eq!(r.shard as u64, owner);
                assert_eq!(r.class, traffic::class_of(&f, &sip));
                seen[r.shard as usize] += 1;
                // The other direction and its RTCP port pair go to the same shard.
                let back = udp4(FAR, near(id), (20_000, sport), &rtp, id);
                let b = calliper_wire::decode(linktype::ETHERNET, &back).unwrap();
                assert_eq!(media_flow(&sip, &b).unwrap().shard(shards as u64), owner);
                // Each shard but the owner is told to count it (the first) or skip it.
                for i in 0..shards {
                    let expect = match (i as u64 == owner, i) {
                        (true, _) => Routing::Owned,
                        (false, 0) => Routing::Counted { class: r.class, src: near(id).into() },
                        (false, _) => Routing::Skipped,
                    };
                    assert_eq!(r.for_shard(i), expect);
                    assert_eq!(router.routing(i, linktype::ETHERNET, &media), expect);
                }
            }
            assert!(seen.iter().all(|&n| n > 0), "{seen:?}: a shard got nothing");
            for other in [
                udp4(near(1), FAR, (5060, 5060), invite, 1),
                udp4(near(1), FAR, (10_001, 20_001), &rtcp, 1),
                v6.clone(),
            ] {
                assert_eq!(router.route(linktype::ETHERNET, &other), None);
                for i in 0..shards {
                    assert_eq!(router.routing(i, linktype::ETHERNET, &other), Routing::Unknown);
                }
            }
        }
    }
}
