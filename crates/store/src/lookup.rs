//! Finding one call again: its record and its streams' addresses, ports,
//! SSRC and times, as `calliper export` needs them to pick the call's
//! packets out of a capture.

use crate::StoreError;
use rusqlite::Connection;

/// A stored call and its streams.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCall {
    /// Record id.
    pub id: i64,
    /// SIP Call-ID.
    pub call_id: String,
    /// When the INVITE was seen, ns since the epoch.
    pub invite_ns: i64,
    /// When the call ended, ns since the epoch.
    pub end_ns: i64,
    /// Its streams.
    pub streams: Vec<StoredStream>,
}

/// A stored stream: what identifies its packets.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredStream {
    /// Source address.
    pub src: String,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst: String,
    /// Destination port.
    pub dst_port: u16,
    /// RTP SSRC.
    pub ssrc: u32,
    /// `caller_to_callee`, `callee_to_caller` or `unknown`.
    pub direction: String,
    /// The payload type the stream carried most (None if unknown).
    pub payload_type: Option<u8>,
    /// First packet, ns since the epoch.
    pub first_ns: i64,
    /// Last packet, ns since the epoch.
    pub last_ns: i64,
}

/// The calls whose Call-ID is `call`, or whose record id it is.
pub fn find_calls(conn: &Connection, call: &str) -> Result<Vec<StoredCall>, StoreError> {
    let mut q = conn.prepare(
        "SELECT id, call_id, invite_ns, end_ns FROM calls
         WHERE call_id = ?1 OR CAST(id AS TEXT) = ?1 ORDER BY id",
    )?;
    let mut calls = q
        .query_map([call], |r| {
            Ok(StoredCall {
                id: r.get(0)?,
                call_id: r.get(1)?,
                invite_ns: r.get(2)?,
                end_ns: r.get(3)?,
                streams: Vec::new(),
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut q = conn.prepare(
        "SELECT src, src_port, dst, dst_port, ssrc, direction, payload_type, first_ns, last_ns
         FROM streams WHERE call = ?1 ORDER BY first_ns",
    )?;
    for c in &mut calls {
        c.streams = q
            .query_map([c.id], |r| {
                Ok(StoredStream {
                    src: r.get(0)?,
                    src_port: r.get(1)?,
                    dst: r.get(2)?,
                    dst_port: r.get(3)?,
                    ssrc: r.get::<_, i64>(4)? as u32,
                    direction: r.get(5)?,
                    payload_type: r
                        .get::<_, Option<i64>>(6)?
                        .and_then(|p| u8::try_from(p).ok()),
                    first_ns: r.get(7)?,
                    last_ns: r.get(8)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
    }
    Ok(calls)
}
