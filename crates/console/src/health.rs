//! Probe health (`GET /api/health`, and the `calliper_probe_*` and
//! `calliper_engine_*` metrics): what the probe publishes about once a
//! second (its input, packets, the capture ring's drops, what its queues
//! dropped, the engine's counters) and what the console reads itself when
//! asked (the process's memory, the interfaces' kernel counters).

use crate::api::{json_body, ApiError};
use crate::exposition::Family;
use crate::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What a running probe last said about itself (cheap to clone; the probe
/// publishes, the console reads).
#[derive(Clone, Default)]
pub struct ProbeHealth(Arc<Mutex<Option<Arc<HealthReport>>>>);

impl std::fmt::Debug for ProbeHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeHealth")
    }
}

/// The capture ring's own counts (live capture only).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct RingCounts {
    /// Packets the kernel put in the ring.
    pub received: u64,
    /// Packets the kernel dropped because the ring was full.
    pub dropped: u64,
    /// Times the ring was full.
    pub ring_full: u64,
}

/// One report of the probe's state.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HealthReport {
    /// When the probe started (ns since the epoch).
    pub started_ns: i64,
    /// When this report was made.
    pub updated_ns: i64,
    /// Interfaces or files read.
    pub input: String,
    /// Interfaces captured on (none when reading files).
    pub interfaces: Vec<String>,
    /// Analysis threads.
    pub threads: u64,
    /// Packets handed to the analysis.
    pub packets: u64,
    /// The capture ring's counts (live capture only).
    pub capture: Option<RingCounts>,
    /// Calls open now (one analysis thread only: shards do not say).
    pub calls_open: Option<u64>,
    /// Call records handed to the outputs.
    pub calls_written: u64,
    /// What each output queue and tracker dropped, by its summary key.
    pub dropped: BTreeMap<&'static str, u64>,
    /// The engine's counters, as the run's summary gives them.
    pub engine: serde_json::Value,
    /// The ClickHouse sink's delivery (`--clickhouse`).
    pub clickhouse: Option<calliper_store::clickhouse::Report>,
}

impl ProbeHealth {
    /// No report yet.
    pub fn new() -> ProbeHealth {
        ProbeHealth::default()
    }

    /// Replaces the last report.
    pub fn publish(&self, report: HealthReport) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(report));
    }

    fn latest(&self) -> Option<Arc<HealthReport>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// An interface's kernel counters (`/sys/class/net/NAME/statistics`):
/// what the NIC and driver saw, before the capture ring.
#[derive(Debug, Default, Serialize)]
struct InterfaceCounts {
    name: String,
    rx_packets: Option<u64>,
    rx_bytes: Option<u64>,
    rx_dropped: Option<u64>,
    rx_errors: Option<u64>,
    /// Sent: the probe captures both directions, the kernel counts each.
    tx_packets: Option<u64>,
}

/// True for a name the kernel could have given an interface (no path
/// separators, not `.` or `..`): only such names are looked up in sysfs.
fn interface_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
}

fn interface_counts(name: &str) -> InterfaceCounts {
    let read = |what: &str| -> Option<u64> {
        if !interface_name(name) {
            return None;
        }
        let path = format!("/sys/class/net/{name}/statistics/{what}");
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    };
    InterfaceCounts {
        name: name.to_string(),
        rx_packets: read("rx_packets"),
        rx_bytes: read("rx_bytes"),
        rx_dropped: read("rx_dropped"),
        rx_errors: read("rx_errors"),
        tx_packets: read("tx_packets"),
    }
}

/// The process's resident memory now and at its peak, in bytes
/// (`/proc/self/status`).
fn memory() -> (Option<u64>, Option<u64>) {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return (None, None);
    };
    let field = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        let kib: u64 = line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The report as the API gives it: with uptime, memory and interfaces.
fn answer(r: &HealthReport) -> serde_json::Value {
    let (rss, peak) = memory();
    let interfaces: Vec<InterfaceCounts> =
        r.interfaces.iter().map(|n| interface_counts(n)).collect();
    let mut v = serde_json::to_value(r).unwrap_or_default();
    if let serde_json::Value::Object(o) = &mut v {
        o.insert("started".into(), calliper_store::rfc3339(r.started_ns).into());
        o.insert("updated".into(), calliper_store::rfc3339(r.updated_ns).into());
        o.insert(
            "uptime_seconds".into(),
            (now_ns().saturating_sub(r.started_ns).max(0) / 1_000_000_000).into(),
        );
        o.insert(
            "memory".into(),
            serde_json::json!({ "resident_bytes": rss, "peak_resident_bytes": peak }),
        );
        o.insert("interfaces".into(), serde_json::to_value(interfaces).unwrap_or_default());
    }
    v
}

