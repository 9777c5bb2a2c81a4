//! Reading the KPI rows back: the sums per (longer) interval and key that
//! `calliper report kpi` prints. Rows add up ([`calliper_model::kpi`]), so
//! any interval that is a multiple of the stored one is a plain sum.

use crate::StoreError;
use calliper_model::kpi::{KpiCounts, COUNTERS, COUNTER_NAMES};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// The summed counters of one interval and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KpiSum {
    /// Interval start, ns since the epoch (a multiple of the interval asked for).
    pub start_ns: i64,
    /// The key within the dimension.
    pub key: String,
    /// The counters.
    pub counts: KpiCounts,
}

/// Opens `path` read-only (it must exist: a report never creates a database).
pub fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    // SQLite says "disk I/O error" for a directory.
    if path.is_dir() {
        return Err(StoreError::Invalid("a directory, not a database file".into()));
    }
    Ok(Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?)
}

/// The stored KPI rows' interval lengths, s (normally one).
pub fn kpi_intervals(conn: &Connection) -> Result<Vec<f64>, StoreError> {
    let mut q = conn.prepare("SELECT DISTINCT interval_s FROM kpi ORDER BY interval_s")?;
    let v = q.query_map([], |r| r.get(0))?.collect::<Result<Vec<f64>, _>>()?;
    Ok(v)
}

/// Which KPI sums to read: `dimension`'s rows that start from `from_ns` to
/// `until_ns` (both included), summed per interval of `interval_ns` and
/// key, at most `max_rows` sums (the first ones).
#[derive(Clone, Copy, Debug)]
pub struct KpiWindow<'a> {
    /// `call_type`, `direction`, `peer`, … (docs/kpi.md).
    pub dimension: &'a str,
    /// The width of the intervals summed into one.
    pub interval_ns: i64,
    /// The first interval start read.
    pub from_ns: i64,
    /// The last interval start read.
    pub until_ns: i64,
    /// Sums given at most.
    pub max_rows: usize,
}

impl<'a> KpiWindow<'a> {
    /// Every row of `dimension`, per interval of `interval_ns`.
    pub fn all(dimension: &'a str, interval_ns: i64) -> KpiWindow<'a> {
        let (from_ns, until_ns, max_rows) = (i64::MIN, i64::MAX, usize::MAX);
        KpiWindow { dimension, interval_ns, from_ns, until_ns, max_rows }
    }
}

/// Sums of `dimension`'s rows per interval of `interval_ns` and key, in
/// time order.
pub fn kpi_sums(
    conn: &Connection,
    dimension: &str,
    interval_ns: i64,
) -> Result<Vec<KpiSum>, StoreError> {
    kpi_sums_between(conn, &KpiWindow::all(dimension, interval_ns))
}

/// The sums `w` asks for, in time order.
pub fn kpi_sums_between(conn: &Connection, w: &KpiWindow) -> Result<Vec<KpiSum>, StoreError> {
    let sums: Vec<String> = COUNTER_NAMES.iter().map(|c| format!("SUM({c})")).collect();
    let sql = format!(
        "SELECT (start_ns - (start_ns % ?1 + ?1) % ?1) AS bucket, key, {} FROM kpi
         WHERE dimension = ?2 AND start_ns >= ?3 AND start_ns <= ?4
         GROUP BY bucket, key ORDER BY bucket, key LIMIT ?5",
        sums.join(", ")
    );
    let mut q = conn.prepare(&sql)?;
    let limit = i64::try_from(w.max_rows).unwrap_or(i64::MAX);
    let rows = q.query_map(
        rusqlite::params![w.interval_ns, w.dimension, w.from_ns, w.until_ns, limit],
        |r| {
            let mut counts = KpiCounts::default();
            for i in 0..COUNTERS {
                // A crafted row of another type counts as nothing.
                let v = r.get_ref(i + 2)?.as_i64().unwrap_or(0);
                counts.0[i] = v.max(0) as u64;
            }
            Ok(KpiSum {
                start_ns: r.get_ref(0)?.as_i64().unwrap_or(0),
                key: String::from_utf8_lossy(r.get_ref(1)?.as_bytes().unwrap_or(b"")).into_owned(),
                counts,
            })
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}
