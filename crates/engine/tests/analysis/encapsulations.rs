//! Every encapsulation the decoder handles, shown on real traffic: the
//! packets of two captures (SIPp over IPv4, and SIP over IPv6 with fragments)
//! are wrapped in VXLAN, MPLS, GRE, ERSPAN I/II/III, IPv4-in-IPv4,
//! IPv4-in-IPv6, IPv6-in-IPv4, PPPoE sessions and PPTP (enhanced GRE
//! carrying PPP, with and without PPP's header compression) and GTP-U (with
//! and without optional fields and extension headers). Calliper must report exactly the records of
//! the unwrapped capture, and tshark must find the same SIP INVITEs in the
//! wrapped file (so the wrapping is real, not something only we accept).

use calliper_capture::CaptureReader;
use calliper_testkit::captures::{repo_root, scratch, write_pcap};
use calliper_testkit::oracle::tshark;
use calliper_testkit::probe::analyze;
use calliper_wire::emit::{self, ethertype_of};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn testdata(name: &str) -> PathBuf {
    repo_root().join("testdata").join(name)
}

/// (timestamp ns, IP packet) of every packet of a capture.
fn ip_packets(path: &Path) -> Vec<(i64, Vec<u8>)> {
    let data = std::fs::read(path).unwrap();
    let mut r = CaptureReader::new(&data[..]).unwrap();
    let mut out = vec![];
    while let Some(p) = r.next_packet().unwrap() {
        let skip = match p.link_type {
            1 => 14,   // Ethernet
            113 => 16, // Linux SLL
            l => panic!("link type {l}"),
        };
        out.push((p.ts_ns, p.data[skip..].to_vec()));
    }
    out
}

fn checksum(h: &mut [u8]) {
    h[10] = 0;
    h[11] = 0;
    let c = calliper_wire::emit::ipv4_checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

fn outer_ipv4(proto: u8, inner: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0, 0, 0, 0x12, 0x34, 0, 0, 64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2];
    h[2..4].copy_from_slice(&((20 + inner.len()) as u16).to_be_bytes());
    checksum(&mut h);
    h.extend_from_slice(inner);
    h
}

fn outer_ipv6(next: u8, inner: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(inner);
    h
}

fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    calliper_wire::emit::ethernet(&[], ethertype, payload)
}

