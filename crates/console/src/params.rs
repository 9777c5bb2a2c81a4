//! The search's query parameters, checked one by one: an unknown or
//! repeated parameter, or a value that does not parse, is a 400 that says
//! which and why. An empty value counts as absent (a form sends its empty
//! fields).

use calliper_store::{Network, Search, Sort, Status};

/// Every parameter a search takes, with what it means (the 400 for an
/// unknown one lists them).
pub(crate) const PARAMETERS: &[(&str, &str)] = &[
    ("from", "INVITE at or after: RFC 3339 (2026-11-24T10:00:00Z) or ns since the epoch"),
    ("to", "INVITE before: as for from"),
    ("caller", "caller user (From), * and ? as wildcards"),
    ("callee", "callee user (To), wildcards as for caller"),
    ("ip", "a party's or a stream's address, or a network (10.0.0.0/8)"),
    ("status", "final status: a code (486), a class (4xx) or none"),
    ("state", "completed, answered, failed, cancelled, no_final_response or evicted"),
    ("codec", "a stream's codec, any case (PCMU, G722, ...)"),
    ("mos_below", "worst stream MOS below this"),
    ("loss_above", "a stream losing more than this percentage"),
    ("min_duration", "duration at least this many seconds"),
    ("max_duration", "duration at most this many seconds"),
    ("user_agent", "either party's User-Agent, wildcards as for caller"),
    ("call_id", "the Call-ID, exactly"),
    ("probe", "the probe that saw the call (--probe-name; ClickHouse only)"),
    ("label", "a rule label the call carries"),
    ("alert", "an alert kind that named the call (low_mos, high_loss, no_rtp, one_way_audio, ...)"),
    ("sort", "time, duration, mos, setup_delay or status"),
    ("order", "desc (default) or asc"),
    ("limit", "calls per page"),
    ("offset", "calls to skip"),
];

/// The call states a record can have.
pub(crate) const STATES: &[&str] =
    &["completed", "answered", "failed", "cancelled", "no_final_response", "evicted"];

/// Most `*` in one wildcard pattern.
const MAX_STARS: usize = 4;

/// Longest text value accepted.
const MAX_TEXT: usize = 256;

/// A parameter that cannot be taken, and why.
#[derive(Debug, PartialEq)]
pub(crate) struct BadParameter(pub(crate) String);

pub(crate) fn bad(name: &str, value: &str, why: &str) -> BadParameter {
    let shown: String = value.chars().take(64).collect();
    BadParameter(format!("{name}={shown:?}: {why}"))
}

fn number(name: &str, v: &str, range: std::ops::RangeInclusive<f64>) -> Result<f64, BadParameter> {
    match v.parse::<f64>() {
        Ok(n) if n.is_finite() && range.contains(&n) => Ok(n),
        _ => Err(bad(
            name,
            v,
            &format!("a number from {} to {} expected", range.start(), range.end()),
        )),
    }
}

pub(crate) fn instant(name: &str, v: &str) -> Result<i64, BadParameter> {
    if let Ok(ns) = v.parse::<i64>() {
        return Ok(ns);
    }
    calliper_store::parse_rfc3339(v).ok_or_else(|| {
        bad(
            name,
            v,
            "RFC 3339 time (2026-11-24T10:00:00Z, 2026-11-24) or ns since the epoch expected",
        )
    })
}

fn status(v: &str) -> Result<Status, BadParameter> {
    let b = v.as_bytes();
    if v.eq_ignore_ascii_case("none") {
        return Ok(Status::None);
    }
    if b.len() == 3 && (b'1'..=b'6').contains(&b[0]) && v[1..].eq_ignore_ascii_case("xx") {
        return Ok(Status::Class(u16::from(b[0] - b'0')));
    }
    match v.parse::<u16>() {
        Ok(c) if (100..=699).contains(&c) => Ok(Status::Code(c)),
        _ => Err(bad("status", v, "a code (100-699), a class (1xx-6xx) or none expected")),
    }
}

