//! The web UI: one page and its script and style, compiled into the
//! binary (no files to install, nothing fetched from elsewhere: the
//! Content-Security-Policy allows only this origin).

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The assets, by name: (name, content type, content).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("../assets/app.js")),
    ("call.js", "text/javascript; charset=utf-8", include_str!("../assets/call.js")),
    ("probe.js", "text/javascript; charset=utf-8", include_str!("../assets/probe.js")),
    ("kpi.md", "text/plain; charset=utf-8", include_str!("../../../docs/kpi.md")),
    ("style.css", "text/css; charset=utf-8", include_str!("../assets/style.css")),
];

fn page(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// `GET /`.
pub(crate) async fn index() -> Response {
    page("text/html; charset=utf-8", include_str!("../assets/index.html"))
}

/// `GET /assets/{file}`.
pub(crate) async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, kind, body)) => page(kind, body),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
