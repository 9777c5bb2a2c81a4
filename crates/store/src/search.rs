//! Searching stored calls, and one call in full, for the console and its
//! JSON API. Every value reaches SQLite as a parameter; the only text put
//! into SQL is chosen from fixed lists here. Rows come out as JSON objects
//! keyed by column name, so the schema stays the one definition of a
//! record's fields.

use crate::readonly::{column_names, Budget};
use crate::StoreError;
use rusqlite::Connection;
use serde_json::{Map, Value};
use std::net::IpAddr;

/// Most calls one search returns (an export's page), and the deepest
/// offset it may start at (deeper pages cost as much as reading every row
/// before them: narrow the search instead).
pub const MAX_LIMIT: u32 = 100_000;
/// See [`MAX_LIMIT`].
pub const MAX_OFFSET: u32 = 100_000;
/// How far around a call's INVITE and end its messages and alerts are
/// looked for (the same Call-ID may come back much later as another call).
pub(crate) const DETAIL_MARGIN_NS: i64 = 64_000_000_000;

/// What the final status must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// This code.
    Code(u16),
    /// This class: 1 to 6 (`2xx`…).
    Class(u16),
    /// No final response.
    None,
}

/// A network: an address and how many leading bits must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length (32 or 128 for one address).
    pub prefix: u8,
}

impl Network {
    /// Parses `ADDR` or `ADDR/PREFIX`.
    pub fn parse(s: &str) -> Option<Network> {
        let (a, p) = s.split_once('/').unwrap_or((s, ""));
        let addr: IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = if p.is_empty() && !s.contains('/') {
            max
        } else {
            p.parse().ok().filter(|p| *p <= max)?
        };
        Some(Network { addr, prefix })
    }

    /// True when `ip` (text, as stored) is in this network.
    pub fn contains(&self, ip: &str) -> bool {
        let Ok(ip) = ip.parse::<IpAddr>() else {
            return false;
        };
        let (a, b, bits) = match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => (u32::from(n) as u128, u32::from(i) as u128, 32),
            (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
            _ => return false,
        };
        let shift = bits - u32::from(self.prefix);
        shift >= bits || (a >> shift) == (b >> shift)
    }
}

/// Ways to order the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// By INVITE time.
    Time,
    /// By duration.
    Duration,
    /// By the worst stream MOS.
    Mos,
    /// By setup delay.
    SetupDelay,
    /// By final status.
    Status,
}

impl Sort {
    /// Every key, by its name in the API.
    pub const ALL: [(&'static str, Sort); 5] = [
        ("time", Sort::Time),
        ("duration", Sort::Duration),
        ("mos", Sort::Mos),
        ("setup_delay", Sort::SetupDelay),
        ("status", Sort::Status),
    ];

    pub(crate) fn column(self) -> &'static str {
        match self {
            Sort::Time => "invite_ns",
            Sort::Duration => "duration_ms",
            Sort::Mos => "worst_mos",
            Sort::SetupDelay => "setup_delay_ms",
            Sort::Status => "final_status",
        }
    }
}

/// A search over the calls; every filter is optional and they all apply.
#[derive(Debug, Clone)]
pub struct Search {
    /// INVITE at or after, ns since the epoch.
    pub from_ns: Option<i64>,
    /// INVITE before, ns since the epoch.
    pub to_ns: Option<i64>,
    /// Caller user (From), `*` and `?` as wildcards.
    pub caller: Option<String>,
    /// Callee user (To), wildcards as for `caller`.
    pub callee: Option<String>,
    /// Either party's signalling address or a stream's, in this network.
    pub ip: Option<Network>,
    /// Final status.
    pub status: Option<Status>,
    /// Call state (`answered`, `failed`, …).
    pub state: Option<String>,
    /// A stream with this codec (any case).
    pub codec: Option<String>,
    /// Worst stream MOS below this.
    pub mos_below: Option<f64>,
    /// A stream losing more than this, percent.
    pub loss_above: Option<f64>,
    /// Duration at least, ms.
    pub min_duration_ms: Option<f64>,
    /// Duration at most, ms.
    pub max_duration_ms: Option<f64>,
    /// Either party's User-Agent, wildcards as for `caller`.
    pub user_agent: Option<String>,
    /// The Call-ID, exactly.
    pub call_id: Option<String>,
    /// The probe that saw the call (ClickHouse, where many probes write).
    pub probe: Option<String>,
    /// A rule label the call carries.
    pub label: Option<String>,
    /// An alert of this kind named the call.
    pub alert: Option<String>,
    /// Order.
    pub sort: Sort,
    /// Largest first.
    pub descending: bool,
    /// Calls to return, at most [`MAX_LIMIT`].
    pub limit: u32,
    /// Calls to skip, at most [`MAX_OFFSET`].
    pub offset: u32,
}