/// The search the parameters describe; `max_limit` is the largest page
/// this endpoint serves.
pub(crate) fn search(pairs: &[(String, String)], max_limit: u32) -> Result<Search, BadParameter> {
    let mut s = Search::default();
    let names: Vec<&'static str> = PARAMETERS.iter().map(|(p, _)| *p).collect();
    for (known, v) in simple(pairs, &names)? {
        let text = || Some(v.to_string());
        // A pattern with many stars can take a matcher exponential time.
        if matches!(known, "caller" | "callee" | "user_agent") && v.matches('*').count() > MAX_STARS
        {
            return Err(bad(known, v, &format!("at most {MAX_STARS} * wildcards")));
        }
        match known {
            "from" => s.from_ns = Some(instant(known, v)?),
            "to" => s.to_ns = Some(instant(known, v)?),
            "caller" => s.caller = text(),
            "callee" => s.callee = text(),
            "user_agent" => s.user_agent = text(),
            "call_id" => s.call_id = text(),
            "probe" => s.probe = text(),
            "label" => s.label = text(),
            "alert" => s.alert = text(),
            "codec" => s.codec = text(),
            "state" => {
                if !STATES.contains(&v) {
                    return Err(bad(known, v, &format!("one of {} expected", STATES.join(", "))));
                }
                s.state = text()
            }
            "ip" => {
                s.ip = Some(Network::parse(v).ok_or_else(|| {
                    bad(known, v, "an IPv4 or IPv6 address, optionally /PREFIX, expected")
                })?)
            }
            "status" => s.status = Some(status(v)?),
            "mos_below" => s.mos_below = Some(number(known, v, 1.0..=5.0)?),
            "loss_above" => s.loss_above = Some(number(known, v, 0.0..=100.0)?),
            "min_duration" => s.min_duration_ms = Some(number(known, v, 0.0..=1e9)? * 1000.0),
            "max_duration" => s.max_duration_ms = Some(number(known, v, 0.0..=1e9)? * 1000.0),
            "sort" => {
                s.sort =
                    Sort::ALL.iter().find(|(n, _)| *n == v).map(|(_, k)| *k).ok_or_else(|| {
                        bad(known, v, "time, duration, mos, setup_delay or status expected")
                    })?
            }
            "order" => {
                s.descending = match v {
                    "desc" => true,
                    "asc" => false,
                    _ => return Err(bad(known, v, "asc or desc expected")),
                }
            }
            "limit" => {
                s.limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=max_limit).contains(n))
                    .ok_or_else(|| bad(known, v, &format!("1 to {max_limit} expected")))?
            }
            "offset" => {
                s.offset = v.parse().ok().filter(|n| *n <= calliper_store::MAX_OFFSET).ok_or_else(
                    || {
                        bad(
                            known,
                            v,
                            &format!(
                                "0 to {} expected (narrow the search to go deeper)",
                                calliper_store::MAX_OFFSET
                            ),
                        )
                    },
                )?
            }
            _ => unreachable!("every parameter of PARAMETERS is matched"),
        }
    }
    Ok(s)
}

/// The parameters of a simple list (`allowed` names only, each once,
/// text checked as for a search), empty values left out.
pub(crate) fn simple<'a>(
    pairs: &'a [(String, String)],
    allowed: &[&'static str],
) -> Result<Vec<(&'static str, &'a str)>, BadParameter> {
    let mut out: Vec<(&'static str, &'a str)> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (name, value) in pairs {
        let Some(known) = allowed.iter().find(|a| *a == name) else {
            return Err(BadParameter(format!(
                "unknown parameter {:?} (known: {})",
                name.chars().take(64).collect::<String>(),
                allowed.join(", ")
            )));
        };
        if seen.contains(known) {
            return Err(BadParameter(format!("{known} given twice")));
        }
        seen.push(known);
        let v = value.trim();
        if v.len() > MAX_TEXT || v.chars().any(char::is_control) {
            return Err(bad(known, v, &format!("at most {MAX_TEXT} bytes, no control characters")));
        }
        if !v.is_empty() {
            out.push((known, v));
        }
    }
    Ok(out)
}

/// A whole number from `range`.
pub(crate) fn whole(
    name: &str,
    v: &str,
    range: std::ops::RangeInclusive<u32>,
) -> Result<u32, BadParameter> {
    v.parse()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| bad(name, v, &format!("{} to {} expected", range.start(), range.end())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> Result<Search, BadParameter> {
        let v: Vec<(String, String)> =
            pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        search(&v, 1000)
    }

    #[test]
    fn good_values_are_taken() {
        let s = p(&[
            ("from", "2026-11-24T10:00:00Z"),
            ("to", "1800000000000000000"),
            ("caller", "alice*"),
            ("status", "4xx"),
            ("ip", "10.0.0.0/8"),
            ("mos_below", "3.5"),
            ("min_duration", "2"),
            ("sort", "mos"),
            ("order", "asc"),
            ("limit", "10"),
            ("codec", ""),
        ])
        .unwrap();
        assert_eq!(s.from_ns, calliper_store::parse_rfc3339("2026-11-24T10:00:00Z"));
        assert_eq!(s.to_ns, Some(1_800_000_000_000_000_000));
        assert_eq!(s.status, Some(Status::Class(4)));
        assert_eq!(s.min_duration_ms, Some(2000.0));
        assert_eq!((s.sort, s.descending, s.limit), (Sort::Mos, false, 10));
        assert_eq!(s.codec, None);
        assert_eq!(p(&[("status", "486")]).unwrap().status, Some(Status::Code(486)));
        assert_eq!(p(&[("status", "none")]).unwrap().status, Some(Status::None));
    }

    #[test]
    fn bad_values_say_which_and_why() {
        for (k, v) in [
            ("from", "yesterday"),
            ("status", "7xx"),
            ("status", "99"),
            ("ip", "10.0.0.0/40"),
            ("mos_below", "NaN"),
            ("mos_below", "9"),
            ("loss_above", "-1"),
            ("sort", "caller"),
            ("order", "up"),
            ("state", "done"),
            ("limit", "0"),
            ("limit", "1001"),
            ("offset", "100000000"),
            ("caller", "a\u{0}b"),
            ("nonsense", "1"),
        ] {
            let e = p(&[(k, v)]).unwrap_err();
            assert!(e.0.contains(k), "{k}={v}: {}", e.0);
        }
        assert!(p(&[("caller", &"a".repeat(300))]).is_err());
        assert!(p(&[("caller", "*a*b*c*d*")]).is_err());
        assert!(p(&[("caller", "*a*b*c*")]).is_ok());
        assert!(p(&[("caller", "a"), ("caller", "b")]).is_err());
    }
}
