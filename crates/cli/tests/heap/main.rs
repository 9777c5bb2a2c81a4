//! The engine's heap: no allocation per packet in steady state, the state
//! per concurrent call, and the documented memory bound. Counted with a
//! global allocator ([`tracking`]) whose counters are process-wide, so this
//! binary has its own harness (`harness = false`): the checks run one after
//! another on the main thread, and nothing else runs meanwhile. It prints
//! libtest's lines, takes a name filter as the first free argument, and
//! exits 101 when a check fails.

#[path = "../common/mod.rs"]
mod common;
mod tracking;

mod alloc;
mod memory;
mod memory_bound;

type Check = (&'static str, fn());

const CHECKS: [Check; 4] = [
    (
        "alloc::rtp_packets_allocate_nothing_after_warm_up",
        alloc::rtp_packets_allocate_nothing_after_warm_up,
    ),
    (
        "alloc::batches_allocate_nothing_after_warm_up",
        alloc::batches_allocate_nothing_after_warm_up,
    ),
    (
        "memory::state_per_concurrent_call_stays_within_budget",
        memory::state_per_concurrent_call_stays_within_budget,
    ),
    (
        "memory_bound::peak_heap_stays_under_the_documented_bound",
        memory_bound::peak_heap_stays_under_the_documented_bound,
    ),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in CHECKS {
            println!("{name}: test");
        }
        return;
    }
    let filter = args.iter().find(|a| !a.starts_with('-'));
    let chosen: Vec<&Check> = CHECKS
        .iter()
        .filter(|(name, _)| filter.is_none_or(|f| name.contains(f.as_str())))
        .collect();
    println!("\nrunning {} tests", chosen.len());
    let mut failed = Vec::new();
    for (name, check) in &chosen {
        let outcome = std::panic::catch_unwind(check);
        println!("test {name} ... {}", if outcome.is_ok() { "ok" } else { "FAILED" });
        if outcome.is_err() {
            failed.push(*name);
        }
    }
    if !failed.is_empty() {
        println!("\nfailures:\n    {}", failed.join("\n    "));
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; {} filtered out\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        chosen.len() - failed.len(),
        failed.len(),
        CHECKS.len() - chosen.len()
    );
    if !failed.is_empty() {
        std::process::exit(101);
    }
}
