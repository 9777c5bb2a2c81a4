//! KPI rows per interval and dimension, from call records and registration
//! transactions: off the packet path (a record is counted once, when
//! written). A call counts in the interval of its INVITE, a registration in
//! that of its REGISTER. The rows of finished intervals go out once per
//! interval, [`SETTLE_NS`] after its end; a call that ends later (a long
//! call) goes out in a later row with the same interval and key: rows add up.

use calliper_model::event::{Registration, RegistrationOutcome};
use calliper_model::kpi::{uri_host, Dimension, KpiCounts, NerCodes, COUNTER_NAMES};
use calliper_model::{CallRecord, Event, Tracker};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// How long after an interval's end its rows wait for the records of calls
/// that failed or were cancelled in it (written after the call grace).
pub const SETTLE_NS: i64 = 15_000_000_000;
/// Most rows held between two emissions (beyond it calls are not counted:
/// [`Kpis::dropped`]); the per-dimension key cap keeps far below it.
pub const MAX_ROWS: usize = 100_000;
/// Longest key kept (a User-Agent, a domain).
const MAX_KEY: usize = 64;
/// The key that gathers what a dimension has no room for.
pub const OTHER: &str = "other";

/// A named trunk: calls to or from any of its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trunk {
    /// The name reported.
    pub name: String,
    /// Its signalling addresses.
    pub addresses: Vec<IpAddr>,
}

impl Trunk {
    /// Parses `NAME=ADDR[,ADDR...]`.
    pub fn parse(s: &str) -> Result<Trunk, String> {
        let (name, addrs) =
            s.split_once('=').ok_or_else(|| format!("`{s}` is not NAME=ADDRESS[,ADDRESS...]"))?;
        let addresses = addrs
            .split(',')
            .map(|a| a.trim().parse().map_err(|_| format!("`{a}` in `{s}` is not an IP address")))
            .collect::<Result<Vec<IpAddr>, String>>()?;
        if name.trim().is_empty() {
            return Err(format!("`{s}` has no trunk name before `=`"));
        }
        if name.trim() == OTHER {
            return Err(format!(
                "`{OTHER}` is the key of what has no room: name the trunk otherwise"
            ));
        }
        Ok(Trunk { name: name.trim().to_string(), addresses })
    }
}

/// The trunk of traffic between `a` and `b`: the first of `trunks` that
/// holds either address, else the pair `a>b` (written into `buf`).
pub fn trunk_key<'a>(trunks: &'a [Trunk], a: IpAddr, b: IpAddr, buf: &'a mut String) -> &'a str {
    match trunks.iter().find(|t| t.addresses.contains(&a) || t.addresses.contains(&b)) {
        Some(t) => &t.name,
        None => {
            use std::fmt::Write;
            buf.clear();
            let _ = write!(buf, "{a}>{b}");
            buf
        }
    }
}

/// How KPIs are kept.
#[derive(Debug, Clone)]
pub struct KpiConfig {
    /// Interval length, ns.
    pub interval_ns: i64,
    /// Most keys per dimension and interval; the rest count under [`OTHER`].
    pub max_keys: usize,
    /// Named trunks (the first that holds an address wins).
    pub trunks: Vec<Trunk>,
    /// NER's mapping of final responses.
    pub ner: NerCodes,
}

impl Default for KpiConfig {
    fn default() -> Self {
        KpiConfig {
            interval_ns: 60_000_000_000,
            max_keys: 100,
            trunks: Vec::new(),
            ner: NerCodes::default(),
        }
    }
}

/// One interval's keys of one dimension.
type Table = HashMap<String, KpiCounts>;

#[derive(Default)]
struct State {
    tables: BTreeMap<(i64, Dimension), Table>,
    rows: usize,
    clock: i64,
    next_emit: i64,
    ready: Vec<Value>,
    dropped: u64,
    /// Everything counted in the run (the total of every interval).
    run_total: KpiCounts,
}

/// The KPI tracker: a handle shared by the engine's hub and the output.
#[derive(Clone)]
pub struct Kpis {
    cfg: Arc<KpiConfig>,
    state: Arc<Mutex<State>>,
    /// Room to write a trunk key or a lower-cased host without allocating.
    scratch: [String; 3],
}

/// `s` cut to [`MAX_KEY`] bytes (at a character boundary); `(none)` when empty.
fn key(s: &str) -> &str {
    let mut end = s.len().min(MAX_KEY);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    match &s[..end] {
        "" => "(none)",
        k => k,
    }
}

/// The lower-cased host of `uri` (see [`uri_host`]), in `buf` only when
/// lower-casing changes it.
fn host<'a>(uri: &'a str, buf: &'a mut String) -> &'a str {
    let h = uri_host(uri);
    if h.bytes().any(|b| b.is_ascii_uppercase()) {
        buf.clear();
        buf.push_str(h);
        buf.make_ascii_lowercase();
        buf
    } else {
        h
    }
}

