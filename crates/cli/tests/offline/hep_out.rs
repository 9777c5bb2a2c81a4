//! `--hep` against a real collector: sngrep (`-L`, its HEP listener)
//! receives what `calliper analyze --hep` sends in a network namespace of
//! the test's own, and writes the SIP messages it understood to a pcap.
//! That pcap must hold exactly the capture's SIP messages: the same
//! times, addresses, ports, Call-IDs and CSeqs, as tshark reads both. The
//! summary's `hep_sent` counts them.

use crate::common;
use common::tshark;
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
    let mut args = vec!["-Y", "sip", "-T", "fields"];
    for f in &fields {
        args.extend(["-e", f]);
    }
    let mut v: Vec<String> = tshark(pcap, &args).lines().map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn sngrep_receives_every_sip_message_as_captured() {
    let capture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let dir = common::scratch("hep-out");
    std::fs::create_dir_all(&dir).unwrap();
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
    let out = cmd
        .output()
        .expect("unshare (util-linux) runs the test in its own network namespace");
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
    let last: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&summary)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["hep_sent"], 36, "{last}");
    assert!(
        last.get("hep_dropped").is_none() && last.get("hep_failed").is_none(),
        "{last}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// SIP that arrived as HEP is not sent on as HEP (a probe reading a feed
/// and sending to the same collector would loop), and a key that is not a
/// regular file is refused before any work.
#[test]
fn hep_is_not_sent_again_and_a_device_is_no_key_file() {
    let dir = common::scratch("hep-again");
    std::fs::create_dir_all(&dir).unwrap();
    let original = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap");
    let (feed, sip) = crate::hep::as_hep_feed(&original, |_| {});
    let path = dir.join("feed.pcap");
    common::write_pcap(&path, 1, &feed);
    let collector = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    collector
        .set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .unwrap();
    let to = format!("udp:{}", collector.local_addr().unwrap());
    let lines = common::calliper_jsonl(&path, &["--hep-port", "9060", "--hep", &to]);
    let summary = lines.last().unwrap();
    assert_eq!(summary["hep"], sip, "{summary}");
    assert!(
        lines.iter().any(|l| l["type"] == "call"),
        "the feed's calls are analysed"
    );
    assert_eq!(summary["hep_sent"], 0, "{summary}");
    let mut buf = [0u8; 65536];
    assert!(collector.recv(&mut buf).is_err(), "something was sent");
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--hep", &to, "--hep-key", "/dev/zero"])
        .arg(&original)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("regular file"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
