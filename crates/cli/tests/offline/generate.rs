//! `calliper generate` is the generator library driven by options: the
//! same options give the library's bytes, and the same seed the same bytes
//! on every run (the captures the in-process tests make are the ones the
//! command's tests read).

use crate::common;
use calliper_testkit::generated;

#[test]
fn the_command_writes_the_librarys_seeded_bytes() {
    let dir = common::scratch_dir("generate");
    let (pcap, truth) = (dir.join("gen.pcap"), dir.join("truth.jsonl"));
    let args = "--calls 400 --concurrent 150 --hold-mean 10 --loss 2 --burst 0.5 \
                --duplicate 1 --reorder 1 --seed 9";
    common::generate(args, &pcap, &truth);
    let by_command = std::fs::read(&pcap).unwrap();
    let by_library = generated::pcap(&generated::impaired());
    assert!(by_command.len() > 1_000_000, "{} bytes", by_command.len());
    assert!(by_command == by_library, "generate's bytes are not the library's");
    // Another seed, another capture: the seed is not ignored.
    let other = generated::pcap(&calliper_generate::Spec { seed: 10, ..generated::impaired() });
    assert!(other != by_library, "seed 10 made seed 9's bytes");
    std::fs::remove_dir_all(&dir).ok();
}
