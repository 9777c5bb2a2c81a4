//! The example tracker (examples/mos_by_user_agent.rs, under 150 lines)
//! sees every call exactly once: its table equals one computed from the
//! records `analyze` writes.

use crate::common;

#[path = "../../examples/mos_by_user_agent.rs"]
mod example;

use std::collections::BTreeMap;

#[test]
fn the_example_tracker_sees_every_call_once() {
    let mut compared = 0;
    for file in common::captures() {
        let rows = example::run(std::slice::from_ref(&file)).unwrap();
        let mut expected: BTreeMap<String, (u64, u64, f64)> = BTreeMap::new();
        for c in common::calliper_jsonl(&file, &[]).iter().filter(|l| l["type"] == "call") {
            let ua = c["caller_user_agent"].as_str().unwrap_or("(none)").to_string();
            let row = expected.entry(ua).or_default();
            row.0 += 1;
            for s in c["streams"].as_array().unwrap() {
                if s["mos_scale"] == "narrowband" {
                    row.1 += 1;
                    row.2 += s["mos"].as_f64().unwrap();
                }
            }
        }
        let expected: Vec<(String, u64, Option<f64>)> = expected
            .into_iter()
            .map(|(ua, (calls, n, sum))| (ua, calls, (n > 0).then(|| sum / n as f64)))
            .collect();
        assert_eq!(rows.len(), expected.len(), "{}", file.display());
        for (a, b) in rows.iter().zip(&expected) {
            assert_eq!((&a.0, a.1), (&b.0, b.1), "{}", file.display());
            match (a.2, b.2) {
                (Some(x), Some(y)) => assert!((x - y).abs() < 1e-9, "{}", file.display()),
                (x, y) => assert_eq!(x, y),
            }
        }
        compared += expected.iter().map(|r| r.1).sum::<u64>();
    }
    assert!(compared >= common::at_least(30, 3) as u64, "only {compared} calls");
    assert!(include_str!("../../examples/mos_by_user_agent.rs").lines().count() < 150);
}
