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
use rusqlite::Connection;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

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

/// Runs `work` on a read-only connection to the database, on the blocking
/// pool, within the concurrency and time limits.
pub(crate) async fn with_db<T: Send + 'static>(
    state: &Arc<State>,
    work: impl FnOnce(&Connection) -> Result<T, calliper_store::StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let Ok(_permit) = state.queries.try_acquire() else {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "busy: {} requests are reading the database; try again",
                crate::MAX_CONCURRENT_QUERIES
            ),
        ));
    };
    let db = state.db.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let conn = calliper_store::open_searchable(&db)?;
        let deadline = Instant::now() + crate::QUERY_TIME_LIMIT;
        // Called every 10 000 virtual machine steps: true interrupts.
        conn.progress_handler(10_000, Some(move || Instant::now() > deadline));
        work(&conn)
    })
    .await;
    match joined {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(calliper_store::StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _))))
            if e.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            Err(ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the search took longer than {} s and was stopped: narrow it (a time range, an exact caller or callee)",
                    crate::QUERY_TIME_LIMIT.as_secs()
                ),
            ))
        }
        Ok(Err(e)) => Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("database: {e}"),
        )),
        Err(_) => Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the database request failed".into(),
        )),
    }
}

/// `GET /api/calls`: newest first unless sorted otherwise.
pub(crate) async fn calls(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let search = params::search(&pairs, PAGE_LIMIT)?;
    let (limit, offset) = (search.limit, search.offset);
    let (calls, more) = with_db(&state, move |c| calliper_store::search_calls(c, &search)).await?;
    Ok(Json(json!({
        "calls": calls,
        "limit": limit,
        "offset": offset,
        "more": more,
    })))
}

/// `GET /api/calls/{id}`: the call, its streams with their interval
/// reports, its SIP messages and its alerts.
pub(crate) async fn call(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: i64 = id.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
        ApiError(
            StatusCode::BAD_REQUEST,
            "a call's id is its record id, a positive integer (search by call_id=... for a Call-ID)".into(),
        )
    })?;
    match with_db(&state, move |c| calliper_store::call_detail(c, id)).await? {
        Some(v) => Ok(Json(v)),
        None => Err(ApiError(StatusCode::NOT_FOUND, format!("no call {id}"))),
    }
}

/// Anything else.
pub(crate) async fn not_found() -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        "no such page: the console is at /, the API at /api/calls and /api/calls/ID, metrics at /metrics".into(),
    )
}
