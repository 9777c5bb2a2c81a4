//! `serve --clickhouse` over a two-shard cluster that two probes wrote:
//! each search answers what the two probes' own consoles (`serve --db`
//! on their SQLite runs) answer together, call by call and field by
//! field, in both directions; each call's streams too.

use crate::common::clickhouse::{storable_strings, Server, CLUSTER, PASSWORD, READER};
use crate::common::scratch;
use crate::run::*;
use crate::server::{enc, Server as Console};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The calls a console's search gives, as canonical JSON texts without
/// the store's own id (and the probe, which SQLite has not), counted.
fn calls(console: &Console, query: &str) -> (BTreeMap<String, usize>, Vec<Value>) {
    let r = console.get(&format!("/api/calls?limit=1000&{query}"), &[]);
    let body = r.json();
    assert_eq!(r.status, 200, "{query}: {body}");
    assert_eq!(body["more"], false, "{query}: more than a page");
    let list = body["calls"].as_array().unwrap().clone();
    let mut counted = BTreeMap::new();
    for c in &list {
        *counted.entry(canonical(c, &["id", "probe"])).or_default() += 1;
    }
    (counted, list)
}

fn canonical(v: &Value, without: &[&str]) -> String {
    let m: Map<String, Value> = v
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !without.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::to_string(&m).unwrap()
}

/// What is in `a` and not in `b`, for a message.
fn missing(a: &BTreeMap<String, usize>, b: &BTreeMap<String, usize>) -> Vec<String> {
    a.iter()
        .filter(|(k, n)| b.get(*k) != Some(n))
        .map(|(k, _)| k.chars().take(600).collect())
        .take(3)
        .collect()
}