/// Wraps one IP packet; returns an Ethernet frame.
fn wrap(kind: &str, ip: &[u8]) -> Vec<u8> {
    let et = ethertype_of(ip);
    let inner_eth = ethernet(et, ip);
    match kind {
        "vxlan" => {
            let mut udp = vec![0xC0, 0x00, 0x12, 0xB5, 0, 0, 0, 0]; // 49152 -> 4789
            let len = 8 + 8 + inner_eth.len();
            udp[4..6].copy_from_slice(&(len as u16).to_be_bytes());
            udp.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 0x2A, 0]); // VNI 42
            udp.extend_from_slice(&inner_eth);
            ethernet(0x0800, &outer_ipv4(17, &udp))
        }
        "mpls" => {
            // Two labels, bottom of stack on the second.
            let mut p = vec![0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40];
            p.extend_from_slice(ip);
            ethernet(0x8847, &p)
        }
        "gre" => {
            let mut g = vec![0, 0];
            g.extend_from_slice(&et.to_be_bytes());
            g.extend_from_slice(ip);
            ethernet(0x0800, &outer_ipv4(47, &g))
        }
        "erspan1" => {
            let mut g = vec![0, 0, 0x88, 0xBE];
            g.extend_from_slice(&inner_eth);
            ethernet(0x0800, &outer_ipv4(47, &g))
        }
        "erspan2" => {
            let mut g = vec![0x10, 0, 0x88, 0xBE, 0, 0, 0, 1];
            g.extend_from_slice(&[0x10, 0x64, 0x00, 0x07, 0, 0, 0, 0]); // version 1, VLAN 100, session 7
            g.extend_from_slice(&inner_eth);
            ethernet(0x0800, &outer_ipv4(47, &g))
        }
        "erspan3" => {
            let mut g = vec![0x10, 0, 0x22, 0xEB, 0, 0, 0, 1];
            g.extend_from_slice(&[0x20, 0x64, 0x00, 0x07, 0, 0, 0, 0, 0, 0, 0, 0]); // version 2, no subheader
            g.extend_from_slice(&inner_eth);
            ethernet(0x0800, &outer_ipv4(47, &g))
        }
        "ip-in-ipv4" => {
            let proto = if et == 0x86DD { 41 } else { 4 };
            ethernet(0x0800, &outer_ipv4(proto, ip))
        }
        "ip-in-ipv6" => {
            let next = if et == 0x86DD { 41 } else { 4 };
            ethernet(0x86DD, &outer_ipv6(next, ip))
        }
        "pppoe" => {
            let ppp_proto: u16 = if et == 0x86DD { 0x0057 } else { 0x0021 };
            let mut p = vec![0x11, 0x00, 0x00, 0x01];
            p.extend_from_slice(&((2 + ip.len()) as u16).to_be_bytes());
            p.extend_from_slice(&ppp_proto.to_be_bytes());
            p.extend_from_slice(ip);
            ethernet(0x8864, &p)
        }
        "pptp" | "pptp-compressed-ppp" => {
            let compressed = kind == "pptp-compressed-ppp";
            // PPP: address and control bytes and a two-byte protocol, or
            // both compressed away (one odd protocol byte).
            let mut ppp = if compressed { vec![] } else { vec![0xFF, 0x03, 0x00] };
            ppp.push(if et == 0x86DD { 0x57 } else { 0x21 });
            ppp.extend_from_slice(ip);
            // Enhanced GRE: key and sequence present; with an acknowledgement too.
            let mut g = vec![0x30, if compressed { 0x81 } else { 0x01 }, 0x88, 0x0B];
            g.extend_from_slice(&(ppp.len() as u16).to_be_bytes());
            g.extend_from_slice(&[0x00, 0x07, 0, 0, 0, 1]); // call id 7, sequence 1
            if compressed {
                g.extend_from_slice(&[0, 0, 0, 1]); // acknowledgement 1
            }
            g.extend_from_slice(&ppp);
            ethernet(0x0800, &outer_ipv4(47, &g))
        }
        "gtpu" | "gtpu-extensions" => {
            // A VoLTE/5G user plane: eNodeB/gNB to gateway on port 2152,
            // with a sequence number and a PDU session container (QFI 9)
            // in the second kind.
            let gtp = if kind == "gtpu" {
                emit::gtpu(0x1234, None, &[], ip)
            } else {
                emit::gtpu(0x1234, Some(7), &[(0x85, &[0x10, 0x09])], ip)
            };
            let udp = emit::udp(2152, 2152, &gtp);
            ethernet(0x0800, &outer_ipv4(17, &udp))
        }
        _ => unreachable!(),
    }
}

/// An Ethernet capture of `packets`.
fn write_ethernet(path: &Path, packets: &[(i64, Vec<u8>)]) {
    write_pcap(path, 1, packets);
}

fn records(lines: Vec<Value>) -> Vec<Value> {
    lines
        .into_iter()
        // The time series counts frames as captured: tunnels add bytes.
        .filter(|l| l["type"] != "summary" && l["type"] != "traffic")
        .collect()
}

fn tshark_invites(path: &Path) -> usize {
    tshark(path, &["-Y", "sip.Method == \"INVITE\""]).lines().count()
}

