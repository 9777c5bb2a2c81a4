//! Capture times the analysis believes (docs/hostile-input.md, Time), as
//! the command's export reads them; the analysis's own tests are the
//! engine's (`crates/engine/tests/analysis/time_jumps.rs`).

use crate::common;
use std::path::Path;

const DAY: i64 = 86_400_000_000_000;

/// The sample capture's packets: (time, frame), and its link type.
fn sample() -> (Vec<(i64, Vec<u8>)>, u32) {
    let path = common::sample_capture();
    let (frames, link) = calliper_testkit::captures::read_frames(&path);
    (frames, u32::from(link))
}

/// `export audio` sees the times the analysis believed: a re-stamped RTP
/// packet is still its stream's, not "another call's".
#[test]
fn export_reads_the_times_the_analysis_believed() {
    let (mut packets, link) = sample();
    // Mid-call, where all but 36 of the capture's 2 988 packets are RTP.
    packets[1000].0 += 70 * 365 * DAY;
    let dir = common::scratch_dir("time-export");
    let (pcap, db, wav) = (dir.join("c.pcap"), dir.join("c.db"), dir.join("c.wav"));
    common::write_pcap(&pcap, link, &packets);
    common::analyze_into_db(&pcap, &db, &[]);
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let out = common::export_audio("1-836@127.0.1.1", &path(&db), &path(&pcap), &path(&wav));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("outside its time"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
