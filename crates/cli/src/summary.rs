//! The terminal report and the counters as JSON.

use calliper_engine::{CallRecord, Counters, MosScale, Record, StreamRecord, Unscored};
use calliper_rules::RuleInfo;
use calliper_store::rfc3339;
use serde_json::json;
use std::borrow::Cow;
use std::io::{self, Write};

/// Text from the capture made safe for a terminal: control characters
/// (escape sequences, a bare CR that would overwrite a line) and
/// bidirectional or zero-width formatting are shown escaped instead of
/// acted on (`calliper_model::text`).
pub fn printable(s: &str) -> Cow<'_, str> {
    calliper_engine::text::visible(s)
}

/// Counters as a JSON object (for the JSON summary line and the database):
/// every field of [`Counters`], by its serialisation.
pub fn counters_json(c: &Counters) -> serde_json::Value {
    serde_json::to_value(c).unwrap_or_else(|e| json!({ "error": e.to_string() }))
}

/// Prints the counters for a human: every counter that is not zero, one
/// line per group (totals, then each nested group), each anomaly on a line
/// of its own. Generated from the same serialisation as the JSON, so no
/// counter can be left out; the number of lines is bounded by the number
/// of counters in the code (SIP kinds are a fixed set), whatever the input.
pub fn print_counters(w: &mut impl Write, c: &Counters) -> io::Result<()> {
    let serde_json::Value::Object(all) = counters_json(c) else {
        return Ok(());
    };
    let mut totals = Vec::new();
    let mut groups = Vec::new();
    for (name, v) in &all {
        match v {
            serde_json::Value::Object(o) if name != "anomalies" => groups.push((name, o)),
            serde_json::Value::Number(n) if n.as_u64() != Some(0) => {
                totals.push(format!("{} {n}", name.replace('_', " ")))
            }
            _ => {}
        }
    }
    if totals.is_empty() {
        totals.push("none (no packet analysed)".into());
    }
    writeln!(w, "counters     {}", totals.join(", "))?;
    for (name, o) in groups {
        let parts: Vec<String> = o
            .iter()
            .filter(|(_, v)| v.as_u64() != Some(0))
            .map(|(k, v)| format!("{} {v}", k.replace('_', " ")))
            .collect();
        if !parts.is_empty() {
            writeln!(w, "{:<12} {}", name.replace('_', " "), parts.join(", "))?;
        }
    }
    if c.anomalies.is_empty() {
        writeln!(w, "anomalies    none")?;
    }
    for (k, v) in &c.anomalies {
        writeln!(w, "anomaly      {k}: {v}")?;
        if let Some(hint) = anomaly_hint(k) {
            writeln!(w, "             {hint}")?;
        }
    }
    Ok(())
}

/// `1 call`, `3 calls`: a count and its noun, in the right number.
pub fn counted(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// What an operator can do about an anomaly, where the tool knows.
fn anomaly_hint(kind: &str) -> Option<&'static str> {
    match kind {
        "ppp_header_compressed" => Some(
            "the media's headers are compressed (cRTP): `calliper crtp decompress IN OUT`, then analyze OUT",
        ),
        "ppp_compressed" => Some("compressed or encrypted PPP (CCP, MPPE): its calls cannot be seen"),
        "time_implausible" => Some(
            "packets stamped more than a day from their neighbours, analysed at the time before them (docs/hostile-input.md, Time)",
        ),
        _ => None,
    }
}

/// Most streams without a call held until the end, to be written after the
/// calls with the call whose streams share their SSRC; beyond it they are
/// written at once, unlinked.
const MAX_HELD_ORPHANS: usize = 10_000;
/// Most SSRCs of calls' streams remembered for that link (each with up to
/// [`CALLS_PER_SSRC`] calls: an SSRC reused by another call does not hide
/// the first).
const MAX_LINKED_SSRCS: usize = 20_000;
/// Calls remembered per SSRC.
const CALLS_PER_SSRC: usize = 4;
/// How far outside a call's stream an orphan with its SSRC still belongs
/// to it (the console's related streams take the call's time the same way).
const LINK_SLACK_NS: i64 = 10_000_000_000;

