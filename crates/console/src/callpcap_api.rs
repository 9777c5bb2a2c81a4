//! A call's recording (`--record`): `GET /api/calls/{id}/pcap` sends the
//! call's capture file from the recordings directory, found by the stored
//! call's Call-ID and INVITE time (never by a path from the request), and
//! `GET /api/calls/{id}/audio` its voice decoded from that file as a WAV.

use crate::api::ApiError;
use crate::State;
use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use calliper_audio::call::CallAudio;
use std::sync::Arc;

/// Largest recording sent whole; a longer call is exported with
/// `calliper export pcap`.
pub const MAX_RECORDING_BYTES: u64 = 64 << 20;
/// Recordings being sent or decoded at once (each is held whole meanwhile).
pub const MAX_DOWNLOADS: usize = 2;
/// Largest WAV sent (about 35 minutes of an 8 kHz call, 6 of a 48 kHz
/// one); a longer call is exported with `calliper export audio`.
pub const MAX_AUDIO_BYTES: usize = 64 << 20;
/// Most memory one call's decoding may take ([`CallAudio::memory_bound`]:
/// its streams' timelines and channels, from the stored spans).
pub const MAX_DECODING_BYTES: usize = 256 << 20;

/// The recordings of the call of `call_id` and INVITE time `invite_ns`
/// (from the database, never from the request).
pub(crate) async fn find(
    state: &Arc<State>,
    call_id: String,
    invite_ns: i64,
) -> Result<Vec<std::path::PathBuf>, ApiError> {
    let Some(dir) = state.recordings.clone() else {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            "this console has no recordings: give it the run's --record-dir DIR".into(),
        ));
    };
    tokio::task::spawn_blocking(move || {
        calliper_store::callpcap_paths::find(&dir, invite_ns, &call_id)
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// Call `id` as stored, and its one recording.
async fn recorded(
    state: &Arc<State>,
    id: u64,
) -> Result<(calliper_store::StoredCall, std::path::PathBuf), ApiError> {
    let call = crate::db::run(&state.db, &state.queries, move |store| {
        calliper_store::find_calls(store.sqlite("recordings")?, &id.to_string())
    })
    .await?
    .into_iter()
    .find(|c| u64::try_from(c.id) == Ok(id))
    .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("no call {id}")))?;
    let found = find(state, call.call_id.clone(), call.invite_ns).await?;
    match found.as_slice() {
        [] => Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("call {id} has no recording (not recorded, or deleted to keep the budget)"),
        )),
        [one] => Ok((call, one.clone())),
        many => Err(ApiError(
            StatusCode::CONFLICT,
            format!(
                "{} recordings share call {id}'s Call-ID and INVITE time (two runs recorded it): take one from the directory",
                many.len()
            ),
        )),
    }
}

/// One of [`MAX_DOWNLOADS`] turns to read (and decode) a recording. It
/// goes into the blocking work, so a client that hangs up does not free
/// it while the work goes on.
fn turn(state: &Arc<State>) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    state.downloads.clone().try_acquire_owned().map_err(|_| {
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("busy: {MAX_DOWNLOADS} recordings are being sent or decoded; try again"),
        )
    })
}

/// The bytes of a recording, at most [`MAX_RECORDING_BYTES`] (blocking).
fn read_recording(file: &std::path::Path, id: u64) -> Result<Vec<u8>, ApiError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let unreadable = |e: std::io::Error| {
        ApiError(StatusCode::NOT_FOUND, format!("the recording cannot be read: {e}"))
    };
    // Never through a link put in a recording's place.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file)
        .map_err(unreadable)?;
    let meta = f.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(unreadable(std::io::Error::other("not a regular file")));
    }
    if meta.len() > MAX_RECORDING_BYTES {
        return Err(ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "call {id}'s recording is over {} MiB: export it with `calliper export pcap`",
                MAX_RECORDING_BYTES >> 20
            ),
        ));
    }
    let mut v = Vec::new();
    f.take(MAX_RECORDING_BYTES).read_to_end(&mut v).map_err(unreadable)?;
    Ok(v)
}

/// Runs `work` on a blocking thread (with its turn moved in).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

/// The route's call, its recording read on a blocking thread under a
/// turn of the downloads, then `made` of the two: (the call's id, what
/// `made` gave).
async fn from_recording<T: Send + 'static>(
    state: &Arc<State>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
    made: impl FnOnce(calliper_store::StoredCall, Vec<u8>) -> Result<T, ApiError> + Send + 'static,
) -> Result<(u64, T), ApiError> {
    let id = crate::api::call_id_param(path)?;
    let (call, file) = recorded(state, id).await?;
    let permit = turn(state)?;
    let out = blocking(move || {
        let _turn = permit;
        made(call, read_recording(&file, id)?)
    })
    .await?;
    Ok((id, out))
}

/// `GET /api/calls/{id}/pcap`.
pub(crate) async fn pcap(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let (id, bytes) = from_recording(&state, path, |_, bytes| Ok(bytes)).await?;
    Ok(attachment(bytes, "application/vnd.tcpdump.pcap", &format!("call-{id}.pcap")))
}

/// `GET /api/calls/{id}/audio`: the call's voice decoded from its
/// recording (`calliper_audio::call`), a stereo WAV, caller left.
pub(crate) async fn audio(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let (id, wav) = from_recording(&state, path, |call, bytes| decode(&call, bytes)).await?;
    Ok(attachment(wav, "audio/wav", &format!("call-{id}.wav")))
}

/// The WAV of `call` from its recording's bytes, at most [`MAX_AUDIO_BYTES`].
fn decode(call: &calliper_store::StoredCall, recording: Vec<u8>) -> Result<Vec<u8>, ApiError> {
    let mut audio = CallAudio::new(call, str::to_string);
    if audio.is_empty() {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!(
                "no stream of call {} can be decoded here: {}",
                call.id,
                audio.notes.join("; ")
            ),
        ));
    }
    if audio.memory_bound() > MAX_DECODING_BYTES {
        return Err(ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "call {}'s streams are too long to decode here (over {} MiB): export it with `calliper export audio`",
                call.id,
                MAX_DECODING_BYTES >> 20
            ),
        ));
    }
    let unreadable = |e: calliper_capture::CaptureError| {
        ApiError(StatusCode::UNPROCESSABLE_ENTITY, format!("the recording cannot be read: {e}"))
    };
    let mut input = calliper_capture::CaptureReader::new(std::io::Cursor::new(recording))
        .map_err(unreadable)?;
    while let Some(p) = input.next_packet().map_err(unreadable)? {
        audio.packet(p.ts_ns, p.link_type, p.data);
    }
    if audio.matched == 0 {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!(
                "call {}'s recording holds none of its RTP packets (recorded with --record sip?): its pcap has its signalling",
                call.id
            ),
        ));
    }
    let mixed = audio.mix();
    let frames = mixed.left.len().max(mixed.right.len());
    if frames.saturating_mul(4) > MAX_AUDIO_BYTES {
        return Err(ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "call {}'s audio is over {} MiB: export it with `calliper export audio`",
                call.id,
                MAX_AUDIO_BYTES >> 20
            ),
        ));
    }
    let mut wav = Vec::with_capacity(44 + frames * 4);
    calliper_audio::wav::write_stereo(&mut wav, mixed.rate, &mixed.left, &mixed.right)
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(wav)
}

fn attachment(bytes: Vec<u8>, content_type: &'static str, name: &str) -> Response {
    let mut r = bytes.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    r
}
