//! KPIs against SIPp's own statistics (tests/kpi/run.sh): SIPp calls in a
//! network namespace, the callee answering a share with 486, 503 and 408.
//! The counts of each outcome come from SIPp's message counts
//! (-trace_counts), the request and disconnect delays from its response
//! times (-trace_rtt); Calliper's KPIs, from tcpdump's capture of the same
//! calls, must agree with both.

use crate::common;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

/// How far SIPp's mean response time may sit from the wire's (see the test).
const SIPP_CLOCK_MS: f64 = 5.0;

/// Per-call delays, seconds, read by tshark from the capture.
struct Delays {
    /// INVITE to 180.
    ringing: Vec<f64>,
    /// INVITE to a failure final response.
    failed: Vec<f64>,
    /// BYE to its final response.
    disconnect: Vec<f64>,
}

fn tshark_delays(pcap: &Path) -> Delays {
    let text = common::tshark_fields(
        pcap,
        &[],
        "sip",
        &["frame.time_epoch", "sip.Call-ID", "sip.Method", "sip.Status-Code", "sip.CSeq.method"],
    );
    let mut sent: HashMap<(String, String), f64> = HashMap::new();
    let mut answered = std::collections::HashSet::new();
    let mut d = Delays { ringing: vec![], failed: vec![], disconnect: vec![] };
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [time, call, method, status, cseq] = f[..] else { panic!("tshark line {line:?}") };
        let time: f64 = time.parse().unwrap();
        let key = (call.to_string(), cseq.to_string());
        if !method.is_empty() {
            sent.entry(key).or_insert(time);
            continue;
        }
        let status: u16 = status.parse().unwrap();
        let Some(start) = sent.get(&key) else {
            continue;
        };
        if status <= 100 || !answered.insert(key.clone()) {
            continue;
        }
        let delay = time - start;
        match (cseq, status) {
            ("INVITE", 180) => d.ringing.push(delay),
            ("INVITE", 300..) => d.failed.push(delay),
            ("BYE", 200..) => d.disconnect.push(delay),
            _ => {}
        }
    }
    d
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
    let _turn = crate::turn();
    let (mut rig, dir) = common::rig("tests/kpi/run.sh", "kpi-sipp");
    rig.arg("40");
    if common::namespace_rig(&mut rig, "tests/kpi/run.sh").is_none() {
        return;
    }
    let sipp = sipp_counts(&dir);
    let n = |k: &str| *sipp.get(k).unwrap_or_else(|| panic!("no {k} in SIPp's counts: {sipp:?}"));
    let attempts = n("0_INVITE_Sent");
    let (ringing, busy, unavailable, timeout) =
        (n("2_180_Recv"), n("3_486_Recv"), n("4_503_Recv"), n("5_408_Recv"));
    let (answered, completed) = (n("6_200_Recv"), n("10_200_Recv"));
    assert_eq!(attempts, 40);
    assert!(busy > 0 && unavailable > 0 && timeout > 0 && answered > 0, "{sipp:?}");
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
        assert!((got - want).abs() < 1e-9, "{field}: {got} vs SIPp's {want}\n{r}");
    }

    // The delays, to the microsecond, against tshark's reading of the same
    // capture: per call, the first INVITE to its first response above 100
    // (SRD), and BYE to its final response (SDD).
    let oracle = tshark_delays(&dir.join("kpi.pcap"));
    assert_eq!(count("srd_count"), oracle.ringing.len() as u64, "SRD to 180");
    assert_eq!(count("failed_srd_count"), oracle.failed.len() as u64);
    assert_eq!(count("sdd_count"), oracle.disconnect.len() as u64);
    for (field, want) in [
        ("srd_sum_us", &oracle.ringing),
        ("failed_srd_sum_us", &oracle.failed),
        ("sdd_sum_us", &oracle.disconnect),
    ] {
        let want_us: f64 = want.iter().map(|s| s * 1e6).sum();
        // Each call's delay is kept in whole microseconds.
        let slack = want.len() as f64 + 1.0;
        assert!(
            (count(field) as f64 - want_us).abs() <= slack,
            "{field}: {} vs tshark's {want_us:.0}",
            count(field)
        );
    }

    // And against SIPp, at the endpoints. SIPp reads its clock in whole
    // milliseconds once per turn of its event loop, so a response is timed
    // when the loop wakes, not when it arrived: on this loopback its means
    // run 1-2 ms short of the wire's, more on a loaded machine. A slip of a
    // whole KPI (say SRD to the final response instead of the 180) moves the
    // mean by tens of milliseconds.
    let srd = sipp_response_times(&dir, "1");
    assert_eq!(srd.len() as u64, attempts);
    assert_eq!(count("failed_srd_count"), busy + unavailable + timeout);
    let srd_sum_ms = (count("srd_sum_us") + count("failed_srd_sum_us")) as f64 / 1000.0;
    let ours = srd_sum_ms / attempts as f64;
    assert!(
        (ours - mean(&srd)).abs() < SIPP_CLOCK_MS,
        "mean SRD {ours:.2} ms vs SIPp's {:.2} ms",
        mean(&srd)
    );
    let sdd = sipp_response_times(&dir, "2");
    assert_eq!(count("sdd_count"), sdd.len() as u64);
    let ours = r["sdd_ms"].as_f64().unwrap();
    assert!(
        (ours - mean(&sdd)).abs() < SIPP_CLOCK_MS,
        "mean SDD {ours:.2} ms vs SIPp's {:.2} ms",
        mean(&sdd)
    );
    // The caller hangs up 500 ms after its ACK (uac.xml).
    let sdt = r["sdt_s"].as_f64().unwrap();
    assert!((0.5..0.6).contains(&sdt), "SDT {sdt} s");
    let _ = std::fs::remove_dir_all(&dir);
}
