//! From, To and Contact values (RFC 3261 §25.1 `name-addr` and
//! `addr-spec`) and header parameters (`tag`, Via's `branch`), read
//! without recursion and on bytes where a value is not UTF-8.

use crate::text::{find_byte, split_on, split_once_on};

/// A From/To/Contact value split into its parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NameAddr<'a> {
    /// Display name without quotes, if any.
    pub display: Option<&'a str>,
    /// The URI (`sip:alice@example.com`).
    pub uri: &'a str,
    /// User part of the URI (`alice`).
    pub user: Option<&'a str>,
    /// Host part of the URI.
    pub host: &'a str,
    /// The `tag` parameter.
    pub tag: Option<&'a str>,
}

impl<'a> NameAddr<'a> {
    /// Parses a From/To/Contact value by RFC 3261 §25.1:
    /// `name-addr = [display-name] "<" addr-spec ">"` with a display name
    /// that is a quoted string (with `\` escapes, where `<`, `>` and `"`
    /// are text) or tokens, and the bare `addr-spec` form, whose `;`
    /// parameters belong to the header. A display name never supplies the
    /// URI: `"<sip:boss@x>" <sip:eve@y>` is eve. One pass, no recursion.
    pub fn parse(v: &'a str) -> NameAddr<'a> {
        let v = v.trim();
        let (display, uri, params) = match split_name_addr(v) {
            Some(parts) => parts,
            None => {
                // addr-spec: parameters after ';' belong to the header.
                let semi = find_byte(b';', v.as_bytes()).unwrap_or(v.len());
                (None, &v[..semi], &v[semi..])
            }
        };
        let tag = param(params, "tag");
        let without_scheme = split_once_on(uri, b':').map_or(uri, |(_, r)| r);
        let params_at = memchr::memchr2(b';', b'?', without_scheme.as_bytes());
        let without_params = &without_scheme[..params_at.unwrap_or(without_scheme.len())];
        let (user, host) = match memchr::memrchr(b'@', without_params.as_bytes()) {
            Some(at) => {
                let u = &without_params[..at];
                (Some(split_once_on(u, b':').map_or(u, |(u, _)| u)), &without_params[at + 1..])
            }
            None => (None, without_params),
        };
        NameAddr { display, uri, user, host, tag }
    }
}

/// The `name-addr` form's parts (display name, URI, what follows `>`), or
/// None for a bare `addr-spec`. The URI starts at the first `<` outside
/// quotes; a backslash escapes the next character, inside quotes as the
/// grammar says and outside them too (real phones write `\"name\" <...>`).
/// A value with no such `<` whose quote comes before any `;` is malformed:
/// no URI, since nothing quoted may stand in for one.
fn split_name_addr(v: &str) -> Option<(Option<&str>, &str, &str)> {
    let lt = match uri_start(v.as_bytes()) {
        UriStart::At(lt) => lt,
        UriStart::Malformed => return Some((None, "", "")),
        UriStart::AddrSpec => return None,
    };
    let after = &v[lt + 1..];
    let gt = find_byte(b'>', after.as_bytes()).unwrap_or(after.len());
    Some((display_text(&v[..lt]), &after[..gt], after.get(gt + 1..).unwrap_or("")))
}

/// Where a name-addr's URI starts, read on bytes (any text encoding).
pub(crate) enum UriStart {
    /// At the `<` at this index.
    At(usize),
    /// No `<` outside quotes, and a quote before any `;`: no URI.
    Malformed,
    /// A bare addr-spec.
    AddrSpec,
}

/// The first `<` outside quotes (a backslash escapes the next byte).
pub(crate) fn uri_start(b: &[u8]) -> UriStart {
    let (mut i, mut quoted) = (0, false);
    let (mut params_seen, mut quote_before_params) = (false, false);
    loop {
        match b.get(i) {
            None if quote_before_params => return UriStart::Malformed,
            None => return UriStart::AddrSpec,
            Some(b'\\') => i += 1,
            Some(b';') if !quoted => params_seen = true,
            Some(b'"') => {
                quoted = !quoted;
                quote_before_params |= !params_seen;
            }
            Some(b'<') if !quoted => return UriStart::At(i),
            Some(_) => {}
        }
        i += 1;
    }
}

/// A display name as shown: trimmed, one pair of enclosing quotes removed.
pub(crate) fn display_text(raw: &str) -> Option<&str> {
    let d = raw.trim();
    let d = match d.strip_prefix('"').and_then(|d| d.strip_suffix('"')) {
        Some(inner) => inner,
        None => d,
    };
    Some(d).filter(|d| !d.is_empty())
}

/// The `branch` parameter of a Via value (RFC 3261 §8.1.1.7), the key of
/// its transaction at that hop.
pub fn via_branch(via: &str) -> Option<&str> {
    let (_, params) = split_once_on(via, b';')?;
    param(params, "branch")
        .map(|b| split_once_on(b, b',').map_or(b, |(b, _)| b).trim())
        .filter(|b| !b.is_empty())
}

/// The trimmed value of the first `name=value` parameter named `name` (any
/// case) in `params`, a `;`-separated list.
fn param<'a>(params: &'a str, name: &str) -> Option<&'a str> {
    split_on(params, b';')
        .filter_map(|p| split_once_on(p.trim(), b'='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}
