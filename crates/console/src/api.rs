//! The JSON API: the call search (`GET /api/calls`) and one call in full
//! (`GET /api/calls/{id}`). Database work runs on the blocking pool, at
//! most [`crate::MAX_CONCURRENT_QUERIES`] at once, each stopped after
//! [`crate::QUERY_TIME_LIMIT`].

use crate::params::{self, BadParameter};
use crate::State;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::sync::Arc;

/// Most calls one page of the JSON search returns.
pub const PAGE_LIMIT: u32 = 1000;

/// An answer that is not a success, as `{"error": "..."}`.
pub(crate) struct ApiError(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<BadParameter> for ApiError {
    fn from(e: BadParameter) -> Self {
        ApiError(StatusCode::BAD_REQUEST, e.0)
    }
}

/// `GET /api/calls`: newest first unless sorted otherwise.
pub(crate) async fn calls(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let search = params::search(&pairs, PAGE_LIMIT)?;
    if search.probe.is_some() && matches!(state.db.as_deref(), Some(crate::db::Store::Sqlite(_))) {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "probe=...: this console reads one probe's SQLite database; the probe filter is for serve --clickhouse".into(),
        ));
    }
    let (limit, offset) = (search.limit, search.offset);
    let body = crate::db::run(&state.db, &state.queries, move |store| {
        let (calls, more) = store.search_calls(&search)?;
        Ok(serde_json::to_vec(&json!({
            "calls": calls,
            "limit": limit,
            "offset": offset,
            "more": more,
        }))?)
    })
    .await?;
    Ok(json_body(body))
}

/// A JSON answer already serialised.
pub(crate) fn json_body(body: Vec<u8>) -> Response {
    let mut r = body.into_response();
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}

/// `GET /api/calls/{id}`: the call, its streams with their interval
/// reports, its SIP messages and its alerts.
pub(crate) async fn call(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let id = call_id_param(path)?;
    let detail =
        crate::db::run(&state.db, &state.queries, move |store| store.call_detail(id)).await?;
    let Some(mut detail) = detail else {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no call {id}")));
    };
    // Where its recording is, when this console has recordings.
    let call_id = detail["call_id"].as_str().unwrap_or_default().to_string();
    let invite_ns = detail["invite_ns"].as_i64().unwrap_or_default();
    let recorded = state.recordings.is_some()
        && i64::try_from(id).is_ok()
        && crate::callpcap_api::find(&state, call_id, invite_ns).await.is_ok_and(|f| !f.is_empty());
    crate::offers::mark(&mut detail);
    if let serde_json::Value::Object(o) = &mut detail {
        let link = recorded.then(|| format!("/api/calls/{id}/pcap"));
        o.insert("recording_pcap".into(), link.into());
        let audio = recorded.then(|| format!("/api/calls/{id}/audio"));
        o.insert("recording_audio".into(), audio.into());
    }
    let body = serde_json::to_vec(&detail)
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(json_body(body))
}

/// A call's record id from the path: a positive integer (SQLite's row
/// id, or ClickHouse's record id, which may pass 2^63).
pub(crate) fn call_id_param(
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<u64, ApiError> {
    let bad_id = || {
        ApiError(
            StatusCode::BAD_REQUEST,
            "a call's id is its record id, a positive integer (search by call_id=... for a Call-ID)".into(),
        )
    };
    let Path(id) = path.map_err(|_| bad_id())?;
    // Digits only, no leading zero: one id, one spelling.
    if !id.bytes().all(|b| b.is_ascii_digit()) || id.starts_with('0') {
        return Err(bad_id());
    }
    id.parse().ok().filter(|n| *n > 0).ok_or_else(bad_id)
}

/// Anything else.
pub(crate) async fn not_found() -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        "no such page: the console is at /, the API at /api/calls, /api/calls/ID (and its /pcap and /audio), metrics at /metrics".into(),
    )
}

/// A method the path does not take (the path exists).
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        "this path does not take that method (GET reads; the rules take POST on /api/rules and DELETE on /api/rules/ID)".into(),
    )
}

/// `GET /api/console`: which parts this console serves, so the UI offers
/// only pages that can answer (`serve` has a database and no probe; a
/// probe may run without a database).
pub(crate) async fn parts(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
) -> Response {
    let body = serde_json::json!({
        "database": state.db.is_some(),
        "store": match state.db.as_deref() {
            Some(crate::db::Store::ClickHouse(_)) => "clickhouse",
            Some(crate::db::Store::Sqlite(_)) => "sqlite",
            None => "none",
        },
        "live": state.live.is_some(),
        "probe": state.health.is_some(),
        "rules": state.rules.is_some(),
    });
    json_body(body.to_string().into_bytes())
}
