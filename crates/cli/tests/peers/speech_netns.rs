//! The recording's check against a real call (tests/netns/speech.sh):
//! SIPp sends a known speech file, encoded by sox's G.711 A-law, through
//! Kamailio; Calliper records the callee's capture (`--record all`) and
//! exports the call's audio from that recording. The caller's channel must
//! equal, sample for sample, the speech encoded and decoded by sox's G.711
//! (but for any packet the export says came too late for the receiver's
//! jitter buffer: a listener did not hear it either).

use crate::common;
use calliper_testkit::probe::of_type;
use std::path::Path;
use std::process::Command;

/// The 16-bit samples of a PCM WAV file (interleaved) and its channels.
fn wav(path: &Path) -> (Vec<i16>, u16) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!((&b[0..4], &b[8..12]), (&b"RIFF"[..], &b"WAVE"[..]), "{}", path.display());
    let (mut at, mut channels) = (12, 0);
    while at + 8 <= b.len() {
        let size = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
        let body = &b[at + 8..(at + 8 + size).min(b.len())];
        match &b[at..at + 4] {
            b"fmt " => {
                channels = u16::from_le_bytes([body[2], body[3]]);
                assert_eq!(u16::from_le_bytes([body[14], body[15]]), 16, "16-bit PCM");
            }
            b"data" => {
                let samples = body.chunks_exact(2).map(|s| i16::from_le_bytes([s[0], s[1]]));
                return (samples.collect(), channels);
            }
            _ => {}
        }
        at += 8 + size + size % 2;
    }
    panic!("{}: no data chunk", path.display());
}

#[test]
fn a_lossless_g711_call_exports_exactly_the_speech_sent() {
    let _turn = crate::turn();
    let Some((dir, log)) = common::run_namespace_rig("tests/netns/speech.sh", "speech") else {
        return;
    };
    let (db, rec) = (dir.join("calls.db"), dir.join("rec"));
    let lines = common::calliper_jsonl(
        &dir.join("callee.pcap"),
        &["--db", db.to_str().unwrap(), "--record", "all", "--record-dir", rec.to_str().unwrap()],
    );
    let calls: Vec<_> = of_type(&lines, "call").collect();
    assert_eq!(calls.len(), 1, "{log}");
    let call_id = calls[0]["call_id"].as_str().unwrap();
    let exported = dir.join("export.wav");
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["export", "audio", "--db", db.to_str().unwrap(), "--record-dir"])
        .arg(&rec)
        .arg("-o")
        .arg(&exported)
        .args(["--", call_id])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "export failed: {said}");

    let (reference, one) = wav(&dir.join("reference.wav"));
    assert_eq!(one, 1);
    let (both, two) = wav(&exported);
    assert_eq!(two, 2, "stereo: caller left, callee right");
    let caller: Vec<i16> = both.iter().step_by(2).copied().collect();
    // The sender sends whole 20 ms packets: the speech's last part-packet is not sent.
    let sent = &reference[..reference.len() / 160 * 160];
    assert!(sent.len() >= 8000 * 4, "at least 4 s of speech: {}", sent.len());
    assert!(
        sent.iter().filter(|&&s| s.unsigned_abs() > 1000).count() > 4000,
        "speech, not silence"
    );
    // Where the caller's stream starts in the export (it may start after
    // the callee's): the first place where its first 50 ms equal the speech's.
    let start = (0..caller.len().saturating_sub(sent.len()) + 1)
        .find(|&k| caller[k..k + 400] == sent[..400])
        .unwrap_or_else(|| panic!("the speech's start is nowhere in the export: {said}"));
    assert!(start < 8000, "the caller's stream starts {start} samples in");
    let got = &caller[start..start + sent.len()];
    // The export is what the listener heard: a packet SIPp sent late for
    // the receiver's jitter buffer (a busy machine) is concealed, and the
    // export says how many. Every other 20 ms is the speech, sample for
    // sample.
    let late: usize = said
        .lines()
        .find(|l| l.contains("10.90.1.2:30000 -> 10.90.2.2:20000"))
        .and_then(|l| l.split(" late for the jitter buffer").next())
        .and_then(|l| l.rsplit(", ").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of late packets: {said}"));
    let differ = got.chunks(160).zip(sent.chunks(160)).filter(|(a, b)| a != b).count();
    assert_eq!(
        differ,
        late,
        "{differ} of {} packets differ, {late} said late: {said}",
        sent.len() / 160
    );
    assert!(late <= 3, "{late} packets late: the rig's timing, not the export");
    assert!(caller[..start].iter().all(|&s| s == 0), "silence before the stream");
    std::fs::remove_dir_all(&dir).ok();
}
