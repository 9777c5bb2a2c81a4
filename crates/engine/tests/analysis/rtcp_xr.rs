//! RTCP XR VoIP metrics (RFC 3611 §4.7) against Wireshark: a call whose
//! two endpoints send receiver reports with XR VoIP metrics blocks (and one
//! XR packet with an unrelated block before it). Every block tshark decodes
//! must show, with the same values, on the stream it is about, and every
//! stream's XR figures must be the last block tshark decodes for it.

use calliper_testkit::crafted::{
    invite_or_ok, rtp, Pcap, CALLEE, CALLEE_RTP, CALLER, CALLER_RTP, SEC, T0,
};
use calliper_testkit::oracle::tshark_fields;
use serde_json::Value;
use std::net::Ipv4Addr;

const MS: i64 = SEC / 1000;

/// One VoIP metrics block about `ssrc`, its fields from `seed`.
fn voip_block(ssrc: u32, seed: u8) -> Vec<u8> {
    let mut b = vec![7, 0, 0, 8];
    b.extend_from_slice(&ssrc.to_be_bytes());
    // loss, discard, burst density, gap density
    b.extend_from_slice(&[seed, seed / 2, 200, 10]);
    b.extend_from_slice(&(120 + seed as u16).to_be_bytes()); // burst duration
    b.extend_from_slice(&(3000u16).to_be_bytes()); // gap duration
    b.extend_from_slice(&(40 + seed as u16).to_be_bytes()); // round trip
    b.extend_from_slice(&(60 + seed as u16).to_be_bytes()); // end system delay
    b.extend_from_slice(&[0xB0, 0xC4, 127, 16]); // signal -80, noise -60, RERL n/a, Gmin
    let mos_lq = if seed.is_multiple_of(2) { 127 } else { 35 + seed % 10 };
    b.extend_from_slice(&[80 - seed % 20, 127, mos_lq, 30]); // R, ext R, MOS-LQ, MOS-CQ
    b.extend_from_slice(&[0x03, 0]); // RX config, reserved
    b.extend_from_slice(&(40 + seed as u16).to_be_bytes()); // JB nominal
    b.extend_from_slice(&(80 + seed as u16).to_be_bytes()); // JB maximum
    b.extend_from_slice(&(200u16).to_be_bytes()); // JB abs max
    b
}

/// A compound RTCP packet from `reporter`: an RR about `about`, then an XR
/// packet holding a receiver reference time block and a VoIP metrics block.
fn rtcp(reporter: u32, about: u32, seed: u8) -> Vec<u8> {
    let mut p = vec![0x81, 201, 0, 7];
    p.extend_from_slice(&reporter.to_be_bytes());
    p.extend_from_slice(&about.to_be_bytes());
    p.extend_from_slice(&[0; 20]);
    let rrt = [4u8, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2]; // BT 4, NTP time
    let voip = voip_block(about, seed);
    let words = (8 + rrt.len() + voip.len()) / 4 - 1;
    p.extend_from_slice(&[0x80, 207]);
    p.extend_from_slice(&(words as u16).to_be_bytes());
    p.extend_from_slice(&reporter.to_be_bytes());
    p.extend_from_slice(&rrt);
    p.extend_from_slice(&voip);
    p
}

