//! The probe's rule table: `GET /api/rules` lists the rules with their
//! hits; with the write token, `POST /api/rules` adds one (a JSON object
//! with the keys of a rules file's `[[rule]]`) and `DELETE /api/rules/{id}`
//! removes one. A change reaches the packet threads at their next group of
//! packets; it lasts until the rules file is reloaded (SIGHUP) or the probe
//! restarts.

use crate::api::{json_body, ApiError};
use crate::params::{simple, whole};
use crate::State;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use calliper_rules::{RuleSpec, Rules};
use serde_json::json;
use std::sync::Arc;

/// Most rules one page lists.
pub const RULES_PAGE_LIMIT: u32 = 1000;
/// Largest rule a request may send.
pub const MAX_RULE_BYTES: usize = 8192;

/// The table, if the packet threads keep up with changes (a quiet link
/// applies them only once a second: changes must not pile up meanwhile).
fn writable(state: &State) -> Result<&Rules, ApiError> {
    let rules = table(state)?;
    let pending = rules.pending_changes();
    if pending >= calliper_rules::MAX_PENDING_CHANGES {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the packet threads have {pending} changes still to apply: try again in a second"
            ),
        ));
    }
    Ok(rules)
}

fn table(state: &State) -> Result<&Rules, ApiError> {
    state.rules.as_ref().ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            "no rule table here: rules live in a running probe (`calliper probe --http ...`)"
                .into(),
        )
    })
}

/// `GET /api/rules?offset=0&limit=100`.
pub(crate) async fn list(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let rules = table(&state)?;
    let Query(pairs) = query.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let (mut offset, mut limit) = (0u32, 100u32);
    for (name, v) in simple(&pairs, &["offset", "limit"])? {
        match name {
            "offset" => offset = whole(name, v, 0..=u32::MAX)?,
            _ => limit = whole(name, v, 1..=RULES_PAGE_LIMIT)?,
        }
    }
    let (page, total) = rules.list_page(offset as usize, limit as usize);
    let body = serde_json::to_vec(&json!({
        "rules": page,
        "total": total,
        "offset": offset,
        "limit": limit,
        "writable": state.write_token.is_some(),
    }))
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(json_body(body))
}

/// `POST /api/rules` (write token): adds the rule the JSON body describes.
pub(crate) async fn add(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    spec: Result<axum::Json<RuleSpec>, JsonRejection>,
) -> Result<Response, ApiError> {
    let rules = writable(&state)?;
    let axum::Json(spec) = spec.map_err(|e| {
        // Not JSON at all is 415, too large 413; JSON that is not a rule, 400.
        let status = match e.status() {
            s @ (StatusCode::UNSUPPORTED_MEDIA_TYPE | StatusCode::PAYLOAD_TOO_LARGE) => s,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError(
            status,
            format!(
                "{} (send a JSON object with a rules file's keys, e.g. {{\"net\": \"192.0.2.0/24\", \"action\": \"ignore\"}})",
                e.body_text()
            ),
        )
    })?;
    let (name, priority, filter, action) =
        spec.parts().map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.to_string()))?;
    let id = rules
        .insert(&name, priority, filter, action)
        .map_err(|e| ApiError(StatusCode::CONFLICT, e.to_string()))?;
    let info = rules.get(id);
    eprintln!(
        "calliper console: event=rule_added id={id} kind={} action={}",
        info.as_ref().map_or("-", |i| i.kind),
        info.as_ref().map_or("-", |i| i.action)
    );
    Ok((StatusCode::CREATED, axum::Json(info)).into_response())
}

/// `DELETE /api/rules/{id}` (write token).
pub(crate) async fn remove(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let rules = writable(&state)?;
    let Path(id) = id.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let id: u64 = id.parse().map_err(|_| {
        ApiError(StatusCode::BAD_REQUEST, format!("rule id {id:?} is not a whole number"))
    })?;
    if !rules.delete(id) {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no rule {id}")));
    }
    eprintln!("calliper console: event=rule_removed id={id}");
    Ok(StatusCode::NO_CONTENT.into_response())
}
