//! Captures made by the generator library (`calliper-generate`), in
//! process: the same seeded bytes `calliper generate` writes for the same
//! options.

use calliper_generate::Spec;

/// A busy capture with every impairment the analysis must survive
/// unchanged across ways of running it (threads, batches, stores): 400
/// calls, 150 at once, with loss in bursts, duplicates and reordering.
/// As `calliper generate --calls 400 --concurrent 150 --hold-mean 10
/// --loss 2 --burst 0.5 --duplicate 1 --reorder 1 --seed 9`.
pub fn impaired() -> Spec {
    Spec {
        calls: 400,
        concurrent: 150.0,
        hold_mean: 10.0,
        loss: 2.0,
        burst: 0.5,
        duplicate: 1.0,
        reorder: 1.0,
        seed: 9,
        ..Spec::default()
    }
}

/// The pcap file `spec` makes, as bytes.
pub fn pcap(spec: &Spec) -> Vec<u8> {
    let mut out = Vec::new();
    calliper_generate::write_pcap(spec, &mut out, None).expect("a generator spec that fails");
    out
}
