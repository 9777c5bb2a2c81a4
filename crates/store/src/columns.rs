//! The columns of calls and streams, defined once. SQLite's tables and
//! inserts and ClickHouse's tables and rows are all made from these lists,
//! so a field cannot be stored in one database and forgotten in the other
//! (a column named by hand in one insert and not the other silently became
//! NULL).

use crate::{label, StoreError};
use calliper_model::{CallRecord, StreamRecord};
use rusqlite::types::Value as Sql;
use serde::Serialize;

/// A column's type, as both databases have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    Integer,
    Real,
    Text,
}

impl Type {
    /// Its name in SQLite.
    fn sqlite(self) -> &'static str {
        match self {
            Type::Integer => "INTEGER",
            Type::Real => "REAL",
            Type::Text => "TEXT",
        }
    }

    /// Its name in ClickHouse.
    pub(crate) fn clickhouse(self) -> &'static str {
        match self {
            Type::Integer => "Int64",
            Type::Real => "Float64",
            Type::Text => "String",
        }
    }
}

/// One column: its name, type, and the value a record gives it.
pub(crate) struct Column<R> {
    pub(crate) name: &'static str,
    pub(crate) ty: Type,
    /// Never NULL (the record always has it).
    pub(crate) required: bool,
    pub(crate) value: fn(&R) -> Result<Sql, StoreError>,
}

fn int(v: impl TryInto<i64>) -> Sql {
    v.try_into().map_or(Sql::Integer(i64::MAX), Sql::Integer)
}

fn real(v: f64) -> Sql {
    // SQLite stores NaN as NULL; ClickHouse's JSON has no NaN: NULL in both.
    if v.is_finite() {
        Sql::Real(v)
    } else {
        Sql::Null
    }
}

fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> Sql) -> Sql {
    v.map_or(Sql::Null, f)
}

fn text(v: impl Into<String>) -> Sql {
    Sql::Text(v.into())
}

/// A JSON text, or NULL when `empty`.
fn json_unless<T: Serialize + ?Sized>(empty: bool, v: &T) -> Result<Sql, StoreError> {
    Ok(if empty { Sql::Null } else { Sql::Text(serde_json::to_string(v)?) })
}

/// An enum's JSON name (e.g. `answered`), or NULL.
fn name<T: Serialize>(v: &Option<T>) -> Result<Sql, StoreError> {
    Ok(opt(label(v)?, text))
}

macro_rules! columns {
    ($record:ty: $($name:ident $ty:ident $($required:ident)? = |$r:ident| $value:expr;)*) => {
        &[$(Column::<$record> {
            name: stringify!($name),
            ty: Type::$ty,
            required: columns!(@required $($required)?),
            value: |$r: &$record| -> Result<Sql, StoreError> { Ok($value) },
        }),*]
    };
    (@required required) => { true };
    (@required) => { false };
}

/// The calls' columns, in the order SQLite's table has them.
pub(crate) static CALLS: &[Column<CallRecord>] = columns! { CallRecord:
    call_id Text required = |c| text(&c.call_id);
    from_uri Text = |c| text(&c.from.uri);
    from_user Text = |c| opt(c.from.user.as_deref(), text);
    from_display Text = |c| opt(c.from.display_name.as_deref(), text);
    to_uri Text = |c| text(&c.to.uri);
    to_user Text = |c| opt(c.to.user.as_deref(), text);
    to_display Text = |c| opt(c.to.display_name.as_deref(), text);
    caller_user_agent Text = |c| opt(c.caller_user_agent.as_deref(), text);
    callee_user_agent Text = |c| opt(c.callee_user_agent.as_deref(), text);
    caller_ip Text = |c| text(c.caller_ip.to_string());
    caller_port Integer = |c| int(c.caller_port);
    callee_ip Text = |c| text(c.callee_ip.to_string());
    callee_port Integer = |c| int(c.callee_port);
    invite_ns Integer required = |c| int(c.invite_ns);
    first_provisional_ns Integer = |c| opt(c.first_provisional_ns, int);
    ringing_ns Integer = |c| opt(c.ringing_ns, int);
    answer_ns Integer = |c| opt(c.answer_ns, int);
    end_ns Integer required = |c| int(c.end_ns);
    duration_ms Real = |c| real(c.duration_ms);
    setup_delay_ms Real = |c| opt(c.setup_delay_ms, real);
    final_status Integer = |c| opt(c.final_status, int);
    final_reason Text = |c| opt(c.final_reason.as_deref(), text);
    state Text required = |c| name(&Some(c.state))?;
    hangup_by Text = |c| name(&c.hangup_by)?;
    hangup_reason Text = |c| opt(c.hangup_reason.as_deref(), text);
    sip_messages Integer = |c| int(c.sip_messages);
    invites Integer = |c| int(c.invites);
    rtcp_packets Integer = |c| int(c.rtcp_packets);
    anomalies Integer = |c| int(c.anomalies);
    dtmf_digits Text = |c| text(&c.dtmf_digits);
    // A JSON array, so searches can use json_each.
    labels Text = |c| json_unless(c.labels.is_empty(), &c.labels)?;
    record_payload Integer = |c| int(c.record_payload);
    capture_dropped Integer = |c| int(c.capture_dropped);
    ongoing Integer = |c| int(c.ongoing);
    worst_mos Real = |c| opt(c.worst_mos, real);
    worst_interval_mos Real = |c| opt(c.worst_interval_mos, real);
    mos_scale Text = |c| name(&c.mos_scale)?;
    setup_delay_to_failure Integer = |c| int(c.setup_delay_to_failure);
    disconnect_delay_ms Real = |c| opt(c.disconnect_delay_ms, real);
    agent_reports Text = |c| json_unless(c.agent_reports.is_empty(), &c.agent_reports)?;
};

