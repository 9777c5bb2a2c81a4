//! The decoders against spandsp's, sample for sample: G.711 over all 256
//! codes, G.722 over a signal spandsp encoded and over random codes. The
//! reference outputs come from libspandsp.so.2 through `spandsp.py`;
//! `scripts/test.sh` installs it (Debian's libspandsp2). Skipped only with
//! `CALLIPER_SKIP=spandsp`.

use calliper_audio::{g711, g722};
use std::path::Path;
use std::process::Command;

fn samples(bytes: &[u8]) -> Vec<i16> {
    bytes.chunks_exact(2).map(|c| i16::from_le_bytes([c[0], c[1]])).collect()
}

#[test]
fn g711_and_g722_decode_as_spandsp_does() {
    if calliper_testkit::skip_asked("spandsp") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("calliper-audio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spandsp.py");
    let run = Command::new("python3").arg(&script).arg(&dir).output();
    let run = run.expect("python3 is needed to run spandsp (CALLIPER_SKIP=spandsp skips)");
    assert!(
        run.status.success(),
        "spandsp.py failed (is libspandsp2 installed? CALLIPER_SKIP=spandsp skips): {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    for (name, law) in [("ulaw.pcm", g711::Law::Mu), ("alaw.pcm", g711::Law::A)] {
        let mut ours = Vec::new();
        g711::decode(law, &(0..=255).collect::<Vec<u8>>(), &mut ours);
        assert_eq!(ours, samples(&read(name)), "{name}");
    }
    for name in ["speech-like", "random"] {
        let codes = read(&format!("{name}.g722"));
        let theirs = samples(&read(&format!("{name}.pcm")));
        // Decoded in RTP-sized pieces (20 ms), as a stream arrives.
        let mut decoder = g722::Decoder::new();
        let mut ours = Vec::new();
        for packet in codes.chunks(160) {
            decoder.decode(packet, &mut ours);
        }
        assert_eq!(ours.len(), theirs.len(), "{name}");
        let first = ours.iter().zip(&theirs).position(|(a, b)| a != b);
        assert_eq!(first, None, "{name}: first difference at sample {first:?}");
        // Not a trivial signal: it swings over most of the range.
        assert!(theirs.iter().map(|s| s.unsigned_abs()).max().unwrap() > 10_000);
    }
    std::fs::remove_dir_all(&dir).ok();
}