/// tshark's RTP stream table (one line per stream).
fn tshark_rtp(path: &Path) -> Vec<String> {
    tshark(path, &["-q", "-z", "rtp,streams"])
        .lines()
        .filter(|l| l.contains(" 0x"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_encapsulation_gives_the_records_of_the_plain_capture() {
    let dir = calliper_testkit::captures::scratch_root().join("encap");
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = vec![];
    for capture in ["sipp_hold_dtmf.pcap", "sngrep__ipv6frag.pcap"] {
        let original = testdata(capture);
        let want = records(analyze(&original).lines());
        assert!(!want.is_empty());
        let invites = tshark_invites(&original);
        assert!(invites > 0);
        assert!(
            capture.starts_with("sngrep") || !tshark_rtp(&original).is_empty(),
            "{capture}: tshark finds no RTP stream to compare"
        );
        let packets = ip_packets(&original);
        for kind in [
            "vxlan",
            "mpls",
            "gre",
            "erspan1",
            "erspan2",
            "erspan3",
            "ip-in-ipv4",
            "ip-in-ipv6",
            "pppoe",
            "pptp",
            "pptp-compressed-ppp",
            "gtpu",
            "gtpu-extensions",
        ] {
            let wrapped: Vec<(i64, Vec<u8>)> =
                packets.iter().map(|(t, ip)| (*t, wrap(kind, ip))).collect();
            let path = dir.join(format!("{kind}-{capture}"));
            write_ethernet(&path, &wrapped);
            let got = records(analyze(&path).lines());
            if got != want {
                failures.push(format!("{capture} in {kind}: calliper's records differ"));
            }
            // tshark opens GTP-U itself: it must find the unwrapped
            // capture's RTP streams, figure for figure.
            if kind.starts_with("gtpu") && tshark_rtp(&path) != tshark_rtp(&original) {
                failures.push(format!("{capture} in {kind}: tshark's RTP streams differ"));
            }
            let seen = tshark_invites(&path);
            if seen != invites {
                failures.push(format!(
                    "{capture} in {kind}: tshark sees {seen} INVITEs, {invites} unwrapped"
                ));
            }
        }
    }
    if std::env::var_os("KEEP_ENCAP").is_none() {
        std::fs::remove_dir_all(&dir).ok();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A user plane captured on two legs of its path (eNodeB to serving
/// gateway, then serving to packet gateway: other outer addresses, another
/// TEID, a microsecond later) shows every packet twice: the second copy is
/// removed as a duplicate, and the records are those of the plain capture.
#[test]
fn a_packet_seen_on_two_gtpu_legs_counts_once() {
    let dir = scratch("gtpu-legs");
    std::fs::create_dir_all(&dir).unwrap();
    let original = testdata("sipp_hold_dtmf.pcap");
    let want = records(analyze(&original).lines());
    let packets = ip_packets(&original);
    let mut legs = Vec::new();
    for (t, ip) in &packets {
        legs.push((*t, wrap("gtpu", ip)));
        let mut second = ethernet(
            0x0800,
            &outer_ipv4(17, &emit::udp(2152, 2152, &emit::gtpu(0x9876, None, &[], ip))),
        );
        second[14 + 12..14 + 20].copy_from_slice(&[198, 51, 100, 1, 198, 51, 100, 2]);
        checksum(&mut second[14..34]);
        legs.push((t + 1_000, second));
    }
    let path = dir.join("two-legs.pcap");
    write_ethernet(&path, &legs);
    let lines = analyze(&path).lines();
    let summary = lines.last().unwrap().clone();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(summary["duplicates_removed"], packets.len(), "{summary}");
    assert_eq!(records(lines), want);
}

/// Frames that are not IP are counted by what they carry, and PPP that is
/// compressed or encrypted (its calls cannot be seen) is also an anomaly.
#[test]
fn frames_that_are_not_ip_are_counted_by_type() {
    let dir = calliper_testkit::captures::scratch_root().join("notip");
    std::fs::create_dir_all(&dir).unwrap();
    let pppoe = |proto: u16| {
        let mut p = vec![0x11, 0x00, 0x00, 0x01, 0x00, 0x06];
        p.extend_from_slice(&proto.to_be_bytes());
        p.extend_from_slice(&[1, 2, 3, 4]);
        ethernet(0x8864, &p)
    };
    let pptp_ack =
        ethernet(0x0800, &outer_ipv4(47, &[0x20, 0x81, 0x88, 0x0B, 0, 0, 0, 7, 0, 0, 0, 1]));
    let frames = [
        ethernet(0x0806, &[0; 28]),                  // ARP
        ethernet(0x8863, &[0x11, 0x09, 0, 0, 0, 0]), // PPPoE discovery (PADI)
        pppoe(0xC021),                               // LCP
        pppoe(0x00FD),                               // CCP-compressed datagram
        pptp_ack,
    ];
    let packets: Vec<(i64, Vec<u8>)> = frames
        .into_iter()
        .enumerate()
        .map(|(i, f)| (1_700_000_000_000_000_000 + i as i64 * 1000, f))
        .collect();
    let path = dir.join("not-ip.pcap");
    write_ethernet(&path, &packets);
    let lines = analyze(&path).lines();
    let summary = lines.last().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(summary["not_ip"], 5, "{summary}");
    let by_type = &summary["not_ip_by_type"];
    for kind in ["arp", "pppoe_discovery", "ppp_control", "ppp_compressed", "pptp_ack"] {
        assert_eq!(by_type[kind], 1, "{kind}: {summary}");
    }
    assert_eq!(summary["anomalies"]["ppp_compressed"], 1, "{summary}");
    assert!(summary["anomalies"]["pptp_ack"].is_null(), "{summary}");
}
