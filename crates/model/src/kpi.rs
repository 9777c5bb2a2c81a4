//! Service KPIs: E.411's ASR and NER and RFC 6076's SIP metrics, kept as
//! counters and sums that add up, so rows of any interval and any number of
//! probes merge by addition and the ratios are taken last ([`KpiCounts::figures`]).
//! docs/kpi.md gives the definitions and the choices behind them.

use crate::{CallRecord, CallState};
use serde::Serialize;

macro_rules! counters {
    ($($name:ident = $text:literal, $doc:literal;)*) => {
        /// One KPI counter: an index into [`KpiCounts`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Counter {
            $(#[doc = $doc] $name,)*
        }
        /// The counters' names, in [`Counter`] order: the KPI row's fields
        /// and the `kpi` table's columns.
        pub const COUNTER_NAMES: &[&str] = &[$($text,)*];
    };
}

counters! {
    Attempts = "attempts", "Session attempts with a known outcome (initial INVITEs; a challenged retry is the same attempt).";
    Unresolved = "unresolved", "Attempts without an outcome: still open when the input ended or the probe stopped, or evicted from a full call table. Outside every ratio.";
    Answered = "answered", "Attempts answered 2xx (ASR, SER).";
    Redirected = "redirected", "Attempts answered 3xx: left out of SER's and SEER's denominators.";
    Effective = "effective", "Attempts answered 200, 480, 486, 600 or 603 (SEER).";
    Ineffective = "ineffective", "Attempts answered 408, 500, 503 or 504, or never answered (Timer B: a local 408) (ISA).";
    Completed = "completed", "Answered attempts ended by BYE (SCR).";
    NetworkEffective = "network_effective", "Attempts answered, or ended by the user (busy, no answer, rejected) as the NER mapping says (NER).";
    SrdCount = "srd_count", "Successful SRDs: INVITE to the first non-100 provisional or 2xx.";
    SrdSumUs = "srd_sum_us", "Their sum, microseconds.";
    FailedSrdCount = "failed_srd_count", "Failed SRDs: INVITE to a failure final response.";
    FailedSrdSumUs = "failed_srd_sum_us", "Their sum, microseconds.";
    SddCount = "sdd_count", "SDDs: BYE to its final response.";
    SddSumUs = "sdd_sum_us", "Their sum, microseconds.";
    ByeUnanswered = "bye_unanswered", "BYEs without a final response seen.";
    SdtCount = "sdt_count", "SDTs: 2xx to the BYE of completed sessions.";
    SdtSumMs = "sdt_sum_ms", "Their sum, milliseconds.";
    Registrations = "registrations", "REGISTER transactions, a 401/407 challenge not counted (its retry is).";
    RegistrationsFailed = "registrations_failed", "Those refused or failed (IRA).";
    RrdCount = "rrd_count", "RRDs: REGISTER to its 2xx.";
    RrdSumUs = "rrd_sum_us", "Their sum, microseconds.";
}

/// How many counters a row has.
pub const COUNTERS: usize = COUNTER_NAMES.len();

/// The KPI counters of one interval and key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KpiCounts(pub [u64; COUNTERS]);

impl Default for KpiCounts {
    fn default() -> Self {
        KpiCounts([0; COUNTERS])
    }
}

/// Which final responses count toward NER beside answers (E.411's user
/// busy, ring no answer and terminal rejection: SIP gives no standard mapping).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NerCodes {
    /// Counted whenever they end an attempt.
    pub always: Vec<u16>,
    /// Counted only when the call rang first (180/183): a CANCEL's 487.
    pub after_ringing: Vec<u16>,
}

impl Default for NerCodes {
    /// Busy 486 and 600, no answer 480 and 487 after ringing, rejection 603.
    fn default() -> Self {
        NerCodes { always: vec![480, 486, 600, 603], after_ringing: vec![487] }
    }
}