fn no_probe() -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        "no probe here: health is served by `calliper probe --http`, not by `calliper serve`"
            .into(),
    )
}

/// `GET /api/health`.
pub(crate) async fn serve(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
) -> Result<Response, ApiError> {
    let health = state.health.as_ref().ok_or_else(no_probe)?;
    let Some(report) = health.latest() else {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "the probe is starting: its first report comes within a second".into(),
        ));
    };
    let body = serde_json::to_vec(&answer(&report))
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(json_body(body))
}

/// The ClickHouse sink's delivery (docs/scale-out.md).
fn render_clickhouse(c: &calliper_store::clickhouse::Report, o: &mut String) {
    Family::new(
        o,
        "calliper_clickhouse_rows_total",
        "counter",
        "Rows of calls and streams for ClickHouse, by what became of them: sent (taken by a server), spooled (kept while none answered or the queue was full), retried (sent from the spool), rejected (refused 5 times or by the check of the tables, set aside: kept as .rejected files in a spool directory), dropped (lost: the spool full or unwritable, or held in memory at the end).",
    )
    .by(
        "outcome",
        [
            ("sent", c.sent),
            ("spooled", c.spooled),
            ("retried", c.retried),
            ("rejected", c.rejected),
            ("dropped", c.dropped),
        ],
    );
    Family::new(
        o,
        "calliper_clickhouse_rows_waiting",
        "gauge",
        "Rows in the spool now, waiting for a server.",
    )
    .value(c.waiting);
}

/// Counts by name.
type Named = Vec<(String, u64)>;

/// The engine's counters as `(name, value)`: a nested group's counters
/// are named `group_counter`; anomalies apart. Names come from the
/// counters' definitions (and the fixed anomaly and SIP kind lists), never
/// from packets.
fn engine_counters(v: &serde_json::Value) -> (Named, Named) {
    let (mut counters, mut anomalies) = (Vec::new(), Vec::new());
    let Some(all) = v.as_object() else {
        return (counters, anomalies);
    };
    for (name, v) in all {
        match v {
            serde_json::Value::Number(n) => counters.push((name.clone(), n.as_u64().unwrap_or(0))),
            serde_json::Value::Object(group) => {
                for (k, n) in group {
                    let n = n.as_u64().unwrap_or(0);
                    if name == "anomalies" {
                        anomalies.push((k.clone(), n));
                    } else {
                        counters.push((format!("{name}_{k}"), n));
                    }
                }
            }
            _ => {}
        }
    }
    (counters, anomalies)
}

/// The probe's metrics, appended to a scrape (nothing before the first
/// report).
pub(crate) fn render_metrics(health: &ProbeHealth, o: &mut String) {
    let Some(r) = health.latest() else {
        return;
    };
    let up = now_ns().saturating_sub(r.started_ns).max(0) as f64 / 1e9;
    Family::new(o, "calliper_probe_uptime_seconds", "gauge", "Seconds since the probe started.")
        .value(format_args!("{up:.3}"));
    Family::new(o, "calliper_probe_packets_total", "counter", "Packets handed to the analysis.")
        .value(r.packets);
    if let Some(c) = r.capture {
        for (name, help, n) in [
            ("received", "Packets the kernel put in the capture ring.", c.received),
            ("dropped", "Packets the kernel dropped because the capture ring was full.", c.dropped),
            ("ring_full", "Times the capture ring was full.", c.ring_full),
        ] {
            let metric = format!("calliper_probe_capture_{name}_total");
            Family::new(o, &metric, "counter", help).value(n);
        }
    }
    render_interfaces(&r.interfaces, o);
    let (rss, _) = memory();
    let help = "Resident memory of the probe process.";
    let memory = Family::new(o, "calliper_probe_resident_memory_bytes", "gauge", help);
    if let Some(rss) = rss {
        memory.value(rss);
    }
    let help = "Calls open now (one analysis thread only).";
    let open = Family::new(o, "calliper_probe_calls_open", "gauge", help);
    if let Some(n) = r.calls_open {
        open.value(n);
    }
    let help = "Call records handed to the outputs.";
    Family::new(o, "calliper_probe_calls_written_total", "counter", help).value(r.calls_written);
    let help = "What the probe's output queues and trackers dropped, by what (the summary's key).";
    Family::new(o, "calliper_probe_dropped_total", "counter", help).by("what", &r.dropped);
    let (counters, anomalies) = engine_counters(&r.engine);
    let help = "The engine's counters (docs/architecture.md), by name.";
    Family::new(o, "calliper_engine_counter_total", "counter", help).by("counter", counters);
    let help = "Malformed or hostile input the engine counted, by kind.";
    Family::new(o, "calliper_engine_anomalies_total", "counter", help).by("kind", anomalies);
    if let Some(c) = &r.clickhouse {
        render_clickhouse(c, o);
    }
}