#[test]
fn the_console_over_the_cluster_answers_as_both_probes_consoles_together() {
    let Some(servers) = Server::cluster("console", 2) else {
        return;
    };
    let impaired = impaired_at(scratch("console-impaired.pcap"));
    let strings = storable_strings().save("console-strings");
    let urls = format!("{},{}", servers[0].url, servers[1].url);
    // Each site also sees registrations, IPv6 and crafted strings.
    let sites = [
        (
            "site-a",
            capture("sipp_calls"),
            [capture("sip_ipv6_udp"), capture("sip-method_sip")],
            db("console-a"),
        ),
        ("site-b", impaired, [strings, capture("rtp_rtcp_sip_ipv4_udp")], db("console-b")),
    ];
    for (probe, file, more, db) in &sites {
        let mut extra = vec!["--clickhouse-cluster", CLUSTER];
        extra.extend(more.iter().map(|f| f.to_str().unwrap()));
        succeeded(&analyze(file, db, &urls, probe, &extra), probe);
    }
    for (probe, _, _, db) in &sites {
        let sql = format!("SELECT count() FROM calliper.calls FINAL WHERE probe = '{probe}'");
        wait_for(&servers[0], &sql, sqlite_count(db, "calls"));
        let sql = format!("SELECT count() FROM calliper.streams FINAL WHERE probe = '{probe}'");
        wait_for(&servers[0], &sql, sqlite_count(db, "streams"));
    }
    let env = [("CALLIPER_CLICKHOUSE_PASSWORD", PASSWORD)];
    let reader = ["--clickhouse", &urls, "--clickhouse-user", READER];
    let central = Console::serve(&reader, "127.0.0.1:0", &env);
    let own: Vec<Console> =
        sites.iter().map(|(_, _, _, db)| Console::start(db, "127.0.0.1:0", &[], &[])).collect();
    let (all, list) = calls(&central, "");
    let total: usize = all.values().sum();
    let mut invites: Vec<i64> = list.iter().map(|c| c["invite_ns"].as_i64().unwrap()).collect();
    invites.sort_unstable();
    let since = format!("from={}&to={}", invites[total / 2], invites[total - 5]);
    let mut selective = 0;
    let mut alerted_calls = 0;
    let mut details = 0;
    // The alert filter, for every kind the probes raised.
    let mut kinds = std::collections::BTreeSet::new();
    for console in &own {
        let alerts = console.get("/api/alerts?limit=1000", &[]).json();
        for a in alerts["rows"].as_array().unwrap() {
            kinds.insert(format!("alert={}", a["kind"].as_str().unwrap()));
        }
    }
    assert!(!kinds.is_empty(), "no alerts to search by");
    let alerted = kinds.iter().map(String::as_str);
    let fixed = [
        &since,
        "",
        "caller=sipp",
        "caller=*a*",
        "callee=?000",
        "status=2xx",
        "status=200",
        "status=none",
        "state=completed",
        "codec=pcmu",
        "codec=PCMA",
        "ip=127.0.0.0/8",
        "ip=10.0.0.0/8",
        "ip=::/0",
        "ip=fec0::/16",
        "ip=fe80::21a:a0ff:fe07:32e0",
        "mos_below=4",
        "loss_above=2",
        "min_duration=5",
        "max_duration=2",
        "user_agent=*",
        "sort=mos&order=asc",
        "sort=duration",
        "sort=status&order=asc",
        "sort=setup_delay",
        "from=1700000000000000000&to=2000000000000000000",
    ];
    for query in fixed.into_iter().chain(alerted) {
        let (got, list) = calls(&central, query);
        let mut want = BTreeMap::new();
        for (site, console) in sites.iter().zip(&own) {
            let (theirs, _) = calls(console, query);
            // The site's calls, and only those, carry its name.
            let (mine, _) = calls(&central, &format!("{query}&probe={}", site.0));
            assert_eq!(mine, theirs, "{query} at {}: {:?}", site.0, missing(&mine, &theirs));
            for (k, n) in theirs {
                *want.entry(k).or_default() += n;
            }
        }
        assert_eq!(
            got,
            want,
            "{query}: only in ClickHouse {:?}, only in SQLite {:?}",
            missing(&got, &want),
            missing(&want, &got)
        );
        let n: usize = got.values().sum();
        if n > 0 && n < total {
            selective += 1;
        }
        if query.starts_with("alert=") {
            alerted_calls += n;
        }
        // Each call in full, as its own probe's console gives it.
        if query.starts_with("codec=pcmu") || query.starts_with("caller=sipp") {
            for c in list.iter().take(20) {
                let site = sites.iter().position(|s| s.0 == c["probe"]).unwrap();
                let detail =
                    central.get(&format!("/api/calls/{}", c["id"].as_str().unwrap()), &[]).json();
                let (_, theirs) =
                    calls(&own[site], &format!("call_id={}", enc(c["call_id"].as_str().unwrap())));
                let theirs = theirs
                    .iter()
                    .find(|t| canonical(t, &["id"]) == canonical(c, &["id", "probe"]))
                    .unwrap();
                let local = own[site].get(&format!("/api/calls/{}", theirs["id"]), &[]).json();
                // Each list without the stores' own ids, in time order (rows
                // of the same time are in insertion order in SQLite, by
                // record id in ClickHouse: compared as sets).
                let listed = |d: &Value, key: &str| -> Vec<String> {
                    let rows = d[key].as_array().unwrap_or_else(|| panic!("no {key} in {d}"));
                    let times: Vec<i64> = rows
                        .iter()
                        .map(|r| r["ts_ns"].as_i64().or(r["first_ns"].as_i64()).unwrap())
                        .collect();
                    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{key} out of order");
                    let mut rows: Vec<String> =
                        rows.iter().map(|s| canonical(s, &["id", "call"])).collect();
                    rows.sort();
                    rows
                };
                for key in ["streams", "messages", "alerts", "related_streams"] {
                    assert_eq!(
                        listed(&detail, key),
                        listed(&local, key),
                        "{key} of {}",
                        c["call_id"]
                    );
                }
                assert!(!listed(&detail, "streams").is_empty());
                assert!(!listed(&detail, "messages").is_empty());
                assert_eq!(detail["loss_by_leg"], local["loss_by_leg"]);
                assert_eq!(detail["truncated"], local["truncated"]);
                details += 1;
            }
        }
    }
    assert!(details >= 30, "only {details} calls compared in full");
    assert!(
        alerted_calls > 0 && selective >= 15,
        "only {selective} searches selected some calls of {total}; {alerted_calls} by alerts"
    );
    // Hostile text is found by its exact bytes, and read back as stored.
    let (_, nasty) =
        calls(&central, &format!("call_id={}", enc("'); DROP TABLE calls; --{\"a\":1}@h")));
    assert_eq!(nasty.len(), 1);
    assert_eq!(nasty[0]["caller_user_agent"], "'); DROP TABLE calls; --{\"a\":1}@h");
    let (_, emoji) = calls(&central, &format!("user_agent={}", enc("emoji?-*")));
    assert_eq!(emoji.len(), 1, "? is one character, a 4-byte one too");
    pages_equal(&central, &own);
    csv_equal(&central, &own);
    let parts = central.get("/api/console", &[]).json();
    assert_eq!(parts["store"], "clickhouse");
    in_the_browser(&central);
}

