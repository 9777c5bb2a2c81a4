//! One SQLite database per day (UTC) in a directory, kept within an age and
//! a disk budget: what a probe running for months writes to. A record goes
//! to the day of its time (a call's INVITE, a stream's first packet, a
//! tracker row's time), so a replay of old captures files them where they
//! belong. When a newer day begins, days beyond `keep_days` and, oldest
//! first, days beyond the byte budget are deleted — never the newest two:
//! records of yesterday still arrive after today began (calls that span
//! midnight, one batch of output holding both days). A record for a day
//! already deleted is dropped and counted, never written to a new file.

use crate::{Sink, Sqlite, StoreError};
use calliper_model::Record;
use serde_json::Value;
use std::path::{Path, PathBuf};

const DAY_NS: i64 = 86_400_000_000_000;
/// Day databases held open at once (today and yesterday, for calls that
/// span midnight and late records).
const OPEN_DAYS: usize = 2;
/// Most day files one run creates (a capture with a clock that jumps about
/// must not fill the disk with files); records beyond are dropped, counted.
pub const MAX_NEW_DAYS: usize = 1000;
const PREFIX: &str = "calliper-";
const SUFFIX: &str = ".db";

/// Days to keep and bytes the directory may hold.
#[derive(Debug, Clone, Copy, Default)]
pub struct Retention {
    /// Keep this many most recent days (the newest included; at least 2);
    /// None keeps all.
    pub keep_days: Option<u32>,
    /// Delete the oldest days while the databases take more than this.
    pub max_bytes: Option<u64>,
}

/// The per-day sink.
pub struct Daily {
    dir: PathBuf,
    retention: Retention,
    open: Vec<(i64, Sqlite)>,
    newest: Option<i64>,
    /// The newest day retention deleted: older records are dropped.
    deleted_through: Option<i64>,
    /// Records dropped because their day was deleted, its database is
    /// damaged, or the run made [`MAX_NEW_DAYS`] files already.
    dropped: u64,
    /// Days whose database could not be opened (named once on stderr).
    broken: Vec<i64>,
    /// Day files this run created.
    created: usize,
}

/// The file name of day `day` (days since the epoch).
pub fn day_file(day: i64) -> String {
    format!("{PREFIX}{}{SUFFIX}", &crate::rfc3339(day.saturating_mul(DAY_NS))[..10])
}

/// The day a file name stands for, if it is exactly a name [`day_file`]
/// writes (`calliper-YYYY-MM-DD.db`, a date that exists).
fn day_of_file(name: &str) -> Option<i64> {
    let date = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let shape = date.len() == 10
        && date.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    if !shape {
        return None;
    }
    let mut parts = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (parts.next()??, parts.next()??, parts.next()??);
    if parts.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm), the inverse of rfc3339's.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let day = era * 146_097 + doe - 719_468;
    // 2026-02-31 would parse as a day in March: only real dates.
    (day_file(day) == name).then_some(day)
}

impl Daily {
    /// Writes day databases into `dir` (created 0700 if missing).
    pub fn open(dir: &Path, retention: Retention) -> Result<Daily, StoreError> {
        crate::files::private_dir(dir)?;
        Ok(Daily {
            dir: dir.to_path_buf(),
            retention,
            open: Vec::new(),
            newest: None,
            deleted_through: None,
            dropped: 0,
            broken: Vec::new(),
            created: 0,
        })
    }

    /// The day databases in the directory, oldest first, with their sizes
    /// (the database and its -wal and -shm files).
    pub fn days(dir: &Path) -> Result<Vec<(i64, PathBuf, u64)>, StoreError> {
        let mut days = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            // Only files (or links) by that name: never a directory.
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name();
            let Some(day) = name.to_str().and_then(day_of_file) else {
                continue;
            };
            let path = e.path();
            let size = ["", "-wal", "-shm"]
                .iter()
                .filter_map(|s| std::fs::metadata(format!("{}{s}", path.display())).ok())
                .map(|m| m.len())
                .sum();
            days.push((day, path, size));
        }
        days.sort();
        Ok(days)
    }

    /// The database of the day of `ns` (None: the newest day), or None when
    /// retention deleted that day.
    fn db(&mut self, ns: Option<i64>) -> Result<Option<&mut Sqlite>, StoreError> {
        let day = ns
            .map(|t| t.div_euclid(DAY_NS))
            .or(self.newest)
            .unwrap_or_else(|| crate::now_ns().div_euclid(DAY_NS));
        if self.deleted_through.is_some_and(|d| day <= d) || self.broken.contains(&day) {
            self.dropped += 1;
            return Ok(None);
        }
        if let Some(i) = self.open.iter().position(|(d, _)| *d == day) {
            return Ok(Some(&mut self.open[i].1));
        }
        if self.open.len() >= OPEN_DAYS {
            // Close the oldest open day (its last batch committed).
            let oldest = (0..self.open.len()).min_by_key(|&i| self.open[i].0).unwrap_or(0);
            let (_, mut db) = self.open.remove(oldest);
            db.flush()?;
        }
        let path = self.dir.join(day_file(day));
        let existed = path.exists();
        if !existed && self.created >= MAX_NEW_DAYS {
            self.dropped += 1;
            return Ok(None);
        }
        let db = match Sqlite::open(&path) {
            Ok(db) => db,
            Err(e) => {
                // One damaged day must not stop the probe: its records are
                // dropped and counted, the other days go on.
                eprintln!(
                    "calliper: warning: {}: {e}; records of that day are not stored",
                    path.display()
                );
                self.broken.push(day);
                self.dropped += 1;
                return Ok(None);
            }
        };
        self.created += !existed as usize;
        self.open.push((day, db));
        if self.newest.is_none_or(|n| day > n) {
            self.newest = Some(day);
            self.retain()?;
        }
        let i = self.open.iter().position(|(d, _)| *d == day);
        Ok(i.map(|i| &mut self.open[i].1))
    }

    /// Deletes days beyond the retention, counted back from the newest
    /// record's day but never from later than the clock's today (a record
    /// from the future must not delete the present); today and yesterday,
    /// by records and by the clock, are never deleted.
    fn retain(&mut self) -> Result<(), StoreError> {
        let Some(newest) = self.newest else {
            return Ok(());
        };
        let today = crate::now_ns().div_euclid(DAY_NS);
        let newest = newest.min(today);
        // Never deleted: the newest two days by the records and by the clock.
        let protected = |day: i64| day > newest - OPEN_DAYS as i64 || day >= today - 1;
        let mut days = Self::days(&self.dir)?;
        let mut total: u64 = days.iter().map(|d| d.2).sum();
        let mut doomed = Vec::new();
        days.retain(|(day, path, size)| {
            let too_old = !protected(*day)
                && self
                    .retention
                    .keep_days
                    .is_some_and(|k| *day <= newest - k.max(OPEN_DAYS as u32) as i64);
            if too_old {
                doomed.push(path.clone());
                total -= size;
            }
            !too_old
        });
        for (day, path, size) in &days {
            if protected(*day) || self.retention.max_bytes.is_none_or(|m| total <= m) {
                break;
            }
            doomed.push(path.clone());
            total -= size;
        }
        for path in doomed {
            let day = day_of_path(&path);
            self.deleted_through = self.deleted_through.max(day);
            // An open day being deleted is closed first.
            self.open.retain(|(d, _)| Some(*d) != day);
            for s in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{s}", path.display()));
            }
            eprintln!("calliper: retention: deleted {}", path.display());
        }
        Ok(())
    }
}