/// The kernel's receive counters of the interfaces captured on.
fn render_interfaces(names: &[String], o: &mut String) {
    let interfaces: Vec<InterfaceCounts> = names.iter().map(|n| interface_counts(n)).collect();
    for (name, help, get) in [
        (
            "packets",
            "Packets the interface received (kernel counter).",
            (|i: &InterfaceCounts| i.rx_packets) as fn(&InterfaceCounts) -> Option<u64>,
        ),
        ("bytes", "Bytes the interface received (kernel counter).", |i| i.rx_bytes),
        (
            "dropped",
            "Packets the interface's driver or stack dropped on receipt (kernel counter).",
            |i| i.rx_dropped,
        ),
        ("errors", "Receive errors of the interface (kernel counter).", |i| i.rx_errors),
    ] {
        let metric = format!("calliper_probe_interface_receive_{name}_total");
        let rows = interfaces.iter().filter_map(|i| Some((&i.name, get(i)?)));
        Family::new(o, &metric, "counter", help).by("interface", rows);
    }
}

/// Metric family names the probe adds (for the docs' test).
#[cfg(test)]
pub(crate) fn families() -> Vec<String> {
    let h = ProbeHealth::new();
    h.publish(HealthReport {
        capture: Some(RingCounts::default()),
        clickhouse: Some(Default::default()),
        ..HealthReport::default()
    });
    let mut o = String::new();
    render_metrics(&h, &mut o);
    o.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap_or("").to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clickhouse_sinks_counts_are_metrics() {
        let h = ProbeHealth::new();
        h.publish(HealthReport {
            clickhouse: Some(calliper_store::clickhouse::Report {
                sent: 7,
                spooled: 5,
                waiting: 3,
                retried: 2,
                rejected: 1,
                dropped: 4,
                ..Default::default()
            }),
            ..HealthReport::default()
        });
        let mut o = String::new();
        render_metrics(&h, &mut o);
        for line in [
            "calliper_clickhouse_rows_total{outcome=\"sent\"} 7",
            "calliper_clickhouse_rows_total{outcome=\"spooled\"} 5",
            "calliper_clickhouse_rows_total{outcome=\"retried\"} 2",
            "calliper_clickhouse_rows_total{outcome=\"rejected\"} 1",
            "calliper_clickhouse_rows_total{outcome=\"dropped\"} 4",
            "calliper_clickhouse_rows_waiting 3",
        ] {
            assert!(o.lines().any(|l| l == line), "{line} not in\n{o}");
        }
    }

    /// Both directions are read, since the probe captures both.
    #[test]
    fn interface_counts_read_received_and_sent() {
        let lo = interface_counts("lo");
        assert!(lo.rx_packets.is_some() && lo.tx_packets.is_some(), "{lo:?}");
        assert!(interface_counts("no-such-if0").tx_packets.is_none());
    }

    #[test]
    fn only_plain_interface_names_reach_sysfs() {
        for ok in ["eth0", "ens3f1", "veth-a.100"] {
            assert!(interface_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "../../etc", "a/b", "eth 0", "a\nb", "0123456789abcdefg"] {
            assert!(!interface_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn loopback_counts_are_read_and_memory_is_known() {
        let lo = interface_counts("lo");
        assert!(lo.rx_packets.is_some(), "{lo:?}");
        assert!(interface_counts("../..").rx_packets.is_none());
        let (rss, peak) = memory();
        assert!(rss.unwrap() > 0 && peak.unwrap() >= rss.unwrap());
    }

    #[test]
    fn engine_counters_are_flattened_by_name() {
        let v = serde_json::json!({
            "udp": 3, "anomalies": {"sip_bad_line": 2}, "defrag": {"evicted": 1}, "input": "x"
        });
        let (c, a) = engine_counters(&v);
        assert_eq!(c, vec![("defrag_evicted".to_string(), 1), ("udp".to_string(), 3)]);
        assert_eq!(a, vec![("sip_bad_line".to_string(), 2)]);
    }
}
