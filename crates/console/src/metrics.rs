//! `GET /metrics`: Prometheus counters and histograms of what the database
//! holds, read incrementally — each scrape reads only the rows added since
//! the last one (by row id), at most [`MAX_ROWS_PER_SCRAPE`] per table, so
//! a scrape costs the same over ten calls or ten million. Labels take only
//! values from fixed lists (`other` for the rest): a crafted database or
//! packet cannot make series without bound. Names and meanings:
//! `docs/console.md`.

use crate::api::ApiError;
use crate::exposition::Family;
use crate::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use rusqlite::Connection;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Most new rows of one table read by one scrape (the rest wait for the
/// next; `calliper_console_catching_up` says so).
pub const MAX_ROWS_PER_SCRAPE: i64 = 1_000_000;

use crate::params::STATES;
/// Request methods by name: the SIP parser's list (one definition).
use calliper_sip::METHODS;
const CLASSES: &[&str] = &["1xx", "2xx", "3xx", "4xx", "5xx", "6xx"];
const ALERTS: &[&str] =
    &["low_mos", "high_loss", "no_rtp", "one_way_audio", "low_asr", "scanning", "scanner_agent"];
const OUTCOMES: &[&str] = &["registered", "unregistered", "challenged", "auth_failed", "failed"];

/// `v` if it is in `known`, else `other`.
fn label(known: &[&'static str], v: Option<&str>) -> &'static str {
    v.and_then(|v| known.iter().find(|k| **k == v).copied()).unwrap_or("other")
}

fn class(status: Option<i64>) -> &'static str {
    match status {
        Some(s @ 100..=699) => CLASSES[(s / 100 - 1) as usize],
        Some(_) => "other",
        None => "none",
    }
}

/// A Prometheus histogram.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram { bounds, counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }

    fn observe(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        for (b, c) in self.bounds.iter().zip(&mut self.counts) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let mut f = Family::new(out, name, "histogram", help);
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            f.series("_bucket", &[("le", &b.to_string())], c);
        }
        f.series("_bucket", &[("le", "+Inf")], self.count);
        f.series("_sum", &[], self.sum);
        f.series("_count", &[], self.count);
    }
}

/// Everything counted so far, and where each table was read up to.
#[derive(Debug, Clone)]
struct Totals {
    last: BTreeMap<&'static str, i64>,
    calls: BTreeMap<(&'static str, &'static str), u64>,
    mos: Histogram,
    setup_delay: Histogram,
    streams: u64,
    stream_packets: u64,
    stream_lost: u64,
    requests: BTreeMap<&'static str, u64>,
    responses: BTreeMap<&'static str, u64>,
    alerts: BTreeMap<&'static str, u64>,
    registrations: BTreeMap<&'static str, u64>,
    /// Call attempts and answers by named trunk (`--trunk NAME=ADDR`).
    trunks: BTreeMap<String, (u64, u64)>,
    catching_up: bool,
}

/// Most trunks given series of their own; the rest count as `other`.
pub const MAX_TRUNKS: usize = 100;

/// A trunk's label: a name the operator gave (`--trunk`), not the
/// `caller>callee` addresses the KPI rows use for calls outside a trunk,
/// and at most [`MAX_TRUNKS`] of them; anything else is `other`.
fn trunk(known: &BTreeMap<String, (u64, u64)>, key: Option<String>) -> String {
    match key {
        Some(k)
            if !k.is_empty()
                && k.len() <= 64
                && !k.contains('>')
                && k.chars().all(|c| c.is_ascii_graphic())
                && (known.contains_key(&k) || known.len() < MAX_TRUNKS) =>
        {
            k
        }
        _ => "other".into(),
    }
}

impl Default for Totals {
    fn default() -> Self {
        Totals {
            last: BTreeMap::new(),
            calls: BTreeMap::new(),
            mos: Histogram::new(&[1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.3, 4.5]),
            setup_delay: Histogram::new(&[0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]),
            streams: 0,
            stream_packets: 0,
            stream_lost: 0,
            requests: BTreeMap::new(),
            responses: BTreeMap::new(),
            alerts: BTreeMap::new(),
            registrations: BTreeMap::new(),
            trunks: BTreeMap::new(),
            catching_up: false,
        }
    }
}

type Row<'a> = &'a rusqlite::Row<'a>;

// Column readers that take what a crafted database holds: a value of
// another type counts as absent, never as an error that would stop every
// later scrape at the same row.
fn int(r: Row<'_>, i: usize) -> Option<i64> {
    r.get_ref(i).ok()?.as_i64().ok()
}
fn real(r: Row<'_>, i: usize) -> Option<f64> {
    match r.get_ref(i).ok()? {
        rusqlite::types::ValueRef::Real(f) => Some(f),
        rusqlite::types::ValueRef::Integer(n) => Some(n as f64),
        _ => None,
    }
}
fn text(r: Row<'_>, i: usize) -> Option<String> {
    match r.get_ref(i).ok()? {
        rusqlite::types::ValueRef::Text(t) => std::str::from_utf8(t).ok().map(str::to_string),
        _ => None,
    }
}