fn day_of_path(p: &Path) -> Option<i64> {
    day_of_file(p.file_name()?.to_str()?)
}

impl Sink for Daily {
    fn write(&mut self, r: &Record) -> Result<(), StoreError> {
        let ns = match r {
            Record::Call(c) => c.invite_ns,
            Record::Stream(s) => s.first_ns,
        };
        match self.db(Some(ns))? {
            Some(db) => db.write(r),
            None => Ok(()),
        }
    }

    fn write_tracked(&mut self, kind: &'static str, value: &Value) -> Result<(), StoreError> {
        let ns = ["ts_ns", "start_ns"].iter().find_map(|k| value.get(*k).and_then(|v| v.as_i64()));
        match self.db(ns)? {
            Some(db) => db.write_tracked(kind, value),
            None => Ok(()),
        }
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        for (_, db) in &mut self.open {
            db.flush()?;
        }
        Ok(())
    }

    fn finish(&mut self, input: &str, summary: &Value) -> Result<(), StoreError> {
        self.flush()?;
        if self.dropped > 0 {
            eprintln!(
                "calliper: warning: {} records not stored: their day's database was deleted by retention, \
                 could not be opened, or the run had already made {MAX_NEW_DAYS} day files",
                self.dropped
            );
        }
        // The run's row goes to the newest day.
        match self.db(None)? {
            Some(db) => db.finish(input, summary),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_names_round_trip() {
        for day in [-1000, 0, 1, 59, 60, 365, 11_016, 20_415, 100_000] {
            assert_eq!(day_of_file(&day_file(day)), Some(day), "{}", day_file(day));
        }
        // 20 416 days after 1970-01-01 (Python: date(2025, 11, 24) - date(1970, 1, 1)).
        assert_eq!(day_file(20_416), "calliper-2025-11-24.db");
        for bad in [
            "calliper-2026-02-31.db",
            "calliper-+2026-01-01.db",
            "calliper-02025-01-01.db",
            "calliper-2025-1-1.db",
            "calliper-99999999999999999-01-01.db",
            "calliper-2025-13-01.db",
            "calliper-x.db",
            "other-2025-01-01.db",
            "calliper-2025-01-01-1.db",
        ] {
            assert_eq!(day_of_file(bad), None, "{bad}");
        }
    }

    /// A record from the future neither deletes the present nor files
    /// that are not exactly day databases.
    #[test]
    fn retention_counts_from_the_clock_and_spares_other_names() {
        let dir = std::env::temp_dir().join(format!("calliper-daily-unit-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("calliper-2019-01-01.db")).unwrap();
        let today = crate::now_ns().div_euclid(DAY_NS);
        for d in [today, today - 1, today - 5] {
            std::fs::write(dir.join(day_file(d)), b"").unwrap();
        }
        for other in ["calliper-2026-02-31.db", "calliper-+2026-01-01.db", "notes.txt"] {
            std::fs::write(dir.join(other), b"x").unwrap();
        }
        let mut daily =
            Daily::open(&dir, Retention { keep_days: Some(2), max_bytes: Some(0) }).unwrap();
        // Year 2096.
        daily.db(Some(4_000_000_000 * 1_000_000_000)).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !n.ends_with("-wal") && !n.ends_with("-shm"))
            .collect();
        left.sort();
        let mut want = vec![
            "calliper-+2026-01-01.db".to_string(),
            "calliper-2019-01-01.db".to_string(),
            "calliper-2026-02-31.db".to_string(),
            "calliper-2096-10-02.db".to_string(),
            day_file(today - 1),
            day_file(today),
            "notes.txt".to_string(),
        ];
        want.sort();
        assert_eq!(left, want);
        std::fs::remove_dir_all(&dir).ok();
    }
}