impl NerCodes {
    /// Parses `480,486,600,603,487@ringing` (a code, or a code counted only
    /// after ringing).
    pub fn parse(s: &str) -> Result<NerCodes, String> {
        let mut codes = NerCodes { always: Vec::new(), after_ringing: Vec::new() };
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (code, list) = match item.strip_suffix("@ringing") {
                Some(c) => (c, &mut codes.after_ringing),
                None => (item, &mut codes.always),
            };
            match code.parse::<u16>() {
                Ok(c) if (300..700).contains(&c) => list.push(c),
                _ => return Err(format!("`{item}` is not a final failure code (300-699), optionally followed by @ringing")),
            }
        }
        Ok(codes)
    }
}

/// The form [`NerCodes::parse`] reads (the command line shows the default so).
impl std::fmt::Display for NerCodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let always = self.always.iter().map(|c| c.to_string());
        let ringing = self.after_ringing.iter().map(|c| format!("{c}@ringing"));
        let items: Vec<String> = always.chain(ringing).collect();
        f.write_str(&items.join(","))
    }
}

/// The KPI abbreviations in words, for a report a reader meets cold.
pub const LEGEND: &str =
    "ASR answer-seizure ratio, NER network effectiveness ratio (ITU-T E.411); \
SER session establishment ratio, SEER session establishment effectiveness ratio, ISA ineffective \
session attempts, SCR session completion ratio, SRD session request delay, SDD session disconnect \
delay, SDT session duration, IRA ineffective registration attempts, RRD registration request delay \
(RFC 6076); fSRD the SRD of failed attempts, REG registrations; definitions in docs/kpi.md";

/// One KPI figure: an index into [`KpiFigures`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// E.411 answer-seizure ratio: answered / attempts.
    Asr,
    /// E.411 network effectiveness ratio: network-effective / attempts.
    Ner,
    /// RFC 6076 session establishment ratio: answered / (attempts − 3xx).
    Ser,
    /// RFC 6076 session establishment effectiveness ratio.
    Seer,
    /// RFC 6076 ineffective session attempts: ineffective / attempts.
    Isa,
    /// RFC 6076 session completion ratio: completed / attempts.
    Scr,
    /// RFC 6076 ineffective registration attempts: failed / registrations.
    Ira,
    /// Mean successful SRD, ms.
    SrdMs,
    /// Mean failed SRD, ms.
    FailedSrdMs,
    /// Mean SDD, ms.
    SddMs,
    /// Mean SDT, s.
    SdtS,
    /// Mean RRD, ms.
    RrdMs,
}

impl Figure {
    /// Every figure, in [`KpiFigures`] order (the JSON's).
    pub const ALL: [Figure; 12] = {
        use Figure::*;
        [Asr, Ner, Ser, Seer, Isa, Scr, Ira, SrdMs, FailedSrdMs, SddMs, SdtS, RrdMs]
    };

    /// Its field name in JSON.
    pub fn name(self) -> &'static str {
        use Figure::*;
        match self {
            Asr => "asr",
            Ner => "ner",
            Ser => "ser",
            Seer => "seer",
            Isa => "isa",
            Scr => "scr",
            Ira => "ira",
            SrdMs => "srd_ms",
            FailedSrdMs => "failed_srd_ms",
            SddMs => "sdd_ms",
            SdtS => "sdt_s",
            RrdMs => "rrd_ms",
        }
    }

    /// Its abbreviation for people ([`LEGEND`] spells them out): its
    /// name's first word in capitals.
    pub fn label(self) -> String {
        match self {
            Figure::FailedSrdMs => "failed SRD".into(),
            _ => self.name().split('_').next().unwrap_or_default().to_ascii_uppercase(),
        }
    }

    /// Its unit, with the space before it.
    pub fn unit(self) -> &'static str {
        match self {
            Figure::SdtS => " s",
            Figure::SrdMs | Figure::FailedSrdMs | Figure::SddMs | Figure::RrdMs => " ms",
            _ => " %",
        }
    }
}

/// The ratios and means of a [`KpiCounts`] by [`Figure`]: percentages, and
/// delays in ms (SDT in s); none where the denominator is 0. Serialised as
/// a map of the figures' names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KpiFigures(pub [Option<f64>; Figure::ALL.len()]);

