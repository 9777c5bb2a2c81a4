//! `calliper crtp` on every capture, against tshark both ways: tshark reads
//! every cRTP frame `compress` writes without a malformed packet,
//! and counts the same FULL_HEADER, COMPRESSED_UDP and COMPRESSED_RTP
//! frames as the summary; and after `decompress`, tshark's decoding of
//! every IP packet (addresses, IDs, lengths, checksums, RTP fields,
//! payload) equals its decoding of the original capture, packet for packet.

use crate::common;

use calliper_testkit::probe::of_type;
use common::tshark;
use std::path::Path;
use std::process::Command;

fn crtp(args: &[&str], input: &Path, output: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .arg("crtp")
        .args(args)
        .arg(input)
        .arg(output)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{}: {stderr}", input.display());
    stderr
}

/// The number just before `phrase` in the summary.
fn figure(summary: &str, phrase: &str) -> usize {
    let at = summary.find(phrase).unwrap_or_else(|| panic!("no {phrase:?} in {summary}"));
    summary[..at].split_whitespace().last().unwrap().parse().unwrap()
}

const FIELDS: &[&str] = &[
    "ip.src",
    "ip.dst",
    "ip.id",
    "ip.len",
    "ip.ttl",
    "ip.flags",
    "ip.checksum",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.plen",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "udp.checksum",
    "rtp.seq",
    "rtp.timestamp",
    "rtp.ssrc",
    "rtp.marker",
    "rtp.p_type",
    "rtp.csrc.item",
    "rtp.payload",
];

/// tshark's decoding of every IP packet of `file`, a line each.
fn decoded(file: &Path) -> Vec<String> {
    let listed =
        common::tshark_fields(file, &["-o", "rtp.heuristic_rtp:TRUE"], "ip or ipv6", FIELDS);
    listed.lines().map(str::to_string).collect()
}

/// What tshark makes of one frame.
struct Frame {
    /// Whether it holds IP (its layers name ip or ipv6).
    ip: bool,
    /// Its PPP protocol numbers, as tshark prints them.
    ppp: Vec<String>,
    /// Whether tshark dissects it as cRTP: a crtp layer, or a context id
    /// (COMPRESSED_NON_TCP frames name no layer beyond ppp).
    crtp: bool,
    /// Whether tshark finds it malformed.
    malformed: bool,
}

/// What tshark makes of each frame of a file, read in one pass.
struct LinkFrames(Vec<Frame>);

impl LinkFrames {
    fn of(file: &Path) -> LinkFrames {
        let fields = ["frame.protocols", "ppp.protocol", "crtp.cid", "_ws.malformed"];
        let frame = |line: &str| {
            let f: Vec<&str> = line.split('\t').collect();
            let field = |i: usize| f.get(i).copied().unwrap_or("");
            Frame {
                ip: field(0).split(':').any(|l| l == "ip" || l == "ipv6"),
                ppp: field(1).split(',').filter(|p| !p.is_empty()).map(String::from).collect(),
                crtp: !field(2).is_empty() || field(0).split(':').any(|l| l == "crtp"),
                malformed: !field(3).is_empty(),
            }
        };
        LinkFrames(common::tshark_fields(file, &[], "", &fields).lines().map(frame).collect())
    }
    /// Frames with one of these PPP protocol numbers.
    fn ppp(&self, numbers: &[&str]) -> usize {
        let listed = |f: &&Frame| f.ppp.iter().any(|n| numbers.contains(&n.as_str()));
        self.0.iter().filter(listed).count()
    }
    /// Frames dissected as cRTP.
    fn crtp(&self) -> usize {
        self.0.iter().filter(|f| f.crtp).count()
    }
    /// Malformed frames that hold IP or cRTP.
    fn malformed(&self) -> usize {
        self.0.iter().filter(|f| f.malformed && (f.ip || f.crtp)).count()
    }
}

