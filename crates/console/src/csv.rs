//! `GET /api/calls.csv`: a search as CSV (RFC 4180): the INVITE time in
//! RFC 3339, then the `calls` table's columns and the list's extras, up to
//! [`calliper_store::MAX_LIMIT`] calls or [`MAX_CSV_BYTES`] a request
//! (header `X-Calliper-More` says whether more follow). Rows go to text
//! one by one (over ClickHouse, read a thousand at a time), never all held
//! as JSON. Text that a spreadsheet would run as a
//! formula (starting `=`, `+`, `-`, `@`) is prefixed with `'`: caller names
//! come from packets, and packets come from anyone.

use crate::api::ApiError;
use crate::params;
use crate::State;
use axum::extract::Query;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::sync::Arc;

/// One field, quoted when it must be.
fn field(out: &mut String, v: Option<&Value>) {
    let text = match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => match s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
            true => format!("'{s}"),
            false => s.clone(),
        },
        Some(other) => other.to_string(),
    };
    if text.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&text.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(&text);
    }
}

/// Most bytes of CSV one request returns; a search that would give more
/// stops there, and `X-Calliper-More` says so (page on with `offset`, by
/// the row count in `X-Calliper-Rows`).
pub const MAX_CSV_BYTES: usize = 64 << 20;

pub(crate) async fn calls(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let mut search = params::search(&pairs, calliper_store::MAX_LIMIT)?;
    if !pairs.iter().any(|(k, _)| k == "limit") {
        search.limit = calliper_store::MAX_LIMIT;
    }
    let (body, rows, more) = crate::db::run(&state.db, &state.queries, move |store| {
        let mut out = String::new();
        let mut rows = 0usize;
        let more = store.for_each_call(&search, |names, values| {
            if rows == 0 {
                // A readable time first: a spreadsheet shows ns as 1.8E+18.
                out.push_str("invite_utc");
                for n in names {
                    out.push(',');
                    field(&mut out, Some(&Value::String(n.clone())));
                }
                out.push_str("\r\n");
            }
            if out.len() > MAX_CSV_BYTES {
                return Ok(false);
            }
            let invite =
                names.iter().position(|n| n == "invite_ns").and_then(|i| values.get(i)?.as_i64());
            out.push_str(&invite.map(calliper_store::rfc3339).unwrap_or_default());
            for v in values {
                out.push(',');
                field(&mut out, Some(v));
            }
            out.push_str("\r\n");
            rows += 1;
            Ok(true)
        })?;
        Ok((out, rows, more))
    })
    .await?;
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"calls.csv\""),
    );
    h.insert("x-calliper-more", HeaderValue::from_static(if more { "true" } else { "false" }));
    h.insert("x-calliper-rows", HeaderValue::from(rows));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(v: Value) -> String {
        let mut s = String::new();
        field(&mut s, Some(&v));
        s
    }

    #[test]
    fn quoting_and_formulas() {
        assert_eq!(one(Value::Null), "");
        assert_eq!(one("alice".into()), "alice");
        assert_eq!(one("a,b".into()), "\"a,b\"");
        assert_eq!(one("say \"hi\"".into()), "\"say \"\"hi\"\"\"");
        assert_eq!(one("=HYPERLINK(1)".into()), "'=HYPERLINK(1)");
        assert_eq!(one("-1+1".into()), "'-1+1");
        assert_eq!(one(serde_json::json!(-3.5)), "-3.5");
        assert_eq!(one("line\nbreak".into()), "\"line\nbreak\"");
    }
}
