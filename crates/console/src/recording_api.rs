//! A call's recording (`--record`): `GET /api/calls/{id}/pcap` sends the
//! call's capture file from the recordings directory, found by the stored
//! call's Call-ID and INVITE time (never by a path from the request).

use crate::api::ApiError;
use crate::State;
use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Largest recording sent whole; a longer call is exported with
/// `calliper export pcap`.
pub const MAX_RECORDING_BYTES: u64 = 64 << 20;
/// Recordings being sent at once (each is held whole while it is sent).
pub const MAX_DOWNLOADS: usize = 2;

/// The recordings of call `id` (its Call-ID and INVITE time from the database).
pub(crate) async fn find(state: &Arc<State>, id: i64) -> Result<Vec<std::path::PathBuf>, ApiError> {
    let Some(dir) = state.recordings.clone() else {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            "this console has no recordings: give it the run's --record-dir DIR".into(),
        ));
    };
    let call = crate::db::run(&state.db, &state.queries, move |c| {
        let mut q = c.prepare("SELECT call_id, invite_ns FROM calls WHERE id = ?")?;
        let mut rows = q.query([id])?;
        Ok(match rows.next()? {
            Some(r) => {
                let call_id = r.get_ref(0)?.as_str().unwrap_or("").to_string();
                Some((call_id, r.get_ref(1)?.as_i64().unwrap_or(0)))
            }
            None => None,
        })
    })
    .await?;
    let Some((call_id, invite_ns)) = call else {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no call {id}")));
    };
    tokio::task::spawn_blocking(move || calliper_store::recordings::find(&dir, invite_ns, &call_id))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// `GET /api/calls/{id}/pcap`.
pub(crate) async fn pcap(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let id = crate::api::call_id_param(path)?;
    let found = find(&state, id).await?;
    let file = match found.as_slice() {
        [] => {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("call {id} has no recording (not recorded, or deleted to keep the budget)"),
            ))
        }
        [one] => one.clone(),
        many => {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!(
                    "{} recordings share call {id}'s Call-ID and INVITE time (two runs recorded it): take one from the directory",
                    many.len()
                ),
            ))
        }
    };
    let Ok(_permit) = state.downloads.clone().try_acquire_owned() else {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("busy: {MAX_DOWNLOADS} recordings are being sent; try again"),
        ));
    };
    let bytes = tokio::task::spawn_blocking(move || -> std::io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // Never through a link put in a recording's place.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&file)?;
        if !f.metadata()?.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        if f.metadata()?.len() > MAX_RECORDING_BYTES {
            return Ok(None);
        }
        let mut v = Vec::new();
        f.take(MAX_RECORDING_BYTES + 1).read_to_end(&mut v)?;
        Ok(Some(v))
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| {
        ApiError(
            StatusCode::NOT_FOUND,
            format!("the recording cannot be read: {e}"),
        )
    })?;
    let Some(bytes) = bytes else {
        return Err(ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "call {id}'s recording is over {} MiB: export it with `calliper export pcap`",
                MAX_RECORDING_BYTES >> 20
            ),
        ));
    };
    let mut r = bytes.into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.tcpdump.pcap"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"call-{id}.pcap\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(r)
}
