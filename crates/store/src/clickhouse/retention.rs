//! `--clickhouse-keep-days`: whole days (partitions) older than the kept
//! ones are dropped, at most once an hour, on every server the probe lists
//! (each drops its own shard's). Days count back from the newest row this
//! run wrote, never from later than the clock's today: a capture of 2023
//! analysed today keeps its days, and a packet dated 2096 deletes nothing.
//! A partition holds every probe's rows of that day: give the probes the
//! same setting, or set it on one.

use super::http::Endpoint;
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_secs(3600);

/// When and what to drop.
pub(super) struct Retention {
    keep_days: u16,
    next: Instant,
}

impl Retention {
    pub(super) fn new(keep_days: u16) -> Retention {
        Retention { keep_days, next: Instant::now() }
    }

    /// True when an hour has passed since the last time (or never ran).
    pub(super) fn due(&self) -> bool {
        Instant::now() >= self.next
    }

    /// Drops, on `e`, the partitions of `tables` older than the kept days
    /// before `newest` (days since 1970, as the rows' `day`); returns how
    /// many. Partitions are named by the server (`system.parts`), checked
    /// to be dates, and dropped by name.
    pub(super) fn apply(
        &mut self,
        e: &Endpoint,
        database: &str,
        tables: &[&str],
        newest: u16,
    ) -> Result<u64, super::HttpError> {
        self.next = Instant::now() + EVERY;
        let today = super::row_binary::day(crate::now_ns());
        let cutoff = newest.min(today).saturating_sub(self.keep_days - 1);
        let mut dropped = 0;
        for table in tables {
            let listed = e.tsv(&format!(
                "SELECT DISTINCT partition FROM system.parts WHERE database = '{database}' AND table = '{table}' AND active FORMAT TSV"
            ))?;
            for partition in listed.lines() {
                let Some(day) = day_number(partition) else {
                    continue;
                };
                if day < cutoff {
                    e.post(
                        format!("ALTER TABLE {database}.{table} DROP PARTITION '{partition}'")
                            .as_bytes(),
                    )?;
                    dropped += 1;
                }
            }
        }
        Ok(dropped)
    }
}

/// `YYYY-MM-DD` as days since 1970-01-01 (None unless exactly a date).
fn day_number(s: &str) -> Option<u16> {
    let ns = crate::parse_rfc3339(s).filter(|_| s.len() == 10)?;
    u16::try_from(ns.div_euclid(86_400_000_000_000)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_count_days_from_1970_and_nothing_else_is_a_date() {
        assert_eq!(day_number("1970-01-01"), Some(0));
        assert_eq!(day_number("2023-11-14"), Some(19_675));
        assert_eq!(day_number("2000-03-01"), Some(11_017));
        for bad in ["20231114", "2023-13-01", "x'; DROP", "", "1969-12-31"] {
            assert_eq!(day_number(bad), None, "{bad}");
        }
    }
}
