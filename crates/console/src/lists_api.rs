//! The stored lists besides calls: `GET /api/alerts`, `GET
//! /api/registrations` (newest first, a time range, equality filters,
//! pages) and `GET /api/kpi` (the KPI counters summed per interval and key
//! of one dimension, with their ratios: docs/kpi.md).

use crate::api::{json_body, ApiError, PAGE_LIMIT};
use crate::params::{bad, instant, simple, whole};
use crate::State;
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use calliper_model::kpi::{Dimension, COUNTER_NAMES};
use calliper_store::{List, ListQuery};
use serde_json::json;
use std::sync::Arc;

/// Most KPI sums one answer holds.
pub const MAX_KPI_ROWS: usize = 10_000;

type Pairs = Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>;

fn pairs(q: Pairs) -> Result<Vec<(String, String)>, ApiError> {
    q.map(|Query(p)| p).map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))
}

async fn list(state: Arc<State>, list: List, query: Pairs) -> Result<Response, ApiError> {
    let pairs = pairs(query)?;
    let mut allowed = vec!["from", "to", "limit", "offset"];
    allowed.extend(list.filters());
    let mut q = ListQuery { limit: 50, ..ListQuery::default() };
    for (name, v) in simple(&pairs, &allowed)? {
        match name {
            "from" => q.from_ns = Some(instant(name, v)?),
            "to" => q.to_ns = Some(instant(name, v)?),
            "limit" => q.limit = whole(name, v, 1..=PAGE_LIMIT)?,
            "offset" => q.offset = whole(name, v, 0..=calliper_store::MAX_OFFSET)?,
            column => q.equals.push((column, v.to_string())),
        }
    }
    let (limit, offset) = (q.limit, q.offset);
    let body = crate::db::run(&state.db, &state.queries, move |store| {
        let (rows, more) = store.list_rows(list, &q)?;
        Ok(serde_json::to_vec(&json!({
            "rows": rows, "limit": limit, "offset": offset, "more": more,
        }))?)
    })
    .await?;
    Ok(json_body(body))
}

/// `GET /api/alerts`.
pub(crate) async fn alerts(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    query: Pairs,
) -> Result<Response, ApiError> {
    list(state, List::Alerts, query).await
}

/// `GET /api/registrations`.
pub(crate) async fn registrations(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    query: Pairs,
) -> Result<Response, ApiError> {
    list(state, List::Registrations, query).await
}

/// `GET /api/kpi?dimension=total&interval=3600&from=...&to=...`.
pub(crate) async fn kpi(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    query: Pairs,
) -> Result<Response, ApiError> {
    let KpiQuery { dimension, interval_s, from, until } =
        kpi_query(&pairs(query)?, &["dimension", "interval", "from", "to"])?;
    let body = crate::db::run(&state.db, &state.queries, move |store| {
        let interval_ns = i64::from(interval_s) * 1_000_000_000;
        let window = calliper_store::KpiWindow {
            dimension: dimension.name(),
            interval_ns,
            from_ns: from,
            until_ns: until,
            max_rows: MAX_KPI_ROWS + 1,
        };
        let mut sums = store.kpi_sums_between(&window)?;
        let more = sums.len() > MAX_KPI_ROWS;
        sums.truncate(MAX_KPI_ROWS);
        let rows: Vec<_> = sums
            .iter()
            .map(|s| {
                let counts: serde_json::Map<String, serde_json::Value> = COUNTER_NAMES
                    .iter()
                    .zip(s.counts.0)
                    .map(|(n, v)| (n.to_string(), v.into()))
                    .collect();
                json!({ "start_ns": s.start_ns, "key": s.key, "counts": counts, "figures": s.counts.figures() })
            })
            .collect();
        Ok(serde_json::to_vec(&json!({
            "dimension": dimension.name(), "interval_s": interval_s, "rows": rows, "more": more,
        }))?)
    })
    .await?;
    Ok(json_body(body))
}

/// The parameters of the KPI answers: a time range (`to` excluded), an
/// interval (seconds) and a dimension, each defaulted, `allowed` naming
/// those an answer takes.
struct KpiQuery {
    dimension: Dimension,
    interval_s: u32,
    from: i64,
    until: i64,
}

fn kpi_query(pairs: &[(String, String)], allowed: &[&'static str]) -> Result<KpiQuery, ApiError> {
    let (mut dimension, mut interval_s, mut from, mut until) =
        (Dimension::Total, 3600u32, i64::MIN, i64::MAX);
    for (name, v) in simple(pairs, allowed)? {
        match name {
            "dimension" => {
                dimension = Dimension::ALL.into_iter().find(|d| d.name() == v).ok_or_else(|| {
                    bad(
                        name,
                        v,
                        "total, trunk, caller_domain, callee_domain or user_agent expected",
                    )
                })?
            }
            "interval" => interval_s = whole(name, v, 1..=31 * 86_400)?,
            "from" => from = instant(name, v)?,
            // `to` is excluded: the last start included is one ns before.
            _ => until = instant(name, v)?.saturating_sub(1),
        }
    }
    Ok(KpiQuery { dimension, interval_s, from, until })
}

/// `GET /api/kpi/load?interval=3600&from=...&to=...`: concurrent calls
/// (the most any time-series row reports) and calls started and ended, per
/// interval.
pub(crate) async fn load(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    query: Pairs,
) -> Result<Response, ApiError> {
    let KpiQuery { interval_s, from, until, .. } =
        kpi_query(&pairs(query)?, &["interval", "from", "to"])?;
    let body = crate::db::run(&state.db, &state.queries, move |store| {
        let interval_ns = i64::from(interval_s) * 1_000_000_000;
        let mut rows = store.load_between(interval_ns, from, until, MAX_KPI_ROWS + 1)?;
        let more = rows.len() > MAX_KPI_ROWS;
        rows.truncate(MAX_KPI_ROWS);
        Ok(serde_json::to_vec(&json!({ "interval_s": interval_s, "rows": rows, "more": more }))?)
    })
    .await?;
    Ok(json_body(body))
}

/// `GET /api/kpi/mos?from=...&to=...`: calls per band of worst stream MOS,
/// and the answered calls without one.
pub(crate) async fn mos(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    query: Pairs,
) -> Result<Response, ApiError> {
    let KpiQuery { from, until, .. } = kpi_query(&pairs(query)?, &["from", "to"])?;
    let body = crate::db::run(&state.db, &state.queries, move |store| {
        let (counts, without) = store.mos_bands(from, until)?;
        let bands: Vec<_> = calliper_store::MOS_BANDS
            .iter()
            .zip(counts)
            .map(|((lo, hi), calls)| json!({ "from": lo, "to": hi, "calls": calls }))
            .collect();
        Ok(serde_json::to_vec(&json!({ "bands": bands, "answered_without_mos": without }))?)
    })
    .await?;
    Ok(json_body(body))
}
