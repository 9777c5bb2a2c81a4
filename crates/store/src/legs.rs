//! Where a call's loss was introduced. A call seen on several media legs
//! (through a relay: caller → relay → callee) has, in each direction, one
//! stream per hop, each seen by the probe. Hops chain where one ends at the
//! address the next starts from (the relay); other streams of a direction
//! (video beside audio, media moved by a re-INVITE) are not hops of a path.
//! When the relay passes RTP on unchanged (same SSRC, same sequence
//! numbers), a packet lost upstream is a gap downstream too, so a hop's own
//! share of an SSRC's loss is its loss minus the hop before it; an SSRC the
//! hop before did not carry (the relay renumbers) is all its own.

use serde::Serialize;
use serde_json::{Map, Value};

/// One hop of one direction: a stream's addresses (its SSRCs summed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hop {
    /// `address:port` it came from.
    pub src: String,
    /// `address:port` it went to.
    pub dst: String,
    /// Its SSRCs, in the order first seen.
    pub ssrcs: Vec<u32>,
    /// Its first packet (ns since the epoch).
    pub first_ns: i64,
    /// Packets expected by sequence numbers, over its SSRCs.
    pub expected: i64,
    /// Packets lost by sequence numbers, over its SSRCs.
    pub lost: i64,
    /// `lost` as a percentage of `expected`.
    pub loss_percent: Option<f64>,
    /// True when it carries an SSRC of the hop before it: those packets
    /// were relayed unchanged, so the loss before it shows in it too.
    pub relayed: bool,
    /// The loss this hop added: per SSRC, its loss minus the previous
    /// hop's for an SSRC both carry (never below 0), else its loss.
    pub introduced: i64,
    /// Lost packets per SSRC, for `introduced`.
    #[serde(skip)]
    lost_by_ssrc: Vec<(u32, i64)>,
    /// The addresses alone, for chaining.
    #[serde(skip)]
    ips: (String, String),
}

/// The hops of one path of one direction, in the order packets cross them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Path {
    /// `caller_to_callee` or `callee_to_caller`.
    pub direction: String,
    /// First seen first: the probe sees a packet reach a relay before the
    /// relay sends it on.
    pub hops: Vec<Hop>,
}

fn int(s: &Map<String, Value>, k: &str) -> i64 {
    s.get(k).and_then(Value::as_i64).unwrap_or(0)
}

