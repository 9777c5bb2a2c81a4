//! Where a call's loss was introduced. A call seen on several media legs
//! (through a relay: caller → relay → callee) has, in each direction, one
//! stream per hop, each seen by the probe. When the relay passes RTP on
//! unchanged (same SSRC, same sequence numbers), a packet lost upstream is
//! a gap downstream too, so a hop's own share is its loss minus the loss
//! of the hop before it; where the relay renumbers (another SSRC), a hop's
//! loss is all its own.

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
    /// True when it carries an SSRC of the hop before it: the same packets,
    /// relayed unchanged, so the loss before it shows in it too.
    pub relayed: bool,
    /// The loss this hop added: `lost` minus the previous hop's when
    /// `relayed` (never below 0), else `lost`.
    pub introduced: i64,
}

/// The hops of one direction, in the order packets cross them.
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

fn endpoint(s: &Map<String, Value>, addr: &str, port: &str) -> String {
    let a = text(s, addr);
    let p = int(s, port);
    if a.contains(':') {
        format!("[{a}]:{p}")
    } else {
        format!("{a}:{p}")
    }
}

/// The paths of a call's streams (rows of the `streams` table), for each
/// direction that crossed more than one hop; empty for a call seen on one
/// leg. Linear in the streams but for the hops (a handful).
pub fn loss_by_leg(streams: &[Map<String, Value>]) -> Vec<Path> {
    let mut paths = Vec::new();
    for direction in ["caller_to_callee", "callee_to_caller"] {
        let mut hops: Vec<Hop> = Vec::new();
        for s in streams.iter().filter(|s| text(s, "direction") == direction) {
            let (src, dst) = (
                endpoint(s, "src", "src_port"),
                endpoint(s, "dst", "dst_port"),
            );
            let ssrc = u32::try_from(int(s, "ssrc")).unwrap_or(0);
            let first = s
                .get("first_ns")
                .and_then(Value::as_i64)
                .unwrap_or(i64::MAX);
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
                    });
                    hops.len() - 1
                }
            };
            let h = &mut hops[i];
            if !h.ssrcs.contains(&ssrc) {
                h.ssrcs.push(ssrc);
            }
            h.first_ns = h.first_ns.min(first);
            h.expected = h.expected.saturating_add(int(s, "expected").max(0));
            h.lost = h.lost.saturating_add(int(s, "lost").max(0));
        }
        if hops.len() < 2 {
            continue;
        }
        hops.sort_by_key(|h| h.first_ns);
        for i in 0..hops.len() {
            let before = i.checked_sub(1).map(|j| hops[j].clone());
            let h = &mut hops[i];
            h.loss_percent = (h.expected > 0).then(|| 100.0 * h.lost as f64 / h.expected as f64);
            h.relayed = before
                .as_ref()
                .is_some_and(|b| b.ssrcs.iter().any(|s| h.ssrcs.contains(s)));
            h.introduced = match (&before, h.relayed) {
                (Some(b), true) => (h.lost - b.lost).max(0),
                _ => h.lost,
            };
        }
        paths.push(Path {
            direction: direction.to_string(),
            hops,
        });
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
            stream(
                "caller_to_callee",
                ("10.0.0.1", 4000),
                ("10.0.2.2", 2000),
                7,
                20,
                9,
            ),
            stream(
                "caller_to_callee",
                ("10.0.1.2", 3000),
                ("10.0.0.1", 4002),
                7,
                10,
                4,
            ),
            // The other way, renumbered by the relay: each hop's loss is its own.
            stream(
                "callee_to_caller",
                ("10.0.2.2", 2000),
                ("10.0.0.1", 4000),
                8,
                11,
                3,
            ),
            stream(
                "callee_to_caller",
                ("10.0.0.1", 4002),
                ("10.0.1.2", 3000),
                9,
                21,
                5,
            ),
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
        assert_eq!(
            (back[0].introduced, back[1].introduced, back[1].relayed),
            (3, 5, false)
        );
    }

    #[test]
    fn one_leg_gives_no_path_and_ssrcs_of_one_hop_add_up() {
        let one_leg = [
            stream(
                "caller_to_callee",
                ("10.0.1.2", 3000),
                ("10.0.2.2", 2000),
                1,
                10,
                2,
            ),
            stream(
                "caller_to_callee",
                ("10.0.1.2", 3000),
                ("10.0.2.2", 2000),
                2,
                50,
                3,
            ),
            stream(
                "callee_to_caller",
                ("10.0.2.2", 2000),
                ("10.0.1.2", 3000),
                3,
                10,
                1,
            ),
        ];
        assert!(loss_by_leg(&one_leg).is_empty());
        let mut relayed = one_leg.to_vec();
        relayed.push(stream(
            "caller_to_callee",
            ("10.0.0.1", 4000),
            ("10.0.3.3", 2000),
            2,
            60,
            4,
        ));
        let hops = &loss_by_leg(&relayed)[0].hops;
        assert_eq!(
            (hops[0].lost, hops[0].expected, hops[0].ssrcs.clone()),
            (5, 200, vec![1, 2])
        );
        // Shares SSRC 2: charged 4 - 5 → 0, never below.
        assert_eq!((hops[1].relayed, hops[1].introduced), (true, 0));
    }
}
