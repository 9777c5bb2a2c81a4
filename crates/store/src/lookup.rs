//! Finding one call again: its record and its streams' addresses, ports,
//! SSRC and times, as `calliper export` needs them to pick the call's
//! packets out of a capture.

use crate::StoreError;
use calliper_model::stored::{StoredCall, StoredStream};
use rusqlite::Connection;

/// Most records one look-up returns, and most streams read per call: a
/// database is input too, and could hold absurd numbers of them.
pub const MAX_CALLS: usize = 100;
/// See [`MAX_CALLS`].
pub const MAX_STREAMS: usize = 1000;

/// The call whose record id is `call`, else the calls whose Call-ID it is
/// (a record id comes first, so every record can be named). `calls` and
/// `streams` must be tables: a database crafted with views in their place
/// could make the look-up run forever.
pub fn find_calls(conn: &Connection, call: &str) -> Result<Vec<StoredCall>, StoreError> {
    let tables: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('calls', 'streams')",
        [],
        |r| r.get(0),
    )?;
    if tables != 2 {
        return Err(StoreError::Invalid(
            "no calls and streams tables: not a calliper database".into(),
        ));
    }
    let by_id = "SELECT id, call_id, invite_ns, end_ns FROM calls WHERE CAST(id AS TEXT) = ?1
                 LIMIT ?2";
    let by_call_id = "SELECT id, call_id, invite_ns, end_ns FROM calls WHERE call_id = ?1
                      ORDER BY id LIMIT ?2";
    let mut calls = read_calls(conn, by_id, call)?;
    if calls.is_empty() {
        calls = read_calls(conn, by_call_id, call)?;
    }
    let mut q = conn.prepare(
        "SELECT src, src_port, dst, dst_port, ssrc, direction, payload_type, first_ns, last_ns, codec
         FROM streams WHERE call = ?1 ORDER BY first_ns LIMIT ?2",
    )?;
    for c in &mut calls {
        c.streams = q
            .query_map(rusqlite::params![c.id, MAX_STREAMS as i64], |r| {
                Ok(StoredStream {
                    src: r.get(0)?,
                    src_port: r.get(1)?,
                    dst: r.get(2)?,
                    dst_port: r.get(3)?,
                    ssrc: r.get::<_, i64>(4)? as u32,
                    direction: r.get(5)?,
                    payload_type: r.get::<_, Option<i64>>(6)?.and_then(|p| u8::try_from(p).ok()),
                    first_ns: r.get(7)?,
                    last_ns: r.get(8)?,
                    // Text only: a hostile database's other types read as unknown.
                    codec: r.get::<_, Option<String>>(9).ok().flatten(),
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
    }
    Ok(calls)
}

/// The calls `sql` selects (`?1` the argument, `?2` the row limit).
fn read_calls(conn: &Connection, sql: &str, call: &str) -> Result<Vec<StoredCall>, StoreError> {
    let mut q = conn.prepare(sql)?;
    let calls = q
        .query_map(rusqlite::params![call, MAX_CALLS as i64], |r| {
            Ok(StoredCall {
                id: r.get(0)?,
                call_id: r.get(1)?,
                invite_ns: r.get(2)?,
                end_ns: r.get(3)?,
                streams: Vec::new(),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(calls)
}

/// How many calls and runs the database holds (so a run that added to an
/// existing database can say so).
pub fn totals(conn: &Connection) -> Result<(i64, i64), StoreError> {
    Ok(conn.query_row(
        "SELECT (SELECT count(*) FROM calls), (SELECT count(*) FROM runs)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

/// How many earlier runs of the database analysed `input` (the same file
/// names): a run that analyses it again stores each of its calls twice.
pub fn runs_of(conn: &Connection, input: &str) -> Result<i64, StoreError> {
    Ok(conn.query_row("SELECT count(*) FROM runs WHERE input = ?1", [input], |r| r.get(0))?)
}