impl Totals {
    /// Reads `table`'s rows after the last one read (by row id, which
    /// every table checked at opening has), `columns` of each, into `add`.
    fn read(
        &mut self,
        conn: &Connection,
        table: &'static str,
        columns: &str,
        mut add: impl FnMut(&mut Self, Row<'_>),
    ) -> Result<(), calliper_store::StoreError> {
        let from = self.last.get(table).copied().unwrap_or(0);
        let mut q = conn.prepare(&format!(
            "SELECT rowid, {columns} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT ?"
        ))?;
        let mut rows = q.query(rusqlite::params![from, MAX_ROWS_PER_SCRAPE])?;
        let (mut last, mut n) = (from, 0);
        while let Some(r) = rows.next()? {
            last = r.get(0)?;
            n += 1;
            add(self, r);
        }
        self.last.insert(table, last);
        self.catching_up |= n == MAX_ROWS_PER_SCRAPE;
        Ok(())
    }

    /// Reads what was added since the last update. When a table's row ids
    /// went back (rows deleted, the file replaced) the counts start again:
    /// Prometheus takes that as a counter reset.
    fn update(&mut self, conn: &Connection) -> Result<(), calliper_store::StoreError> {
        for (table, last) in &self.last {
            let top: i64 =
                conn.query_row(&format!("SELECT coalesce(max(rowid), 0) FROM {table}"), [], |r| {
                    r.get(0)
                })?;
            if top < *last {
                *self = Totals::default();
                break;
            }
        }
        self.catching_up = false;
        self.read(conn, "calls", "state, final_status, worst_mos, setup_delay_ms", |t, r| {
            let state = label(STATES, text(r, 1).as_deref());
            *t.calls.entry((state, class(int(r, 2)))).or_default() += 1;
            if let Some(m) = real(r, 3) {
                t.mos.observe(m);
            }
            if let Some(d) = real(r, 4) {
                t.setup_delay.observe(d / 1000.0);
            }
        })?;
        self.read(conn, "streams", "packets, lost", |t, r| {
            t.streams += 1;
            let count = |i| int(r, i).unwrap_or(0).max(0) as u64;
            t.stream_packets = t.stream_packets.saturating_add(count(1));
            t.stream_lost = t.stream_lost.saturating_add(count(2));
        })?;
        self.read(conn, "sip_messages", "method, status", |t, r| match text(r, 1) {
            Some(m) => *t.requests.entry(label(METHODS, Some(&m))).or_default() += 1,
            None => *t.responses.entry(class(int(r, 2))).or_default() += 1,
        })?;
        self.read(conn, "alerts", "kind", |t, r| {
            let k = label(ALERTS, text(r, 1).as_deref());
            *t.alerts.entry(k).or_default() += 1;
        })?;
        self.read(conn, "registrations", "outcome", |t, r| {
            let k = label(OUTCOMES, text(r, 1).as_deref());
            *t.registrations.entry(k).or_default() += 1;
        })?;
        self.read(conn, "kpi", "dimension, key, attempts, answered", |t, r| {
            if text(r, 1).as_deref() == Some("trunk") {
                let k = trunk(&t.trunks, text(r, 2));
                let count = |i| int(r, i).unwrap_or(0).max(0) as u64;
                let e = t.trunks.entry(k).or_default();
                e.0 = e.0.saturating_add(count(3));
                e.1 = e.1.saturating_add(count(4));
            }
        })?;
        Ok(())
    }

    fn render(&self) -> String {
        let mut o = String::new();
        let help = "Calls stored, by how they ended and the class of their final status.";
        let mut calls = Family::new(&mut o, "calliper_calls_total", "counter", help);
        for ((state, class), n) in &self.calls {
            calls.sample(&[("state", state), ("status_class", class)], n);
        }
        self.mos.write(&mut o, "calliper_call_mos", "Worst stream MOS of each scored call.");
        self.setup_delay.write(
            &mut o,
            "calliper_call_setup_delay_seconds",
            "Session request delay (RFC 6076 SRD: INVITE to its first response other than 100) of each call.",
        );
        for (name, help, n) in [
            ("calliper_streams_total", "RTP streams stored.", self.streams),
            (
                "calliper_stream_packets_total",
                "RTP packets of the stored streams.",
                self.stream_packets,
            ),
            (
                "calliper_stream_lost_packets_total",
                "RTP packets the stored streams lost (by sequence numbers).",
                self.stream_lost,
            ),
        ] {
            Family::new(&mut o, name, "counter", help).value(n);
        }
        for (name, help, label, rows) in [
            (
                "calliper_sip_requests_total",
                "SIP requests stored, by method.",
                "method",
                &self.requests,
            ),
            (
                "calliper_sip_responses_total",
                "SIP responses stored, by status class.",
                "status_class",
                &self.responses,
            ),
            ("calliper_alerts_total", "Alerts raised, by kind.", "kind", &self.alerts),
            (
                "calliper_registrations_total",
                "REGISTER transactions, by outcome.",
                "outcome",
                &self.registrations,
            ),
        ] {
            Family::new(&mut o, name, "counter", help).by(label, rows);
        }
        for (name, help, pick) in [
            (
                "attempts",
                "Call attempts (INVITEs) by trunk.",
                (|v: &(u64, u64)| v.0) as fn(&(u64, u64)) -> u64,
            ),
            ("answered", "Calls answered by trunk.", |v| v.1),
        ] {
            let metric = format!("calliper_trunk_{name}_total");
            let rows = self.trunks.iter().map(|(k, v)| (k, pick(v)));
            Family::new(&mut o, &metric, "counter", help).by("trunk", rows);
        }
        let help =
            "1 when the last scrape left rows for the next (a large database, first scrapes).";
        Family::new(&mut o, "calliper_console_catching_up", "gauge", help)
            .value(u8::from(self.catching_up));
        o
    }
}

/// The totals, shared by scrapes (one at a time updates them).
#[derive(Default)]
pub(crate) struct Metrics {
    totals: Arc<Mutex<Totals>>,
}

/// `GET /metrics`.
pub(crate) async fn serve(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
) -> Result<Response, ApiError> {
    let totals = state.metrics.totals.clone();
    let mut text = match (state.db.as_deref(), &state.health) {
        // A probe without a database: its own metrics only; ClickHouse
        // has its own (system.metrics), and its calls are counted there.
        (None, Some(_)) | (Some(crate::db::Store::ClickHouse(_)), _) => String::new(),
        _ => {
            crate::db::run(&state.db, &state.scrapes, move |store| {
                let conn = store.sqlite("the database's metrics")?;
                let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
                // Updated on a copy: a failed read leaves the totals as they were.
                let mut next = t.clone();
                next.update(conn)?;
                *t = next;
                Ok(t.render())
            })
            .await?
        }
    };
    if let Some(h) = &state.health {
        crate::health::render_metrics(h, &mut text);
    }
    crate::listen::render_metrics(&mut text);
    let mut r = text.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_from_fixed_lists() {
        assert_eq!(label(METHODS, Some("INVITE")), "INVITE");
        assert_eq!(label(METHODS, Some("X-EVIL\"}")), "other");
        assert_eq!(label(STATES, None), "other");
        assert_eq!(class(Some(486)), "4xx");
        assert_eq!(class(Some(99)), "other");
        assert_eq!(class(None), "none");
        let mut known = BTreeMap::new();
        assert_eq!(trunk(&known, Some("carrier-a".into())), "carrier-a");
        assert_eq!(trunk(&known, Some("10.0.0.1>10.0.0.2".into())), "other");
        assert_eq!(trunk(&known, Some("a b".into())), "other");
        assert_eq!(trunk(&known, None), "other");
        for i in 0..MAX_TRUNKS {
            known.insert(format!("t{i}"), (0, 0));
        }
        assert_eq!(trunk(&known, Some("one-more".into())), "other");
        assert_eq!(trunk(&known, Some("t7".into())), "t7");
    }

    /// Metric family names, from what a scrape says.
    fn families() -> Vec<String> {
        let mut names: Vec<String> = Totals::default()
            .render()
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        names.extend(crate::health::families());
        names
    }

    #[test]
    fn the_docs_and_the_dashboard_name_only_real_metrics() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        let doc = std::fs::read_to_string(root.join("console.md")).unwrap();
        let names = families();
        for n in &names {
            assert!(doc.contains(&format!("`{n}`")), "docs/console.md does not describe {n}");
        }
        for (p, _) in crate::params::PARAMETERS {
            assert!(
                doc.contains(&format!("`{p}`")),
                "docs/console.md does not describe the parameter {p}"
            );
        }
        let dash: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(root.join("grafana-dashboard.json")).unwrap(),
        )
        .unwrap();
        let mut used = 0;
        for panel in dash["panels"].as_array().unwrap() {
            for t in panel["targets"].as_array().unwrap() {
                let expr = t["expr"].as_str().unwrap();
                for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if let Some(base) = word.strip_prefix("calliper_") {
                        let base = format!("calliper_{base}");
                        let family = ["_bucket", "_sum", "_count"]
                            .iter()
                            .find_map(|s| base.strip_suffix(s))
                            .unwrap_or(&base);
                        assert!(
                            names.iter().any(|n| n == family),
                            "the dashboard uses {word}, which no scrape gives"
                        );
                        used += 1;
                    }
                }
            }
        }
        assert!(used >= names.len(), "the dashboard uses {used} metrics");
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.5, 3.0, f64::NAN] {
            h.observe(v);
        }
        let mut s = String::new();
        h.write(&mut s, "x", "help");
        assert!(s.contains("x_bucket{le=\"1\"} 1\n"));
        assert!(s.contains("x_bucket{le=\"2\"} 2\n"));
        assert!(s.contains("x_bucket{le=\"+Inf\"} 3\n"));
        assert!(s.contains("x_sum 5\nx_count 3\n"));
    }
}
