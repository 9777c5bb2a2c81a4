//! Load over time and the spread of quality in a time range, for the KPI
//! page: concurrent calls and calls started per interval (the time series'
//! `traffic` rows, summed into the interval asked for), and how many calls
//! fall in each MOS band.

use crate::StoreError;
use rusqlite::Connection;
use serde::Serialize;

/// One interval's load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadSum {
    /// Its start (ns since the epoch, a multiple of the interval).
    pub start_ns: i64,
    /// The most calls open that any time-series row in it reports.
    pub max_calls_open: i64,
    /// Calls whose INVITE came in it.
    pub calls_started: i64,
    /// Calls that ended in it.
    pub calls_ended: i64,
}

/// The time series' rows that start from `from_ns` to `until_ns` (both
/// included), summed per `interval_ns`: at most `max_rows`, the first ones.
pub fn load_between(
    conn: &Connection,
    interval_ns: i64,
    from_ns: i64,
    until_ns: i64,
    max_rows: usize,
) -> Result<Vec<LoadSum>, StoreError> {
    let mut q = conn.prepare(
        "SELECT (start_ns - (start_ns % ?1 + ?1) % ?1) AS bucket, MAX(calls_open), SUM(calls_started), SUM(calls_ended)
         FROM traffic WHERE start_ns >= ?2 AND start_ns <= ?3
         GROUP BY bucket ORDER BY bucket LIMIT ?4",
    )?;
    let limit = i64::try_from(max_rows).unwrap_or(i64::MAX);
    let rows = q.query_map(rusqlite::params![interval_ns, from_ns, until_ns, limit], |r| {
        // A crafted row of another type counts as nothing.
        let n = |i: usize| r.get_ref(i).map(|v| v.as_i64().unwrap_or(0).max(0));
        Ok(LoadSum {
            start_ns: r.get_ref(0)?.as_i64().unwrap_or(0),
            max_calls_open: n(1)?,
            calls_started: n(2)?,
            calls_ended: n(3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The MOS bands: half a point wide from 1 to 5, each including its lower
/// edge (a MOS below 1 counts in the first, 5 in the last).
pub const MOS_BANDS: [(f64, f64); 8] = [
    (1.0, 1.5),
    (1.5, 2.0),
    (2.0, 2.5),
    (2.5, 3.0),
    (3.0, 3.5),
    (3.5, 4.0),
    (4.0, 4.5),
    (4.5, 5.0),
];

/// Calls whose INVITE came from `from_ns` to `until_ns` (both included)
/// with a worst stream MOS, counted per band of [`MOS_BANDS`]; and the
/// answered calls of that range without one (no voice stream scored: no
/// media, one way only, or codecs without an E-model value), so the bands
/// do not hide them.
pub fn mos_bands(
    conn: &Connection,
    from_ns: i64,
    until_ns: i64,
) -> Result<([u64; MOS_BANDS.len()], u64), StoreError> {
    let mut q = conn.prepare(
        "SELECT MIN(?3, MAX(0, CAST((worst_mos - 1.0) * 2 AS INTEGER))) AS band, COUNT(*)
         FROM calls WHERE invite_ns >= ?1 AND invite_ns <= ?2 AND typeof(worst_mos) IN ('real', 'integer')
         GROUP BY band",
    )?;
    let last = MOS_BANDS.len() as i64 - 1;
    let mut bands = [0u64; MOS_BANDS.len()];
    let mut rows = q.query(rusqlite::params![from_ns, until_ns, last])?;
    while let Some(r) = rows.next()? {
        let band = r.get_ref(0)?.as_i64().unwrap_or(0).clamp(0, last) as usize;
        bands[band] += r.get_ref(1)?.as_i64().unwrap_or(0).max(0) as u64;
    }
    let without: i64 = conn.query_row(
        "SELECT COUNT(*) FROM calls WHERE invite_ns >= ?1 AND invite_ns <= ?2
         AND answer_ns IS NOT NULL AND typeof(worst_mos) NOT IN ('real', 'integer')",
        rusqlite::params![from_ns, until_ns],
        |r| r.get(0),
    )?;
    Ok((bands, without.max(0) as u64))
}
