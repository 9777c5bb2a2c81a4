//! Alerts: thresholds crossed, as stored events that name their call (or
//! the source or trunk they are about). Judged from call records and
//! registration transactions, off the packet path; docs/alerts.md.

use crate::kpi::{trunk_key, Trunk};
use calliper_model::event::{CallChange, CallPhase, Registration, RegistrationOutcome};
use calliper_model::{CallRecord, CallState, Event, StreamDirection, Tracker};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Most alerts held between two writes (beyond it they are counted, not kept).
pub const MAX_ALERTS: usize = 100_000;
/// Most sources (scanning) and trunks (ASR) followed at once; new ones
/// beyond are not judged and are counted ([`Alerts::untracked`]).
pub const MAX_FOLLOWED: usize = 10_000;
/// The window in which a source's failed requests are counted, ns.
const SCAN_WINDOW_NS: i64 = 60_000_000_000;
/// The ASR window's granularity, ns.
const MINUTE_NS: i64 = 60_000_000_000;

/// User-Agent fragments of well-known SIP scanners (case-insensitive).
pub const SCANNER_AGENTS: &[&str] = &[
    "friendly-scanner",
    "sipvicious",
    "sipcli",
    "sip-scan",
    "sipsak",
    "sundayddr",
    "iwar",
    "sivus",
    "vaxsipuseragent",
    "pplsip",
    "smap",
];

/// Most answers and registrations waiting for their place among the
/// records ([`Alerts`]); beyond it the oldest is judged at once.
const MAX_WAITING: usize = 100_000;

/// Longest ASR window, minutes (each trunk keeps a bucket per minute).
pub const MAX_ASR_MINUTES: usize = 60;

/// The thresholds; `None` turns a check off.
#[derive(Debug, Clone)]
pub struct AlertConfig {
    /// A call whose worst stream MOS is below this.
    pub mos_below: Option<f64>,
    /// A call with a scored stream losing more than this, percent.
    pub loss_above: Option<f64>,
    /// One-way audio and no RTP are judged on calls answered at least this long, ns.
    pub media_after_ns: Option<i64>,
    /// A trunk whose ASR over [`Self::asr_window_ns`] falls below this, percent.
    pub asr_below: Option<f64>,
    /// The ASR window, ns (whole minutes, at most [`MAX_ASR_MINUTES`]).
    pub asr_window_ns: i64,
    /// Fewest attempts in the window before ASR is judged.
    pub asr_min_attempts: u64,
    /// A source with this many refused REGISTERs or INVITEs (401, 403, 404,
    /// 407, 484) in a minute is scanning.
    pub scan_failures: Option<u32>,
    /// User-Agent fragments that mark a scanner (lower case).
    pub scanner_agents: Vec<String>,
    /// Named trunks (as for the KPIs).
    pub trunks: Vec<Trunk>,
}

impl AlertConfig {
    fn asr_window_minutes(&self) -> usize {
        ((self.asr_window_ns / MINUTE_NS) as usize).clamp(1, MAX_ASR_MINUTES)
    }
}

impl Default for AlertConfig {
    fn default() -> Self {
        AlertConfig {
            mos_below: Some(3.1),
            loss_above: Some(5.0),
            media_after_ns: Some(5_000_000_000),
            asr_below: Some(30.0),
            asr_window_ns: 15 * MINUTE_NS,
            asr_min_attempts: 20,
            scan_failures: Some(20),
            scanner_agents: SCANNER_AGENTS.iter().map(|s| s.to_string()).collect(),
            trunks: Vec::new(),
        }
    }
}

/// One alert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// When: the call's end, or the request that crossed the threshold.
    pub ts_ns: i64,
    /// `low_mos`, `high_loss`, `one_way_audio`, `no_rtp`, `low_asr`,
    /// `scanning`, `scanner_agent`.
    pub kind: &'static str,
    /// The call it is about (its Call-ID), if one.
    pub call_id: Option<String>,
    /// The source it is about (scanning), if one.
    pub source: Option<IpAddr>,
    /// The trunk, direction or User-Agent it is about, if one.
    pub key: Option<String>,
    /// The figure that crossed the threshold.
    pub value: f64,
    /// The threshold.
    pub threshold: f64,
    /// What value and threshold measure (`calliper_model::alert::unit`).
    pub unit: &'static str,
}