/// The streams' columns (SQLite's table has a `call` column before them,
/// the row id of the stream's call).
pub(crate) static STREAMS: &[Column<StreamRecord>] = columns! { StreamRecord:
    src Text = |s| text(s.src.to_string());
    src_port Integer = |s| int(s.src_port);
    dst Text = |s| text(s.dst.to_string());
    dst_port Integer = |s| int(s.dst_port);
    ssrc Integer = |s| int(s.ssrc);
    direction Text = |s| name(&Some(s.direction))?;
    payload_type Integer = |s| int(s.payload_type);
    codec Text = |s| text(&s.codec);
    first_ns Integer = |s| int(s.first_ns);
    last_ns Integer = |s| int(s.last_ns);
    packets Integer = |s| int(s.packets);
    bytes Integer = |s| int(s.bytes);
    expected Integer = |s| int(s.expected);
    lost Integer = |s| int(s.lost);
    loss_percent Real = |s| real(s.loss_percent);
    duplicates Integer = |s| int(s.duplicates);
    out_of_order Integer = |s| int(s.out_of_order);
    seq_resets Integer = |s| int(s.seq_resets);
    seq_outages Integer = |s| int(s.seq_outages);
    event_packets Integer = |s| int(s.event_packets);
    event_end_repeats Integer = |s| int(s.event_end_repeats);
    mean_jitter_ms Real = |s| real(s.mean_jitter_ms);
    max_jitter_ms Real = |s| real(s.max_jitter_ms);
    min_delta_ms Real = |s| opt(s.min_delta_ms, real);
    mean_delta_ms Real = |s| real(s.mean_delta_ms);
    max_delta_ms Real = |s| real(s.max_delta_ms);
    wireshark_expected Integer = |s| int(s.wireshark_expected);
    wireshark_lost Integer = |s| int(s.wireshark_lost);
    burst_ratio Real = |s| real(s.burst_ratio);
    r_factor Real = |s| opt(s.r_factor, real);
    mos Real = |s| opt(s.mos, real);
    mos_scale Text = |s| name(&s.mos_scale)?;
    unscored Text = |s| name(&s.unscored)?;
    dtmf Text = |s| json_unless(false, &s.dtmf)?;
    rtcp_reports Integer = |s| int(s.rtcp_reports);
    rtcp_max_fraction_lost Real = |s| real(s.rtcp_max_fraction_lost);
    rtcp_cumulative_lost Integer = |s| int(s.rtcp_cumulative_lost);
    rtcp_max_jitter_ms Real = |s| real(s.rtcp_max_jitter_ms);
    worst_interval_mos Real = |s| opt(s.worst_interval_mos, real);
    packet_ms Real = |s| opt(s.packet_ms, real);
    rtt_ms Real = |s| opt(s.rtt_ms, real);
    delay_ms Real = |s| opt(s.delay_ms, real);
    delay_inputs Text = |s| opt(s.delay_inputs, text);
    jitter_buffers Text = |s| json_unless(false, &s.jitter_buffers)?;
    encrypted Integer = |s| int(s.encrypted);
    rtcp_xr Text = |s| json_unless(s.rtcp_xr.is_none(), &s.rtcp_xr)?;
    segment_mean_jitter_ms Real = |s| opt(s.segment_mean_jitter_ms, real);
    segment_max_jitter_ms Real = |s| opt(s.segment_max_jitter_ms, real);
    restarts_ns Text = |s| json_unless(s.restarts_ns.is_empty(), &s.restarts_ns)?;
};

/// Each column's value for `record`, in the list's order.
pub(crate) fn values<R>(columns: &[Column<R>], record: &R) -> Result<Vec<Sql>, StoreError> {
    columns.iter().map(|c| (c.value)(record)).collect()
}

/// `a, b, c`: the columns' names.
pub(crate) fn names<R>(columns: &[Column<R>]) -> String {
    let names: Vec<_> = columns.iter().map(|c| c.name).collect();
    names.join(", ")
}

/// SQLite's definitions of the columns (`name TYPE [NOT NULL]`).
pub(crate) fn sqlite_definitions<R>(columns: &[Column<R>]) -> String {
    let defs: Vec<_> = columns
        .iter()
        .map(|c| {
            let null = if c.required { " NOT NULL" } else { "" };
            format!("{} {}{null}", c.name, c.ty.sqlite())
        })
        .collect();
    defs.join(",\n    ")
}
