//! The most heap an analysis can hold, as a formula of its configured caps
//! (docs/hostile-input.md prints it for the defaults). Every table's term
//! is its cap times the largest entry it can hold, with the slack its
//! container may carry (doubling vectors, hash tables below their load
//! factor, the old and new storage while either grows). A test drives each
//! cap to its limit with the largest entries input can make and checks the
//! heap stays under this.

use crate::lru::Idx;
use crate::{
    dedup, defrag, sctp, tcp, Call, CallRecord, Config, MediaDesc, MediaEntry, Record, Stream,
    StreamRecord, BATCH, MAX_CALL_ID, MAX_DESCS_PER_CALL, MAX_STREAMS_PER_CALL, MAX_TEXT,
};
use calliper_rtp::dtmf::{DtmfEvent, DtmfTracker, MAX_EVENTS};
use std::mem::size_of;
use std::net::IpAddr;

/// Bytes the allocator may add to one allocation (header and rounding).
const ALLOC: usize = 32;
/// Texts a call keeps besides its Call-ID, each at most [`MAX_TEXT`]
/// bytes: From and To URI, user and display name, the caller's tag, both
/// user agents, the final and hang-up reasons (one allocation with the
/// Call-ID, `call_text`).
const TEXTS_PER_CALL: usize = 11;

/// A slab of `n` entries of `T`: its slots vector may have twice the
/// capacity it uses, and old and new storage coexist while it grows.
pub(crate) fn slab<T>(n: usize) -> usize {
    3 * n * (size_of::<Option<T>>() + size_of::<Idx>())
}

/// A hash table of `n` entries of `T` (hashbrown: at most 7/8 full, bucket
/// counts a power of two, one control byte each, old and new while growing).
pub(crate) fn table<T>(n: usize) -> usize {
    4 * n * (size_of::<T>() + 1)
}

/// One table's or buffer's share of a [`MemoryBound`].
#[derive(Debug, Clone, Copy)]
pub struct Part {
    /// What holds the memory.
    pub what: &'static str,
    /// Its most heap, bytes.
    pub bytes: usize,
    /// The flags that bound it, or "fixed" for caps built in: what an
    /// operator changes to make the row smaller.
    pub bounded_by: &'static str,
}

/// The heap bound of one engine or of a sharded run, by part.
#[derive(Debug, Clone)]
pub struct MemoryBound {
    /// In the order of docs/hostile-input.md.
    pub parts: Vec<Part>,
}

impl MemoryBound {
    /// The whole bound, bytes.
    pub fn total(&self) -> usize {
        self.parts.iter().map(|p| p.bytes).sum()
    }
}

fn part(what: &'static str, bytes: usize, bounded_by: &'static str) -> Part {
    Part { what, bytes, bounded_by }
}

/// A call's reports from capture agents over HEP, when full: the box, the
/// vector and its entries (`agent_reports`).
fn agent_reports_heap() -> usize {
    crate::agent_reports::MAX_AGENT_REPORTS * size_of::<calliper_model::agent::AgentReport>()
        + 2 * ALLOC
}

impl Config {
    /// The most heap one engine with these caps can hold.
    pub fn memory_bound(&self) -> MemoryBound {
        let calls = self.max_calls;
        let streams = self.max_streams;
        // Only HEP (`--hep-port`, or the probe's collector) brings them.
        let agents = if self.hep_port.is_some() { agent_reports_heap() } else { 0 };
        // The text (Call-ID and the rest, one allocation), SDP media
        // descriptions with their rtpmaps, media addresses, stream indices.
        let call_heap = MAX_CALL_ID
            + TEXTS_PER_CALL * MAX_TEXT
            + ALLOC
            + MAX_DESCS_PER_CALL
                * (size_of::<MediaDesc>()
                    + calliper_sip::sdp::MAX_FORMATS * size_of::<crate::Rtpmap>()
                    + ALLOC)
            + 2 * MAX_DESCS_PER_CALL * size_of::<(IpAddr, u16)>()
            + MAX_STREAMS_PER_CALL * size_of::<Idx>()
            + 3 * ALLOC
            + agents;
        let stream_heap = size_of::<DtmfTracker>()
            + 2 * MAX_EVENTS * size_of::<DtmfEvent>()
            + calliper_rtp::segments::HEAP_BYTES;
        let mut parts = vec![
            part(
                "calls",
                slab::<Call>(calls) + table::<Idx>(calls) + calls * call_heap,
                "--max-calls",
            ),
            part(
                "media addresses",
                table::<((IpAddr, u16), MediaEntry)>(self.max_media),
                "--max-media",
            ),
            part(
                // Slots, the index (grows at half full: up to four slots of
                // 8 bytes per stream, six while it grows), DTMF events.
                "streams",
                slab::<Stream>(streams) + streams * (6 * 8 + stream_heap + 2 * ALLOC),
                "--max-streams",
            ),
            part(
                // Records not yet taken by the caller: in the worst case every
                // call and stream ends at one batch end.
                "records",
                calls
                    * (size_of::<Record>()
                        + size_of::<CallRecord>()
                        + MAX_CALL_ID
                        + TEXTS_PER_CALL * (MAX_TEXT + ALLOC)
                        + agents)
                    + streams
                        * (size_of::<StreamRecord>()
                            + MAX_EVENTS * (size_of::<DtmfEvent>() + 4)
                            + 3 * ALLOC),
                "--max-calls, --max-streams",
            ),
            part("duplicate filter", dedup::memory_bound(), "fixed"),
            part("IP reassembly", defrag::memory_bound(&self.defrag), "fixed"),
            part("TCP reassembly", tcp::memory_bound(&self.tcp), "fixed"),
            part("SCTP messages", sctp::memory_bound(), "fixed"),
            part(
                // Media activity of a batch (sorted in place), one
                // WebSocket message being unmasked, and one compressed HEP
                // payload inflated (with its reading's doubling slack).
                "batch and scratch",
                2 * BATCH as usize * size_of::<(i64, Idx)>()
                    + 2 * crate::websocket::MAX_FRAME as usize
                    + 2 * (crate::framing::HEP_INFLATED_MAX + 1),
                "fixed",
            ),
        ];
        if self.record_sink.is_some() {
            // Frames of messages not yet whole, held for the recorder.
            parts.push(part(
                "recording hold",
                crate::callpcap::memory_bound(),
                "fixed (with --record-dir)",
            ));
        }
        MemoryBound { parts }
    }