#[derive(Default)]
struct Source {
    failures: u32,
    scanning_alerted: bool,
    agent_alerted: bool,
}

struct TrunkWindow {
    /// (minute, attempts, answered) by minute modulo the window's length.
    buckets: Box<[(i64, u32, u32)]>,
    /// The latest minute counted.
    last_minute: i64,
    /// No new alert before this time (one per window).
    quiet_until: i64,
}

/// A judgement taken from a live event, waiting for the records of calls
/// that ended before it; the first field is the engine's clock when the
/// event was sent, which places it among the records.
enum Waiting {
    /// An answer, for its trunk's ASR: (clock, time, trunk, Call-ID).
    Answer(i64, i64, String, String),
    /// A REGISTER's outcome, for its source: (clock, time, source, refused,
    /// agent).
    Register(i64, i64, IpAddr, bool, Option<String>),
}

impl Waiting {
    fn clock(&self) -> i64 {
        match self {
            Waiting::Answer(clock, ..) | Waiting::Register(clock, ..) => *clock,
        }
    }
}

#[derive(Default)]
struct State {
    /// Live judgements in the order they came; see [`Alerts`].
    waiting: VecDeque<Waiting>,
    ready: Vec<Alert>,
    dropped: u64,
    untracked: u64,
    sources: HashMap<IpAddr, Source>,
    /// The window `sources` counts.
    scan_window: i64,
    trunks: HashMap<String, TrunkWindow>,
    /// The minute idle trunks were last pruned.
    pruned_minute: i64,
}

/// The alert tracker: a handle shared by the engine's hub and the output.
///
/// Answers and registrations come live from the signalling engine; records
/// come later, when a call ends (merged from every shard in a sharded run).
/// The order in which the two meet would decide which sources and trunks
/// the caps let in, and so differ between runs and thread counts. So the
/// live judgements wait, in their order, and a record first applies those
/// older than the engine time it was written at (`held_until_ns`): every
/// engine has delivered all of them by then, whatever the threads. When no
/// call ends, [`Event::RecordsBefore`] lets them go in the same order.
#[derive(Clone)]
pub struct Alerts {
    cfg: Arc<AlertConfig>,
    state: Arc<Mutex<State>>,
    /// Room to write a trunk key without allocating.
    scratch: String,
}

