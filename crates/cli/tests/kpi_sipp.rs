//! KPIs against SIPp's own statistics (tests/kpi/run.sh): SIPp calls in a
//! network namespace, the callee answering a share with 486, 503 and 408.
//! The counts of each outcome come from SIPp's message counts
//! (-trace_counts), the request and disconnect delays from its response
//! times (-trace_rtt); Calliper's KPIs, from tcpdump's capture of the same
//! calls, must agree with both.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// SIPp's counts file: the last line's value of each column.
fn sipp_counts(dir: &Path) -> HashMap<String, u64> {
    let file = find(dir, "_counts.csv");
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().unwrap().split(';').collect();
    let last: Vec<&str> = lines.next_back().unwrap().split(';').collect();
    header
        .iter()
        .zip(last)
        .filter_map(|(h, v)| Some((h.to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// SIPp's response times, ms, of counter `rtd`.
fn sipp_response_times(dir: &Path, rtd: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(find(dir, "_rtt.csv")).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(';').collect();
            (f.get(2).map(|s| s.trim()) == Some(rtd)).then(|| f[1].trim().parse().unwrap())
        })
        .collect()
}

fn find(dir: &Path, suffix: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(suffix))
        .unwrap_or_else(|| panic!("SIPp wrote no *{suffix} in {}", dir.display()))
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn kpis_of_sipp_calls_with_failures_match_sipps_statistics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("calliper-kpi-sipp-{}", std::process::id()));
    let mut rig = Command::new(root.join("tests/kpi/run.sh"));
    rig.arg(&dir).arg("40");
    if common::namespace_rig(&mut rig, "tests/kpi/run.sh").is_none() {
        return;
    }
    let sipp = sipp_counts(&dir);
    let n = |k: &str| {
        *sipp
            .get(k)
            .unwrap_or_else(|| panic!("no {k} in SIPp's counts: {sipp:?}"))
    };
    let attempts = n("0_INVITE_Sent");
    let (ringing, busy, unavailable, timeout) = (
        n("2_180_Recv"),
        n("3_486_Recv"),
        n("4_503_Recv"),
        n("5_408_Recv"),
    );
    let (answered, completed) = (n("6_200_Recv"), n("10_200_Recv"));
    assert_eq!(attempts, 40);
    assert!(
        busy > 0 && unavailable > 0 && timeout > 0 && answered > 0,
        "{sipp:?}"
    );
    assert_eq!(ringing + busy + unavailable + timeout, attempts, "{sipp:?}");

    let db = dir.join("kpi.db");
    common::analyze_into_db(&dir.join("kpi.pcap"), &db, &[]);
    let rows = common::report_kpi(&db, &["--interval", "366d"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    let count = |k: &str| r[k].as_u64().unwrap();
    let pct = |x: u64| 100.0 * x as f64 / attempts as f64;
    for (field, want) in [
        ("attempts", attempts),
        ("answered", answered),
        ("completed", completed),
        // SEER and NER (default mapping): answers and busy.
        ("effective", answered + busy),
        ("network_effective", answered + busy),
        // ISA: 503 and 408.
        ("ineffective", unavailable + timeout),
        ("redirected", 0),
        ("unresolved", 0),
    ] {
        assert_eq!(count(field), want, "{field}\n{r}");
    }
    for (field, want) in [
        ("asr", pct(answered)),
        ("ser", pct(answered)),
        ("seer", pct(answered + busy)),
        ("ner", pct(answered + busy)),
        ("isa", pct(unavailable + timeout)),
        ("scr", pct(completed)),
    ] {
        let got = r[field].as_f64().unwrap();
        assert!(
            (got - want).abs() < 1e-9,
            "{field}: {got} vs SIPp's {want}\n{r}"
        );
    }

    // SIPp times its responses in whole milliseconds (at the endpoint;
    // the capture is on the same loopback): means agree within 1.5 ms.
    let srd = sipp_response_times(&dir, "1");
    assert_eq!(srd.len() as u64, attempts);
    assert_eq!(count("srd_count"), ringing, "SRD to 180");
    assert_eq!(count("failed_srd_count"), busy + unavailable + timeout);
    let srd_sum_ms = (count("srd_sum_us") + count("failed_srd_sum_us")) as f64 / 1000.0;
    let ours = srd_sum_ms / attempts as f64;
    assert!(
        (ours - mean(&srd)).abs() < 1.5,
        "mean SRD {ours:.2} ms vs SIPp's {:.2} ms",
        mean(&srd)
    );
    let sdd = sipp_response_times(&dir, "2");
    assert_eq!(count("sdd_count"), sdd.len() as u64);
    let ours = r["sdd_ms"].as_f64().unwrap();
    assert!(
        (ours - mean(&sdd)).abs() < 1.5,
        "mean SDD {ours:.2} ms vs SIPp's {:.2} ms",
        mean(&sdd)
    );
    // The caller hangs up 500 ms after its ACK (uac.xml).
    let sdt = r["sdt_s"].as_f64().unwrap();
    assert!((0.5..0.6).contains(&sdt), "SDT {sdt} s");
    let _ = std::fs::remove_dir_all(&dir);
}
