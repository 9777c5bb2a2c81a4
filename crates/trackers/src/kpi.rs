//! KPI rows per interval and dimension, from call records and registration
//! transactions: off the packet path (a record is counted once, when
//! written). A call counts in the interval of its INVITE, a registration in
//! that of its REGISTER. The rows of finished intervals go out once per
//! interval, [`SETTLE_NS`] after its end; a call that ends later (a long
//! call) goes out in a later row with the same interval and key: rows add up.

use calliper_record::event::{Registration, RegistrationOutcome};
use calliper_record::kpi::{uri_host, Dimension, KpiCounts, NerCodes, COUNTER_NAMES};
use calliper_record::{CallRecord, Event, Tracker};
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
        let (name, addrs) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}` is not NAME=ADDRESS[,ADDRESS...]"))?;
        let addresses = addrs
            .split(',')
            .map(|a| {
                a.trim()
                    .parse()
                    .map_err(|_| format!("`{a}` in `{s}` is not an IP address"))
            })
            .collect::<Result<Vec<IpAddr>, String>>()?;
        if name.trim().is_empty() {
            return Err(format!("`{s}` has no trunk name before `=`"));
        }
        Ok(Trunk {
            name: name.trim().to_string(),
            addresses,
        })
    }
}

/// The trunk of traffic between `a` and `b`: the first of `trunks` that
/// holds either address, else the pair `a>b`.
pub fn trunk_key(trunks: &[Trunk], a: IpAddr, b: IpAddr) -> String {
    trunks
        .iter()
        .find(|t| t.addresses.contains(&a) || t.addresses.contains(&b))
        .map_or_else(|| format!("{a}>{b}"), |t| t.name.clone())
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

type RowKey = (i64, Dimension, String);

#[derive(Default)]
struct State {
    rows: BTreeMap<RowKey, KpiCounts>,
    keys: HashMap<(i64, Dimension), usize>,
    clock: i64,
    next_emit: i64,
    ready: Vec<Value>,
    dropped: u64,
}

/// The KPI tracker: a handle shared by the engine's hub and the output.
#[derive(Clone)]
pub struct Kpis {
    cfg: Arc<KpiConfig>,
    state: Arc<Mutex<State>>,
}

fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_KEY);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn or_none(s: String) -> String {
    if s.is_empty() {
        "(none)".into()
    } else {
        s
    }
}

impl Kpis {
    /// A tracker keeping `cfg`'s intervals and keys.
    pub fn new(cfg: KpiConfig) -> Kpis {
        Kpis {
            cfg: Arc::new(cfg),
            state: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Calls and registrations not counted (more than [`MAX_ROWS`] rows held).
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    fn trunk(&self, a: IpAddr, b: IpAddr) -> String {
        trunk_key(&self.cfg.trunks, a, b)
    }

    fn interval(&self, ts: i64) -> i64 {
        ts.div_euclid(self.cfg.interval_ns) * self.cfg.interval_ns
    }

    /// Adds `count` to each of `keys` in the interval of `ts`.
    fn count(&self, ts: i64, keys: [(Dimension, String); 4], count: impl Fn(&mut KpiCounts)) {
        let start = self.interval(ts);
        let mut s = self.lock();
        if s.rows.len() + 5 > MAX_ROWS {
            s.dropped += 1;
            return;
        }
        let all = std::iter::once((Dimension::Total, "all".to_string()));
        for (dim, key) in all.chain(keys) {
            let key = cut(&key);
            let row = (start, dim, key);
            let row = if s.rows.contains_key(&row) || dim == Dimension::Total {
                row
            } else if *s.keys.get(&(start, dim)).unwrap_or(&0) < self.cfg.max_keys {
                *s.keys.entry((start, dim)).or_default() += 1;
                row
            } else {
                (start, dim, OTHER.to_string())
            };
            count(s.rows.entry(row).or_default());
        }
    }

    /// Moves the clock; once an interval has settled, its rows (and any late
    /// additions to older ones) become ready.
    fn tick(&self, now: i64) {
        let mut s = self.lock();
        s.clock = s.clock.max(now);
        if s.next_emit == 0 {
            s.next_emit = self.interval(now) + self.cfg.interval_ns + SETTLE_NS;
        }
        if s.clock >= s.next_emit {
            let through = s.clock - SETTLE_NS;
            let rows = self.release(&mut s, through);
            s.ready.extend(rows);
            s.next_emit = self.interval(through) + self.cfg.interval_ns + SETTLE_NS;
        }
    }

    /// Takes the rows of intervals that end at or before `through`.
    fn release(&self, s: &mut State, through: i64) -> Vec<Value> {
        let len = self.cfg.interval_ns;
        let done: Vec<RowKey> = s
            .rows
            .keys()
            .take_while(|(start, _, _)| start.saturating_add(len) <= through)
            .cloned()
            .collect();
        s.keys
            .retain(|(start, _), _| start.saturating_add(len) > through);
        done.into_iter()
            .filter_map(|k| s.rows.remove(&k).map(|c| row(&k, len, &c)))
            .collect()
    }

    fn call(&self, c: &CallRecord) {
        let keys = [
            (Dimension::Trunk, self.trunk(c.caller_ip, c.callee_ip)),
            (Dimension::CallerDomain, or_none(uri_host(&c.from.uri))),
            (Dimension::CalleeDomain, or_none(uri_host(&c.to.uri))),
            (
                Dimension::UserAgent,
                or_none(c.caller_user_agent.clone().unwrap_or_default()),
            ),
        ];
        self.count(c.invite_ns, keys, |k| k.add_call(c, &self.cfg.ner));
    }

    fn registration(&self, r: &Registration<'_>) {
        let refused = match r.outcome {
            RegistrationOutcome::Challenged => return,
            RegistrationOutcome::Registered | RegistrationOutcome::Unregistered => false,
            RegistrationOutcome::AuthFailed | RegistrationOutcome::Failed => true,
        };
        let delay_ms = (r.ts_ns - r.request_ns) as f64 / 1e6;
        let keys = [
            (Dimension::Trunk, self.trunk(r.client.0, r.registrar.0)),
            (Dimension::CallerDomain, or_none(uri_host(r.aor))),
            (Dimension::CalleeDomain, or_none(uri_host(r.aor))),
            (
                Dimension::UserAgent,
                or_none(r.user_agent.unwrap_or_default().to_string()),
            ),
        ];
        self.count(r.request_ns, keys, |k| {
            k.add_registration(refused, delay_ms)
        });
    }
}

/// One JSON row: interval, dimension, key and every counter.
fn row(k: &RowKey, len: i64, c: &KpiCounts) -> Value {
    let mut m = Map::new();
    m.insert("start_ns".into(), k.0.into());
    m.insert("interval_s".into(), (len as f64 / 1e9).into());
    m.insert("dimension".into(), k.1.name().into());
    m.insert("key".into(), k.2.clone().into());
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
        let k = Kpis::new(KpiConfig {
            max_keys: 2,
            ..KpiConfig::default()
        });
        for agent in ["a", "b", "c", "d", "a"] {
            let keys = [
                (Dimension::Trunk, "t".to_string()),
                (Dimension::CallerDomain, "d".to_string()),
                (Dimension::CalleeDomain, "d".to_string()),
                (Dimension::UserAgent, agent.to_string()),
            ];
            k.count(1, keys, |c| c.add_registration(false, 1.0));
        }
        let rows = k.take_all();
        let agents: Vec<(String, u64)> = rows
            .iter()
            .filter(|r| r["dimension"] == "user_agent")
            .map(|r| {
                (
                    r["key"].as_str().unwrap().to_string(),
                    r["registrations"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            agents,
            [("a".to_string(), 2), ("b".into(), 1), (OTHER.into(), 2)]
        );
        let total = rows.iter().find(|r| r["dimension"] == "total").unwrap();
        assert_eq!(total["registrations"], 5);
    }

    #[test]
    fn an_interval_goes_out_once_settled_and_a_late_call_adds_a_row() {
        let min = 60_000_000_000;
        let k = Kpis::new(KpiConfig::default());
        let keys = || {
            [
                (Dimension::Trunk, "t".to_string()),
                (Dimension::CallerDomain, "d".to_string()),
                (Dimension::CalleeDomain, "d".to_string()),
                (Dimension::UserAgent, "u".to_string()),
            ]
        };
        k.count(min + 1, keys(), |c| c.add_registration(false, 1.0));
        k.tick(min + 1);
        k.tick(2 * min + SETTLE_NS - 1);
        assert!(k.take().is_empty(), "not settled yet");
        k.tick(2 * min + SETTLE_NS);
        let first = k.take();
        assert_eq!(first.len(), 5);
        assert!(first.iter().all(|r| r["start_ns"] == min));
        // A late addition to the same interval waits for the next emission.
        k.count(min + 2, keys(), |c| c.add_registration(true, 0.0));
        k.tick(3 * min);
        assert!(k.take().is_empty());
        k.tick(3 * min + SETTLE_NS);
        let late = k.take();
        assert_eq!(late.len(), 5);
        assert!(late
            .iter()
            .all(|r| r["start_ns"] == min && r["registrations_failed"] == 1));
    }
}