impl Alerts {
    /// A tracker judging by `cfg`.
    pub fn new(cfg: AlertConfig) -> Alerts {
        Alerts { cfg: Arc::new(cfg), state: Arc::default(), scratch: String::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock(&self.state)
    }

    /// Alerts raised since the last call.
    pub fn take(&self) -> Vec<Alert> {
        std::mem::take(&mut self.lock().ready)
    }

    /// The input ended: judges what still waits, then takes every alert.
    pub fn take_all(&self) -> Vec<Alert> {
        let mut s = self.lock();
        settle(&self.cfg, &mut s, i64::MAX);
        std::mem::take(&mut s.ready)
    }

    /// Alerts not kept (more than [`MAX_ALERTS`] between two writes).
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Sources and trunks not judged (more than [`MAX_FOLLOWED`] at once).
    pub fn untracked(&self) -> u64 {
        self.lock().untracked
    }

    fn call(&mut self, c: &CallRecord) {
        let mut s = crate::lock(&self.state);
        let cfg = &self.cfg;
        settle(cfg, &mut s, c.held_until_ns);
        // An attempt's failure, at its end (its answer was counted live).
        let failed = c.state != CallState::Evicted
            && !c.final_status.is_some_and(|st| (200..300).contains(&st));
        if failed {
            let key = trunk_key(&cfg.trunks, c.caller_ip, c.callee_ip, &mut self.scratch);
            count_attempt(cfg, &mut s, key, c.end_ns, false, &c.call_id);
        }
        let about = |kind, key: Option<String>, value, threshold| Alert {
            ts_ns: c.end_ns,
            kind,
            call_id: Some(c.call_id.clone()),
            source: None,
            key,
            value,
            threshold,
            unit: calliper_model::alert::unit(kind),
        };
        if let (Some(t), Some(mos)) = (cfg.mos_below, c.worst_mos) {
            if mos < t {
                raise(&mut s, about("low_mos", None, mos, t));
            }
        }
        let worst_loss = c
            .streams
            .iter()
            .filter(|st| st.mos.is_some())
            .map(|st| st.loss_percent)
            .reduce(f64::max);
        if let (Some(t), Some(loss)) = (cfg.loss_above, worst_loss) {
            if loss > t {
                raise(&mut s, about("high_loss", None, loss, t));
            }
        }
        if let (Some(after), Some(answer)) = (cfg.media_after_ns, c.answer_ns) {
            // A call never hung up lived until the probe let it go.
            let life_ns = if c.hangup_by.is_none() {
                (c.held_until_ns - answer).max(0) as f64
            } else {
                c.duration_ms * 1e6
            };
            if life_ns >= after as f64 {
                let voice = |d: StreamDirection| {
                    c.streams
                        .iter()
                        .filter(|st| st.direction == d)
                        .map(|st| st.packets - st.event_packets.min(st.packets))
                        .sum::<u64>()
                };
                let up = voice(StreamDirection::CallerToCallee);
                let down = voice(StreamDirection::CalleeToCaller);
                let secs = life_ns / 1e9;
                // A fax call's T.38 is its media.
                let (up, down) = (up + c.t38_packets, down + c.t38_packets);
                let missing = match (up, down) {
                    (0, 0) => Some(("no_rtp", None)),
                    (0, _) => Some(("one_way_audio", Some("caller_to_callee".to_string()))),
                    (_, 0) => Some(("one_way_audio", Some("callee_to_caller".to_string()))),
                    _ => None,
                };
                if let Some((kind, key)) = missing {
                    raise(&mut s, about(kind, key, secs, after as f64 / 1e9));
                }
            }
        }
        let refused =
            matches!(c.final_status, Some(401 | 403 | 404 | 407 | 484)) && c.answer_ns.is_none();
        let agent = c.caller_user_agent.as_deref();
        judge_source(cfg, &mut s, c.caller_ip, c.end_ns, refused, agent);
    }

    /// An answer, for its trunk's ASR, counted when it comes (not at the
    /// record, which comes only at the hang-up: a window would see its
    /// failures first); a failure is counted at its call's record.
    fn phase(&mut self, ch: &CallChange<'_>) {
        if ch.phase != CallPhase::Answered || self.cfg.asr_below.is_none() {
            return;
        }
        let key = trunk_key(&self.cfg.trunks, ch.parties.0, ch.parties.1, &mut self.scratch);
        let w = Waiting::Answer(ch.clock_ns, ch.ts_ns, key.to_string(), ch.call_id.to_string());
        wait(&self.cfg, &mut self.lock(), w);
    }

    fn registration(&self, r: &Registration<'_>) {
        if self.cfg.scan_failures.is_none() && self.cfg.scanner_agents.is_empty() {
            return;
        }
        let refused = matches!(
            r.outcome,
            RegistrationOutcome::AuthFailed
                | RegistrationOutcome::Failed
                | RegistrationOutcome::Challenged
        );
        let agent = r.user_agent.map(str::to_string);
        let w = Waiting::Register(r.clock_ns, r.ts_ns, r.client.0, refused, agent);
        wait(&self.cfg, &mut self.lock(), w);
    }
}

/// Queues a live judgement; past [`MAX_WAITING`] the oldest is made now.
fn wait(cfg: &AlertConfig, s: &mut State, w: Waiting) {
    if s.waiting.len() >= MAX_WAITING {
        if let Some(old) = s.waiting.pop_front() {
            judge(cfg, s, old);
        }
    }
    s.waiting.push_back(w);
}

/// Makes the waiting judgements sent before the clock read `before`, in
/// their order, stopping at the first that was not.
fn settle(cfg: &AlertConfig, s: &mut State, before: i64) {
    while s.waiting.front().is_some_and(|w| w.clock() < before) {
        if let Some(w) = s.waiting.pop_front() {
            judge(cfg, s, w);
        }
    }
}

fn judge(cfg: &AlertConfig, s: &mut State, w: Waiting) {
    match w {
        Waiting::Answer(_, ts, key, call_id) => count_attempt(cfg, s, &key, ts, true, &call_id),
        Waiting::Register(_, ts, ip, refused, agent) => {
            judge_source(cfg, s, ip, ts, refused, agent.as_deref())
        }
    }
}

/// An attempt's outcome on a trunk, counted when it is known (the 2xx, or
/// the end of an unanswered call), not when the record is written: an
/// answered call's record comes only at its hang-up, so counting records
/// would judge a window on its failures first.
fn count_attempt(
    cfg: &AlertConfig,
    s: &mut State,
    key: &str,
    ts: i64,
    answered: bool,
    call_id: &str,
) {
    let Some(t) = cfg.asr_below else { return };
    let minutes = cfg.asr_window_minutes();
    let minute = ts.div_euclid(MINUTE_NS);
    if !s.trunks.contains_key(key) {
        if s.trunks.len() >= MAX_FOLLOWED && s.pruned_minute != minute {
            // Trunks idle for a whole window go, at most once a minute.
            s.pruned_minute = minute;
            s.trunks.retain(|_, w| w.last_minute > minute - minutes as i64);
        }
        if s.trunks.len() >= MAX_FOLLOWED {
            s.untracked += 1;
            return;
        }
        let w = TrunkWindow {
            buckets: vec![(i64::MIN, 0, 0); minutes].into_boxed_slice(),
            last_minute: minute,
            quiet_until: i64::MIN,
        };
        s.trunks.insert(key.to_string(), w);
    }
    let Some(w) = s.trunks.get_mut(key) else {
        return;
    };
    w.last_minute = w.last_minute.max(minute);
    let oldest = w.last_minute - minutes as i64 + 1;
    if minute < oldest {
        return; // older than the window
    }
    let b = &mut w.buckets[minute.rem_euclid(minutes as i64) as usize];
    if b.0 != minute {
        *b = (minute, 0, 0);
    }
    b.1 += 1;
    b.2 += answered as u32;
    let (attempts, answers) = w
        .buckets
        .iter()
        .filter(|b| b.0 >= oldest)
        .fold((0u64, 0u64), |(a, n), b| (a + u64::from(b.1), n + u64::from(b.2)));
    let asr = 100.0 * answers as f64 / attempts.max(1) as f64;
    if attempts >= cfg.asr_min_attempts && asr < t && ts >= w.quiet_until {
        w.quiet_until = ts.saturating_add(minutes as i64 * MINUTE_NS);
        let a = Alert {
            ts_ns: ts,
            kind: "low_asr",
            call_id: Some(call_id.to_string()),
            source: None,
            key: Some(key.to_string()),
            value: asr,
            threshold: t,
            unit: calliper_model::alert::unit("low_asr"),
        };
        raise(s, a);
    }
}

/// Scanning (refused requests per source per minute) and scanner agents.
fn judge_source(
    cfg: &AlertConfig,
    s: &mut State,
    ip: IpAddr,
    ts: i64,
    refused: bool,
    agent: Option<&str>,
) {
    // The sources of the current calendar minute only: a later minute, or
    // a jump back in time of more than a minute, starts afresh (a record of
    // the minute before joins the current one, so the order in which
    // records come does not matter).
    let window = ts.div_euclid(SCAN_WINDOW_NS);
    if window > s.scan_window || window < s.scan_window.saturating_sub(1) {
        s.scan_window = window;
        s.sources.clear();
    }
    if !s.sources.contains_key(&ip) && s.sources.len() >= MAX_FOLLOWED {
        s.untracked += 1;
        return;
    }
    let src = s.sources.entry(ip).or_default();
    src.failures += refused as u32;
    let mut alerts = Vec::new();
    if let Some(t) = cfg.scan_failures {
        if src.failures >= t && !src.scanning_alerted {
            src.scanning_alerted = true;
            alerts.push(("scanning", None, src.failures as f64, t as f64));
        }
    }
    if let Some(agent) = agent {
        let known = cfg.scanner_agents.iter().any(|a| contains_ignore_case(agent, a));
        if known && !src.agent_alerted {
            src.agent_alerted = true;
            alerts.push(("scanner_agent", Some(agent.to_string()), 1.0, 1.0));
        }
    }
    for (kind, key, value, threshold) in alerts {
        let a = Alert {
            ts_ns: ts,
            kind,
            call_id: None,
            source: Some(ip),
            key,
            value,
            threshold,
            unit: calliper_model::alert::unit(kind),
        };
        raise(s, a);
    }
}

fn raise(s: &mut State, a: Alert) {
    if s.ready.len() >= MAX_ALERTS {
        s.dropped += 1;
    } else {
        s.ready.push(a);
    }
}

/// `hay` contains `needle` (lower case), ASCII case aside.
fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    let n = needle.as_bytes();
    n.is_empty() || hay.as_bytes().windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
}