fn capture() -> Pcap {
    let mut p = Pcap::default();
    p.udp(T0, CALLER, CALLEE, &invite_or_ok("xr", false, ""));
    p.udp(T0 + 100 * MS, CALLEE, CALLER, &invite_or_ok("xr", true, ""));
    let rtcp_of = |e: (Ipv4Addr, u16)| (e.0, e.1 + 1);
    for i in 0..400u16 {
        let at = T0 + SEC + i as i64 * 20 * MS;
        let up = rtp(0, i, i as u32 * 160, 0x1111, &[0xff; 160]);
        p.udp(at, CALLER_RTP, CALLEE_RTP, &up);
        let down = rtp(0, i, i as u32 * 160, 0x2222, &[0xff; 160]);
        p.udp(at + MS, CALLEE_RTP, CALLER_RTP, &down);
        if i % 100 == 99 {
            let seed = (i / 100) as u8 * 3 + 1;
            // The callee reports on the caller's stream, and back.
            let from_callee = rtcp(0x2222, 0x1111, seed);
            p.udp(at + 5 * MS, rtcp_of(CALLEE_RTP), rtcp_of(CALLER_RTP), &from_callee);
            let from_caller = rtcp(0x1111, 0x2222, seed + 1);
            p.udp(at + 6 * MS, rtcp_of(CALLER_RTP), rtcp_of(CALLEE_RTP), &from_caller);
        }
    }
    p
}

#[test]
fn xr_voip_metrics_match_wireshark_both_ways() {
    let pcap = capture().save("rtcp-xr");
    let fields = [
        "rtcp.ssrc.identifier",
        "rtcp.xr.voipmetrics.rtdelay",
        "rtcp.xr.voipmetrics.esdelay",
        "rtcp.xr.voipmetrics.rfactor",
        "rtcp.xr.voipmetrics.moslq",
        "rtcp.xr.voipmetrics.moscq",
        "rtcp.xr.voipmetrics.jbnominal",
        "rtcp.xr.voipmetrics.jbmax",
        "rtcp.xr.voipmetrics.burstduration",
    ];
    let decode_as = ["-d", "udp.port==30001,rtcp", "-d", "udp.port==40001,rtcp"];
    let out = tshark_fields(&pcap, &decode_as, "rtcp.xr.bt == 7", &fields);
    // tshark: per block, the stream it is about and the values, in order.
    let mut wireshark: Vec<(u64, Vec<String>)> = Vec::new();
    for line in out.lines().filter(|l| !l.is_empty()) {
        let cols: Vec<&str> = line.split('\t').collect();
        // rtcp.ssrc.identifier lists the RR's source, then the VoIP block's.
        let about = cols[0].split(',').next_back().unwrap();
        let about = u64::from_str_radix(about.trim_start_matches("0x"), 16).unwrap();
        wireshark.push((about, cols[1..].iter().map(|s| s.to_string()).collect()));
    }
    assert_eq!(wireshark.len(), 8, "tshark decoded {out}");
    let lines = calliper_testkit::probe::analyze(&pcap).lines();
    let call = lines.iter().find(|l| l["type"] == "call").unwrap();
    let streams = call["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2);
    for s in streams {
        let ssrc = s["ssrc"].as_u64().unwrap();
        let xr = &s["rtcp_xr"];
        let blocks: Vec<&Vec<String>> =
            wireshark.iter().filter(|(about, _)| *about == ssrc).map(|(_, v)| v).collect();
        assert_eq!(xr["reports"], blocks.len() as u64, "{s}");
        let last = blocks.last().unwrap();
        let num = |v: &Value| v.as_f64().map(|f| f.to_string());
        let ours = [
            num(&xr["round_trip_ms"]),
            num(&xr["end_system_delay_ms"]),
            num(&xr["r_factor"]),
            num(&xr["mos_lq"]),
            num(&xr["mos_cq"]),
            num(&xr["jb_nominal_ms"]),
            num(&xr["jb_maximum_ms"]),
        ];
        for (i, (o, w)) in ours.iter().zip(last.iter()).enumerate() {
            let w: f64 = w.parse().unwrap();
            match o {
                Some(o) => {
                    assert_eq!(o.parse::<f64>().unwrap(), w, "{} of {ssrc:#x}: {xr}", fields[i + 1])
                }
                // Unavailable (127): tshark shows the raw value.
                None => assert!(w == 127.0 || w == 12.7, "{} of {ssrc:#x}: {w}", fields[i + 1]),
            }
        }
    }
    let _ = std::fs::remove_file(&pcap);
}