impl KpiFigures {
    /// One figure.
    pub fn get(&self, f: Figure) -> Option<f64> {
        self.0[f as usize]
    }
}

impl Serialize for KpiFigures {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(Figure::ALL.len()))?;
        for f in Figure::ALL {
            m.serialize_entry(f.name(), &self.get(f))?;
        }
        m.end()
    }
}

impl KpiCounts {
    /// One counter.
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }

    fn bump(&mut self, c: Counter, by: u64) {
        let v = &mut self.0[c as usize];
        *v = v.saturating_add(by);
    }

    /// Adds another row's counters.
    pub fn add(&mut self, other: &KpiCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }

    /// Counts one call's record.
    pub fn add_call(&mut self, c: &CallRecord, ner: &NerCodes) {
        use Counter::*;
        let answered = c.answer_ns.is_some();
        // A cancelled attempt whose 487 was not seen ended as a 487 would.
        let status = c.final_status.or((c.state == CallState::Cancelled).then_some(487));
        let open = c.ongoing || c.state == CallState::Evicted;
        if !answered && status.is_none() && open {
            self.bump(Unresolved, 1);
            return;
        }
        self.bump(Attempts, 1);
        let code = if answered { 200 } else { status.unwrap_or(408) };
        if answered {
            self.bump(Answered, 1);
        }
        if (300..400).contains(&code) {
            self.bump(Redirected, 1);
        }
        if matches!(code, 200 | 480 | 486 | 600 | 603) {
            self.bump(Effective, 1);
        }
        if matches!(code, 408 | 500 | 503 | 504) {
            self.bump(Ineffective, 1);
        }
        let rang = c.ringing_ns.is_some();
        if answered || ner.always.contains(&code) || (rang && ner.after_ringing.contains(&code)) {
            self.bump(NetworkEffective, 1);
        }
        if let Some(srd) = c.setup_delay_ms {
            let (n, sum) = if c.setup_delay_to_failure {
                (FailedSrdCount, FailedSrdSumUs)
            } else {
                (SrdCount, SrdSumUs)
            };
            self.bump(n, 1);
            self.bump(sum, micros(srd));
        }
        if answered && c.state == CallState::Completed {
            self.bump(Completed, 1);
            self.bump(SdtCount, 1);
            self.bump(SdtSumMs, c.duration_ms.max(0.0).round() as u64);
            match c.disconnect_delay_ms {
                Some(sdd) => {
                    self.bump(SddCount, 1);
                    self.bump(SddSumUs, micros(sdd));
                }
                None => self.bump(ByeUnanswered, 1),
            }
        }
    }

    /// Counts one registration transaction: `refused` when it failed, its
    /// delay (request to final response) when it succeeded. Challenges are
    /// not counted (see [`Counter::Registrations`]).
    pub fn add_registration(&mut self, refused: bool, delay_ms: f64) {
        use Counter::*;
        self.bump(Registrations, 1);
        if refused {
            self.bump(RegistrationsFailed, 1);
        } else {
            self.bump(RrdCount, 1);
            self.bump(RrdSumUs, micros(delay_ms));
        }
    }

    /// The ratios and means.
    pub fn figures(&self) -> KpiFigures {
        use Counter::*;
        let g = |c| self.get(c) as f64;
        let ratio = |n: f64, d: f64| (d > 0.0).then(|| 100.0 * n / d);
        let mean = |sum: f64, n: f64, scale: f64| (n > 0.0).then(|| sum / n / scale);
        let established = g(Attempts) - g(Redirected);
        KpiFigures(Figure::ALL.map(|f| match f {
            Figure::Asr => ratio(g(Answered), g(Attempts)),
            Figure::Ner => ratio(g(NetworkEffective), g(Attempts)),
            Figure::Ser => ratio(g(Answered), established),
            Figure::Seer => ratio(g(Effective), established),
            Figure::Isa => ratio(g(Ineffective), g(Attempts)),
            Figure::Scr => ratio(g(Completed), g(Attempts)),
            Figure::Ira => ratio(g(RegistrationsFailed), g(Registrations)),
            Figure::SrdMs => mean(g(SrdSumUs), g(SrdCount), 1000.0),
            Figure::FailedSrdMs => mean(g(FailedSrdSumUs), g(FailedSrdCount), 1000.0),
            Figure::SddMs => mean(g(SddSumUs), g(SddCount), 1000.0),
            Figure::SdtS => mean(g(SdtSumMs), g(SdtCount), 1000.0),
            Figure::RrdMs => mean(g(RrdSumUs), g(RrdCount), 1000.0),
        }))
    }
}