impl Tracker for Alerts {
    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::CallRecord(c) => self.call(c),
            Event::Call(ch) => self.phase(ch),
            Event::Registration(r) => self.registration(r),
            Event::RecordsBefore(t) => settle(&self.cfg, &mut self.lock(), *t),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_beyond_the_cap_are_counted_and_a_new_window_starts_afresh() {
        let cfg = AlertConfig::default();
        let mut s = State::default();
        let ip = |i: u32| IpAddr::from(i.to_be_bytes());
        for i in 0..MAX_FOLLOWED as u32 + 5 {
            judge_source(&cfg, &mut s, ip(i), 1, true, None);
        }
        assert_eq!(s.sources.len(), MAX_FOLLOWED);
        assert_eq!(s.untracked, 5);
        judge_source(&cfg, &mut s, ip(u32::MAX), SCAN_WINDOW_NS, true, None);
        assert_eq!(s.sources.len(), 1);
        assert!(s.ready.is_empty(), "one refusal per source is no scan");
    }

    /// An answer that reaches the tracker before the record of a call that
    /// failed earlier (a sharded run's reader lags its first shard) is
    /// judged after it, as when it comes after: the alerts are the same.
    #[test]
    fn an_answer_waits_for_the_records_of_calls_that_ended_before_it() {
        let cfg =
            AlertConfig { asr_below: Some(60.0), asr_min_attempts: 2, ..AlertConfig::default() };
        let answer = || Waiting::Answer(30, 30, "a>b".into(), "answered".into());
        let failed_record = |s: &mut State| {
            settle(&cfg, s, 20);
            count_attempt(&cfg, s, "a>b", 10, false, "failed");
        };
        let mut early = State::default();
        wait(&cfg, &mut early, answer());
        failed_record(&mut early);
        settle(&cfg, &mut early, i64::MAX);
        let mut late = State::default();
        failed_record(&mut late);
        wait(&cfg, &mut late, answer());
        settle(&cfg, &mut late, i64::MAX);
        assert_eq!(early.ready, late.ready);
        // The second attempt (the answer, at 50 %) crossed the threshold.
        assert_eq!(early.ready.len(), 1);
        assert_eq!(early.ready[0].call_id.as_deref(), Some("answered"));
    }

    #[test]
    fn agents_match_without_regard_to_case() {
        assert!(contains_ignore_case("Friendly-Scanner 1.0", "friendly-scanner"));
        assert!(!contains_ignore_case("Linphone", "sipvicious"));
        assert!(contains_ignore_case("x", ""));
    }
}