impl Default for Search {
    fn default() -> Self {
        Search {
            from_ns: None,
            to_ns: None,
            caller: None,
            callee: None,
            ip: None,
            status: None,
            state: None,
            codec: None,
            mos_below: None,
            loss_above: None,
            min_duration_ms: None,
            max_duration_ms: None,
            user_agent: None,
            call_id: None,
            probe: None,
            label: None,
            alert: None,
            sort: Sort::Time,
            descending: true,
            limit: 50,
            offset: 0,
        }
    }
}

/// A wildcard pattern (`*` any run, `?` one character, case-sensitive like
/// `=`) as an SQLite GLOB pattern, with `[` made literal; None when it has
/// no wildcard (compared with `=`, so an index serves it).
fn glob_pattern(p: &str) -> Option<String> {
    if !p.contains(['*', '?']) {
        return None;
    }
    Some(p.replace('[', "[[]"))
}

/// SQL conditions and their parameters, built together.
#[derive(Default)]
struct Where {
    sql: Vec<String>,
    params: Vec<rusqlite::types::Value>,
}

impl Where {
    fn add(&mut self, sql: &str, values: impl IntoIterator<Item = rusqlite::types::Value>) {
        self.sql.push(sql.to_string());
        self.params.extend(values);
    }

    /// `columns` (one or more, any matching) equal to the text or matching the pattern.
    fn text(&mut self, columns: &[&str], pattern: &str) {
        let (op, v) = match glob_pattern(pattern) {
            Some(glob) => ("GLOB ?", glob),
            None => ("= ?", pattern.to_string()),
        };
        let any = columns.iter().map(|c| format!("{c} {op}")).collect::<Vec<_>>().join(" OR ");
        self.add(&format!("({any})"), columns.iter().map(|_| v.clone().into()));
    }
}

fn build(s: &Search) -> Where {
    use rusqlite::types::Value as V;
    let mut w = Where::default();
    if let Some(t) = s.from_ns {
        w.add("invite_ns >= ?", [V::Integer(t)]);
    }
    if let Some(t) = s.to_ns {
        w.add("invite_ns < ?", [V::Integer(t)]);
    }
    if let Some(p) = &s.caller {
        w.text(&["from_user"], p);
    }
    if let Some(p) = &s.callee {
        w.text(&["to_user"], p);
    }
    if let Some(p) = &s.user_agent {
        w.text(&["caller_user_agent", "callee_user_agent"], p);
    }
    if let Some(id) = &s.call_id {
        w.add("call_id = ?", [V::Text(id.clone())]);
    }
    if let Some(n) = &s.ip {
        let net = V::Text(format!("{}/{}", n.addr, n.prefix));
        w.add(
            "(in_network(caller_ip, ?) OR in_network(callee_ip, ?) OR EXISTS \
             (SELECT 1 FROM streams st WHERE st.call = calls.id AND (in_network(st.src, ?) OR in_network(st.dst, ?))))",
            [net.clone(), net.clone(), net.clone(), net],
        );
    }
    match s.status {
        Some(Status::Code(c)) => w.add("final_status = ?", [V::Integer(c.into())]),
        Some(Status::Class(c)) => w.add(
            "final_status >= ? AND final_status < ?",
            [V::Integer(i64::from(c) * 100), V::Integer(i64::from(c) * 100 + 100)],
        ),
        Some(Status::None) => w.add("final_status IS NULL", []),
        None => {}
    }
    if let Some(st) = &s.state {
        w.add("state = ?", [V::Text(st.clone())]);
    }
    if let Some(c) = &s.codec {
        w.add(
            "EXISTS (SELECT 1 FROM streams st WHERE st.call = calls.id AND st.codec = ? COLLATE NOCASE)",
            [V::Text(c.clone())],
        );
    }
    if let Some(m) = s.mos_below {
        w.add("worst_mos < ?", [V::Real(m)]);
    }
    if let Some(l) = s.loss_above {
        w.add(
            "EXISTS (SELECT 1 FROM streams st WHERE st.call = calls.id AND st.loss_percent > ?)",
            [V::Real(l)],
        );
    }
    if let Some(d) = s.min_duration_ms {
        w.add("duration_ms >= ?", [V::Real(d)]);
    }
    if let Some(d) = s.max_duration_ms {
        w.add("duration_ms <= ?", [V::Real(d)]);
    }
    if let Some(l) = &s.label {
        // Labels are stored as a JSON array of strings (a row that is not
        // JSON, in a crafted database, has none).
        w.add(
            "json_valid(calls.labels) AND EXISTS (SELECT 1 FROM json_each(calls.labels) WHERE json_each.value = ?)",
            [V::Text(l.clone())],
        );
    }
    if let Some(k) = &s.alert {
        w.add(
            "EXISTS (SELECT 1 FROM alerts a WHERE a.call_id = calls.call_id AND a.kind = ? \
             AND a.ts_ns BETWEEN calls.invite_ns AND calls.end_ns + ?)",
            [V::Text(k.clone()), V::Integer(DETAIL_MARGIN_NS)],
        );
    }
    w
}

