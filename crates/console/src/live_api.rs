//! The live page's data: `GET /api/live` (the open calls now, as JSON)
//! and `GET /api/live/events` (the same, pushed as server-sent events
//! when it changes, at most once per [`PUSH_EVERY`]; a comment every
//! [`KEEP_ALIVE`] keeps idle proxies from closing the stream). At most
//! [`MAX_WATCHERS`] streams at once; a stream ends with its connection's
//! time limit, and the browser's EventSource reconnects by itself.

use crate::api::ApiError;
use crate::State;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most calls one snapshot holds (the newest).
pub const MAX_SHOWN: usize = 500;
/// How often a stream checks for changes.
pub const PUSH_EVERY: Duration = Duration::from_millis(250);
/// Longest silence on a stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Most event streams open at once.
pub const MAX_WATCHERS: usize = 64;

fn live(state: &State) -> Result<&crate::LiveCalls, ApiError> {
    state.live.as_ref().ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            "no live calls here: `calliper probe --http ADDR` serves them (`calliper serve` shows a database)".into(),
        )
    })
}

/// The snapshot as JSON, made once per change however many watch (the
/// copy under the tracker's lock, which the packet thread also takes, and
/// the serialising happen once, not per watcher).
fn snapshot_json(state: &State, live: &crate::LiveCalls) -> Bytes {
    let version = live.version();
    let mut cache = state.live_json.lock().unwrap_or_else(|p| p.into_inner());
    if cache.0 != Some(version) {
        let json = serde_json::to_vec(&live.snapshot(MAX_SHOWN)).unwrap_or_default();
        *cache = (Some(version), Bytes::from(json));
    }
    cache.1.clone()
}

/// `GET /api/live`.
pub(crate) async fn snapshot(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
) -> Result<Response, ApiError> {
    Ok(crate::api::json_body(snapshot_json(&state, live(&state)?).to_vec()))
}

/// `GET /api/live/events`.
pub(crate) async fn events(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
) -> Result<Response, ApiError> {
    let live = live(&state)?.clone();
    let Ok(permit) = state.watchers.clone().try_acquire_owned() else {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_WATCHERS} live pages are open already; try again"),
        ));
    };
    // (state, live calls, last version sent, when last sent, the permit)
    let start = (state.clone(), live, None::<u64>, Instant::now(), permit);
    let stream =
        futures_util::stream::unfold(start, |(state, live, sent, at, permit)| async move {
            loop {
                let version = live.version();
                if sent != Some(version) {
                    let json = snapshot_json(&state, &live);
                    let mut frame = Vec::with_capacity(json.len() + 8);
                    frame.extend(b"data: ");
                    frame.extend(&json[..]);
                    frame.extend(b"\n\n");
                    // At most one push per PUSH_EVERY, however busy the probe.
                    if sent.is_some() {
                        tokio::time::sleep(PUSH_EVERY).await;
                    }
                    let item: Result<Bytes, std::io::Error> = Ok(Bytes::from(frame));
                    return Some((item, (state, live, Some(version), Instant::now(), permit)));
                }
                if at.elapsed() >= KEEP_ALIVE {
                    let item = Ok(Bytes::from_static(b": still here\n\n"));
                    return Some((item, (state, live, sent, Instant::now(), permit)));
                }
                tokio::time::sleep(PUSH_EVERY).await;
            }
        });
    let mut r = Body::from_stream(stream).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(r)
}
