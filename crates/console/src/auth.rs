//! Who may ask: the token (bearer, or basic auth with the token as the
//! password, so a browser can prompt for it), and on a loopback listener
//! without a token, a `Host` that names loopback (against DNS rebinding).
//! Every response also gets the headers that keep a browser from framing,
//! sniffing or leaking it.

use crate::State;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use std::sync::Arc;

/// Compares without stopping at the first difference (no timing oracle).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The `Authorization` header's scheme and value.
fn credentials(headers: &HeaderMap) -> Option<(&str, &str)> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, value) = v.split_once(' ').unwrap_or((v, ""));
    Some((scheme, value.trim()))
}

/// True when the request carries `token` as a bearer token (the only way
/// the write token is taken: a browser never adds it by itself, as it does
/// basic credentials, so another site cannot make it change anything).
fn bearer(headers: &HeaderMap, token: &str) -> bool {
    credentials(headers).is_some_and(|(scheme, value)| {
        scheme.eq_ignore_ascii_case("bearer") && same(value.as_bytes(), token.as_bytes())
    })
}

/// True when the request carries `token`, as a bearer token or as the
/// password of basic auth.
fn authorised(headers: &HeaderMap, token: &str) -> bool {
    if bearer(headers, token) {
        return true;
    }
    let Some((scheme, value)) = credentials(headers) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(value) else {
        return false;
    };
    let password = match decoded.iter().position(|&c| c == b':') {
        Some(i) => &decoded[i + 1..],
        None => &decoded[..],
    };
    same(password, token.as_bytes())
}

/// True when `Host` names loopback: `localhost`, 127.0.0.0/8 or `[::1]`,
/// with any port.
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A refusal; the connection is closed after it (`Connection: close`), so
/// a client that is refused cannot keep the connection to hold a place.
fn refuse(status: StatusCode, why: &str) -> Response {
    let mut r = (status, axum::Json(serde_json::json!({ "error": why }))).into_response();
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"calliper\", charset=\"UTF-8\""),
        );
    }
    r
}

/// A request a page made that the console must not answer: one for a
/// frame (the console is never framed: `X-Frame-Options` and
/// `frame-ancestors` tell the browser, and this refuses the work before it
/// is done), or a fetch another site's page made that is not a top-level
/// navigation to the console.
fn foreign_or_framed(headers: &HeaderMap) -> Option<&'static str> {
    let is = |v: Option<&str>, want: &str| v.is_some_and(|v| v.trim().eq_ignore_ascii_case(want));
    // Every Sec-Fetch-Dest given is looked at, in any case.
    let framed = headers.get_all("sec-fetch-dest").iter().any(|v| {
        let v = v.to_str().ok();
        ["iframe", "frame", "fencedframe", "embed", "object"].iter().any(|f| is(v, f))
    });
    if framed {
        return Some("the console is not shown in frames (Sec-Fetch-Dest names a frame)");
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let dest = header("sec-fetch-dest");
    let navigation =
        is(header("sec-fetch-mode"), "navigate") && (dest.is_none() || is(dest, "document"));
    (is(header("sec-fetch-site"), "cross-site") && !navigation)
        .then_some("a request made by another site's page (Sec-Fetch-Site: cross-site) is refused")
}

/// The middleware: refuses what may not ask, answers the rest with the
/// safety headers.
pub(crate) async fn check(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    req: Request<Body>,
    next: Next,
) -> Response {
    let writer = state.write_token.as_deref().is_some_and(|w| bearer(req.headers(), w));
    if let Some(token) = &state.token {
        if !writer && !authorised(req.headers(), token) {
            return with_headers(refuse(
                StatusCode::UNAUTHORIZED,
                "this console needs its token: Authorization: Bearer TOKEN, or basic auth with the token as password",
            ));
        }
    } else if state.loopback_only_hosts && !loopback_host(req.headers()) {
        return with_headers(refuse(
            StatusCode::FORBIDDEN,
            "Host is not a loopback name: a console without a token answers only localhost, 127.0.0.0/8 and [::1]",
        ));
    }
    // Another site's page may not make the browser fetch from here (an
    // <audio> or <img> pointed at a loopback console without a token), nor
    // frame it: only a top-level navigation may come from elsewhere.
    if let Some(why) = foreign_or_framed(req.headers()) {
        return with_headers(refuse(StatusCode::FORBIDDEN, why));
    }
    use axum::http::Method;
    let method = req.method();
    if method != Method::GET && method != Method::HEAD {
        let rules = req.uri().path() == "/api/rules" || req.uri().path().starts_with("/api/rules/");
        if !rules || (method != Method::POST && method != Method::DELETE) {
            return with_headers(refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                "GET only (the rules also take POST and DELETE, with the write token)",
            ));
        }
        if state.write_token.is_none() {
            return with_headers(refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                "this console is read-only: start the probe with --write-token-file FILE to change rules here",
            ));
        }
        if !writer {
            return with_headers(refuse(
                StatusCode::FORBIDDEN,
                "changing rules needs the write token: Authorization: Bearer WRITE_TOKEN",
            ));
        }
    }
    with_headers(next.run(req).await)
}

fn with_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            // media-src blob:: the player plays the WAV the page fetched once.
            "default-src 'self'; img-src 'self' data:; media-src 'self' blob:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn bearer_and_basic_carry_the_token() {
        let t = "0123456789abcdef";
        assert!(authorised(&headers(&[(header::AUTHORIZATION, "Bearer 0123456789abcdef")]), t));
        assert!(!authorised(&headers(&[(header::AUTHORIZATION, "Bearer 0123456789abcdeF")]), t));
        assert!(!authorised(&headers(&[(header::AUTHORIZATION, "Bearer ")]), t));
        assert!(!authorised(&headers(&[]), t));
        let basic = base64::engine::general_purpose::STANDARD.encode("ops:0123456789abcdef");
        assert!(authorised(&headers(&[(header::AUTHORIZATION, &format!("Basic {basic}"))]), t));
        let wrong = base64::engine::general_purpose::STANDARD.encode("0123456789abcdef:x");
        assert!(!authorised(&headers(&[(header::AUTHORIZATION, &format!("Basic {wrong}"))]), t));
        assert!(!authorised(&headers(&[(header::AUTHORIZATION, "Basic !!!")]), t));
    }

    #[test]
    fn only_loopback_names_pass_without_a_token() {
        for ok in ["localhost:8080", "127.0.0.1:8080", "127.9.9.9", "[::1]:80", "LOCALHOST"] {
            assert!(loopback_host(&headers(&[(header::HOST, ok)])), "{ok}");
        }
        for bad in ["evil.example:8080", "192.0.2.1", "localhost.evil.example", "[::2]:80", ""] {
            assert!(!loopback_host(&headers(&[(header::HOST, bad)])), "{bad}");
        }
        assert!(!loopback_host(&headers(&[])));
    }
}
