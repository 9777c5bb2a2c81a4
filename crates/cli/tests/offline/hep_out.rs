//! `--hep` against a real collector: sngrep (`-L`, its HEP listener)
//! receives what `calliper analyze --hep` sends in a network namespace of
//! the test's own, and writes the SIP messages it understood to a pcap.
//! That pcap must hold exactly the capture's SIP messages: the same
//! times, addresses, ports, Call-IDs and CSeqs, as tshark reads both. The
//! summary's `hep_sent` counts them with the quality reports. Those (type
//! 34) are read by a HEP3 reader of the test's own, in Python from the
//! specification (this tshark has no HEP dissector, and sngrep ignores
//! them), and must carry the records' and interval reports' figures.

use crate::common;
use calliper_testkit::probe::of_type;
use std::path::Path;
use std::process::Command;

/// Each SIP message of `pcap` as tshark shows it, sorted.
fn sip_messages(pcap: &Path) -> Vec<String> {
    let fields = [
        "frame.time_epoch",
        "ip.src",
        "udp.srcport",
        "ip.dst",
        "udp.dstport",
        "sip.Call-ID",
        "sip.CSeq",
        "udp.length",
    ];
    let mut v: Vec<String> =
        common::tshark_fields(pcap, &[], "sip", &fields).lines().map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn sngrep_receives_every_sip_message_as_captured() {
    let capture = common::sample_capture();
    let dir = common::scratch_dir("hep-out");
    let (received, summary) = (dir.join("sngrep.pcap"), dir.join("out.jsonl"));
    assert!(
        Command::new("sngrep").arg("-V").output().is_ok(),
        "sngrep (the Debian package) is needed as the HEP collector: scripts/test.sh installs it"
    );
    let script = format!(
        "set -e; ip link set lo up
         sngrep -N -q -L udp:127.0.0.1:9060 -O {received} & p=$!
         for i in $(seq 100); do ss -lun | grep -q 127.0.0.1:9060 && break; sleep 0.05; done
         {calliper} analyze --progress never --format jsonl -o {summary} --hep udp:127.0.0.1:9060 --hep-id 7 {capture}
         sleep 0.5; kill -INT $p; wait $p || true",
        received = received.display(),
        summary = summary.display(),
        calliper = env!("CARGO_BIN_EXE_calliper"),
        capture = capture.display(),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-n", "--", "sh", "-c", &script]);
    let out =
        cmd.output().expect("unshare (util-linux) runs the test in its own network namespace");
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    if !out.status.success()
        && log.contains("unshare failed")
        && common::skip_requested("netns", &log)
    {
        return;
    }
    assert!(out.status.success(), "the rig failed: {log}");
    let want = sip_messages(&capture);
    assert_eq!(want.len(), 36);
    assert_eq!(sip_messages(&received), want);
    let last: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&summary).unwrap().lines().last().unwrap())
            .unwrap();
    // The SIP messages and each stream's quality reports (offline/hep_out.rs,
    // quality_reports_carry_the_records_figures).
    let quality = common::calliper_jsonl(&capture, &["--events", "intervals"])
        .iter()
        .map(|l| match l["type"].as_str() {
            Some("interval") if !l["call"].is_null() => 1,
            Some("call") => l["streams"].as_array().unwrap().len() as u64,
            _ => 0,
        })
        .sum::<u64>();
    assert!(quality > 0);
    assert_eq!(last["hep_sent"], 36 + quality, "{last}");
    assert!(last.get("hep_dropped").is_none() && last.get("hep_failed").is_none(), "{last}");
    std::fs::remove_dir_all(&dir).ok();
}