#[test]
fn tshark_reads_what_compress_writes_and_decompress_gives_it_back() {
    let dir = common::scratch_dir("crtp");
    let (compressed, restored) = (dir.join("link.pcap"), dir.join("ip.pcap"));
    let (mut with_rtp, mut with_non_tcp) = (0, 0);
    for capture in common::captures() {
        let summary = crtp(&["compress"], &capture, &compressed);
        let name = capture.display();
        let full = figure(&summary, " full headers");
        let rtp = figure(&summary, " compressed RTP");
        let compressed_udp = figure(&summary, " compressed UDP");
        let non_tcp = figure(&summary, " compressed non-TCP");
        // A packet tshark finds malformed in the capture (some hold bad
        // T.38) may stay so inside a FULL_HEADER; the link adds none.
        let frames = LinkFrames::of(&compressed);
        let malformed = frames.malformed();
        assert!(
            malformed == 0 || malformed <= LinkFrames::of(&capture).malformed(),
            "{name}: cRTP frames tshark finds malformed:\n{}",
            tshark(&compressed, &["-Y", "_ws.malformed"])
        );
        // tshark dissects FULL_HEADER, COMPRESSED_UDP and
        // COMPRESSED_NON_TCP as crtp, and names COMPRESSED_RTP only by its
        // PPP protocol.
        assert_eq!(frames.ppp(&["0x0061"]), full, "{name}: FULL_HEADER\n{summary}");
        assert_eq!(frames.crtp(), full + compressed_udp + non_tcp, "{name}: crtp\n{summary}");
        assert_eq!(frames.ppp(&["0x0065"]), non_tcp, "{name}: COMPRESSED_NON_TCP\n{summary}");
        with_non_tcp += (non_tcp > 0) as usize;
        assert_eq!(frames.ppp(&["0x0069", "0x2069"]), rtp, "{name}: COMPRESSED_RTP\n{summary}");
        with_rtp += (rtp > 0) as usize;

        let summary = crtp(&["decompress"], &compressed, &restored);
        assert!(summary.contains(" 0 lost to context damage"), "{name}: {summary}");
        let (before, after) = (decoded(&capture), decoded(&restored));
        assert_eq!(before.len(), after.len(), "{name}: packets");
        for (n, (b, a)) in before.iter().zip(&after).enumerate() {
            assert_eq!(b, a, "{name}: IP packet {n} differs after the round trip");
        }
    }
    assert!(with_rtp >= common::at_least(10, 2), "only {with_rtp} captures had RTP to compress");
    assert!(
        with_non_tcp >= common::at_least(10, 3),
        "only {with_non_tcp} captures had UDP to compress as non-TCP"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_settings_are_refused_plainly() {
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["crtp", "compress", "--contexts", "0", "in.pcap", "out.pcap"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("0 is not in 1..=65536"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["crtp", "decompress", "/nonexistent.pcap", "/tmp/out.pcap"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open"));
    // Writing over the input would destroy it while it is read.
    let capture = &common::captures()[0];
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["crtp", "compress"])
        .args([capture, capture])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("are the same file"));
}

#[test]
fn swapped_arguments_are_refused_and_leave_the_other_file_alone() {
    let dir = common::scratch_dir("crtp-swap");
    let capture = dir.join("call.pcap");
    std::fs::copy(&common::captures()[0], &capture).unwrap();
    let link = dir.join("link.pcap");
    crtp(&["compress"], &capture, &link);
    let (call_bytes, link_bytes) =
        (std::fs::read(&capture).unwrap(), std::fs::read(&link).unwrap());
    for (command, input, output, says) in [
        ("decompress", &capture, &link, "not a capture of PPP frames"),
        ("compress", &link, &capture, "did you mean `calliper crtp decompress`"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
            .args(["crtp", command])
            .args([input, output])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{command}");
    }
    assert_eq!(std::fs::read(&capture).unwrap(), call_bytes);
    assert_eq!(std::fs::read(&link).unwrap(), link_bytes);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_output_is_private_even_when_it_was_there_before() {
    use std::os::unix::fs::PermissionsExt;
    let output = calliper_testkit::captures::scratch_root().join("crtp-mode.pcap");
    std::fs::write(&output, b"old").unwrap();
    std::fs::set_permissions(&output, std::fs::Permissions::from_mode(0o644)).unwrap();
    crtp(&["compress"], &common::captures()[0], &output);
    let mode = std::fs::metadata(&output).unwrap().permissions().mode() & 0o777;
    std::fs::remove_file(&output).ok();
    assert_eq!(mode, 0o600);
}

#[test]
fn the_header_checksum_option_round_trips() {
    let capture = common::sample_capture();
    let dir = common::scratch_dir("crtp-hc");
    let (compressed, restored) = (dir.join("link.pcap"), dir.join("ip.pcap"));
    let summary = crtp(&["compress", "--header-checksum"], &capture, &compressed);
    assert!(figure(&summary, " compressed RTP") > 0, "{summary}");
    let problems =
        tshark(&compressed, &["-Y", "_ws.malformed || _ws.expert.severity >= 0x00600000"]);
    assert!(problems.is_empty(), "{problems}");
    let summary = crtp(&["decompress"], &compressed, &restored);
    assert!(summary.contains(" 0 lost to context damage"), "{summary}");
    assert_eq!(decoded(&capture), decoded(&restored));
    std::fs::remove_dir_all(&dir).ok();
}

/// Copies a pcap, leaving out the records `drop` picks (by index and data).
fn drop_records(from: &Path, to: &Path, drop: impl Fn(usize, &[u8]) -> bool) -> usize {
    let bytes = std::fs::read(from).unwrap();
    let (mut out, mut at, mut index, mut dropped) = (bytes[..24].to_vec(), 24, 0, 0);
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let record = &bytes[at..at + 16 + len];
        if drop(index, &record[16..]) {
            dropped += 1;
        } else {
            out.extend_from_slice(record);
        }
        at += 16 + len;
        index += 1;
    }
    std::fs::write(to, out).unwrap();
    dropped
}

#[test]
fn repeated_updates_bridge_losses_on_the_link() {
    let capture = common::sample_capture();
    let dir = common::scratch_dir("crtp-rep");
    let (link, lossy, restored) =
        (dir.join("link.pcap"), dir.join("lossy.pcap"), dir.join("ip.pcap"));
    let robust = ["--repeats", "2", "--header-checksum"];
    let summary = crtp(&[&["compress"][..], &robust].concat(), &capture, &link);
    assert!(figure(&summary, " compressed RTP") > 0, "{summary}");
    // Lossless, it comes back whole.
    let summary = crtp(&[&["decompress"][..], &robust].concat(), &link, &restored);
    assert!(summary.contains(" 0 lost to context damage"), "{summary}");
    assert_eq!(decoded(&capture), decoded(&restored));
    // Two compressed packets in a row lost every 25: each gap is bridged.
    // (This capture's IPv4 IDs step unevenly, so most packets carry the
    // absolute ID in an enhanced COMPRESSED_UDP, as RFC 3545's first
    // example does.)
    let compressed = |data: &[u8]| data.len() > 4 && matches!(data[2..4], [0x00, 0x67 | 0x69]);
    let dropped = drop_records(&link, &lossy, |i, data| i % 25 < 2 && compressed(data));
    assert!(dropped > 20, "{dropped}");
    let summary = crtp(&[&["decompress"][..], &robust].concat(), &lossy, &restored);
    assert!(summary.contains(" 0 lost to context damage"), "{summary}");
    assert!(figure(&summary, " gaps bridged") * 2 >= dropped, "{summary}");
    let (all, kept) = (decoded(&capture), decoded(&restored));
    assert_eq!(kept.len() + dropped, all.len());
    assert!(kept.iter().all(|line| all.contains(line)), "a packet came back different");
    // Plain RFC 2508's decompressor loses packets at every gap.
    let summary = crtp(&["decompress"], &lossy, &restored);
    assert!(figure(&summary, " lost to context damage") > 0, "{summary}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `analyze` reads the PPP link `compress` writes: the signalling tshark
/// finds there becomes the same calls, and the compressed media is an
/// anomaly counted packet for packet, with what to do about it.
#[test]
fn analyze_reads_a_ppp_link_and_names_its_compressed_media() {
    let capture = common::sample_capture();
    let dir = common::scratch_dir("crtp-analyze");
    let link = dir.join("link.pcap");
    crtp(&["compress"], &capture, &link);
    let lines = common::calliper_jsonl(&link, &[]);
    let summary = lines.last().unwrap();
    let calls: Vec<&str> =
        of_type(&lines, "call").map(|l| l["call_id"].as_str().unwrap()).collect();
    // First INVITEs only (the calls re-INVITE for hold and resume).
    let mut seen = std::collections::HashSet::new();
    let theirs: Vec<String> =
        common::tshark_fields(&link, &[], "sip.Method == \"INVITE\"", &["sip.Call-ID"])
            .lines()
            .filter(|id| seen.insert(id.to_string()))
            .map(str::to_string)
            .collect();
    assert!(!theirs.is_empty(), "tshark found no INVITE on the link");
    assert_eq!(calls, theirs, "{summary}");
    let compressed = tshark(
        &link,
        &[
            "-Y",
            &["0x0061", "0x0065", "0x0067", "0x2067", "0x0069", "0x2069"]
                .map(|p| format!("ppp.protocol == {p}"))
                .join(" || "),
        ],
    )
    .lines()
    .count();
    assert!(compressed > 0);
    assert_eq!(summary["anomalies"]["ppp_header_compressed"], compressed, "{summary}");

    let out = common::calliper(&["analyze", "--progress", "never", link.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("calliper crtp decompress"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A capture cut short is compressed up to the cut, which is said, with
/// exit status 1 as `analyze` gives: the link frames before it are kept,
/// and `decompress` gives back every whole packet the cut capture holds.
#[test]
fn a_truncated_capture_is_compressed_up_to_the_cut() {
    let dir = common::scratch_dir("crtp-cut");
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &std::fs::read(common::sample_capture()).unwrap()[..3000]).unwrap();
    let bytes = std::fs::read(&cut).unwrap();
    let mut reader = calliper_capture::CaptureReader::new(&bytes[..]).unwrap();
    let mut whole = 0;
    while let Ok(Some(_)) = reader.next_packet() {
        whole += 1;
    }
    assert!(whole > 0);
    let link = dir.join("cut.ppp");
    let out =
        common::calliper(&["crtp", "compress", cut.to_str().unwrap(), link.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("truncated capture: record at byte offset"), "{stderr}");
    assert_eq!(figure(&stderr, " IP ("), whole, "{stderr}");
    let back = crtp(&["decompress"], &link, &dir.join("back.pcap"));
    assert_eq!(figure(&back, " restored of"), whole, "{back}");
}

/// A pcapng of several links is judged by its first packet, and a later
/// frame of another link neither stops the run nor leaves a partial file:
/// `compress` reads a PPP frame carrying IP as it reads Ethernet, and
/// `decompress` counts a frame that is not PPP and goes on. Both ways the
/// same packets come back as when the links are not mixed.
#[test]
fn a_capture_mixing_links_is_read_to_its_end() {
    use calliper_capture::pcap_out::pcapng;
    let dir = common::scratch_dir("crtp-mixed");
    let bytes = std::fs::read(common::sample_capture()).unwrap();
    let mut reader = calliper_capture::CaptureReader::new(&bytes[..]).unwrap();
    let (mut mixed, mut frames) = (pcapng::section_header(), 0);
    mixed.extend(pcapng::interface(1, 65535));
    mixed.extend(pcapng::interface(9, 65535));
    while let Ok(Some(p)) = reader.next_packet() {
        assert_eq!(p.link_type, 1, "the sample is Ethernet");
        if frames % 2 == 1 && p.data.get(12..14) == Some(&[8, 0][..]) {
            // The same IPv4 packet as a PPP frame (address, control, 0x0021).
            let ppp = [&[0xFF, 0x03, 0x00, 0x21][..], &p.data[14..]].concat();
            mixed.extend(pcapng::packet(1, p.ts_ns, &ppp));
        } else {
            mixed.extend(pcapng::packet(0, p.ts_ns, p.data));
        }
        frames += 1;
    }
    let input = dir.join("mixed.pcapng");
    std::fs::write(&input, &mixed).unwrap();
    let (plain_link, mixed_link) = (dir.join("plain.ppp"), dir.join("mixed.ppp"));
    let plain = crtp(&["compress"], &common::sample_capture(), &plain_link);
    let summary = crtp(&["compress"], &input, &mixed_link);
    assert_eq!(figure(&summary, " IP ("), frames, "{summary}");
    assert_eq!(figure(&summary, " IP ("), figure(&plain, " IP ("), "{summary}");
    let back = dir.join("mixed-back.pcap");
    crtp(&["decompress"], &mixed_link, &back);
    assert_eq!(decoded(&common::sample_capture()), decoded(&back));
    // The link capture with an Ethernet frame among its PPP frames.
    let link = std::fs::read(&plain_link).unwrap();
    let mut reader = calliper_capture::CaptureReader::new(&link[..]).unwrap();
    let mut with_ethernet = pcapng::section_header();
    with_ethernet.extend(pcapng::interface(9, 65535));
    with_ethernet.extend(pcapng::interface(1, 65535));
    let mut n = 0;
    while let Ok(Some(p)) = reader.next_packet() {
        with_ethernet.extend(pcapng::packet(0, p.ts_ns, p.data));
        if n == 3 {
            with_ethernet.extend(pcapng::packet(1, p.ts_ns, &[0u8; 60]));
        }
        n += 1;
    }
    let input = dir.join("with-ethernet.pcapng");
    std::fs::write(&input, &with_ethernet).unwrap();
    let back = crtp(&["decompress"], &input, &dir.join("back.pcap"));
    assert!(back.contains(" 1 of another link type"), "{back}");
    assert_eq!(figure(&back, " restored of"), frames, "{back}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A capture without a packet cannot tell which way it goes, so an existing
/// output is left as it was (found by review: an empty PPP capture given to
/// `compress` emptied the file named after it), with exit status 1 so that
/// a script does not go on with the older file.
#[test]
fn a_capture_without_packets_leaves_the_output_alone() {
    use calliper_capture::pcap_out::{file_header, Resolution};
    let dir = common::scratch_dir("crtp-empty");
    let victim = dir.join("victim.pcap");
    std::fs::copy(common::sample_capture(), &victim).unwrap();
    let before = std::fs::read(&victim).unwrap();
    for (command, link) in [("compress", 9), ("decompress", 1)] {
        let empty = dir.join(format!("empty-{link}.pcap"));
        std::fs::write(&empty, file_header(link, 65535, Resolution::Micros)).unwrap();
        let out =
            common::calliper(&["crtp", command, empty.to_str().unwrap(), victim.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        assert!(stderr.contains("not written"), "{command}: {stderr}");
        assert_eq!(std::fs::read(&victim).unwrap(), before, "{command}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
