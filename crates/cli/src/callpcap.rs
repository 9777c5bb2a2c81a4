//! `--record`: each call's packets in a capture file of its own, written
//! while the analysis runs (docs/recording.md).

use anyhow::{bail, Context, Result};
use calliper_callpcap::{Counts, Recorder, RecorderConfig};
use calliper_engine::{Config, RecordingMode};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;

/// Which calls to record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordArg {
    /// Only the calls a `record` rule selects (all their packets).
    None,
    /// Every call's SIP messages (and all packets of `record` calls).
    Sip,
    /// Every call's SIP, RTP and RTCP packets.
    All,
}

/// Recording options.
#[derive(clap::Args, Debug)]
pub struct RecordArgs {
    /// Record calls into per-call pcap files under --record-dir: `all`
    /// (SIP, RTP and RTCP of every call), `sip` (signalling only) or
    /// `none` (only the calls a `record` rule selects).
    #[arg(long, value_enum, default_value = "none", value_name = "WHAT")]
    pub record: RecordArg,
    /// Directory of the recordings: DIR/YYYY-MM-DD/HHMMSS.mmm_N_HASH_CALLID.pcap
    /// (the INVITE's UTC day and time, the call's number in the run, a hash
    /// of the Call-ID),
    /// created 0700, files 0600.
    #[arg(long, value_name = "DIR")]
    pub record_dir: Option<PathBuf>,
    /// Most space the recordings take on disk (bytes, or whole numbers with
    /// K, M, G, T: powers of 1024; each file counted in whole 4 KiB blocks,
    /// as `du` does): past it, the oldest are deleted until 90 % is used.
    /// Default 10G.
    #[arg(long, default_value_t = DEFAULT_MAX_SIZE, hide_default_value = true, value_name = "SIZE", value_parser = size)]
    pub record_max_size: u64,
    /// Delete the recordings of days older than this many days before the
    /// newest packet (never this run's files).
    #[arg(long, value_name = "DAYS")]
    pub record_max_days: Option<u32>,
}

/// The default of `--record-max-size`: 10 GiB.
const DEFAULT_MAX_SIZE: u64 = 10 << 30;

/// `10G`, `500M`, `64K` or bytes.
fn size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits.parse().map_err(|_| format!("`{s}` is not a size (e.g. 10G, 500M)"))?;
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => {
            return Err(format!("`{s}`: a whole number, then K, M, G or T (e.g. 1536M, not 1.5G)"))
        }
    };
    n.checked_shl(shift)
        .filter(|v| v >> shift == n && *v > 0)
        .ok_or_else(|| format!("`{s}` is not a size above 0 that fits"))
}

impl RecordArgs {
    /// Starts the recorder when a directory is given, its sinks installed
    /// in `cfg`; an error when recording is asked for without one. `lossy`:
    /// live capture, which drops (and counts) rather than wait for the disk.
    pub fn start(&self, cfg: &mut Config, lossy: bool) -> Result<Option<Recorder>> {
        let Some(dir) = &self.record_dir else {
            if self.record_max_days.is_some() || self.record_max_size != DEFAULT_MAX_SIZE {
                bail!("--record-max-size and --record-max-days hold --record-dir: give it too");
            }
            if self.record != RecordArg::None {
                let what = if self.record == RecordArg::All { "all" } else { "sip" };
                bail!("--record {what} needs --record-dir DIR (where the files go)");
            }
            return Ok(None);
        };
        let rule_selects =
            cfg.rules.as_ref().is_some_and(|r| r.list().iter().any(|r| r.action == "record"));
        if self.record == RecordArg::None && !rule_selects {
            eprintln!(
                "calliper: warning: --record none and no `record` rule: nothing is recorded \
                 (use --record all or sip; a probe's console can add rules later)"
            );
        }
        let recorder = Recorder::start(RecorderConfig {
            dir: dir.clone(),
            max_bytes: self.record_max_size,
            max_age_days: self.record_max_days,
            lossy,
        })
        .with_context(|| format!("cannot record into {}", dir.display()))?;
        cfg.record = match self.record {
            RecordArg::None => RecordingMode::None,
            RecordArg::Sip => RecordingMode::Sip,
            RecordArg::All => RecordingMode::All,
        };
        cfg.record_sink = Some(recorder.factory());
        Ok(Some(recorder))
    }
}

/// The recording's counts for the run's summary; warns of any packet not
/// recorded.
pub fn summary(c: &Counts) -> serde_json::Value {
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    let unwritten = n(&c.dropped) + n(&c.lost) + n(&c.other_link_type) + n(&c.deleted_unwritten);
    if unwritten > 0 {
        eprintln!(
            "calliper: warning: {unwritten} packets of recorded calls were not written \
             ({} the writer was behind, {} after a write error, {} of another link type than the call's first, \
             {} of calls whose file the budget or age limit deleted while they were recorded)",
            n(&c.dropped),
            n(&c.lost),
            n(&c.other_link_type),
            n(&c.deleted_unwritten)
        );
    }
    if n(&c.deleted_files) > 0 {
        eprintln!(
            "calliper: recording: {} recording(s) ({} bytes) deleted to keep to --record-max-size or --record-max-days",
            n(&c.deleted_files),
            n(&c.deleted_bytes)
        );
    }
    if n(&c.partial) > 0 {
        eprintln!(
            "calliper: warning: {} recorded packets belong to SIP messages or datagrams carried in several packets \
             (TCP, SCTP, WebSocket, IP fragments) of which some packets were given up (the engine's \
             record_frames_dropped): those recordings hold the messages in part",
            n(&c.partial)
        );
    }
    serde_json::json!({
        "partial": n(&c.partial),
        "files": n(&c.files),
        "packets": n(&c.packets),
        "bytes": n(&c.bytes),
        "dropped": n(&c.dropped),
        "lost": n(&c.lost),
        "write_errors": n(&c.write_errors),
        "other_link_type": n(&c.other_link_type),
        "deleted_unwritten": n(&c.deleted_unwritten),
        "deleted_files": n(&c.deleted_files),
        "deleted_bytes": n(&c.deleted_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size("10G"), Ok(10 << 30));
        assert_eq!(size("500m"), Ok(500 << 20));
        assert_eq!(size("4096"), Ok(4096));
        assert!(
            size("0").is_err()
                && size("1X").is_err()
                && size("99999999999T").is_err()
                && size("").is_err()
        );
    }
}
