//! The SQLite schema of calls and streams, and its migrations: a database
//! written by an earlier version gains the newer columns when opened.

use crate::{columns, StoreError};
use rusqlite::Connection;

/// The SQLite schema: calls, their streams (their columns from
/// [`crate::columns`]), and one row per analysis run.
pub fn schema() -> String {
    format!(
        "
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY,
    {}
);
CREATE INDEX IF NOT EXISTS calls_by_time ON calls(invite_ns);
CREATE INDEX IF NOT EXISTS calls_by_caller_time ON calls(from_user, invite_ns);
CREATE INDEX IF NOT EXISTS calls_by_callee_time ON calls(to_user, invite_ns);
CREATE INDEX IF NOT EXISTS calls_by_call_id ON calls(call_id);
CREATE TABLE IF NOT EXISTS streams (
    id INTEGER PRIMARY KEY,
    call INTEGER REFERENCES calls(id),
    {}
);
CREATE INDEX IF NOT EXISTS streams_by_call ON streams(call);
CREATE INDEX IF NOT EXISTS streams_by_time ON streams(first_ns);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    input TEXT,
    summary TEXT
);
",
        columns::sqlite_definitions(columns::CALLS),
        columns::sqlite_definitions(columns::STREAMS)
    )
}

/// The schema's version (`PRAGMA user_version`): 1 added the calls' rule
/// labels and payload-recording flag; 2 the trackers' tables
/// (registrations, users), which `CREATE TABLE IF NOT EXISTS` adds; 3 the
/// calls' capture drops and ongoing flag, and the time series (`traffic`,
/// `traffic_protocols`, also added that way); 4 the streams' MOS scale and
/// why a stream has no MOS (`r_factor` and `mos` may now be NULL); 5 the
/// jitter-buffer scores, delay, round trip and SRTP flag of streams, and
/// the calls' worst MOS; 6 the calls' failed-SRD flag and disconnect delay
/// (RFC 6076), the streams' RTCP XR VoIP metrics (JSON), and the KPI table (`kpi`, added by `CREATE TABLE IF NOT EXISTS`);
/// 7 the call detail tables (`sip_messages`, `stream_intervals`) and the
/// caller and callee indexes with time (a search by user and time range);
/// 8 the streams' outages (big jumps counted as loss); 9 their jitter
/// within restart segments and restart times (JSON); 10 the calls' reports
/// from capture agents over HEP (`agent_reports`, JSON); 11 the time
/// series' packets of talkers beyond its top list, and when each row was
/// released (every field of its JSON line is now stored).
const SCHEMA_VERSION: i64 = 11;

