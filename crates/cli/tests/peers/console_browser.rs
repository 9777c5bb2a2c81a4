//! The console in a real browser: Debian's headless Chromium driven through
//! WebDriver (chromedriver). It loads the console, searches for a caller
//! through the form, opens a call, and checks what the page shows against
//! the JSON API: one row per call, one ladder arrow per SIP message (and
//! the raw message behind an arrow), one stream row per stream, one chart
//! point per interval with the API's values. Screenshots go to
//! `target/console-screenshots/`. `CALLIPER_SKIP=browser` skips it on
//! purpose where Chromium cannot be installed.

use crate::browser::Browser;
use crate::server::{enc, temp, Server};
use crate::{common, flow, server};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// This binary's turn at the real-time peers, and a browser; None where
/// `CALLIPER_SKIP=browser` asked to skip it.
fn browser_turn() -> Option<(std::sync::MutexGuard<'static, ()>, Browser)> {
    let turn = crate::turn();
    Some((turn, Browser::start()?))
}

#[test]
fn the_console_shows_what_the_api_gives() {
    let Some((_turn, browser)) = browser_turn() else { return };
    let db = temp("calls.db");
    let _ = std::fs::remove_file(&db);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    for p in ["sipp_hold_dtmf.pcap", "heplify__rtp_rtcp_sip_ipv4_udp.pcap", "sngrep__ipv6frag.pcap"]
    {
        common::analyze_into_db_append(&root.join(p), &db, &[]);
    }
    let s = Server::on(&db);
    let base = format!("http://127.0.0.1:{}", s.addr.port());
    let api = |path: &str| s.get(path, &[]).json();

    // The call list: one row per call, newest first.
    browser.go(&format!("{base}/"));
    let all = api("/api/calls");
    let n = all["calls"].as_array().unwrap().len();
    let rows = browser.wait("the call list", "const r = document.querySelectorAll('#calls tbody tr'); return r.length ? r.length : null;");
    assert_eq!(rows, n);
    let ids = browser.js(
        "return [...document.querySelectorAll('#calls tbody tr')].map(r => Number(r.dataset.id));",
    );
    let api_ids: Vec<Value> =
        all["calls"].as_array().unwrap().iter().map(|c| c["id"].clone()).collect();
    assert_eq!(ids, Value::Array(api_ids));
    browser.screenshot("calls.png");
    // At 1400×1000 the call list fits: no cell sticks out of the window.
    assert_eq!(browser.overflowing("#calls th, #calls td"), json!([]));

    // Search through the form, as a person would.
    let caller = "sipp";
    browser.js(&format!(
        "document.querySelector('input[name=caller]').value = '{caller}'; document.querySelector('#search button').click(); return true;"
    ));
    let want = api(&format!("/api/calls?caller={}", enc(caller)));
    let want_ids: Vec<Value> =
        want["calls"].as_array().unwrap().iter().map(|c| c["id"].clone()).collect();
    assert!(!want_ids.is_empty() && want_ids.len() < n, "the search must pick some calls, not all");
    let shown = browser.wait(
        "the search's results",
        &format!("return location.hash.includes('caller={caller}') && document.querySelectorAll('#calls tbody tr').length === {} ? [...document.querySelectorAll('#calls tbody tr')].map(r => Number(r.dataset.id)) : null;", want_ids.len()),
    );
    assert_eq!(shown, Value::Array(want_ids.clone()));
    // The search's URL is shareable: loaded afresh, it shows the same calls.
    let url = browser.js("return location.href;");
    browser.go("about:blank");
    browser.go(url.as_str().unwrap());
    let again = browser.wait("the shared search", "const r = [...document.querySelectorAll('#calls tbody tr')].map(r => Number(r.dataset.id)); return r.length ? r : null;");
    assert_eq!(again, Value::Array(want_ids.clone()));

    // Open a call: its ladder, streams and charts against the API.
    let id = want_ids[0].as_i64().unwrap();
    browser.js(&format!(
        "document.querySelector('#calls tbody tr[data-id=\"{id}\"]').click(); return true;"
    ));
    let call = api(&format!("/api/calls/{id}"));
    // The call's facts, as text.
    let facts = browser.wait("the call's facts", "const d = document.querySelector('dl.facts'); return d ? [...d.querySelectorAll('dt')].map(t => [t.textContent, t.nextElementSibling.textContent]) : null;");
    let fact = |name: &str| {
        facts
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f[0] == name)
            .map(|f| f[1].as_str().unwrap().to_string())
    };
    assert_eq!(fact("Call-ID").as_deref(), call["call_id"].as_str(), "{facts}");
    assert_eq!(fact("State").as_deref(), call["state"].as_str(), "{facts}");
    assert_eq!(fact("Caller").as_deref(), call["from_uri"].as_str(), "{facts}");
    let messages = call["messages"].as_array().unwrap();
    let arrows = browser.wait(
        "the ladder",
        "const a = document.querySelectorAll('#ladder .arrow'); return a.length ? a.length : null;",
    );
    assert_eq!(arrows, messages.len());
    let labels = browser.js("return [...document.querySelectorAll('#ladder .arrow')].map(a => a.querySelector('text').firstChild.textContent);");
    let want_labels: Vec<String> = messages
        .iter()
        .map(|m| match m["method"].as_str() {
            Some(method) => method.to_string(),
            None => format!("{} ({})", m["status"], m["cseq_method"].as_str().unwrap()),
        })
        .collect();
    assert_eq!(labels, json!(want_labels));
    // An arrow opens its raw message.
    browser.js("document.querySelectorAll('#ladder .arrow')[1].dispatchEvent(new MouseEvent('click')); return true;");
    let raw = browser.wait(
        "the raw message",
        "const p = document.querySelector('#raw'); return p ? p.textContent : null;",
    );
    assert_eq!(raw, messages[1]["message"]);
    let streams = call["streams"].as_array().unwrap();
    flow::flow_shows_the_call(&browser, &call, &root.join("sipp_hold_dtmf.pcap"));
    let stream_rows = browser.js("return document.querySelectorAll('#streams tbody tr').length;");
    assert_eq!(stream_rows, streams.len());
    // Each stream's MOS after each jitter-buffer model, as the API gives them.
    let shown = browser.js("return [...document.querySelectorAll('#streams tbody tr')].map(r => r.querySelector('td.buffers').textContent);");
    for (st, shown) in streams.iter().zip(shown.as_array().unwrap()) {
        let models: Value = match &st["jitter_buffers"] {
            Value::String(t) => serde_json::from_str(t).unwrap(),
            v => v.clone(),
        };
        for m in models.as_array().unwrap() {
            let mos = m["mos"].as_f64().map_or("–".to_string(), |v| format!("{v:.2}"));
            let model = match m["model"].as_str().unwrap() {
                "fixed50" => "fixed 50 ms",
                "fixed200" => "fixed 200 ms",
                other => other,
            };
            let want = format!("{model}: {mos}");
            assert!(shown.as_str().unwrap().contains(&want), "{shown} lacks {want}");
        }
    }
    let mut points_checked = 0;
    // Charts in the order of the streams (two streams may share an SSRC).
    for (index, st) in streams.iter().enumerate() {
        let ssrc = st["ssrc"].as_i64().unwrap();
        let intervals = st["intervals"].as_array().unwrap();
        for (kind, field) in [("mos", "mos"), ("jitter", "jitter_ms"), ("loss", "loss_percent")] {
            let want: Vec<f64> = intervals.iter().filter_map(|i| i[field].as_f64()).collect();
            let got = browser.js(&format!(
                "const s = document.querySelectorAll('.stream-charts')[{index}].querySelector('svg.chart[data-kind=\"{kind}\"]'); return s ? [...s.querySelectorAll('circle')].map(c => Number(c.dataset.value)) : [];"
            ));
            let got: Vec<f64> =
                got.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            assert_eq!(got.len(), want.len(), "stream {ssrc} {kind}");
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-9, "stream {ssrc} {kind}: {g} vs {w}");
                points_checked += 1;
            }
        }
    }
    assert!(points_checked > 0, "no chart point checked");
    browser.screenshot("call.png");
    browser.js("document.querySelector('#streams').scrollIntoView(); return true;");
    browser.screenshot("streams.png");
    // Nothing but what the page means to show: no "null", no "[object ...]".
    let text = browser.js("return document.body.innerText;");
    let text = text.as_str().unwrap();
    assert!(
        !text.contains("null")
            && !text.contains("[object")
            && !text.contains("undefined")
            && !text.contains("NaN"),
        "{text}"
    );
    // Words, not the API's enum names.
    for raw in ["caller_to_callee", "callee_to_caller", "no_final_response", "not_voice"] {
        assert!(!text.contains(raw), "the page shows {raw}");
    }
    // Compare two messages: tick the first, then the second.
    browser.js("const a = document.querySelectorAll('#ladder .arrow'); a[0].dispatchEvent(new MouseEvent('click')); document.querySelector('#compare').click(); a[2].dispatchEvent(new MouseEvent('click')); document.querySelector('#compare').click(); return true;");
    let diff = browser.wait("the diff", "const d = document.querySelector('#diff'); return d ? d.querySelectorAll('.add, .del').length : null;");
    assert!(diff.as_u64().unwrap() > 0, "two different messages differ");
    browser.js("document.querySelector('#diff').scrollIntoView(); return true;");
    browser.screenshot("diff.png");

    // The KPI page: one table row per row of the API, with its ASR.
    browser.go(&format!("{base}/#/kpi?interval=86400"));
    let kpi = api("/api/kpi?interval=86400");
    let want = kpi["rows"].as_array().unwrap();
    assert!(!want.is_empty());
    let shown = browser.wait(
        "the KPI table",
        &format!("const r = document.querySelectorAll('#kpi tbody tr'); return r.length === {} ? [...r].map(t => t.children[4].textContent) : null;", want.len()),
    );
    let asr: Vec<String> = want
        .iter()
        .map(|r| r["figures"]["asr"].as_f64().map_or(String::new(), |a| format!("{a:.1}")))
        .collect();
    assert_eq!(shown, json!(asr));
    // The MOS bars carry the API's counts; the load charts its rows.
    let bars = browser.wait(
        "the MOS bands",
        "const r = document.querySelectorAll('#mos-bands rect:not(#mos-none)'); return r.length ? [...r].map(b => Number(b.dataset.calls)) : null;",
    );
    let bands: Vec<u64> = api("/api/kpi/mos")["bands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["calls"].as_u64().unwrap())
        .collect();
    assert_eq!(bars, json!(bands));
    assert!(bands.iter().sum::<u64>() > 0);
    // Answered calls without a MOS have their own bar: as many as the call
    // search lists answered without a worst MOS.
    let none = browser.js("return Number(document.querySelector('#mos-none').dataset.calls);");
    let unscored = all["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["answer_ns"].is_null() && c["worst_mos"].is_null())
        .count();
    assert!(unscored > 0, "the captures hold an answered call without MOS");
    assert_eq!(none, json!(unscored));
    // The definitions are a link the console serves.
    let doc = browser.js("return document.querySelector('#kpi-doc').getAttribute('href');");
    let text = s.get(doc.as_str().unwrap(), &[]);
    assert!(
        text.status == 200 && String::from_utf8_lossy(&text.body).contains("ASR"),
        "{}",
        text.status
    );
    let load = api("/api/kpi/load?interval=86400")["rows"].as_array().unwrap().len();
    let points = browser
        .js("return Number(document.querySelector('svg[data-kind=concurrent]').dataset.points);");
    assert_eq!(points, json!(load));
    browser.screenshot("kpi.png");
    // Registrations and alerts pages answer with their tables.
    for (route, path) in [("registrations", "/api/registrations"), ("alerts", "/api/alerts")] {
        browser.go(&format!("{base}/#/{route}"));
        let n = api(path)["rows"].as_array().unwrap().len();
        browser.wait(
            route,
            &format!("const t = document.querySelector('#rows tbody'); return t && t.children.length === {n} ? true : null;"),
        );
        assert_eq!(browser.overflowing("#rows th, #rows td"), json!([]), "{route}");
    }
    // `serve` has no probe: its Live, Probe and Rules links are hidden, and
    // going there by address says what the page needs, not an API error.
    let shown = browser.js(
        "return [...document.querySelectorAll('nav a')].filter(a => !a.hidden).map(a => a.textContent);",
    );
    assert_eq!(shown, json!(["Calls", "KPIs", "Registrations", "Alerts", "Metrics"]));
    for route in ["live", "probe", "rules"] {
        browser.go(&format!("{base}/#/{route}"));
        let said = browser.wait(
            route,
            "const m = document.getElementById('main').textContent; return m.includes('needs') ? m : null;",
        );
        assert!(said.as_str().unwrap().contains("calliper probe"), "{route}: {said}");
        assert!(!said.as_str().unwrap().to_lowercase().contains("error"), "{route}: {said}");
    }
    // A page answered after the user has moved on draws nothing: the KPI
    // page's answers are held back 400 ms, and the user goes to the calls
    // meanwhile. (Before the fix its table landed under the calls.)
    browser.go(&format!("{base}/#/calls"));
    browser
        .wait("the calls", "return document.querySelectorAll('#calls tbody tr').length || null;");
    browser.js(
        "const f = window.fetch; window.fetch = (u, o) => String(u).includes('/api/kpi') ? new Promise((ok) => setTimeout(() => ok(f(u, o)), 400)) : f(u, o); location.hash = '#/kpi'; return true;",
    );
    browser.wait(
        "the KPI page",
        "return document.querySelector('h1').textContent === 'KPIs' || null;",
    );
    browser.js("location.hash = '#/calls?caller=sipp'; return true;");
    browser.wait(
        "the calls again",
        "return document.querySelectorAll('#calls tbody tr').length || null;",
    );
    std::thread::sleep(Duration::from_millis(1500));
    let page = browser.js("return [document.querySelector('h1').textContent, document.querySelectorAll('#kpi, .stream-charts').length, document.querySelectorAll('#calls').length];");
    assert_eq!(page, json!(["Calls", 0, 1]));
}

#[test]
fn the_live_page_follows_a_replay() {
    let Some((_turn, browser)) = browser_turn() else { return };
    let pcap = common::sample_capture();
    let db = temp("live.db");
    let _ = std::fs::remove_file(&db);
    let probe = server::Probe::start(&pcap, &db);
    browser.go(&format!("http://127.0.0.1:{}/#/live", probe.addr.port()));
    // The three calls of the capture appear, one a second, with what the
    // live API says of them.
    let rows = browser.wait(
        "three live calls",
        "const r = document.querySelectorAll('#live tbody tr'); return r.length === 3 ? [...r].map(t => t.dataset.callId) : null;",
    );
    let api: Vec<Value> =
        probe.live()["calls"].as_array().unwrap().iter().map(|c| c["call_id"].clone()).collect();
    assert_eq!(rows, Value::Array(api));
    assert!(
        probe.started.elapsed() < Duration::from_secs(5),
        "the three calls (INVITEs at 0, 1 and 2 s) took {:?} to show",
        probe.started.elapsed()
    );
    // Answered, with their streams' quality, as the replay goes on.
    browser.wait(
        "a stream's quality",
        "return document.querySelector('#live .live-stream') ? true : null;",
    );
    // Each call says how old it is, from the API's clock.
    let ages = browser.js(
        "return [...document.querySelectorAll('#live td.age')].map(t => parseInt(t.textContent));",
    );
    let snap = probe.live();
    for (age, c) in ages.as_array().unwrap().iter().zip(snap["calls"].as_array().unwrap()) {
        let want =
            (snap["now_ns"].as_i64().unwrap() - c["invite_ns"].as_i64().unwrap()) / 1_000_000_000;
        assert!((age.as_i64().unwrap() - want).abs() <= 2, "age {age}, API {want} s");
    }
    browser.screenshot("live.png");
    assert_eq!(browser.overflowing("#live th, #live td"), json!([]));
}

#[test]
fn the_probe_and_rules_pages_show_and_change_the_probe() {
    let Some((_turn, browser)) = browser_turn() else { return };
    let pcap = common::sample_capture();
    let write = "browser-write-token-0123456789";
    let probe =
        server::Probe::start_with(&pcap, &["-o", "/dev/null"], &[("CALLIPER_WRITE_TOKEN", write)]);
    let base = format!("http://127.0.0.1:{}/", probe.addr.port());
    browser.go(&format!("{base}#/probe"));
    // The page's packet count is one the API gave (the page shows its
    // latest report, which the API's answers bracket).
    let before = server::request(probe.addr, "GET", "/api/health", &[]).json()["packets"]
        .as_u64()
        .unwrap_or(0);
    let shown = browser.wait(
        "the packets analysed",
        "const d = [...document.querySelectorAll('#health dt')].find(t => t.textContent === 'Packets analysed (both directions)'); \
         return d && d.nextElementSibling.textContent.trim() !== '0' ? d.nextElementSibling.textContent : null;",
    );
    let after =
        server::request(probe.addr, "GET", "/api/health", &[]).json()["packets"].as_u64().unwrap();
    let shown: u64 = shown.as_str().unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(before.min(1) <= shown && shown <= after, "{before} ≤ {shown} ≤ {after}");
    browser.wait(
        "the engine's counters",
        "return [...document.querySelectorAll('#engine-counters td')].some(t => t.textContent === 'sip_messages');",
    );
    browser.screenshot("probe.png");
    let text = browser.js("return document.getElementById('main').innerText;");
    assert!(!text.as_str().unwrap().contains("null"), "{text}");

    // Add a rule through the form, see it listed as the API lists it, remove it.
    browser.go(&format!("{base}#/rules"));
    browser.wait("the add form", "return document.querySelector('#add-rule') !== null;");
    browser.js(&format!(
        "const f = document.querySelector('#add-rule'); \
         f.querySelector('[name=token]').value = '{write}'; \
         f.querySelector('[name=filter]').value = 'to_user=1000'; \
         f.querySelector('[name=action]').value = 'label'; \
         f.querySelector('[name=label]').value = 'from-browser'; \
         f.requestSubmit();"
    ));
    let row = browser.wait(
        "the added rule",
        "const r = document.querySelector('#rules tbody tr'); return r ? [...r.children].map(c => c.textContent) : null;",
    );
    let api = server::request(probe.addr, "GET", "/api/rules", &[]).json();
    let rule = &api["rules"][0];
    assert_eq!(api["total"], 1, "{api}");
    assert_eq!(row[0], rule["id"].to_string());
    assert_eq!(row[4], "to_user=1000");
    assert_eq!(row[5], "label");
    assert_eq!(row[6], "from-browser");
    browser.screenshot("rules.png");
    browser.js("document.querySelector('#rules button.remove').click();");
    browser.wait(
        "the rule removed",
        "return document.querySelectorAll('#rules tbody tr').length === 0;",
    );
    let api = server::request(probe.addr, "GET", "/api/rules", &[]).json();
    assert_eq!(api["total"], 0, "{api}");
}

#[test]
fn the_loss_by_leg_table_shows_what_the_api_gives() {
    let Some((_turn, browser)) = browser_turn() else { return };
    let db = temp("legs.db");
    let pcap =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rtpengine_relay_loss.pcap");
    common::analyze_into_db(&pcap, &db, &[]);
    let s = Server::on(&db);
    let id = s.get("/api/calls", &[]).json()["calls"][0]["id"].clone();
    let detail = s.get(&format!("/api/calls/{id}"), &[]).json();
    browser.go(&format!("http://127.0.0.1:{}/#/call/{id}", s.addr.port()));
    let rows = browser.wait(
        "the loss-by-leg table",
        "const r = document.querySelectorAll('#legs tbody tr'); \
         return r.length ? [...r].map(t => [t.dataset.direction, ...[...t.children].slice(2, 8).map(c => c.textContent)]) : null;",
    );
    let mut want = Vec::new();
    for p in detail["loss_by_leg"].as_array().unwrap() {
        for h in p["hops"].as_array().unwrap() {
            want.push(json!([
                p["direction"],
                h["src"],
                h["dst"],
                h["expected"].to_string(),
                h["lost"].to_string(),
                format!("{:.2}", h["loss_percent"].as_f64().unwrap()),
                h["introduced"].to_string(),
            ]));
        }
    }
    assert_eq!(want.len(), 4, "{detail}");
    assert_eq!(rows, Value::Array(want));
    browser.js("document.querySelector('#legs').scrollIntoView();");
    browser.screenshot("legs.png");
}

/// A WAV's per-slice peaks as the page computes them (`wavePeaks` in
/// app.js), rounded to three decimals: the oracle for the waveform.
fn wav_peaks(wav: &[u8], slices: usize) -> Vec<Vec<f64>> {
    assert_eq!(&wav[..4], b"RIFF");
    let data = &wav[44..];
    let frames = data.len() / 4;
    let mut peaks = vec![vec![0f64; slices]; 2];
    for i in 0..frames {
        let slice = i * slices / frames;
        for (ch, side) in peaks.iter_mut().enumerate() {
            let at = 4 * i + 2 * ch;
            let s = f64::from(i16::from_le_bytes([data[at], data[at + 1]])).abs() / 32768.0;
            side[slice] = side[slice].max(s);
        }
    }
    peaks.iter().map(|side| side.iter().map(|p| (p * 1000.0).round() / 1000.0).collect()).collect()
}

#[test]
fn the_call_page_plays_the_recording_and_draws_its_waveform() {
    let Some((_turn, browser)) = browser_turn() else { return };
    let (db, rec) = (temp("player.db"), temp("player-rec"));
    let _ = std::fs::remove_dir_all(&rec);
    let pcap = common::sample_capture();
    common::analyze_into_db(
        &pcap,
        &db,
        &["--record", "all", "--record-dir", rec.to_str().unwrap()],
    );
    let s = Server::start(&db, "127.0.0.1:0", &["--record-dir", rec.to_str().unwrap()], &[]);
    let calls = s.get("/api/calls", &[]).json()["calls"].as_array().unwrap().clone();
    let mut checked = 0;
    for c in &calls {
        let id = &c["id"];
        let wav = s.get(&format!("/api/calls/{id}/audio"), &[]);
        if wav.status != 200 {
            continue;
        }
        browser.go(&format!("http://127.0.0.1:{}/#/call/{id}", s.addr.port()));
        let status = browser.wait(
            "the player's status",
            "const s = document.getElementById('audio-status');              return s && !s.textContent.startsWith('Decoding') ? s.textContent : null;",
        );
        let frames = (wav.body.len() - 44) / 4;
        let rate = u32::from_le_bytes(wav.body[24..28].try_into().unwrap());
        assert_eq!(
            status,
            format!(
                "{:.1} s at {rate} Hz: the caller above, the callee below.",
                frames as f64 / f64::from(rate)
            ),
        );
        let peaks: Vec<Vec<f64>> = serde_json::from_str(
            browser
                .js("return document.getElementById('waveform').dataset.peaks;")
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let want = wav_peaks(&wav.body, 600);
        let differ = (0..2)
            .flat_map(|ch| (0..600).map(move |x| (ch, x)))
            .find(|&(ch, x)| peaks[ch][x] != want[ch][x]);
        assert_eq!(differ, None, "call {id}: the waveform is not the WAV's (channel, slice)");
        assert!(want[0].iter().any(|&p| p > 0.05), "speech in it");
        // The browser plays the same WAV: its duration is the WAV's.
        let duration = browser.wait(
            "the audio's duration",
            "const a = document.getElementById('audio'); return a.src.startsWith('blob:') && isFinite(a.duration) ? a.duration : null;",
        );
        assert!(
            (duration.as_f64().unwrap() - frames as f64 / f64::from(rate)).abs() < 0.01,
            "{duration}"
        );
        browser.js("document.getElementById('player').scrollIntoView();");
        browser.screenshot("player.png");
        checked += 1;
    }
    assert!(checked >= 1, "no recorded call with audio");
}
