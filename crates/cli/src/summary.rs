//! The terminal report and the counters as JSON.

use calliper_engine::{CallRecord, Counters, Record, StreamRecord};
use calliper_store::rfc3339;
use serde_json::json;
use std::io::{self, Write};

/// Counters as a JSON object (for the JSON summary line and the database).
pub fn counters_json(c: &Counters) -> serde_json::Value {
    json!({
        "packets": c.packets,
        "bytes": c.bytes,
        "udp": c.udp,
        "tcp": c.tcp,
        "other_ip": c.other_ip,
        "not_ip": c.not_ip,
        "ip_fragments": c.ip_fragments,
        "duplicates_removed": c.duplicates_removed,
        "dedup_overflow": c.dedup_overflow,
        "defrag": c.defrag,
        "tcp_reassembly": c.tcp_reassembly,
        "sctp": c.sctp,
        "sip_messages": c.sip_messages,
        "sip_by_kind": c.sip_by_kind,
        "sip_outside_calls": c.sip_outside_calls,
        "rtp_in_calls": c.rtp_in_calls,
        "rtp_orphan": c.rtp_orphan,
        "rtcp": c.rtcp,
        "udp_untracked": c.udp_untracked,
        "calls": c.calls,
        "calls_evicted": c.calls_evicted,
        "unanswered_evicted": c.unanswered_evicted,
        "streams": c.streams,
        "streams_refused": c.streams_refused,
        "media_refused": c.media_refused,
        "candidates_rejected": c.candidates_rejected,
        "anomalies": c.anomalies,
    })
}

/// Prints the counters for a human.
pub fn print_counters(w: &mut impl Write, c: &Counters) -> io::Result<()> {
    writeln!(
        w,
        "packets      {} ({} bytes): {} UDP, {} TCP, {} other IP, {} not IP",
        c.packets, c.bytes, c.udp, c.tcp, c.other_ip, c.not_ip
    )?;
    writeln!(
        w,
        "sip          {} messages, {} calls, {} outside any call",
        c.sip_messages, c.calls, c.sip_outside_calls
    )?;
    if !c.sip_by_kind.is_empty() {
        let kinds: Vec<String> = c
            .sip_by_kind
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        writeln!(w, "             {}", kinds.join(", "))?;
    }
    writeln!(
        w,
        "rtp          {} packets in calls, {} without signalling, {} RTCP; {} streams",
        c.rtp_in_calls, c.rtp_orphan, c.rtcp, c.streams
    )?;
    writeln!(w, "untracked    {} UDP datagrams", c.udp_untracked)?;
    if c.duplicates_removed > 0 {
        writeln!(
            w,
            "duplicates   {} packets removed (each seen twice by the capture)",
            c.duplicates_removed
        )?;
    }
    if c.dedup_overflow > 0 {
        writeln!(
            w,
            "dedup        {} packets remembered by forgetting another within --dedup-window (traffic denser than the filter holds): a copy of a forgotten packet is counted twice",
            c.dedup_overflow
        )?;
    }
    let d = &c.defrag;
    if d.fragments > 0 {
        writeln!(
            w,
            "fragments    {} pieces, {} datagrams reassembled; given up: {} timed out, {} evicted, {} malformed, {} too many pieces; {} conflicting overlaps",
            d.fragments, d.reassembled, d.timed_out, d.evicted, d.malformed, d.too_many_pieces, d.overlap_conflicts
        )?;
    }
    let t = &c.tcp_reassembly;
    if t.flows > 0 {
        writeln!(
            w,
            "tcp sip      {} flows, {} segments, {} out of order, {} retransmitted bytes; given up: {} gaps ({} bytes), {} bytes over caps, {} flows evicted",
            t.flows, t.segments, t.out_of_order, t.retransmitted_bytes, t.gaps, t.gap_bytes, t.overflow_bytes, t.flows_evicted
        )?;
    }
    let refused = [
        ("calls evicted (table full)", c.calls_evicted),
        (
            "unanswered INVITEs evicted (flood cap)",
            c.unanswered_evicted,
        ),
        ("streams refused (table full)", c.streams_refused),
        ("SDP media refused (table full)", c.media_refused),
        ("RTP-like candidates rejected", c.candidates_rejected),
    ];
    for (what, n) in refused.iter().filter(|(_, n)| *n > 0) {
        writeln!(w, "limits       {n} {what}")?;
    }
    if c.anomalies.is_empty() {
        writeln!(w, "anomalies    none")?;
    } else {
        for (k, v) in &c.anomalies {
            writeln!(w, "anomaly      {k}: {v}")?;
        }
    }
    Ok(())
}

/// Human-readable report: one block per call, then orphan streams, then counters.
pub struct TextReport<W: Write> {
    w: W,
    calls: u64,
    streams: u64,
}

impl<W: Write> TextReport<W> {
    /// A report written to `w`.
    pub fn new(w: W) -> Self {
        TextReport {
            w,
            calls: 0,
            streams: 0,
        }
    }

    /// Adds a record. Write errors surface at `finish`.
    pub fn record(&mut self, r: &Record) {
        let _ = match r {
            Record::Call(c) => self.call(c),
            Record::Stream(s) => {
                self.streams += 1;
                writeln!(self.w, "stream without call  {}", stream_line(s))
            }
        };
    }

    fn call(&mut self, c: &CallRecord) -> io::Result<()> {
        self.calls += 1;
        let who = |p: &calliper_engine::Party| p.user.clone().unwrap_or_else(|| p.uri.clone());
        writeln!(
            self.w,
            "call {}  {} -> {}  {}  {} {}  {:?}  duration {:.1} s  setup {}",
            c.call_id,
            who(&c.from),
            who(&c.to),
            rfc3339(c.invite_ns),
            c.final_status.map_or("-".into(), |s| s.to_string()),
            c.final_reason.as_deref().unwrap_or(""),
            c.state,
            c.duration_ms / 1000.0,
            c.setup_delay_ms
                .map_or("-".into(), |d| format!("{d:.0} ms")),
        )?;
        if !c.dtmf_digits.is_empty() {
            writeln!(self.w, "    dtmf {}", c.dtmf_digits)?;
        }
        for s in &c.streams {
            self.streams += 1;
            writeln!(self.w, "    {}", stream_line(s))?;
        }
        Ok(())
    }

    /// Writes the counters and flushes.
    pub fn finish(&mut self, c: &Counters) -> io::Result<()> {
        writeln!(self.w, "---")?;
        writeln!(
            self.w,
            "reported     {} calls, {} streams",
            self.calls, self.streams
        )?;
        print_counters(&mut self.w, c)?;
        self.w.flush()
    }
}

fn stream_line(s: &StreamRecord) -> String {
    format!(
        "{}:{} -> {}:{} ssrc 0x{:08X} {} pkts {} lost {} ({:.2}%) dup {} ooo {} jitter mean {:.3} max {:.3} ms delta max {:.3} ms MOS {:.2}",
        s.src, s.src_port, s.dst, s.dst_port, s.ssrc, s.codec, s.packets, s.lost, s.loss_percent, s.duplicates, s.out_of_order,
        s.mean_jitter_ms, s.max_jitter_ms, s.max_delta_ms, s.mos
    )
}