/// A delay in ms as whole microseconds (a negative one, from a reordered
/// capture, as 0).
fn micros(ms: f64) -> u64 {
    (ms.max(0.0) * 1000.0).round() as u64
}

/// What a KPI row is keyed by beside its interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// Everything: key `all`.
    Total,
    /// A configured trunk's name, else the signalling address pair `caller>callee`.
    Trunk,
    /// The caller's domain (From URI host; a REGISTER's AOR host).
    CallerDomain,
    /// The callee's domain (To URI host).
    CalleeDomain,
    /// The caller's User-Agent (a REGISTER's).
    UserAgent,
}

impl Dimension {
    /// Every dimension, in report order.
    pub const ALL: [Dimension; 5] = [
        Dimension::Total,
        Dimension::Trunk,
        Dimension::CallerDomain,
        Dimension::CalleeDomain,
        Dimension::UserAgent,
    ];

    /// The name in rows and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Dimension::Total => "total",
            Dimension::Trunk => "trunk",
            Dimension::CallerDomain => "caller_domain",
            Dimension::CalleeDomain => "callee_domain",
            Dimension::UserAgent => "user_agent",
        }
    }
}

/// The host of a SIP URI, without port: `sip:a@Example.com:5060;x` gives
/// `Example.com` (compare without case); a `tel:` URI gives `tel`.
pub fn uri_host(uri: &str) -> &str {
    let uri = uri.trim().trim_start_matches('<');
    let Some((scheme, rest)) = uri.split_once(':') else {
        return "";
    };
    if !scheme.eq_ignore_ascii_case("sip") && !scheme.eq_ignore_ascii_case("sips") {
        return scheme;
    }
    let rest = rest.split('>').next().unwrap_or("");
    // The user part may hold `;` (user parameters, `;npdi`) but not an
    // unescaped `@`, so the first `@` ends it, unless headers (`?`) come first.
    let after_user = match (rest.find('@'), rest.find('?')) {
        (Some(at), Some(q)) if q < at => rest,
        (Some(at), _) => &rest[at + 1..],
        (None, _) => rest,
    };
    let host = after_user.split([';', '?']).next().unwrap_or("");
    match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    }
}

#[cfg(test)]
mod tests {
    use super::{uri_host, NerCodes};

    /// What is shown (the command line's default) reads back as itself.
    #[test]
    fn ner_codes_print_as_they_parse() {
        let default = NerCodes::default();
        assert_eq!(default.to_string(), "480,486,600,603,487@ringing");
        assert_eq!(NerCodes::parse(&default.to_string()), Ok(default));
        let only_ringing = NerCodes::parse("487@ringing").unwrap();
        assert_eq!(only_ringing.to_string(), "487@ringing");
        assert_eq!(NerCodes::parse("").unwrap().to_string(), "");
    }

    #[test]
    fn hosts_of_uris_with_user_parameters_ports_and_brackets() {
        for (uri, host) in [
            ("sip:alice@Atlanta.com:5060;transport=tcp", "Atlanta.com"),
            ("<sip:alice;day=tuesday@atlanta.com>", "atlanta.com"),
            ("sip:+12125551212;npdi;rn=+1@gw.example.com;user=phone", "gw.example.com"),
            ("sips:[2001:db8::1]:5061", "2001:db8::1"),
            ("sip:example.com?subject=a@b", "example.com"),
            ("tel:+1-201-555-0123", "tel"),
            ("sip:@", ""),
            ("nonsense", ""),
        ] {
            assert_eq!(uri_host(uri), host, "{uri}");
        }
    }
}