/// The KPI page's answers and the lists over ClickHouse equal both
/// probes' own consoles' together: counters and calls added, the most
/// calls open the larger, list rows the same (without the stores' ids).
fn pages_equal(central: &Console, own: &[Console]) {
    let get = |c: &Console, path: &str| {
        let r = c.get(path, &[]);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        r.json()
    };
    for dimension in ["total", "trunk", "caller_domain", "user_agent"] {
        let path = format!("/api/kpi?dimension={dimension}&interval=60");
        let mut want: BTreeMap<(i64, String), Vec<u64>> = BTreeMap::new();
        for console in own {
            for row in get(console, &path)["rows"].as_array().unwrap() {
                let key =
                    (row["start_ns"].as_i64().unwrap(), row["key"].as_str().unwrap().to_string());
                let counts: Vec<u64> = row["counts"]
                    .as_object()
                    .unwrap()
                    .values()
                    .map(|v| v.as_u64().unwrap())
                    .collect();
                let sum = want.entry(key).or_insert(vec![0; counts.len()]);
                sum.iter_mut().zip(counts).for_each(|(s, c)| *s += c);
            }
        }
        let got: BTreeMap<(i64, String), Vec<u64>> = get(central, &path)["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                let key =
                    (row["start_ns"].as_i64().unwrap(), row["key"].as_str().unwrap().to_string());
                (
                    key,
                    row["counts"]
                        .as_object()
                        .unwrap()
                        .values()
                        .map(|v| v.as_u64().unwrap())
                        .collect(),
                )
            })
            .collect();
        assert!(!got.is_empty(), "{path}");
        assert_eq!(got, want, "{path}");
    }
    let path = "/api/kpi/load?interval=60";
    let mut want: BTreeMap<i64, [i64; 3]> = BTreeMap::new();
    for console in own {
        for row in get(console, path)["rows"].as_array().unwrap() {
            let sum = want.entry(row["start_ns"].as_i64().unwrap()).or_default();
            sum[0] = sum[0].max(row["max_calls_open"].as_i64().unwrap());
            sum[1] += row["calls_started"].as_i64().unwrap();
            sum[2] += row["calls_ended"].as_i64().unwrap();
        }
    }
    let got: BTreeMap<i64, [i64; 3]> = get(central, path)["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = |k: &str| r[k].as_i64().unwrap();
            (n("start_ns"), [n("max_calls_open"), n("calls_started"), n("calls_ended")])
        })
        .collect();
    assert!(!got.is_empty());
    assert_eq!(got, want, "{path}");
    let bands = |v: &Value| -> Vec<u64> {
        let mut b: Vec<u64> =
            v["bands"].as_array().unwrap().iter().map(|b| b["calls"].as_u64().unwrap()).collect();
        b.push(v["answered_without_mos"].as_u64().unwrap());
        b
    };
    let mut want = vec![0; 9];
    for console in own {
        want.iter_mut().zip(bands(&get(console, "/api/kpi/mos"))).for_each(|(w, b)| *w += b);
    }
    assert_eq!(bands(&get(central, "/api/kpi/mos")), want);
    assert!(want.iter().sum::<u64>() > 400);
    for list in ["/api/alerts?limit=1000", "/api/registrations?limit=1000"] {
        let rows = |c: &Console| -> Vec<String> {
            let mut r: Vec<String> = get(c, list)["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| canonical(r, &["id", "probe"]))
                .collect();
            r.sort();
            r
        };
        let mut want: Vec<String> = own.iter().flat_map(rows).collect();
        want.sort();
        assert!(!want.is_empty(), "{list}");
        assert_eq!(rows(central), want, "{list}");
    }
}