/// Human-readable report: one block per call, then orphan streams, then counters.
pub struct TextReport<W: Write> {
    w: W,
    calls: u64,
    streams: u64,
    /// Streams without a call, held for the end (`analyze`; a probe, which
    /// runs for ever, writes them at once).
    orphans: Option<Vec<StreamRecord>>,
    /// Per SSRC of a call's stream: the calls, and the stream's first and last packet.
    call_ssrcs: std::collections::HashMap<u32, Vec<(String, i64, i64)>>,
}

/// A run that failed never reaches `finish`: the streams without a call
/// held for it are written all the same.
impl<W: Write> Drop for TextReport<W> {
    fn drop(&mut self) {
        let _ = self.write_orphans();
    }
}

impl<W: Write> TextReport<W> {
    /// A report written to `w`; `link_orphans` holds streams without a
    /// call until the end, to write them with the call carrying their SSRC.
    pub fn new(w: W, link_orphans: bool) -> Self {
        TextReport {
            w,
            calls: 0,
            streams: 0,
            orphans: link_orphans.then(Vec::new),
            call_ssrcs: std::collections::HashMap::new(),
        }
    }

    /// Adds a record. Write errors surface at `finish`.
    pub fn record(&mut self, r: &Record) {
        let _ = match r {
            Record::Call(c) => self.call(c),
            Record::Stream(s) => {
                self.streams += 1;
                match &mut self.orphans {
                    Some(held) if held.len() < MAX_HELD_ORPHANS => {
                        held.push((**s).clone());
                        Ok(())
                    }
                    _ => writeln!(self.w, "stream without call  {}", stream_line(s)),
                }
            }
        };
    }

    /// The held streams without a call, each with the call carrying its
    /// SSRC in its time (a relay's other leg, the phone elsewhere).
    fn write_orphans(&mut self) -> io::Result<()> {
        for s in self.orphans.take().unwrap_or_default() {
            let calls: Vec<String> = self
                .call_ssrcs
                .get(&s.ssrc)
                .into_iter()
                .flatten()
                .filter(|(_, first, last)| {
                    s.first_ns <= last.saturating_add(LINK_SLACK_NS)
                        && s.last_ns >= first.saturating_sub(LINK_SLACK_NS)
                })
                .map(|(call, _, _)| printable(call).into_owned())
                .collect();
            let link = (!calls.is_empty())
                .then(|| format!("  (its SSRC is in call {}'s streams)", calls.join(", ")));
            writeln!(
                self.w,
                "stream without call  {}{}",
                stream_line(&s),
                link.unwrap_or_default()
            )?;
        }
        Ok(())
    }

    fn call(&mut self, c: &CallRecord) -> io::Result<()> {
        self.calls += 1;
        let who = |p: &calliper_engine::Party| {
            printable(p.user.as_deref().unwrap_or(&p.uri)).into_owned()
        };
        writeln!(
            self.w,
            "call {}  {} -> {}  {}  {} {}  {}  duration {:.1} s  setup {}",
            printable(&c.call_id),
            who(&c.from),
            who(&c.to),
            rfc3339(c.invite_ns),
            c.final_status.map_or("-".into(), |s| s.to_string()),
            printable(c.final_reason.as_deref().unwrap_or("")),
            c.state.words(),
            c.duration_ms / 1000.0,
            c.setup_delay_ms.map_or("-".into(), |d| format!("{d:.1} ms")),
        )?;
        if !c.dtmf_digits.is_empty() {
            writeln!(self.w, "    dtmf {}", printable(&c.dtmf_digits))?;
        }
        if !c.labels.is_empty() {
            writeln!(self.w, "    labels {}", printable(&c.labels.join(", ")))?;
        }
        if c.record_payload {
            writeln!(self.w, "    selected for payload recording by a rule")?;
        }
        if c.ongoing {
            writeln!(self.w, "    still open when the input ended: shown as it stood")?;
        }
        if c.capture_dropped > 0 {
            writeln!(
                self.w,
                "    probe dropped {} packets during this call: its loss may be the probe's, not the network's",
                c.capture_dropped
            )?;
        }
        for s in &c.streams {
            self.streams += 1;
            writeln!(self.w, "    {}", stream_line(s))?;
            let room = self.call_ssrcs.len() < MAX_LINKED_SSRCS;
            if self.orphans.is_some() && (room || self.call_ssrcs.contains_key(&s.ssrc)) {
                let calls = self.call_ssrcs.entry(s.ssrc).or_default();
                if calls.len() < CALLS_PER_SSRC {
                    calls.push((c.call_id.clone(), s.first_ns, s.last_ns));
                }
            }
        }
        Ok(())
    }

