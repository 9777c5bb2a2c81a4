//! Where the probe's packets come from: the interfaces' ring, the HEP
//! collector, or both; or capture files, at their own pace if asked.

use super::{log, signals, ProbeArgs};
use anyhow::{bail, Context, Result};
use calliper_capture::files::Inputs;
use calliper_capture::filter::Filter;
use calliper_capture::hep_listen::{HepListenConfig, HepListenStats, HepListener, HepTransport};
use calliper_capture::live::{LiveCapture, LiveConfig, LiveStats};
use calliper_capture::Packet;
use calliper_engine::READ_BATCH;
use std::time::{Duration, Instant};

/// Where packets come from.
#[allow(clippy::large_enum_variant)] // one per run: size does not matter
pub(super) enum Source {
    /// The interfaces' ring, a HEP collector, or both.
    Live {
        ring: Option<Box<LiveCapture>>,
        hep: Option<HepListener>,
        /// With both: the collector's port, whose UDP the ring's packets
        /// must not bring in too (unauthenticated, or read twice), and how
        /// many such packets were left out.
        ring_skips: Option<(u16, u64)>,
    },
    /// The files, the filter, and the pace (`--realtime`).
    Files(Inputs, Option<Filter>, Option<Pace>),
}

/// A replay at the capture's own pace: the first packet's time and when it
/// was handed over.
#[derive(Default)]
pub(super) struct Pace {
    first: Option<(i64, Instant)>,
}

impl Pace {
    /// Waits until a packet captured at `ts_ns` is due (in steps, so a stop
    /// request is seen within a tenth of a second).
    fn wait(&mut self, ts_ns: i64) {
        let (first_ts, start) = *self.first.get_or_insert((ts_ns, Instant::now()));
        let offset = Duration::from_nanos(ts_ns.saturating_sub(first_ts).max(0) as u64);
        let due = start + offset;
        while !signals::stop_requested() {
            let now = Instant::now();
            if now >= due {
                return;
            }
            std::thread::sleep((due - now).min(Duration::from_millis(100)));
        }
    }
}

/// What one step of reading gave.
pub(super) enum Step {
    /// Some packets (or none yet, live).
    Packets,
    /// No more input.
    End,
}

