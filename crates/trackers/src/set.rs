//! The trackers a run keeps beside its records, made, attached and emptied
//! in one place: `analyze` and `probe` write their rows, and the tests'
//! in-process probe reads the same rows without a child process.

use crate::{
    AlertConfig, Alerts, CallDetail, EventKind, EventLog, KpiConfig, KpiCounts, Kpis,
    RegistrationLog, TimeSeries, UserTracker, Users,
};
use calliper_model::Tracker;
use serde_json::Value;

/// Which trackers run, and how.
#[derive(Debug, Clone, Default)]
pub struct TrackerSetConfig {
    /// The event kinds logged (none: no event lines).
    pub events: Vec<EventKind>,
    /// The KPIs' interval, dimensions and answer codes.
    pub kpi: KpiConfig,
    /// The alerts' thresholds.
    pub alerts: AlertConfig,
    /// Keep each call's SIP messages and interval reports (for a database).
    pub call_detail: bool,
}

/// The rows the trackers finished: what a run writes beside its records.
#[derive(Debug, Default)]
pub struct TrackedRows {
    /// Rows by line type (`registration`, `traffic`, `kpi`, `alert`, and the
    /// call detail's).
    pub rows: Vec<(&'static str, Value)>,
    /// Event-log JSON lines.
    pub lines: Vec<u8>,
}

/// Something a tracker dropped, counted.
pub struct Dropped {
    /// What it is, for a warning.
    pub what: &'static str,
    /// Its key in the summary.
    pub key: &'static str,
    /// How many so far.
    pub count: u64,
    /// Why, for a warning.
    pub why: String,
}

/// Registrations per user, each registration transaction, the time series,
/// the event log, the KPIs, the alerts and (optionally) the call detail.
/// Each tracker's clones share its state: the set keeps one handle, the
/// analysis gets the others ([`TrackerSet::trackers`]).
pub struct TrackerSet {
    users: UserTracker,
    registrations: RegistrationLog,
    time_series: TimeSeries,
    event_log: EventLog,
    kpis: Kpis,
    alerts: Alerts,
    detail: Option<CallDetail>,
}

impl TrackerSet {
    /// The trackers `cfg` asks for, empty.
    pub fn new(cfg: &TrackerSetConfig) -> TrackerSet {
        TrackerSet {
            users: UserTracker::new(),
            registrations: RegistrationLog::new(),
            time_series: TimeSeries::new(),
            event_log: EventLog::new(&cfg.events),
            kpis: Kpis::new(cfg.kpi.clone()),
            alerts: Alerts::new(cfg.alerts.clone()),
            detail: cfg.call_detail.then(CallDetail::new),
        }
    }

    /// A handle on each tracker, for the analysis to feed.
    pub fn trackers(&self) -> Vec<Box<dyn Tracker>> {
        let mut t: Vec<Box<dyn Tracker>> = vec![
            Box::new(self.users.clone()),
            Box::new(self.registrations.clone()),
            Box::new(self.time_series.clone()),
            Box::new(self.event_log.clone()),
            Box::new(self.kpis.clone()),
            Box::new(self.alerts.clone()),
        ];
        if let Some(d) = &self.detail {
            t.push(Box::new(d.clone()));
        }
        t
    }

    /// The rows finished since the last call. With `end` (the run is over),
    /// also the KPI intervals not yet closed and the alerts still waiting
    /// for their place among the records.
    pub fn take(&self, end: bool) -> Result<TrackedRows, serde_json::Error> {
        let mut rows = Vec::new();
        for r in self.registrations.take() {
            rows.push(("registration", serde_json::to_value(&r)?));
        }
        rows.extend(self.time_series.take().into_iter().map(|v| ("traffic", v)));
        let kpis = if end { self.kpis.take_all() } else { self.kpis.take() };
        rows.extend(kpis.into_iter().map(|v| ("kpi", v)));
        let alerts = if end { self.alerts.take_all() } else { self.alerts.take() };
        for a in alerts {
            rows.push(("alert", serde_json::to_value(&a)?));
        }
        if let Some(d) = &self.detail {
            rows.extend(d.take());
        }
        Ok(TrackedRows { rows, lines: self.event_log.take() })
    }

    /// What each user's registrations came to.
    pub fn users(&self) -> Users {
        self.users.users()
    }

    /// The KPIs of the whole run.
    pub fn kpi_run_total(&self) -> KpiCounts {
        self.kpis.run_total()
    }

    /// Stream intervals that came after their time-series row was written.
    pub fn late_stream_intervals(&self) -> u64 {
        self.time_series.late()
    }

    /// What the trackers dropped so far, each with its summary key and why.
    pub fn drops(&self) -> [Dropped; 7] {
        [
            Dropped {
                what: "registrations of new users",
                key: "users_dropped",
                count: self.users.dropped(),
                why: format!("more than {} users followed", crate::MAX_USERS),
            },
            Dropped {
                what: "events",
                key: "events_dropped",
                count: self.event_log.dropped(),
                why: format!(
                    "more than {} MiB of them between two writes",
                    crate::MAX_BACKLOG_BYTES >> 20
                ),
            },
            Dropped {
                what: "empty time-series rows",
                key: "traffic_rows_dropped",
                count: self.time_series.dropped(),
                why: format!("more than {} between two writes", crate::MAX_TRAFFIC_ROWS),
            },
            Dropped {
                what: "KPI counts (calls and registrations)",
                key: "kpi_dropped",
                count: self.kpis.dropped(),
                why: format!("more than {} KPI rows held at once", crate::MAX_KPI_ROWS),
            },
            Dropped {
                what: "alerts",
                key: "alerts_dropped",
                count: self.alerts.dropped(),
                why: format!("more than {} between two writes", crate::MAX_ALERTS),
            },
            Dropped {
                what: "alert checks (sources and trunks beyond the followed ones)",
                key: "alerts_untracked",
                count: self.alerts.untracked(),
                why: format!("more than {} followed at once", crate::MAX_FOLLOWED),
            },
            Dropped {
                what: "SIP messages and interval reports (call detail)",
                key: "call_detail_dropped",
                count: self.detail.as_ref().map_or(0, CallDetail::dropped),
                why: format!(
                    "more than {} MiB of them between two writes",
                    crate::MAX_DETAIL_BYTES >> 20
                ),
            },
        ]
    }
}