fn text(s: &Map<String, Value>, k: &str) -> String {
    s.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

fn endpoint(ip: &str, port: i64) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// A direction's streams grouped by addresses and ports, first seen first.
fn hops(streams: &[Map<String, Value>], direction: &str) -> Vec<Hop> {
    let mut hops: Vec<Hop> = Vec::new();
    for s in streams.iter().filter(|s| text(s, "direction") == direction) {
        let ips = (text(s, "src"), text(s, "dst"));
        let src = endpoint(&ips.0, int(s, "src_port"));
        let dst = endpoint(&ips.1, int(s, "dst_port"));
        let ssrc = u32::try_from(int(s, "ssrc")).unwrap_or(0);
        let first = s.get("first_ns").and_then(Value::as_i64).unwrap_or(i64::MAX);
        let lost = int(s, "lost").max(0);
        let i = match hops.iter().position(|h| h.src == src && h.dst == dst) {
            Some(i) => i,
            None => {
                hops.push(Hop {
                    src,
                    dst,
                    ssrcs: Vec::new(),
                    first_ns: first,
                    expected: 0,
                    lost: 0,
                    loss_percent: None,
                    relayed: false,
                    introduced: 0,
                    lost_by_ssrc: Vec::new(),
                    ips,
                });
                hops.len() - 1
            }
        };
        let h = &mut hops[i];
        match h.lost_by_ssrc.iter_mut().find(|(s, _)| *s == ssrc) {
            Some((_, n)) => *n = n.saturating_add(lost),
            None => {
                h.ssrcs.push(ssrc);
                h.lost_by_ssrc.push((ssrc, lost));
            }
        }
        h.first_ns = h.first_ns.min(first);
        h.expected = h.expected.saturating_add(int(s, "expected").max(0));
        h.lost = h.lost.saturating_add(lost);
    }
    hops.sort_by_key(|h| h.first_ns);
    hops
}

/// The paths of a call's streams (rows of the `streams` table): chains of
/// two or more hops of one direction, each starting at the address where
/// the one before it ended. Empty for a call seen on one leg. Quadratic in
/// the hops of a direction (bounded by the streams a detail holds).
pub fn loss_by_leg(streams: &[Map<String, Value>]) -> Vec<Path> {
    let mut paths = Vec::new();
    for direction in ["caller_to_callee", "callee_to_caller"] {
        let mut chains: Vec<Vec<Hop>> = Vec::new();
        for h in hops(streams, direction) {
            let next = chains
                .iter_mut()
                .find(|c| c.last().is_some_and(|l| l.ips.1 == h.ips.0 && l.ips.0 != h.ips.1));
            match next {
                Some(c) => c.push(h),
                None => chains.push(vec![h]),
            }
        }
        for mut hops in chains.into_iter().filter(|c| c.len() > 1) {
            for i in 0..hops.len() {
                let before = i.checked_sub(1).map(|j| hops[j].lost_by_ssrc.clone());
                let h = &mut hops[i];
                h.loss_percent =
                    (h.expected > 0).then(|| 100.0 * h.lost as f64 / h.expected as f64);
                let upstream = |ssrc: u32| {
                    before
                        .as_ref()
                        .and_then(|b| b.iter().find(|(s, _)| *s == ssrc).map(|(_, n)| *n))
                };
                h.relayed = h.ssrcs.iter().any(|&s| upstream(s).is_some());
                h.introduced = h
                    .lost_by_ssrc
                    .iter()
                    .map(|&(s, n)| upstream(s).map_or(n, |u| (n - u).max(0)))
                    .fold(0i64, i64::saturating_add);
            }
            paths.push(Path { direction: direction.to_string(), hops });
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(
        dir: &str,
        src: (&str, i64),
        dst: (&str, i64),
        ssrc: i64,
        first: i64,
        lost: i64,
    ) -> Map<String, Value> {
        let v = serde_json::json!({
            "direction": dir, "src": src.0, "src_port": src.1, "dst": dst.0, "dst_port": dst.1,
            "ssrc": ssrc, "first_ns": first, "expected": 100, "lost": lost,
        });
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_relayed_hop_is_charged_only_what_it_added() {
        let streams = [
            // Relay → callee seen after caller → relay; listed first on purpose.
            stream("caller_to_callee", ("10.0.0.1", 4000), ("10.0.2.2", 2000), 7, 20, 9),
            stream("caller_to_callee", ("10.0.1.2", 3000), ("10.0.0.1", 4002), 7, 10, 4),
            // The other way, renumbered by the relay: each hop's loss is its own.
            stream("callee_to_caller", ("10.0.2.2", 2000), ("10.0.0.1", 4000), 8, 11, 3),
            stream("callee_to_caller", ("10.0.0.1", 4002), ("10.0.1.2", 3000), 9, 21, 5),
        ];
        let paths = loss_by_leg(&streams);
        assert_eq!(paths.len(), 2);
        let c2c = &paths[0].hops;
        assert_eq!(
            (c2c[0].src.as_str(), c2c[0].introduced, c2c[0].relayed),
            ("10.0.1.2:3000", 4, false)
        );
        assert_eq!(
            (c2c[1].src.as_str(), c2c[1].introduced, c2c[1].relayed),
            ("10.0.0.1:4000", 5, true)
        );
        assert_eq!(c2c[1].loss_percent, Some(9.0));
        let back = &paths[1].hops;
        assert_eq!((back[0].introduced, back[1].introduced, back[1].relayed), (3, 5, false));
    }

    #[test]
    fn streams_that_do_not_chain_are_not_hops() {
        // One leg: audio, then media moved by a re-INVITE (same SSRC), and video.
        let one_leg = [
            stream("caller_to_callee", ("10.0.1.2", 3000), ("10.0.2.2", 2000), 1, 10, 2),
            stream("caller_to_callee", ("10.0.1.2", 3002), ("10.0.2.2", 2002), 1, 50, 3),
            stream("caller_to_callee", ("10.0.1.2", 3004), ("10.0.2.2", 2004), 2, 11, 3),
            stream("callee_to_caller", ("10.0.2.2", 2000), ("10.0.1.2", 3000), 3, 10, 1),
        ];
        assert!(loss_by_leg(&one_leg).is_empty(), "{:?}", loss_by_leg(&one_leg));
    }

    #[test]
    fn an_ssrc_is_charged_against_its_own_loss_upstream() {
        let streams = [
            // Hop 1 carries SSRC 1 (3 lost) and SSRC 2 (2 lost, in two records).
            stream("caller_to_callee", ("10.0.1.2", 3000), ("10.0.0.1", 4000), 1, 10, 3),
            stream("caller_to_callee", ("10.0.1.2", 3000), ("10.0.0.1", 4000), 2, 12, 1),
            stream("caller_to_callee", ("10.0.1.2", 3000), ("10.0.0.1", 4000), 2, 13, 1),
            // Hop 2 relays only SSRC 2, losing 4 in all: 2 of them its own.
            stream("caller_to_callee", ("10.0.0.1", 4002), ("10.0.2.2", 2000), 2, 20, 4),
        ];
        let paths = loss_by_leg(&streams);
        assert_eq!(paths.len(), 1);
        let h = &paths[0].hops;
        assert_eq!((h[0].lost, h[0].expected, h[0].ssrcs.clone()), (5, 300, vec![1, 2]));
        assert_eq!((h[1].relayed, h[1].introduced), (true, 2));
        // Never below zero: a hop that lost less than its upstream adds nothing.
        let mut fewer = streams.to_vec();
        fewer[3] = stream("caller_to_callee", ("10.0.0.1", 4002), ("10.0.2.2", 2000), 2, 20, 1);
        assert_eq!(loss_by_leg(&fewer)[0].hops[1].introduced, 0);
    }
}