impl Source {
    /// Hands the next packets to `f`; damaged files are reported and skipped.
    pub(super) fn next(
        &mut self,
        f: &mut dyn FnMut(&[Packet<'_>]),
        clean: &mut bool,
    ) -> Result<Step> {
        match self {
            Source::Live { ring, hep, ring_skips } => {
                // Waiting on one source only: the ring briefly when HEP
                // comes too, then whatever HEP has queued.
                if let Some(ring) = ring {
                    let wait_ms = if hep.is_some() { 10 } else { 100 };
                    match ring_skips {
                        None => ring.next_block(wait_ms, &mut *f),
                        Some((port, skipped)) => ring
                            .next_block(wait_ms, &mut |b: &[Packet<'_>]| {
                                without_port(b, *port, skipped, &mut *f)
                            }),
                    }
                    .context("capture failed")?;
                }
                if let Some(h) = hep {
                    let mut wait = Duration::from_millis(if ring.is_some() { 0 } else { 100 });
                    // All that is queued (the queue's worth at most), so the
                    // ring's pace does not bound the collector's.
                    for _ in 0..HEP_BATCHES_PER_STEP {
                        if h.next_batch(wait, &mut *f) == 0 {
                            break;
                        }
                        wait = Duration::ZERO;
                    }
                }
                Ok(Step::Packets)
            }
            Source::Files(inputs, filter, pace) => {
                // At its own pace, one packet at a time.
                let max = if pace.is_some() { 1 } else { READ_BATCH };
                let mut say = |m: &str| eprintln!("{m}");
                let Some(b) = inputs.next_batch(max, &mut say) else {
                    *clean &= inputs.clean();
                    return Ok(Step::End);
                };
                if let (Some(pace), Some(p)) = (pace.as_mut(), b.iter().next()) {
                    pace.wait(p.ts_ns);
                }
                let mut packets = [Packet::EMPTY; READ_BATCH];
                let mut n = 0;
                for p in b.iter().take(READ_BATCH) {
                    if keeps(filter.as_mut(), &p, clean) {
                        packets[n] = p;
                        n += 1;
                    }
                }
                f(&packets[..n]);
                *clean &= inputs.clean();
                Ok(Step::Packets)
            }
        }
    }

    /// The ring's counts (none without a ring).
    pub(super) fn stats(&mut self) -> Result<Option<LiveStats>> {
        match self {
            Source::Live { ring: Some(r), .. } => Ok(Some(r.stats()?)),
            _ => Ok(None),
        }
    }

    /// Hands over what the HEP collector still holds (the probe stops).
    pub(super) fn drain(&mut self, f: &mut dyn FnMut(&[Packet<'_>])) {
        if let Source::Live { hep: Some(h), .. } = self {
            h.drain(f);
        }
    }

    /// The HEP collector's counts, if one runs.
    pub(super) fn hep_stats(&self) -> Option<(HepListenStats, u64)> {
        match self {
            Source::Live { hep: Some(h), ring_skips, .. } => {
                Some((h.stats(), ring_skips.map_or(0, |(_, n)| n)))
            }
            _ => None,
        }
    }

    /// Live: time passes by the clock, not only by packets.
    pub(super) fn is_live(&self) -> bool {
        matches!(self, Source::Live { .. })
    }

    /// Packets the filter left out (files; live, the kernel does not say).
    pub(super) fn filtered_out(&self) -> Option<u64> {
        match self {
            Source::Files(_, Some(f), _) => Some(f.rejected),
            _ => None,
        }
    }
}

/// Batches of 64 HEP messages taken per step at most: the collector's
/// whole queue (8 192).
const HEP_BATCHES_PER_STEP: usize = 128;

/// Hands on the ring's packets but those of UDP to `port` (counted).
fn without_port(b: &[Packet<'_>], port: u16, skipped: &mut u64, f: &mut dyn FnMut(&[Packet<'_>])) {
    let mut kept = [Packet::EMPTY; READ_BATCH];
    let mut n = 0;
    for p in b {
        let frame = calliper_wire::decode_plain(p.link_type, p.data)
            .or_else(|| calliper_wire::decode(p.link_type, p.data).ok());
        if frame.and_then(|fr| fr.udp()).is_some_and(|(_, dport, _)| dport == port) {
            *skipped += 1;
            continue;
        }
        if n == READ_BATCH {
            f(&kept[..n]);
            n = 0;
        }
        kept[n] = *p;
        n += 1;
    }
    f(&kept[..n]);
}

/// Whether `--filter` (if any) keeps a packet read from a file. A link type
/// the filter cannot be compiled for is reported once and left out.
fn keeps(filter: Option<&mut Filter>, p: &Packet<'_>, clean: &mut bool) -> bool {
    let Some(filter) = filter else {
        return true;
    };
    filter.accepts(p.link_type, p.data, p.orig_len).unwrap_or_else(|e| {
        eprintln!("calliper: {e}: packets of link type {} are left out", p.link_type);
        *clean = false;
        false
    })
}

/// What the probe reads (the files of `--read`, else the interfaces and
/// the HEP collector), and its name for the log and the summary.
pub(super) fn open_source(a: &ProbeArgs, live: &LiveConfig) -> Result<(Source, String)> {
    if a.read.is_empty() {
        let ring = match a.interfaces.is_empty() {
            true => None,
            false => Some(Box::new(LiveCapture::open(live)?)),
        };
        let hep = a.hep_listen.map(|l| open_hep(a, l)).transpose()?;
        let mut names = a.interfaces.clone();
        if let Some(h) = &hep {
            log(&format!("event=hep_listen address={}", h.local_addr()));
            names.extend(a.hep_listen.map(|(t, _)| hep_name(t, h.local_addr())));
        }
        // HEP on the ring is read only when asked for with --hep-port.
        let ring_skips = match (&ring, &hep) {
            (Some(_), Some(h)) if a.engine.hep_port.is_none() => Some((h.local_addr().port(), 0)),
            _ => None,
        };
        let source = Source::Live { ring, hep, ring_skips };
        return Ok((source, names.join(",")));
    }
    let inputs = Inputs::open(&a.read)?;
    let filter = a.filter.as_deref().map(Filter::new).transpose()?;
    let pace = a.realtime.then(Pace::default);
    let source = Source::Files(inputs, filter, pace);
    Ok((source, crate::input_names(&a.read)))
}

/// `--hep-listen`: binds the collector (a key required off loopback).
pub(super) fn open_hep(
    a: &ProbeArgs,
    (transport, address): (HepTransport, std::net::SocketAddr),
) -> Result<HepListener> {
    let key = a.hep_listen_key.as_deref().map(crate::run::read_hep_key).transpose()?;
    if key.is_none() && !address.ip().is_loopback() {
        bail!(
            "--hep-listen on {address} (not loopback) needs --hep-listen-key: \
             anyone who can reach it could feed calls in"
        );
    }
    let shown = hep_name(transport, address);
    HepListener::open(&HepListenConfig {
        transport,
        address,
        key,
        reorder: std::time::Duration::from_millis(a.hep_reorder_ms),
    })
    .with_context(|| format!("cannot listen for HEP on {shown}"))
}

/// `udp:ADDR:PORT` or `tcp:ADDR:PORT`.
fn hep_name(transport: HepTransport, address: std::net::SocketAddr) -> String {
    format!("hep:{}:{address}", transport.name())
}

/// The HEP collector's counts for the summary.
pub(super) fn hep_summary(h: &HepListenStats, ring_skipped: u64) -> serde_json::Value {
    serde_json::json!({
        "received": h.received,
        "dropped": h.dropped,
        "unauthenticated": h.unauthenticated,
        "malformed": h.malformed,
        "too_long": h.too_long,
        "connections": h.connections,
        "connections_refused": h.connections_refused,
        "connections_timed_out": h.connections_timed_out,
        "threads_failed": h.threads_failed,
        "ring_skipped": ring_skipped,
    })
}
