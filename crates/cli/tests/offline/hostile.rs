//! Hostile input, round two: one regression test per failure found by
//! reading the code as an attacker would, each feeding the capture that
//! reproduced it (built by `common::hostile`), with one thread and with two.
//! Every run must end (no hang), by exit (no abort), with status 0 and
//! equal counters for both thread counts, and memory under its bound.

use crate::common;

use calliper_testkit::probe::of_type;
use common::hostile;
use common::run_measured;
use common::runs::{analyze, both_ways, both_ways_counters, small, Run, SMALL_RSS_KIB};
use serde_json::Value;
use std::process::Command;

#[test]
fn non_ascii_rtpmap_then_rtp() {
    let run = small("non-ascii", &hostile::non_ascii_rtpmap());
    let streams = run.only_call()["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0]["codec"], "ab\u{e9}");
    assert_eq!(streams[0]["packets"], 5);
}

#[test]
fn nested_fragments_5000_levels() {
    let capture = hostile::nested_fragments(5000);
    let run = small("nested-fragments", &capture);
    let s = run.summary();
    // Reassembly counts as nesting: the chain stops at the depth limit.
    assert_eq!(s["anomalies"]["encapsulation_too_deep"], 1, "{s}");
    assert_eq!(s["packets"], 5001);
    // The rest of the chain is never completed and is reported as such.
    assert_eq!(s["anomalies"]["ip_fragments_incomplete_at_end"], 1, "{s}");
}

#[test]
fn invented_methods_200000() {
    let run = small("invented-methods", &hostile::invented_methods(200_000));
    let s = run.summary();
    let kinds = s["sip_by_kind"].as_object().unwrap();
    assert_eq!(kinds.len(), 1, "{kinds:?}");
    assert_eq!(kinds["other-method"], 200_000);
    // The terminal summary stays short whatever the methods were.
    let file = hostile::invented_methods(200_000).save("invented-methods-text");
    let m = common::analyze_text(&file);
    std::fs::remove_file(&file).ok();
    assert_eq!(m.code, 0);
    let summary = m.stdout.split("---").nth(1).unwrap();
    assert!(summary.len() < 2000, "summary of {} bytes", summary.len());
}

#[test]
fn sctp_partial_messages_capped_and_expired() {
    // 600 never-finished 60 000-byte messages: 36 MB if all were held.
    let run = both_ways(
        "sctp-partial",
        &hostile::sctp_partial_flood(600, 31),
        &[],
        // Within the 16 MiB cap on partial messages (plus the small base).
        SMALL_RSS_KIB,
    );
    let s = run.summary();
    // Each was given up: evicted by the byte cap or expired later.
    assert_eq!(s["sctp"]["partial_expired"], 600, "{s}");
}

#[test]
fn nan_and_infinite_timeouts_rejected() {
    let file = hostile::non_ascii_rtpmap().save("nan");
    for (opt, v) in [
        ("--call-timeout", "NaN"),
        ("--call-grace", "nan"),
        ("--stream-timeout", "inf"),
        ("--unanswered-timeout", "-1"),
        ("--call-timeout", "0"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
            .arg("analyze")
            .arg(format!("{opt}={v}"))
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opt} {v}: {err}");
        assert!(err.contains(opt) && err.contains("seconds"), "{opt} {v}: {err}");
    }
    std::fs::remove_file(&file).ok();
}

#[test]
fn dtmf_duration_in_16khz_event_clock() {
    let run = small("dtmf-16k", &hostile::dtmf_16k(1600));
    let calls = run.calls();
    assert_eq!(calls[0]["dtmf_digits"], "5");
    let ev = &calls[0]["streams"][0]["dtmf"][0];
    // 1 600 units of a 16 kHz clock are 100 ms (not 200 ms at 8 kHz).
    assert_eq!(ev["duration_ms"], 100.0, "{ev}");
}

#[test]
fn ssrc_churn_counted_alike_with_threads() {
    let run = small("ssrc-churn", &hostile::ssrc_churn(300));
    // 256 streams per call; the other 44 SSRCs' 3 packets each are refused.
    capped_at_256_streams(&run, 44 * 3);
}

#[test]
fn stream_cap_shared_across_shards() {
    // 200 streams of 5 packets against a cap of 50 streams.
    let run = both_ways_counters(
        "stream-cap",
        &hostile::orphan_streams(200, 5),
        &["--max-streams", "50"],
        SMALL_RSS_KIB,
    );
    let s = run.summary();
    assert_eq!(s["streams_refused"], 150 * 5, "{s}");
    let streams = of_type(&run.lines, "stream").count();
    assert_eq!(streams, 50);
}

#[test]
fn a_panicking_worker_ends_the_run_with_finished_records() {
    // Calls of ~1 s each, one after another: many are finished (BYE plus
    // grace) long before the injected failure near the end of the capture.
    let (dir, pcap, _) =
        common::generated("panic", "--calls 40 --concurrent 2 --hold-mean 1 --seed 3");
    let complete = analyze(&pcap, 1, &[]);
    assert_eq!(complete.code, 0);
    let packets = complete.summary()["packets"].as_u64().unwrap();
    for threads in [1, 2] {
        let m = run_measured(
            Command::new(env!("CARGO_BIN_EXE_calliper"))
                .env("CALLIPER_FAULT_PANIC_AFTER_PACKETS", (packets * 3 / 4).to_string())
                .args(["analyze", "--format", "jsonl", "--progress", "never"])
                .args(["--threads", &threads.to_string()])
                .arg(&pcap),
        );
        assert_eq!(m.code, 3, "{threads} threads: exit {}\n{}", m.code, m.stderr);
        assert!(
            m.stderr.contains(&*pcap.to_string_lossy()) && m.stderr.contains("fault injection"),
            "{threads} threads: the error names the input and the failure\n{}",
            m.stderr
        );
        let calls: Vec<Value> = m
            .stdout
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l["type"] == "call")
            .collect();
        // Calls finished before the failure are written, exactly as in the full run.
        assert!(calls.len() >= 10, "{threads} threads: only {} calls written", calls.len());
        assert!(calls.len() < 40);
        for c in &calls {
            let same = complete.calls().into_iter().find(|x| x["call_id"] == c["call_id"]);
            assert_eq!(Some(c), same, "{threads} threads");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

// Found by the independent attacker review (docs/hostile-input.md).

#[test]
fn ipv6_sources_cancelling_the_hash_constant() {
    // Once all one slot run: each packet walked every stream before it.
    let run = both_ways("v6-hash", &hostile::v6_hash_flood(100_000), &[], 256 * 1024);
    assert_eq!(run.summary()["candidates_rejected"], 100_000);
}

#[test]
fn tcp_body_one_byte_per_segment() {
    // Each segment parsed the 60 KB header section again.
    let run = small("tcp-slow-body", &hostile::tcp_slow_body(150_000));
    let s = run.summary();
    assert_eq!(s["sip_messages"], 1, "{s}");
    assert_eq!(s["calls"], 1, "{s}");
}

#[test]
fn candidates_on_one_address_pair_with_threads() {
    // Each shard had a share of the candidate cap; one pair is on one shard.
    let run = both_ways("candidates", &hostile::candidates_one_pair(60_000), &[], 256 * 1024);
    let s = run.summary();
    assert_eq!((s["streams"].as_u64(), s["candidates_rejected"].as_u64()), (Some(60_000), Some(0)));
}

#[test]
fn streams_per_call_capped_across_shards() {
    let run =
        both_ways_counters("streams-per-call", &hostile::streams_per_call(400), &[], SMALL_RSS_KIB);
    capped_at_256_streams(&run, 144 * 5);
}

/// One call's 256 streams kept, and `refused` RTP packets of others counted.
fn capped_at_256_streams(run: &Run, refused: u64) {
    let s = run.summary();
    let counted = &s["anomalies"]["rtp_too_many_streams_per_call"];
    assert_eq!(counted, refused, "{s}");
    assert_eq!(run.calls()[0]["streams"].as_array().unwrap().len(), 256);
}

#[test]
fn same_call_id_and_start_time_stay_two_calls() {
    let run = both_ways(
        "call-id-reuse",
        &hostile::call_id_reuse(),
        &["--max-calls", "1", "--dedup-window", "0"],
        SMALL_RSS_KIB,
    );
    let with_media: Vec<(String, u64)> = run
        .calls()
        .iter()
        .filter(|c| c["call_id"] == "X")
        .map(|c| {
            let streams = c["streams"].as_array().unwrap();
            (c["from"]["user"].as_str().unwrap().to_string(), streams.len() as u64)
        })
        .collect();
    assert_eq!(with_media, vec![("alice".into(), 1), ("mallory".into(), 1)]);
}

#[test]
fn rtcp_on_another_shard_than_its_rtp() {
    let run = small("rtcp-odd-ports", &hostile::rtcp_on_odd_ports());
    for c in run.calls() {
        assert_eq!(c["streams"][0]["rtcp_reports"], 4, "{}", c["call_id"]);
    }
}

#[test]
fn different_sip_messages_with_equal_first_bytes_are_not_duplicates() {
    let run = small("equal-start", &hostile::equal_starting_invites());
    let s = run.summary();
    assert_eq!((s["calls"].as_u64(), s["duplicates_removed"].as_u64()), (Some(2), Some(0)));
}

#[test]
fn session_refreshes_do_not_use_up_media_descriptions() {
    let run = small("refresh", &hostile::session_refresh_then_move(100));
    let s = run.summary();
    assert!(s["anomalies"].get("sdp_too_many_media_per_call").is_none(), "{s}");
    assert_eq!(s["rtp_in_calls"], 50, "the moved media stays in its call: {s}");
}

#[test]
fn control_characters_do_not_reach_the_terminal() {
    let file = hostile::control_characters().save("control");
    let m = common::analyze_text(&file);
    std::fs::remove_file(&file).ok();
    assert_eq!(m.code, 0);
    assert!(!m.stdout.contains('\u{1b}') && !m.stdout.contains("\rcall"), "{:?}", m.stdout);
    assert!(m.stdout.contains("\\u{1b}[2J"), "{:?}", m.stdout);
}

// Found by the new-user review.

#[test]
fn output_that_is_an_input_empty_files_and_directories() {
    let file = hostile::non_ascii_rtpmap().save("clobber");
    let before = std::fs::read(&file).unwrap();
    for opt in ["-o", "--db"] {
        let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
            .args(["analyze", opt])
            .arg(&file)
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opt}: {err}");
        assert!(err.contains("also an input"), "{opt}: {err}");
        assert_eq!(std::fs::read(&file).unwrap(), before, "{opt} overwrote the capture");
    }
    std::fs::remove_file(&file).ok();
    let empty = calliper_testkit::captures::scratch_root().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze"])
        .arg(&empty)
        .output()
        .unwrap();
    std::fs::remove_file(&empty).ok();
    // Refused before any work (wrong_input.rs).
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty file"));
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze"])
        .arg(std::env::temp_dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a directory"));
}
