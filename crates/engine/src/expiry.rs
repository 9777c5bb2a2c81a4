//! Ending calls and streams: idle expiry from the heads of the activity
//! lists (no table scans), eviction, and the records they leave.

use super::*;

impl Engine {
    /// Ends whatever has been idle past its timeout, looking only at list heads.
    pub(crate) fn expire(&mut self) {
        let now = self.now;
        let call_lists = [
            (LIST_CLOSING, self.cfg.call_grace_ns),
            (LIST_CHALLENGED, self.cfg.challenge_wait_ns),
            (LIST_ACTIVE, self.cfg.call_idle_timeout_ns),
            (LIST_UNANSWERED, self.cfg.unanswered_timeout_ns),
        ];
        for (list, timeout) in call_lists {
            while let Some(i) = self.calls.idle_past(list, now, timeout) {
                self.finish_call(i, Ending::Normal);
            }
        }
        let timeout = self.cfg.stream_idle_timeout_ns;
        while let Some(i) = self.streams.idle_past(LIST_CANDIDATE, now, timeout) {
            self.drop_candidate(i);
        }
        while let Some(i) = self.streams.idle_past(LIST_ORPHAN, now, timeout) {
            self.finish_orphan(i);
        }
    }

    pub(crate) fn finish_orphan(&mut self, si: Idx) {
        if let Some(mut s) = self.remove_stream(si) {
            self.owned.streams += 1;
            let record = self.end_stream(&mut s, None, None);
            self.out.push(Record::Stream(Box::new(record)));
        }
    }

    pub(crate) fn finish_call(&mut self, idx: Idx, ending: Ending) {
        let Some(call) = self.calls.remove(idx) else {
            return;
        };
        self.call_ids.remove(call.text.call_id(), idx);
        let mut last_activity = call.links.stamp;
        let mut streams = Vec::with_capacity(call.streams.len());
        for &si in &call.streams {
            if let Some(mut s) = self.remove_stream(si) {
                let desc = s.desc.and_then(|d| call.media.get(d as usize));
                last_activity = last_activity.max(s.stats.last_ns);
                let record = self.end_stream(&mut s, Some(&call), desc);
                streams.push(record);
            }
        }
        for key in &call.media_keys {
            if self.media.get(key).is_some_and(|e| e.call == idx) {
                self.media.remove(key);
            }
        }
        if call.ignored {
            return;
        }
        if ending == Ending::Discarded {
            // No record, but its end, so a consumer following calls by
            // their events does not keep it open (nor the recorder its file).
            self.call_discarded_event(&call);
            if let Some(r) = self.recorder.as_mut() {
                r.call_ended(call.serial);
            }
            return;
        }
        streams.sort_by_key(|s| (s.first_ns, s.src_port, s.dst_port, s.ssrc));
        let clock = (self.now, self.capture_dropped);
        let mut record = report::call_record(call, ending, streams, last_activity, clock);
        record.summarise_quality();
        if let Some(r) = self.recorder.as_mut() {
            r.call_ended(record.serial);
        }
        self.out.push(Record::Call(record));
        self.traffic.calls_ended += 1;
    }

    /// Ends everything still open (end of input). Calls come out in order of
    /// their first INVITE, then orphan streams in order of their first packet.
    pub fn finish(&mut self) {
        self.finish_open();
        self.finish_rows();
    }

    /// Ends the rows of the time series (end of input): a shard calls it
    /// once every shard has finished what was open ([`Engine::finish_open`]),
    /// so each row holds the same stream reports as in one thread.
    pub fn finish_rows(&mut self) {
        self.traffic_finish();
        if let Some(r) = self.recorder.as_mut() {
            r.flush();
        }
    }

    /// Ends every call and stream still open (end of input), without the
    /// rows of the time series ([`Engine::finish_rows`]).
    pub fn finish_open(&mut self) {
        self.finish_open_in_groups(usize::MAX, |_| {});
    }

    /// As [`Engine::finish_open`], but hands the engine to `between` after
    /// each `group` calls, for the caller to drain their records: the end of
    /// a large input then never holds every open call's record at once
    /// (50 000 of them took 108 MB). The last records' drain also says that
    /// every record before the clock has come ([`Event::RecordsBefore`]);
    /// the drains in between do not, since later groups still follow.
    pub fn finish_open_in_groups(&mut self, group: usize, mut between: impl FnMut(&mut Engine)) {
        // Other shards may still be analysing: the streams ended here must
        // not free room in the shared stream cap for them.
        self.shared = None;
        self.capture_dropped = self.capture_dropped_next as u32;
        self.apply_touches();
        if self.tcp.bytes() > 0 {
            // Signalling cut off by the end of the capture.
            self.counters.anomaly("sip_tcp_incomplete_at_end");
        }
        if !self.defrag.is_empty() {
            self.counters.anomaly("ip_fragments_incomplete_at_end");
        }
        self.sync_counters();
        let mut calls: Vec<(i64, Idx)> = self
            .calls
            .live_indices()
            .into_iter()
            .filter_map(|i| self.calls.get(i).map(|c| (c.invite_ns, i)))
            .collect();
        calls.sort_unstable();
        for (k, (_, i)) in calls.into_iter().enumerate() {
            self.finish_call(i, Ending::Open);
            if (k + 1) % group.max(1) == 0 {
                self.events.finishing = true;
                between(self);
                self.events.finishing = false;
            }
        }
        let mut orphans: Vec<(i64, Idx, bool)> = self
            .streams
            .live_indices()
            .into_iter()
            .filter_map(|i| self.streams.get(i).map(|s| (s.stats.first_ns, i, s.probation == 0)))
            .collect();
        orphans.sort_unstable();
        for (_, i, confirmed) in orphans {
            if confirmed {
                self.finish_orphan(i);
            } else {
                self.drop_candidate(i);
            }
        }
        if self.events.media() {
            self.anomaly_events(self.now);
        }
    }
}

/// How a call leaves the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Ended by signalling or timeout: write its record.
    Normal,
    /// Pushed out by the call cap: write its record, marked evicted.
    Evicted,
    /// An unanswered INVITE pushed out by the flood cap: counted only.
    Discarded,
    /// Still open at the end of the input: write it as it stands.
    Open,
}