    /// The most heap a run on `threads` threads can hold: each shard is a
    /// whole engine (signalling is repeated in every shard), the reader
    /// keeps the records it merges, and the packet chunks queued to the
    /// shards ([`crate::parallel`]).
    pub fn memory_bound_threads(&self, threads: usize) -> MemoryBound {
        let one = self.memory_bound();
        if threads <= 1 {
            return one;
        }
        let records = one.parts.iter().find(|p| p.what == "records").map_or(0, |p| p.bytes);
        // Each shard's rows: the same flags, and --threads.
        let mut parts: Vec<Part> =
            one.parts.iter().map(|p| Part { bytes: p.bytes * threads, ..*p }).collect();
        parts.push(part("records merged by the reader", records, "--max-calls, --max-streams"));
        parts.push(part(
            "packet chunks queued",
            crate::parallel::queued_bytes(threads),
            "--threads",
        ));
        parts.push(part(
            "caps shared by the shards",
            crate::shared::SharedCaps::memory_bound(threads, self.max_calls),
            "--max-calls, --threads",
        ));
        MemoryBound { parts }
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;
    use std::mem::size_of;

    /// Each row names the flags that bound it, truly: halving a flag's cap
    /// shrinks exactly the rows that name it (`--memory-bound` tells an
    /// operator which flag to turn).
    #[test]
    fn each_row_names_the_flags_that_bound_it() {
        let base = Config::default();
        type Lower = fn(&mut Config);
        let flags: [(&str, Lower); 3] = [
            ("--max-calls", |c| c.max_calls /= 2),
            ("--max-streams", |c| c.max_streams /= 2),
            ("--max-media", |c| c.max_media /= 2),
        ];
        for threads in [1, 2] {
            let rows = base.memory_bound_threads(threads).parts;
            for (flag, lower) in flags {
                let mut smaller = base.clone();
                lower(&mut smaller);
                let after = smaller.memory_bound_threads(threads).parts;
                for (row, new) in rows.iter().zip(&after) {
                    assert_eq!(
                        new.bytes < row.bytes,
                        row.bounded_by.contains(flag),
                        "{threads} threads, {flag}: {row:?} -> {new:?}"
                    );
                }
            }
        }
        // With threads, each engine's rows are repeated per shard (said
        // above the table), the others name --threads where it counts.
        let engine: Vec<&str> = base.memory_bound().parts.iter().map(|p| p.what).collect();
        let (two, three) = (base.memory_bound_threads(2), base.memory_bound_threads(3));
        for (row, new) in two.parts.iter().zip(&three.parts) {
            let by_threads = engine.contains(&row.what) || row.bounded_by.contains("--threads");
            assert_eq!(new.bytes > row.bytes, by_threads, "{row:?} -> {new:?}");
        }
    }

    /// Per-call state is measured (BENCHMARKS.md, memory per concurrent
    /// call); a field added to a call or stream must be paid for elsewhere,
    /// or the budget raised with a BENCHMARKS.md row that says why (512 B:
    /// the jitter-buffer simulation and the RTCP round trip, 128 B; calls
    /// 528 B: RFC 6076's disconnect delay, 8 B; streams 528 B: a pointer to
    /// RTCP XR VoIP metrics, allocated only for streams that get them;
    /// calls 592 B: the transactions responses are matched to, 30 B, and
    /// the call's hops, 32 B; calls 400 B: the texts in one allocation,
    /// `call_text`).
    #[test]
    fn call_and_stream_state_stay_within_budget() {
        assert!(size_of::<crate::Stream>() <= 528, "{}", size_of::<crate::Stream>());
        assert!(size_of::<crate::Call>() <= 400, "{}", size_of::<crate::Call>());
    }
}