impl Kpis {
    /// A tracker keeping `cfg`'s intervals and keys.
    pub fn new(cfg: KpiConfig) -> Kpis {
        Kpis { cfg: Arc::new(cfg), state: Arc::default(), scratch: Default::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock(&self.state)
    }

    /// Rows ready to write: those of intervals that ended [`SETTLE_NS`] ago.
    pub fn take(&self) -> Vec<Value> {
        std::mem::take(&mut self.lock().ready)
    }

    /// Every row held (the end of the input).
    pub fn take_all(&self) -> Vec<Value> {
        let mut s = self.lock();
        let mut rows = std::mem::take(&mut s.ready);
        rows.extend(self.release(&mut s, i64::MAX));
        rows
    }

    /// Everything counted so far, all intervals together.
    pub fn run_total(&self) -> KpiCounts {
        self.lock().run_total
    }

    /// Calls and registrations not counted (more than [`MAX_ROWS`] rows held).
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Moves the clock; once an interval has settled, its rows (and any late
    /// additions to older ones) become ready.
    fn tick(&self, now: i64) {
        let mut s = self.lock();
        s.clock = s.clock.max(now);
        if s.next_emit == 0 {
            s.next_emit = interval(&self.cfg, now).saturating_add(self.cfg.interval_ns + SETTLE_NS);
        }
        // A clock far ahead (one stray packet from the future, or files out
        // of order) must not hold every row until the end: time back by
        // more than an interval restarts the schedule from `now`.
        let behind = now < s.next_emit.saturating_sub(2 * self.cfg.interval_ns + SETTLE_NS);
        if behind {
            s.clock = now;
        }
        if s.clock >= s.next_emit || behind {
            let through = s.clock.saturating_sub(SETTLE_NS);
            let rows = self.release(&mut s, through);
            s.ready.extend(rows);
            s.next_emit =
                interval(&self.cfg, through).saturating_add(self.cfg.interval_ns + SETTLE_NS);
        }
    }

    /// Takes the rows of intervals that end at or before `through`, in
    /// order of interval, dimension and key.
    fn release(&self, s: &mut State, through: i64) -> Vec<Value> {
        let len = self.cfg.interval_ns;
        let mut out = Vec::new();
        while let Some(entry) = s.tables.first_entry() {
            let (start, dim) = *entry.key();
            if start.saturating_add(len) > through {
                break;
            }
            let mut rows: Vec<(String, KpiCounts)> = entry.remove().into_iter().collect();
            s.rows -= rows.len();
            fold_to_busiest(&mut rows, self.cfg.max_keys);
            out.extend(rows.iter().map(|(k, c)| row(start, dim, k, len, c)));
        }
        out
    }

    fn call(&mut self, c: &CallRecord) {
        let [t, from, to] = &mut self.scratch;
        let keys = [
            (Dimension::Trunk, trunk_key(&self.cfg.trunks, c.caller_ip, c.callee_ip, t)),
            (Dimension::CallerDomain, host(&c.from.uri, from)),
            (Dimension::CalleeDomain, host(&c.to.uri, to)),
            (Dimension::UserAgent, c.caller_user_agent.as_deref().unwrap_or("")),
        ];
        let ner = &self.cfg.ner;
        count_keys(&self.cfg, &self.state, c.invite_ns, keys, |k| k.add_call(c, ner));
    }

    fn registration(&mut self, r: &Registration<'_>) {
        let refused = match r.outcome {
            RegistrationOutcome::Challenged => return,
            RegistrationOutcome::Registered | RegistrationOutcome::Unregistered => false,
            RegistrationOutcome::AuthFailed | RegistrationOutcome::Failed => true,
        };
        let delay_ms = (r.ts_ns - r.request_ns) as f64 / 1e6;
        let [t, aor, _] = &mut self.scratch;
        let aor = host(r.aor, aor);
        let keys = [
            (Dimension::Trunk, trunk_key(&self.cfg.trunks, r.client.0, r.registrar.0, t)),
            (Dimension::CallerDomain, aor),
            (Dimension::CalleeDomain, aor),
            (Dimension::UserAgent, r.user_agent.unwrap_or("")),
        ];
        count_keys(&self.cfg, &self.state, r.request_ns, keys, |k| {
            k.add_registration(refused, delay_ms)
        });
    }
}

fn interval(cfg: &KpiConfig, ts: i64) -> i64 {
    ts.div_euclid(cfg.interval_ns).saturating_mul(cfg.interval_ns)
}

/// Keys followed per dimension and interval, as a multiple of the keys
/// reported: the busiest `max_keys` of them are kept when the rows go out,
/// so keys seen first (a scan's quickly refused calls, written before long
/// calls end) cannot take the places of busier ones.
const CANDIDATES: usize = 4;

/// Keeps the `keep` busiest keys (attempts, then registrations), adds the
/// rest to `other`, and sorts by key.
fn fold_to_busiest(rows: &mut Vec<(String, KpiCounts)>, keep: usize) {
    use calliper_model::kpi::Counter;
    let busy = |c: &KpiCounts| (c.get(Counter::Attempts), c.get(Counter::Registrations));
    rows.sort_by(|a, b| {
        (a.0 == OTHER).cmp(&(b.0 == OTHER)).then(busy(&b.1).cmp(&busy(&a.1))).then(a.0.cmp(&b.0))
    });
    let named = rows.iter().filter(|r| r.0 != OTHER).count();
    if named > keep {
        let mut other = KpiCounts::default();
        for (_, c) in rows.drain(keep..) {
            other.add(&c);
        }
        rows.push((OTHER.to_string(), other));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
}

/// Adds `count` to the total and to each of `keys` in the interval of `ts`:
/// a key allocates only the first time it is seen in an interval.
fn count_keys(
    cfg: &KpiConfig,
    state: &Mutex<State>,
    ts: i64,
    keys: [(Dimension, &str); 4],
    count: impl Fn(&mut KpiCounts),
) {
    let start = interval(cfg, ts);
    let mut s = crate::lock(state);
    if s.rows + 5 > MAX_ROWS {
        s.dropped += 1;
        return;
    }
    count(&mut s.run_total);
    let all = std::iter::once((Dimension::Total, "all"));
    for (dim, k) in all.chain(keys) {
        let k = key(k);
        let table = s.tables.entry((start, dim)).or_default();
        if let Some(c) = table.get_mut(k) {
            count(c);
            continue;
        }
        let held = table.len() - table.contains_key(OTHER) as usize;
        let k = if held < cfg.max_keys * CANDIDATES || dim == Dimension::Total { k } else { OTHER };
        let new = !table.contains_key(k);
        count(table.entry(k.to_string()).or_default());
        s.rows += new as usize;
    }
}

/// One JSON row: interval, dimension, key and every counter.
fn row(start: i64, dim: Dimension, key: &str, len: i64, c: &KpiCounts) -> Value {
    let mut m = Map::new();
    m.insert("start_ns".into(), start.into());
    m.insert("interval_s".into(), (len as f64 / 1e9).into());
    m.insert("dimension".into(), dim.name().into());
    m.insert("key".into(), key.into());
    for (name, v) in COUNTER_NAMES.iter().zip(c.0) {
        m.insert((*name).into(), v.into());
    }
    Value::Object(m)
}

impl Tracker for Kpis {
    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::CallRecord(c) => {
                self.call(c);
                self.tick(c.end_ns);
            }
            Event::Registration(r) => {
                self.registration(r);
                self.tick(r.ts_ns);
            }
            Event::Traffic(t) => self.tick(t.released_ns),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_trunks_and_refuses_what_is_not_one() {
        let t = Trunk::parse("carrier=192.0.2.1, 2001:db8::1").unwrap();
        assert_eq!(t.name, "carrier");
        assert_eq!(t.addresses.len(), 2);
        assert!(Trunk::parse("carrier").is_err());
        assert!(Trunk::parse("=192.0.2.1").is_err());
        assert!(Trunk::parse("c=host.example").is_err());
    }

    #[test]
    fn keys_beyond_the_cap_count_as_other_and_the_total_keeps_all() {
        let k = Kpis::new(KpiConfig { max_keys: 2, ..KpiConfig::default() });
        for agent in ["a", "b", "c", "d", "a"] {
            let keys = [
                (Dimension::Trunk, "t"),
                (Dimension::CallerDomain, "d"),
                (Dimension::CalleeDomain, "d"),
                (Dimension::UserAgent, agent),
            ];
            count_keys(&k.cfg, &k.state, 1, keys, |c| c.add_registration(false, 1.0));
        }
        let rows = k.take_all();
        let agents: Vec<(String, u64)> = rows
            .iter()
            .filter(|r| r["dimension"] == "user_agent")
            .map(|r| (r["key"].as_str().unwrap().to_string(), r["registrations"].as_u64().unwrap()))
            .collect();
        assert_eq!(agents, [("a".to_string(), 2), ("b".into(), 1), (OTHER.into(), 2)]);
        let total = rows.iter().find(|r| r["dimension"] == "total").unwrap();
        assert_eq!(total["registrations"], 5);
    }

    #[test]
    fn an_interval_goes_out_once_settled_and_a_late_call_adds_a_row() {
        let min = 60_000_000_000;
        let k = Kpis::new(KpiConfig::default());
        let keys = || {
            [
                (Dimension::Trunk, "t"),
                (Dimension::CallerDomain, "d"),
                (Dimension::CalleeDomain, "d"),
                (Dimension::UserAgent, "u"),
            ]
        };
        count_keys(&k.cfg, &k.state, min + 1, keys(), |c| c.add_registration(false, 1.0));
        k.tick(min + 1);
        k.tick(2 * min + SETTLE_NS - 1);
        assert!(k.take().is_empty(), "not settled yet");
        k.tick(2 * min + SETTLE_NS);
        let first = k.take();
        assert_eq!(first.len(), 5);
        assert!(first.iter().all(|r| r["start_ns"] == min));
        // A late addition to the same interval waits for the next emission.
        count_keys(&k.cfg, &k.state, min + 2, keys(), |c| c.add_registration(true, 0.0));
        k.tick(3 * min);
        assert!(k.take().is_empty());
        k.tick(3 * min + SETTLE_NS);
        let late = k.take();
        assert_eq!(late.len(), 5);
        assert!(late.iter().all(|r| r["start_ns"] == min && r["registrations_failed"] == 1));
    }
}