/// The web console shows both probes' calls, and a call's page its SIP
/// ladder.
fn in_the_browser(central: &Console) {
    let Some(b) = crate::browser::Browser::start() else {
        return;
    };
    let url = format!("http://127.0.0.1:{}/", central.addr.port());
    b.go(&format!("{url}#/calls?limit=1000&sort=mos&order=asc"));
    let probes = b.wait(
        "the calls of both probes",
        "const r = [...document.querySelectorAll('#calls tbody tr')].map((t) => t.children[1].textContent); \
         return r.length ? [...new Set(r)].sort() : null",
    );
    assert_eq!(probes, serde_json::json!(["site-a", "site-b"]));
    b.screenshot("clickhouse-calls.png");
    b.js("document.querySelector('#calls tbody tr').click()");
    let arrows = b.wait(
        "the call's SIP ladder",
        "const n = document.querySelectorAll('.flow-view .arrow').length; return n > 0 ? n : null",
    );
    assert!(arrows.as_u64().unwrap() > 0);
    assert_eq!(b.js("return document.getElementById('no-detail') === null"), true);
}

/// The CSV export over ClickHouse holds the rows both probes' own exports
/// hold together (without the stores' ids and the probe column), field by
/// field, for every call and for a selective search.
fn csv_equal(central: &Console, own: &[Console]) {
    for query in ["", "?caller=sipp", "?mos_below=4&sort=mos&order=asc"] {
        let path = format!("/api/calls.csv{query}");
        let rows = |c: &Console| {
            let r = c.get(&path, &[]);
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            assert_eq!(r.header("x-calliper-more"), Some("false"), "{path}");
            let mut table = csv_records(&r.text());
            if table.is_empty() {
                // No call, no header.
                return Vec::new();
            }
            let header = table.remove(0);
            let mut rows: Vec<String> = table
                .into_iter()
                .map(|fields| {
                    assert_eq!(fields.len(), header.len(), "{path}");
                    let row: BTreeMap<&str, String> = header
                        .iter()
                        .map(String::as_str)
                        .zip(fields)
                        .filter(|(name, _)| !["id", "probe"].contains(name))
                        .collect();
                    format!("{row:?}")
                })
                .collect();
            rows.sort();
            rows
        };
        let got = rows(central);
        let mut want: Vec<String> = own.iter().flat_map(rows).collect();
        want.sort();
        assert!(!got.is_empty(), "{path}: no rows");
        assert_eq!(got, want, "{path}");
    }
}

/// The records of RFC 4180 text: fields split at commas, quoted fields
/// with doubled quotes, records ended by CRLF (inside quotes too).
fn csv_records(text: &str) -> Vec<Vec<String>> {
    let (mut records, mut record, mut field) = (Vec::new(), Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\r') if chars.peek() == Some(&'\n') => {
                chars.next();
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(!quoted && field.is_empty() && record.is_empty(), "CSV cut short");
    records
}