    /// One line per address of record that registered.
    pub fn users(&mut self, u: &calliper_trackers::Users) -> io::Result<()> {
        for user in u.users.values() {
            writeln!(
                self.w,
                "user {}  registered {} unregistered {} challenged {} auth failed {} failed {}  expires {}  contacts {}  {}",
                printable(&user.aor),
                user.registered,
                user.unregistered,
                user.challenged,
                user.auth_failed,
                user.failed,
                user.expires.map_or("-".into(), |e| format!("{e} s")),
                printable(&user.contacts.join(", ")),
                printable(user.user_agent.as_deref().unwrap_or("")),
            )?;
        }
        if u.dropped > 0 {
            writeln!(self.w, "users dropped beyond the cap: {}", u.dropped)?;
        }
        Ok(())
    }

    /// The run's KPIs in one line each for calls and registrations
    /// (`calliper report kpi` gives them per interval and key).
    pub fn kpis(&mut self, k: &calliper_trackers::KpiCounts) -> io::Result<()> {
        use calliper_model::kpi::Figure::*;
        use calliper_trackers::Counter::{Attempts, Registrations, Unresolved};
        let f = k.figures();
        let show = |figures: &[calliper_model::kpi::Figure]| {
            let shown: Vec<String> = figures
                .iter()
                .map(|&g| {
                    let value = f.get(g).map_or("-".to_string(), |v| format!("{v:.1}{}", g.unit()));
                    format!("{} {value}", g.label())
                })
                .collect();
            shown.join("  ")
        };
        if k.get(Attempts) > 0 {
            let calls = show(&[Asr, Ner, Ser, Seer, Isa, Scr, SrdMs, FailedSrdMs, SddMs, SdtS]);
            writeln!(self.w, "kpi calls    attempts {}  {calls}", k.get(Attempts))?;
        }
        if k.get(Unresolved) > 0 {
            writeln!(
                self.w,
                "kpi calls    unresolved {} (no outcome by the end of the input: left out of the ratios)",
                k.get(Unresolved)
            )?;
        }
        if k.get(Registrations) > 0 {
            let registrations = show(&[Ira, RrdMs]);
            writeln!(
                self.w,
                "kpi register transactions {}  {registrations}",
                k.get(Registrations)
            )?;
        }
        if k.get(Attempts) > 0 || k.get(Registrations) > 0 {
            writeln!(self.w, "kpi legend   {}", calliper_model::kpi::LEGEND)?;
        }
        Ok(())
    }

