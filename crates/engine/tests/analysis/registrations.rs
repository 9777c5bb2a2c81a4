//! The user tracker against tshark: every REGISTER transaction (request and
//! final response matched by Call-ID and CSeq) on every capture that has
//! one, compared in both directions; per-user counts agree with them.

use calliper_testkit::probe::of_type;
use calliper_testkit::{captures, oracle, probe};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A transaction: (Call-ID, CSeq, final status, To URI of the request, client).
type Transaction = (String, u64, u64, String, String);

/// Each REGISTER transaction whose request and final response tshark shows,
/// per leg (a proxy forwards the same Call-ID and CSeq between other
/// addresses): the first final response from the request's receiver to its sender.
fn tshark_transactions(file: &Path) -> BTreeSet<Transaction> {
    let fields = |filter: &str, extra: &[&str]| -> Vec<Vec<String>> {
        let ip = ["ip.src", "ip.dst", "ipv6.src", "ipv6.dst"];
        let listed: Vec<&str> =
            ["sip.Call-ID", "sip.CSeq.seq"].iter().chain(&ip).chain(extra).copied().collect();
        oracle::tshark_fields(file, &["-d", "tcp.port==6060,sip"], filter, &listed)
            .lines()
            .map(|l| {
                let f: Vec<String> = l.split('\t').map(String::from).collect();
                // Addresses of the innermost IP header (v4 or v6).
                let last = |a: &str, b: &str| {
                    let s = if a.is_empty() { b } else { a };
                    s.rsplit(',').next().unwrap().to_string()
                };
                let (src, dst) = (last(&f[2], &f[4]), last(&f[3], &f[5]));
                [vec![f[0].clone(), f[1].clone(), src, dst], f[6..].to_vec()].concat()
            })
            .collect()
    };
    let requests: BTreeMap<(String, String, String, String), String> =
        fields("sip.Method == \"REGISTER\"", &["sip.to.addr"])
            .into_iter()
            .map(|f| ((f[0].clone(), f[1].clone(), f[2].clone(), f[3].clone()), f[4].clone()))
            .collect();
    let mut first: BTreeMap<(String, String, String, String), u64> = BTreeMap::new();
    for f in
        fields("sip.CSeq.method == \"REGISTER\" && sip.Status-Code >= 200", &["sip.Status-Code"])
    {
        // The response travels from the registrar to the client.
        let key = (f[0].clone(), f[1].clone(), f[3].clone(), f[2].clone());
        if requests.contains_key(&key) {
            first.entry(key).or_insert(f[4].parse().unwrap());
        }
    }
    first
        .into_iter()
        .map(|(k, status)| {
            let aor = requests[&k].clone();
            (k.0, k.1.parse().unwrap(), status, aor, k.2)
        })
        .collect()
}

#[test]
fn registrations_equal_tsharks_transactions_on_every_capture_with_register() {
    let mut compared = 0;
    for file in captures::captures() {
        let oracle = tshark_transactions(&file);
        let lines = probe::analyze(&file).lines();
        let ours: BTreeSet<Transaction> = of_type(&lines, "registration")
            .map(|r| {
                (
                    r["call_id"].as_str().unwrap().to_string(),
                    r["cseq"].as_u64().unwrap(),
                    r["status"].as_u64().unwrap(),
                    r["aor"].as_str().unwrap().to_string(),
                    r["client"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(ours, oracle, "{}", file.display());
        if oracle.is_empty() {
            continue;
        }
        compared += oracle.len();
        // Per user, the outcomes add up to the transactions.
        let users: Vec<&Value> = of_type(&lines, "user").collect();
        for u in &users {
            let aor = u["aor"].as_str().unwrap();
            let n: u64 = ["registered", "unregistered", "challenged", "auth_failed", "failed"]
                .iter()
                .map(|k| u[k].as_u64().unwrap())
                .sum();
            let expected = oracle.iter().filter(|t| t.3 == aor).count() as u64;
            assert_eq!(n, expected, "{}: {aor}", file.display());
        }
        let aors: BTreeSet<&str> = oracle.iter().map(|t| t.3.as_str()).collect();
        assert_eq!(users.len(), aors.len(), "{}", file.display());
    }
    assert!(
        compared >= captures::at_least(20, 10),
        "only {compared} REGISTER transactions compared"
    );
}