/// The columns each version added to a table: (version, table, the first
/// column it adds, the statements that add them).
const ADDED_COLUMNS: &[(i64, &str, &str, &str)] = &[
    (
        1,
        "calls",
        "labels",
        "ALTER TABLE calls ADD COLUMN labels TEXT; ALTER TABLE calls ADD COLUMN record_payload INTEGER;",
    ),
    (
        3,
        "calls",
        "capture_dropped",
        "ALTER TABLE calls ADD COLUMN capture_dropped INTEGER; ALTER TABLE calls ADD COLUMN ongoing INTEGER;",
    ),
    (
        4,
        "streams",
        "mos_scale",
        "ALTER TABLE streams ADD COLUMN mos_scale TEXT; ALTER TABLE streams ADD COLUMN unscored TEXT;
             ALTER TABLE streams ADD COLUMN event_end_repeats INTEGER;
             ALTER TABLE streams ADD COLUMN burst_ratio REAL;",
    ),
    (
        5,
        "streams",
        "worst_interval_mos",
        "ALTER TABLE streams ADD COLUMN worst_interval_mos REAL; ALTER TABLE streams ADD COLUMN packet_ms REAL;
             ALTER TABLE streams ADD COLUMN rtt_ms REAL; ALTER TABLE streams ADD COLUMN delay_ms REAL;
             ALTER TABLE streams ADD COLUMN delay_inputs TEXT; ALTER TABLE streams ADD COLUMN jitter_buffers TEXT;
             ALTER TABLE streams ADD COLUMN encrypted INTEGER;",
    ),
    (
        5,
        "calls",
        "worst_mos",
        "ALTER TABLE calls ADD COLUMN worst_mos REAL; ALTER TABLE calls ADD COLUMN worst_interval_mos REAL;
             ALTER TABLE calls ADD COLUMN mos_scale TEXT;",
    ),
    (
        6,
        "calls",
        "setup_delay_to_failure",
        "ALTER TABLE calls ADD COLUMN setup_delay_to_failure INTEGER;
             ALTER TABLE calls ADD COLUMN disconnect_delay_ms REAL;",
    ),
    (
        6,
        "streams",
        "rtcp_xr",
        "ALTER TABLE streams ADD COLUMN rtcp_xr TEXT;",
    ),
    (
        8,
        "streams",
        "seq_outages",
        "ALTER TABLE streams ADD COLUMN seq_outages INTEGER;",
    ),
    (
        9,
        "streams",
        "segment_mean_jitter_ms",
        "ALTER TABLE streams ADD COLUMN segment_mean_jitter_ms REAL;
             ALTER TABLE streams ADD COLUMN segment_max_jitter_ms REAL;
             ALTER TABLE streams ADD COLUMN restarts_ns TEXT;",
    ),
    (
        10,
        "calls",
        "agent_reports",
        "ALTER TABLE calls ADD COLUMN agent_reports TEXT;",
    ),
    (
        11,
        "traffic",
        "talkers_untracked_packets",
        "ALTER TABLE traffic ADD COLUMN talkers_untracked_packets; ALTER TABLE traffic ADD COLUMN released_ns;",
    ),
];

/// Brings a database written by an earlier version up to [`schema`].
pub(crate) fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for &(added_in, table, column, alter) in ADDED_COLUMNS {
        if version < added_in {
            add_columns(conn, table, column, alter)?;
        }
    }
    if version < 7 {
        conn.execute_batch(
            "DROP INDEX IF EXISTS calls_by_caller; DROP INDEX IF EXISTS calls_by_callee;",
        )?;
    }
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    Ok(())
}

/// Runs `alter` unless `table` already has `column` (the first it adds):
/// a database created from this version's [`schema`] has them all.
fn add_columns(
    conn: &Connection,
    table: &str,
    column: &str,
    alter: &str,
) -> Result<(), StoreError> {
    let present = conn
        .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
        .exists([table, column])?;
    if !present {
        conn.execute_batch(alter)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(conn: &Connection, table: &str) -> Vec<String> {
        let mut q = conn.prepare("SELECT name FROM pragma_table_info(?1)").unwrap();
        let names = q.query_map([table], |r| r.get(0)).unwrap();
        names.map(Result::unwrap).collect()
    }

    /// A database of version 0 (today's tables less every column a later
    /// version added) comes back with exactly today's columns.
    #[test]
    fn an_old_database_gets_every_added_column() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&schema()).unwrap();
        conn.execute_batch(&crate::tracked::schema()).unwrap();
        let today: Vec<_> =
            ["calls", "streams", "traffic"].iter().map(|t| columns(&conn, t)).collect();
        for (_, table, _, alter) in ADDED_COLUMNS {
            for statement in alter.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                let column = statement.split_whitespace().nth(5).unwrap();
                conn.execute_batch(&format!("ALTER TABLE {table} DROP COLUMN {column}")).unwrap();
            }
        }
        assert!(columns(&conn, "calls").len() < today[0].len());
        conn.pragma_update(None, "user_version", 0).unwrap();
        migrate(&conn).unwrap();
        let after: Vec<_> =
            ["calls", "streams", "traffic"].iter().map(|t| columns(&conn, t)).collect();
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        for (a, t) in after.into_iter().zip(today) {
            assert_eq!(sorted(a), sorted(t));
        }
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }
}
