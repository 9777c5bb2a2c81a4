//! The call page's flow in the browser, checked against the API and the
//! engine's own events (part of `console_browser.rs`).

use super::browser::Browser;
use super::common;
use serde_json::{json, Value};
use std::path::Path;

/// The call page's flow, against the API and the engine's own events:
/// one band per stream, times in seconds from the INVITE, the re-INVITEs
/// the engine saw hold or resume the call marked so (and nothing else),
/// a clicked message in view beside the flow, "no RTCP seen" for streams
/// without RTCP, jitter within segments and restart marks for streams
/// that restarted, and a streams table that fits the window.
pub fn flow_shows_the_call(browser: &Browser, call: &Value, capture: &Path) {
    let streams = call["streams"].as_array().unwrap();
    let bands = browser.js("return document.querySelectorAll('#ladder .band').length;");
    assert_eq!(bands, streams.len());
    let whens = browser
        .js("return [...document.querySelectorAll('#ladder .when')].map(t => t.textContent);");
    for w in whens.as_array().unwrap() {
        let w = w.as_str().unwrap();
        let secs = w.strip_prefix('+').and_then(|w| w.strip_suffix(" s"));
        assert!(
            secs.is_some_and(
                |s| s.parse::<f64>().is_ok() && s.split('.').nth(1).is_some_and(|d| d.len() == 3)
            ),
            "{w}"
        );
    }
    // Marks where the engine's events say the call was held and resumed.
    let events = common::calliper_jsonl(capture, &["--events", "calls"]);
    let ts_of_id: std::collections::HashMap<i64, i64> = call["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_i64().unwrap(), m["ts_ns"].as_i64().unwrap()))
        .collect();
    let mut want: Vec<(i64, String)> = events
        .iter()
        .filter(|e| e["type"] == "call_event" && e["call_id"] == call["call_id"])
        .filter_map(|e| {
            let mark = match e["phase"].as_str()? {
                "held" => "hold",
                "resumed" => "resume",
                _ => return None,
            };
            Some((e["ts_ns"].as_i64()?, mark.to_string()))
        })
        .collect();
    assert!(want.len() >= 2, "the SIPp call is held and resumed: {want:?}");
    let shown = browser.js("return [...document.querySelectorAll('#ladder .arrow')].filter(a => a.querySelector('tspan.mark')).map(a => [Number(a.dataset.id), a.querySelector('tspan.mark').textContent]);");
    let mut got: Vec<(i64, String)> = shown
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                ts_of_id[&a[0].as_i64().unwrap()],
                a[1].as_str().unwrap().trim_start_matches(" · ").to_string(),
            )
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    // The last message, clicked as a person would after scrolling to it,
    // is shown in the window beside its arrow.
    browser.js("const a = [...document.querySelectorAll('#ladder .arrow')].pop(); a.scrollIntoView({block: 'center'}); a.dispatchEvent(new MouseEvent('click')); return true;");
    let seen = browser.wait(
        "the last message",
        "const r = document.querySelector('#raw'); const a = [...document.querySelectorAll('#ladder .arrow')].pop(); if (!r || !a.classList.contains('open')) return null; const p = r.getBoundingClientRect(), q = a.getBoundingClientRect(); return [p.top, p.bottom, q.top, window.innerHeight, p.left, q.right];",
    );
    let v: Vec<f64> = seen.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert!(v[0] >= 0.0 && v[0] < v[3] - 50.0, "the message is out of view: {seen}");
    assert!(v[2] >= 0.0 && v[2] < v[3], "the arrow is out of view: {seen}");
    assert!(v[4] >= v[5], "the message is not beside the flow: {seen}");
    // Streams: RTCP, restarts, and a table that fits.
    let rtcp = browser.js("return [...document.querySelectorAll('#streams tbody tr')].map(r => r.querySelector('td.rtcp').textContent);");
    let within = browser.js("return [...document.querySelectorAll('#streams tbody tr')].map(r => (r.querySelector('.within') || {}).textContent || null);");
    let restart_lines = browser.js("return [...document.querySelectorAll('.stream-charts')].map(b => b.querySelectorAll('svg[data-kind=jitter] line.restart').length);");
    for (i, st) in streams.iter().enumerate() {
        let none = st["rtcp_reports"].as_u64().unwrap_or(0) == 0;
        assert_eq!(rtcp[i] == "no RTCP seen", none, "stream {i}: {}", rtcp[i]);
        let restarted = st["seq_resets"].as_u64().unwrap() > 0
            && st["segment_max_jitter_ms"]
                .as_f64()
                .is_some_and(|w| Some(w) != st["max_jitter_ms"].as_f64());
        assert_eq!(
            within[i].as_str().is_some_and(|t| t.contains("within segments")),
            restarted,
            "stream {i}"
        );
        let restarts = st["restarts_ns"].as_array().map_or(0, Vec::len);
        assert_eq!(restart_lines[i], json!(restarts), "stream {i}");
    }
    assert!(
        streams.iter().any(|s| s["seq_resets"].as_u64() > Some(0)),
        "the SIPp call restarts its streams"
    );
    assert_eq!(browser.overflowing("#streams th, #streams td"), json!([]));
}