/// What a call list shows besides the call's own columns: its codecs
/// (distinct, in order) and the worst loss of its streams.
const LIST_EXTRAS: &str =
    "(SELECT group_concat(codec) FROM (SELECT DISTINCT st.codec FROM streams st WHERE st.call = calls.id ORDER BY st.codec)) AS codecs, \
     (SELECT max(st.loss_percent) FROM streams st WHERE st.call = calls.id) AS worst_loss_percent";

/// Most bytes of rows one answer holds (a crafted database can make rows
/// of any size; calliper's own are well under 2 KiB).
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// The SQL of a search and its parameters.
fn query(s: &Search) -> Result<(String, Vec<rusqlite::types::Value>), StoreError> {
    if s.probe.is_some() {
        return Err(StoreError::NotStored(
            "the probe filter needs the ClickHouse store (serve --clickhouse): a SQLite database holds one probe's calls".into(),
        ));
    }
    let w = build(s);
    let cond = match w.sql.is_empty() {
        true => String::new(),
        false => format!("WHERE {}", w.sql.join(" AND ")),
    };
    let dir = if s.descending { "DESC" } else { "ASC" };
    let sql = format!(
        "SELECT calls.*, {LIST_EXTRAS} FROM calls {cond} ORDER BY {} {dir}, id {dir} LIMIT {} OFFSET {}",
        s.sort.column(),
        s.limit.min(MAX_LIMIT) + 1,
        s.offset.min(MAX_OFFSET)
    );
    Ok((sql, w.params))
}

/// The calls `s` selects, in its order, and whether more follow.
pub fn search_calls(
    conn: &Connection,
    s: &Search,
) -> Result<(Vec<Map<String, Value>>, bool), StoreError> {
    let (sql, params) = query(s)?;
    let limit = s.limit.min(MAX_LIMIT) as usize;
    let mut calls =
        Budget::new(MAX_ANSWER_BYTES).rows(conn, &sql, rusqlite::params_from_iter(params))?;
    let more = calls.len() > limit;
    calls.truncate(limit);
    Ok((calls, more))
}

/// Hands each call `s` selects to `each` as (column names, row), without
/// building JSON (an export of many calls); `each` returns false to stop
/// early. Returns whether more calls follow the last one handed over.
pub fn for_each_call(
    conn: &Connection,
    s: &Search,
    mut each: impl FnMut(&[String], &rusqlite::Row<'_>) -> Result<bool, StoreError>,
) -> Result<bool, StoreError> {
    let (sql, params) = query(s)?;
    let limit = s.limit.min(MAX_LIMIT) as usize;
    let mut q = conn.prepare(&sql)?;
    let names = column_names(&q)?;
    let mut rows = q.query(rusqlite::params_from_iter(params))?;
    let mut n = 0;
    while let Some(r) = rows.next()? {
        if n == limit || !each(&names, r)? {
            return Ok(true);
        }
        n += 1;
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_become_glob_patterns() {
        assert_eq!(glob_pattern("alice"), None);
        assert_eq!(glob_pattern("al*"), Some("al*".into()));
        assert_eq!(glob_pattern("a?[x]%_*"), Some("a?[[]x]%_*".into()));
    }

    #[test]
    fn networks_match_by_prefix() {
        let n = Network::parse("10.1.0.0/16").unwrap();
        assert!(n.contains("10.1.200.3"));
        assert!(!n.contains("10.2.0.1"));
        assert!(!n.contains("::1"));
        assert!(!n.contains("garbage"));
        assert!(Network::parse("0.0.0.0/0").unwrap().contains("192.0.2.1"));
        assert!(Network::parse("2001:db8::/32").unwrap().contains("2001:db8:1::5"));
        assert!(Network::parse("192.0.2.7").unwrap().contains("192.0.2.7"));
        assert!(!Network::parse("192.0.2.7").unwrap().contains("192.0.2.8"));
        for bad in ["10.0.0.0/33", "10.0.0.0/", "x/8", "::/129", "10.0.0.0/-1"] {
            assert_eq!(Network::parse(bad), None, "{bad}");
        }
    }
}