/// SIP that arrived as HEP is not sent on as HEP (a probe reading a feed
/// and sending to the same collector would loop; the quality of the media
/// measured here is), and a key that is not a regular file is refused
/// before any work.
#[test]
fn hep_is_not_sent_again_and_a_device_is_no_key_file() {
    let dir = common::scratch_dir("hep-again");
    let original = common::sample_capture();
    let (feed, sip) = calliper_testkit::captures::as_hep_feed(&original, |_| {});
    let path = dir.join("feed.pcap");
    common::write_pcap(&path, 1, &feed);
    let collector = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    collector.set_read_timeout(Some(std::time::Duration::from_millis(500))).unwrap();
    let to = format!("udp:{}", collector.local_addr().unwrap());
    let lines = common::calliper_jsonl(&path, &["--hep-port", "9060", "--hep", &to]);
    let summary = lines.last().unwrap();
    assert_eq!(summary["hep"], sip, "{summary}");
    assert!(lines.iter().any(|l| l["type"] == "call"), "the feed's calls are analysed");
    // Only the quality of the media measured here goes out, no SIP.
    let mut buf = [0u8; 65536];
    let mut received = 0;
    while let Ok(n) = collector.recv(&mut buf) {
        let h = calliper_wire::hep::Hep::parse(&buf[..n]).unwrap();
        assert_eq!(h.kind, calliper_wire::hep::kind::QUALITY_JSON, "SIP was sent again");
        received += 1;
    }
    assert!(received > 0);
    assert_eq!(summary["hep_sent"], received, "{summary}");
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--hep", &to, "--hep-key", "/dev/zero"])
        .arg(&original)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("regular file"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A HEP3 reader written from the specification (sipcapture/HEP, `docs/`),
/// independent of `calliper_wire::hep`: it binds a loopback port, prints
/// it, then prints each message's chunks as JSON until 2 s pass without
/// one.
const HEP_READER: &str = r#"
import json, socket, struct, sys
tcp = sys.argv[1] == "tcp"
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
if tcp:
    s.listen(1)
print(s.getsockname()[1], flush=True)
s.settimeout(10.0 if tcp else 2.0)

def chunks(d):
    assert d[:4] == b"HEP3" and struct.unpack(">H", d[4:6])[0] == len(d), d[:8]
    m, i = {}, 6
    while i < len(d):
        vendor, kind, length = struct.unpack(">HHH", d[i:i + 6])
        v = d[i + 6:i + length]
        assert length >= 6 and i + length <= len(d)
        i += length
        if vendor != 0:
            continue
        if kind in (3, 4):
            m["src" if kind == 3 else "dst"] = socket.inet_ntop(socket.AF_INET, v)
        elif kind in (5, 6):
            m["src" if kind == 5 else "dst"] = socket.inet_ntop(socket.AF_INET6, v)
        elif kind in (7, 8):
            m["sport" if kind == 7 else "dport"] = struct.unpack(">H", v)[0]
        elif kind == 9:
            m["sec"] = struct.unpack(">I", v)[0]
        elif kind == 10:
            m["usec"] = struct.unpack(">I", v)[0]
        elif kind == 11:
            m["type"] = v[0]
        elif kind == 0x11:
            m["correlation"] = v.decode()
        elif kind == 0x20:
            m["mos"] = struct.unpack(">H", v)[0]
        elif kind == 0x0F:
            m["payload"] = v.decode()
    print(json.dumps(m), flush=True)

if tcp:
    # One connection, messages back to back, each framed by its length.
    c, _ = s.accept()
    c.settimeout(2.0)
    buf = b""
    while True:
        try:
            more = c.recv(65536)
        except socket.timeout:
            break
        if not more:
            break
        buf += more
        while len(buf) >= 6 and len(buf) >= struct.unpack(">H", buf[4:6])[0]:
            n = struct.unpack(">H", buf[4:6])[0]
            chunks(buf[:n])
            buf = buf[n:]
    assert buf == b"", "a message cut off"
else:
    while True:
        try:
            d, _ = s.recvfrom(65535)
        except socket.timeout:
            break
        chunks(d)
"#;

/// `calliper analyze --format jsonl EXTRA --hep TRANSPORT:…` of `capture`
/// towards the independent reader: the analysis's lines, and the messages
/// the reader received, as JSON.
fn analyze_into_reader(
    capture: &Path,
    transport: &str,
    extra: &[&str],
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    use std::io::{BufRead, BufReader};
    let mut reader = Command::new("python3")
        .args(["-c", HEP_READER, transport])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs the independent HEP reader");
    let mut out = BufReader::new(reader.stdout.take().unwrap());
    let mut port = String::new();
    out.read_line(&mut port).unwrap();
    let to = format!("{transport}:127.0.0.1:{}", port.trim());
    let lines = common::calliper_jsonl(capture, &[extra, &["--hep", &to]].concat());
    let received = out.lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    assert!(reader.wait().unwrap().success(), "{transport}");
    (lines, received)
}

/// Each stream's quality goes out as HEP type 34 (JSON, the MOS × 100 in
/// chunk 0x20, the Call-ID as correlation id): one `HANGUP` report per
/// stream of each call record with its figures, and one `PERIODIC` report
/// per interval report of a call's stream, with the interval's.
#[test]
fn quality_reports_carry_the_records_figures() {
    use serde_json::Value;
    let capture = common::sample_capture();
    let (lines, received) = analyze_into_reader(&capture, "udp", &["--events", "intervals"]);
    let reports: Vec<(&Value, Value)> = received
        .iter()
        .filter(|m| m["type"] == 34)
        .map(|m| (m, serde_json::from_str(m["payload"].as_str().unwrap()).unwrap()))
        .collect();
    let same_stream = |r: &Value, m: &Value, s: &Value| {
        for (chunk, field, key) in [
            ("src", "SRC_IP", "src"),
            ("sport", "SRC_PORT", "src_port"),
            ("dst", "DST_IP", "dst"),
            ("dport", "DST_PORT", "dst_port"),
        ] {
            if m[chunk] != s[key] || r[field] != s[key] {
                return false;
            }
        }
        r["SSRC"] == s["ssrc"]
    };
    let mos_chunk = |mos: &Value| mos.as_f64().map(|m| (m * 100.0).round() as u64);
    let (mut hangups, mut periodic) = (0, 0);
    for call in of_type(&lines, "call") {
        let id = &call["call_id"];
        for s in call["streams"].as_array().unwrap() {
            let found: Vec<&(&Value, Value)> = reports
                .iter()
                .filter(|(m, r)| r["TYPE"] == "HANGUP" && same_stream(r, m, s))
                .collect();
            assert_eq!(found.len(), 1, "one hang-up report for {s}");
            let (m, r) = found[0];
            assert_eq!(
                (&m["correlation"], &r["CORRELATION_ID"], &r["RTP_SIP_CALL_ID"]),
                (id, id, id)
            );
            assert_eq!(r["TOTAL_PK"], s["packets"]);
            assert_eq!(r["EXPECTED_PK"], s["expected"]);
            assert_eq!(r["PACKET_LOSS"], s["lost"]);
            assert_eq!(r["MOS"], s["mos"]);
            assert_eq!(r["RFACTOR"], s["r_factor"]);
            assert_eq!(r["JITTER"], s["mean_jitter_ms"]);
            assert_eq!(r["CODEC_NAME"], s["codec"]);
            assert_eq!(m["mos"].as_u64(), mos_chunk(&s["mos"]), "the MOS chunk");
            let dir = if s["direction"] == "caller_to_callee" { 0 } else { 1 };
            assert_eq!(r["DIR"], dir);
            let last = s["last_ns"].as_i64().unwrap();
            assert_eq!(
                m["sec"].as_i64().unwrap() * 1_000_000_000 + m["usec"].as_i64().unwrap() * 1000,
                last / 1000 * 1000
            );
            hangups += 1;
        }
    }
    for i in of_type(&lines, "interval") {
        let found: Vec<&(&Value, Value)> = reports
            .iter()
            .filter(|(m, r)| {
                r["TYPE"] == "PERIODIC"
                    && same_stream(r, m, i)
                    && m["sec"].as_i64() == Some(i["reported_ns"].as_i64().unwrap() / 1_000_000_000)
                    && r["TOTAL_PK"] == i["packets"]
            })
            .collect();
        assert_eq!(found.len(), 1, "one periodic report for {i}");
        let (m, r) = found[0];
        assert_eq!(
            (r["EXPECTED_PK"].clone(), r["PACKET_LOSS"].clone()),
            (i["expected"].clone(), i["lost"].clone())
        );
        assert_eq!((&r["MOS"], &r["JITTER"]), (&i["mos"], &i["jitter_ms"]));
        assert_eq!(m["mos"].as_u64(), mos_chunk(&i["mos"]));
        periodic += 1;
    }
    assert!(hangups > 0 && periodic > 0);
    let sip = received.iter().filter(|m| m["type"] == 1).count();
    assert_eq!(received.len(), sip + hangups + periodic, "nothing else was sent");
    assert_eq!(lines.last().unwrap()["hep_sent"], received.len());
}

/// Over TCP (`--hep tcp:`), the same messages arrive on one connection,
/// each framed by its length, read by the independent reader; a collector
/// that is not there counts every message as failed, none waited for long.
#[test]
fn hep_over_tcp_carries_the_same_messages() {
    use serde_json::Value;
    let capture = common::sample_capture();
    let receive = |transport: &str| -> (Vec<Value>, Value) {
        let (lines, mut got) = analyze_into_reader(&capture, transport, &[]);
        got.sort_by_key(|m| m.to_string());
        (got, lines.last().unwrap().clone())
    };
    let (udp, _) = receive("udp");
    let (tcp, summary) = receive("tcp");
    assert!(udp.len() > 36);
    assert_eq!(tcp, udp, "TCP and UDP carry the same messages");
    assert_eq!(summary["hep_sent"], tcp.len(), "{summary}");
    // Nobody listening: every message fails, and the run does not hang.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let started = std::time::Instant::now();
    let lines = common::calliper_jsonl(&capture, &["--hep", &format!("tcp:{closed}")]);
    let summary = lines.last().unwrap();
    assert_eq!(summary["hep_failed"], udp.len(), "{summary}");
    assert!(summary.get("hep_sent").is_none_or(|n| n == 0), "{summary}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

/// RTCP on a call's media goes out as HEP type 5 in rtpengine's JSON, one
/// message per sender or receiver report: for every RTCP datagram of the
/// calls (as many as the records count), the messages sent for it carry
/// exactly the reports tshark reads in that datagram (reporters and
/// types, each block's SSRC, fraction and cumulative lost, jitter, LSR and
/// DLSR, an SR's packet and octet counts), read back by the independent
/// reader.
#[test]
fn rtcp_goes_out_as_rtpengine_does() {
    use serde_json::Value;
    use std::collections::BTreeMap;
    let capture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/heplify__rtp_rtcp_sip_ipv4_udp.pcap");
    let (lines, received) = analyze_into_reader(&capture, "udp", &[]);
    // (time µs, source, port) → (reporters, blocks, sender counts) as text.
    type Datagram = (Vec<String>, Vec<String>, Vec<String>);
    let mut sent: BTreeMap<(i64, String, u64), Datagram> = BTreeMap::new();
    for m in received.iter().filter(|m| m["type"] == 5) {
        let key = (
            m["sec"].as_i64().unwrap() * 1_000_000 + m["usec"].as_i64().unwrap(),
            m["src"].as_str().unwrap().to_string(),
            m["sport"].as_u64().unwrap(),
        );
        let r: Value = serde_json::from_str(m["payload"].as_str().unwrap()).unwrap();
        let d = sent.entry(key).or_default();
        d.0.push(format!("{} {}", r["ssrc"], r["type"]));
        assert_eq!(r["report_count"], r["report_blocks"].as_array().unwrap().len());
        for b in r["report_blocks"].as_array().unwrap() {
            d.1.push(format!(
                "{} {} {} {} {} {}",
                b["source_ssrc"],
                b["fraction_lost"],
                b["packets_lost"],
                b["ia_jitter"],
                b["lsr"],
                b["dlsr"]
            ));
        }
        if let Some(s) = r.get("sender_information") {
            d.2.push(format!("{} {}", s["packets"], s["octets"]));
        }
    }
    let in_calls: u64 = of_type(&lines, "call").map(|c| c["rtcp_packets"].as_u64().unwrap()).sum();
    assert!(in_calls > 0);
    assert_eq!(sent.len() as u64, in_calls, "one datagram's reports per RTCP packet of the calls");
    let fields = [
        "frame.time_epoch",
        "ip.src",
        "udp.srcport",
        "rtcp.pt",
        "rtcp.senderssrc",
        "rtcp.ssrc.identifier",
        "rtcp.ssrc.fraction",
        "rtcp.ssrc.cum_nr",
        "rtcp.ssrc.jitter",
        "rtcp.ssrc.lsr",
        "rtcp.ssrc.dlsr",
        "rtcp.sender.packetcount",
        "rtcp.sender.octetcount",
    ];
    let mut seen: BTreeMap<(i64, String, u64), Datagram> = BTreeMap::new();
    for line in common::tshark_fields(&capture, &[], "rtcp", &fields).lines() {
        let f: Vec<Vec<&str>> = line
            .split('\t')
            .map(|c| if c.is_empty() { vec![] } else { c.split(',').collect() })
            .collect();
        let (sec, frac) = f[0][0].split_once('.').unwrap();
        let us = sec.parse::<i64>().unwrap() * 1_000_000 + frac[..6].parse::<i64>().unwrap();
        let dec = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let types: Vec<&&str> = f[3].iter().filter(|t| **t == "200" || **t == "201").collect();
        let reporters = f[4].iter().zip(types).map(|(s, t)| format!("{} {t}", dec(s))).collect();
        let blocks = (0..f[6].len())
            .map(|i| {
                format!(
                    "{} {} {} {} {} {}",
                    dec(f[5][i]),
                    f[6][i],
                    f[7][i],
                    f[8][i],
                    f[9][i],
                    f[10][i]
                )
            })
            .collect();
        let senders = f[11].iter().zip(&f[12]).map(|(p, o)| format!("{p} {o}")).collect();
        seen.insert(
            (us, f[1][0].to_string(), f[2][0].parse().unwrap()),
            (reporters, blocks, senders),
        );
    }
    for (key, d) in &sent {
        assert_eq!(Some(d), seen.get(key), "{key:?}");
    }
}