    /// One line per alert (also a `{"type":"alert"}` row and in the database).
    pub fn alert(&mut self, a: &serde_json::Value) -> io::Result<()> {
        let about = a["call_id"]
            .as_str()
            .map(|c| format!("call {}", printable(c)))
            .or_else(|| a["source"].as_str().map(|s| format!("source {s}")))
            .unwrap_or_default();
        let key = a["key"].as_str().map(|k| format!(" {}", printable(k))).unwrap_or_default();
        let kind = a["kind"].as_str().unwrap_or("?");
        let unit = match calliper_model::alert::unit(kind) {
            "" => String::new(),
            u => format!(" {u}"),
        };
        writeln!(
            self.w,
            "alert {kind} {about}{key}  value {:.2}{unit} threshold {}{unit}",
            a["value"].as_f64().unwrap_or(f64::NAN),
            a["threshold"],
        )
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// Writes the counters, the recording's and the rules' hits, and flushes.
    pub fn finish(
        &mut self,
        c: &Counters,
        rules: &[RuleInfo],
        summary: &serde_json::Value,
    ) -> io::Result<()> {
        self.write_orphans()?;
        writeln!(self.w, "---")?;
        writeln!(
            self.w,
            "reported     {}, {}",
            counted(self.calls, "call"),
            counted(self.streams, "stream")
        )?;
        print_counters(&mut self.w, c)?;
        print_recording(&mut self.w, summary)?;
        print_rules(&mut self.w, rules)?;
        self.w.flush()
    }
}

/// The run's recording (`--record-dir`): its counts that are not zero, from
/// the JSON summary's `recording`, on one line; nothing without recording.
pub fn print_recording(w: &mut impl Write, summary: &serde_json::Value) -> io::Result<()> {
    let Some(r) = summary.get("recording").and_then(|r| r.as_object()) else {
        return Ok(());
    };
    let parts: Vec<String> = r
        .iter()
        .filter(|(_, v)| v.as_u64() != Some(0))
        .map(|(k, v)| format!("{} {v}", k.replace('_', " ")))
        .collect();
    writeln!(
        w,
        "recording    {}",
        if parts.is_empty() { "nothing recorded".into() } else { parts.join(", ") }
    )
}

/// One line per rule: what it matches, what it does, how often it decided.
pub fn print_rules(w: &mut impl Write, rules: &[RuleInfo]) -> io::Result<()> {
    for r in rules {
        let name =
            if r.name.is_empty() { String::new() } else { format!(" ({})", printable(&r.name)) };
        let label = r.label.as_deref().map(|l| format!(" {}", printable(l)));
        writeln!(
            w,
            "rule {}{name}  {} {}  -> {}{}  priority {}  hits {}",
            r.id,
            r.kind,
            printable(&r.filter),
            r.action,
            label.unwrap_or_default(),
            r.priority,
            r.hits
        )?;
    }
    Ok(())
}

fn stream_line(s: &StreamRecord) -> String {
    format!(
        "{}:{} -> {}:{} ssrc 0x{:08X} {} pkts {} lost {} ({:.2}%) dup {} ooo {} jitter mean {:.3} max {:.3} ms{} delta max {:.3} ms {}",
        s.src, s.src_port, s.dst, s.dst_port, s.ssrc, printable(&s.codec), s.packets, s.lost, s.loss_percent, s.duplicates, s.out_of_order,
        s.mean_jitter_ms, s.max_jitter_ms, restart_note(s), s.max_delta_ms, mos_text(s)
    )
}

/// ` (2 restarts; within segments mean 0.412 max 1.205 ms)` when the
/// source restarted its numbering and the tshark-equal jitter took the
/// timestamp jump (`calliper_rtp::segments`); empty otherwise.
fn restart_note(s: &StreamRecord) -> String {
    let (Some(mean), Some(max)) = (s.segment_mean_jitter_ms, s.segment_max_jitter_ms) else {
        return String::new();
    };
    if s.seq_resets == 0 || (mean, max) == (s.mean_jitter_ms, s.max_jitter_ms) {
        return String::new();
    }
    format!(
        " ({}; within segments mean {mean:.3} max {max:.3} ms)",
        counted(s.seq_resets, "restart"),
    )
}

/// `MOS 4.21 (jitter buffer fixed at 50 ms 3.80, at 200 ms 4.10; worst
/// interval 3.90)`, `wideband` after the score on that scale, or why there
/// is none. The first figure is the adaptive jitter buffer's.
fn mos_text(s: &StreamRecord) -> String {
    use calliper_rtp::playout::Model;
    let scale = match s.mos_scale {
        Some(MosScale::Wideband) => " wideband",
        _ => "",
    };
    let fixed: Vec<String> = s
        .jitter_buffers
        .iter()
        .filter_map(|b| {
            let ms = match b.model {
                Model::Fixed50 => 50,
                Model::Fixed200 => 200,
                Model::Adaptive => return None,
            };
            b.mos.map(|m| format!("at {ms} ms {m:.2}"))
        })
        .collect();
    let mut notes = Vec::new();
    if !fixed.is_empty() {
        notes.push(format!("jitter buffer fixed {}", fixed.join(", ")));
    }
    if let Some(w) = s.worst_interval_mos {
        notes.push(format!("worst interval {w:.2}"));
    }
    match (s.mos, s.unscored) {
        (Some(m), _) if notes.is_empty() => format!("MOS {m:.2}{scale}"),
        (Some(m), _) => format!("MOS {m:.2}{scale} ({})", notes.join("; ")),
        (None, Some(Unscored::NotVoice)) => "no MOS (not voice)".into(),
        (None, Some(Unscored::TooShort)) => "no MOS (too short)".into(),
        (None, _) => "no MOS (no E-model value for this codec)".into(),
    }
}
