//! tshark, the oracle, and what the comparisons read from it.

use std::path::Path;
use std::process::Command;

/// Runs tshark (the oracle) on `file` with `args` and returns its standard
/// output. Fails the test if tshark is missing or exits with an error: an
/// oracle that did not run must not look like one that found nothing.
pub fn tshark(file: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(file).args(args);
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("tshark cannot run ({e}): run the README's test command, which installs it")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Streams where Calliper deliberately differs from tshark, with the reason.
/// The test checks each is still reported by tshark, so the list stays true.
pub const KNOWN_DIFFERENCES: &[(&str, u32, &str)] = &[
    (
        "heplify__FAX-Call-t38-CA-TDM-SIP-FB-1.pcap",
        0x0EAF0EAF,
        "tshark also applies SDP from MEGACO (H.248) messages, which move 10.23.1.52:16756 to T.38; \
         Calliper reads SDP from SIP only and keeps counting the RTP packets (same SSRC) on that address",
    ),
    ("ndpi__stun_dtls_rtp.pcapng", 795438192, "RTP inside TURN ChannelData over TCP is not analysed"),
    ("ndpi__stun_dtls_rtp.pcapng", 840771771, "RTP inside TURN ChannelData over TCP is not analysed"),
];

/// One stream of `tshark -q -z rtp,streams`.
#[derive(Debug, Clone)]
pub struct TsharkStream {
    pub key: (String, u16, String, u16, u32),
    pub packets: u64,
    pub lost: i64,
    pub max_delta: f64,
    pub mean_jitter: f64,
    pub max_jitter: f64,
}

pub fn tshark_streams(file: &Path, heuristic: bool) -> Vec<TsharkStream> {
    let text = if heuristic {
        tshark(file, &["-q", "-z", "rtp,streams", "-o", "rtp.heuristic_rtp:TRUE"])
    } else {
        tshark(file, &["-q", "-z", "rtp,streams"])
    };
    let mut streams = Vec::new();
    for line in text.lines() {
        let mut f: Vec<&str> = line.split_whitespace().collect();
        // start end src sport dst dport ssrc payload... pkts lost (pct) mind meand maxd minj meanj maxj [X]
        if f.len() < 17 || !f[6].starts_with("0x") {
            continue;
        }
        if f.last() == Some(&"X") {
            f.pop();
        }
        let n = f.len();
        streams.push(TsharkStream {
            key: (
                f[2].into(),
                f[3].parse().unwrap(),
                f[4].into(),
                f[5].parse().unwrap(),
                u32::from_str_radix(&f[6][2..], 16).unwrap(),
            ),
            packets: f[n - 9].parse().unwrap(),
            lost: f[n - 8].parse().unwrap(),
            max_delta: f[n - 4].parse().unwrap(),
            mean_jitter: f[n - 2].parse().unwrap(),
            max_jitter: f[n - 1].parse().unwrap(),
        });
    }
    streams
}

/// Runs a capture tool of Wireshark's (`editcap`, `mergecap`).
pub fn wireshark_tool(tool: &str, args: &[&str]) {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool} is needed (scripts/test.sh installs tshark): {e}"));
    assert!(out.status.success(), "{tool}: {}", String::from_utf8_lossy(&out.stderr));
}

/// tshark's `frame.time_epoch` ("1795310759.744595000") as ns since the
/// epoch.
pub fn epoch_ns(s: &str) -> i64 {
    let (sec, frac) = s.split_once('.').unwrap_or((s, "0"));
    let frac = format!("{frac:0<9}");
    sec.parse::<i64>().unwrap() * 1_000_000_000 + frac[..9].parse::<i64>().unwrap()
}

/// The `-T fields` names that tell an RTP stream apart, in this order:
/// source address (IPv4, IPv6: one of the two is empty), source port,
/// destination address (IPv4, IPv6), destination port, SSRC (hex).
pub const RTP_STREAM_FIELDS: [&str; 7] =
    ["ip.src", "ipv6.src", "udp.srcport", "ip.dst", "ipv6.dst", "udp.dstport", "rtp.ssrc"];

/// tshark's `-T fields` output for the packets matching `filter` (all when
/// empty): a line a packet, the `fields` separated by tabs unless `opts`
/// (tshark's own options: `-o rtp.heuristic_rtp:TRUE`, `-E separator=|`,
/// `-d` decode-as) say otherwise.
pub fn tshark_fields(file: &Path, opts: &[&str], filter: &str, fields: &[&str]) -> String {
    let mut args = opts.to_vec();
    if !filter.is_empty() {
        args.extend(["-Y", filter]);
    }
    args.extend(["-T", "fields"]);
    for f in fields {
        args.extend(["-e", f]);
    }
    tshark(file, &args)
}
