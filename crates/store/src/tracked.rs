//! What trackers produce, in SQLite: a table per kind whose columns are the
//! JSON fields of the tracker's line (one definition: the field names), so
//! the database holds exactly what the JSON-lines output says.

use crate::StoreError;
use rusqlite::types::Value as Sql;
use rusqlite::Connection;
use serde_json::Value;

/// A tracker's line type, its table and its columns (JSON field names;
/// arrays and objects are stored as JSON text).
pub(crate) struct TrackedTable {
    pub(crate) kind: &'static str,
    pub(crate) table: &'static str,
    pub(crate) columns: &'static [&'static str],
    /// More columns, from a list defined with the row's type.
    pub(crate) more_columns: &'static [&'static str],
    /// Array fields whose items go to their own tables, one row each,
    /// keyed by the parent's row id (`parent` column).
    pub(crate) items: &'static [Items],
}

impl TrackedTable {
    fn all_columns(&self) -> Vec<&'static str> {
        self.columns
            .iter()
            .chain(self.more_columns)
            .copied()
            .collect()
    }
}

/// Rows of an array field.
pub(crate) struct Items {
    pub(crate) field: &'static str,
    pub(crate) table: &'static str,
    pub(crate) columns: &'static [&'static str],
}

/// Every kind the database stores. Registrations are one row per REGISTER
/// transaction; users one row per address of record and run (the state at
/// the run's end); KPI rows add up (several may share an interval and key).
pub(crate) const TRACKED: &[TrackedTable] = &[
    TrackedTable {
        kind: "registration",
        table: "registrations",
        columns: &[
            "ts_ns",
            "request_ns",
            "aor",
            "contact",
            "expires",
            "status",
            "outcome",
            "user_agent",
            "call_id",
            "cseq",
            "client",
            "client_port",
            "registrar",
            "registrar_port",
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "user",
        table: "users",
        columns: &[
            "aor",
            "contacts",
            "user_agent",
            "expires",
            "client",
            "registered",
            "unregistered",
            "challenged",
            "auth_failed",
            "failed",
            "last_success_ns",
            "last_failure_ns",
            "last_failure_status",
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "traffic",
        table: "traffic",
        columns: &[
            "start_ns",
            "end_ns",
            "packets",
            "bytes",
            "calls_open",
            "calls_started",
            "calls_ended",
            "capture_dropped",
            "streams",
            "stream_packets",
            "stream_expected",
            "stream_lost",
            "mos_mean",
            "mos_min",
        ],
        more_columns: &[],
        items: &[
            Items {
                field: "protocols",
                table: "traffic_protocols",
                columns: &["network", "transport", "application", "packets", "bytes"],
            },
            Items {
                field: "top_talkers",
                table: "traffic_talkers",
                columns: &["address", "packets", "bytes"],
            },
        ],
    },
    TrackedTable {
        kind: "alert",
        table: "alerts",
        columns: &[
            "ts_ns",
            "kind",
            "call_id",
            "source",
            "key",
            "value",
            "threshold",
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "sip_message",
        table: "sip_messages",
        columns: &[
            "ts_ns",
            "call_id",
            "src",
            "src_port",
            "dst",
            "dst_port",
            "transport",
            "method",
            "status",
            "cseq_method",
            "message",
            "truncated",
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "stream_interval",
        table: "stream_intervals",
        columns: &[
            "src",
            "src_port",
            "dst",
            "dst_port",
            "ssrc",
            "codec",
            "start_ns",
            "end_ns",
            "packets",
            "expected",
            "lost",
            "loss_percent",
            "duplicates",
            "late",
            "loss_after_buffer_percent",
            "buffer_delay_ms",
            "jitter_ms",
            "max_delta_ms",
            "r_factor",
            "mos",
            "mos_scale",
            "last",
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "kpi",
        table: "kpi",
        columns: &["start_ns", "interval_s", "dimension", "key"],
        more_columns: calliper_model::kpi::COUNTER_NAMES,
        items: &[],
    },
];

/// The tables of [`TRACKED`], by name.
pub(crate) const TABLES: &[&str] = &[
    "registrations",
    "users",
    "traffic",
    "alerts",
    "sip_messages",
    "stream_intervals",
    "kpi",
];

/// Empty temporary tables standing in for those of [`TRACKED`] that the
/// database lacks (one written by an older version, read-only here), or
/// has only as views: a search then finds nothing in them instead of
/// failing (temporary tables come first in name look-up).
pub(crate) fn stand_ins(conn: &Connection) -> Result<(), StoreError> {
    for t in TRACKED {
        if !crate::readonly::is_table(conn, t.table)? {
            conn.execute_batch(&format!(
                "CREATE TEMP TABLE IF NOT EXISTS {} (id INTEGER PRIMARY KEY, {});",
                t.table,
                t.all_columns().join(", ")
            ))?;
        }
    }
    Ok(())
}

/// The tables' schema (columns untyped: SQLite keeps each value's type).
pub(crate) fn schema() -> String {
    let mut s = String::new();
    for t in TRACKED {
        s += &format!(
            "CREATE TABLE IF NOT EXISTS {} (id INTEGER PRIMARY KEY, {});\n",
            t.table,
            t.all_columns().join(", ")
        );
        for i in t.items {
            s += &format!(
                "CREATE TABLE IF NOT EXISTS {} (parent INTEGER REFERENCES {}(id), {});\n",
                i.table,
                t.table,
                i.columns.join(", ")
            );
            s += &format!(
                "CREATE INDEX IF NOT EXISTS {0}_by_parent ON {0}(parent);\n",
                i.table
            );
        }
    }
    s += "CREATE INDEX IF NOT EXISTS traffic_by_time ON traffic(start_ns);\n";
    s += "CREATE INDEX IF NOT EXISTS registrations_by_aor ON registrations(aor, ts_ns);\n";
    s += "CREATE INDEX IF NOT EXISTS registrations_by_time ON registrations(ts_ns);\n";
    s += "CREATE INDEX IF NOT EXISTS users_by_aor ON users(aor);\n";
    s += "CREATE INDEX IF NOT EXISTS kpi_by_time ON kpi(dimension, start_ns);\n";
    s += "CREATE INDEX IF NOT EXISTS alerts_by_time ON alerts(ts_ns);\n";
    s += "CREATE INDEX IF NOT EXISTS alerts_by_call_id ON alerts(call_id, ts_ns);\n";
    s += "CREATE INDEX IF NOT EXISTS sip_messages_by_call_id ON sip_messages(call_id, ts_ns);\n";
    s += "CREATE INDEX IF NOT EXISTS stream_intervals_by_ssrc ON stream_intervals(ssrc, start_ns);\n";
    s
}

fn sql(v: &Value) -> Result<Sql, StoreError> {
    Ok(match v {
        Value::Null => Sql::Null,
        Value::Bool(b) => Sql::Integer(*b as i64),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Sql::Integer(i),
            (None, Some(f)) => Sql::Real(f),
            // u64 above i64::MAX: kept exactly, as text.
            _ => Sql::Text(n.to_string()),
        },
        Value::String(s) => Sql::Text(s.clone()),
        Value::Array(_) | Value::Object(_) => Sql::Text(serde_json::to_string(v)?),
    })
}

/// Kinds only a database keeps (the console's call detail): a JSON-lines
/// output has the event log's `--events` for them.
pub const DATABASE_ONLY: &[&str] = &["sip_message", "stream_interval"];

/// Stores one tracker line if its kind has a table; other kinds are not
/// stored (they have no table yet).
pub(crate) fn insert(conn: &Connection, kind: &str, value: &Value) -> Result<bool, StoreError> {
    let Some(t) = TRACKED.iter().find(|t| t.kind == kind) else {
        return Ok(false);
    };
    insert_row(conn, t.table, &t.all_columns(), None, value)?;
    let parent = conn.last_insert_rowid();
    for items in t.items {
        for v in value
            .get(items.field)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            insert_row(conn, items.table, items.columns, Some(parent), v)?;
        }
    }
    Ok(true)
}

/// One row of `columns` from `value`'s fields, with the parent's id first
/// when given.
fn insert_row(
    conn: &Connection,
    table: &str,
    columns: &[&str],
    parent: Option<i64>,
    value: &Value,
) -> Result<(), StoreError> {
    let mut values = parent.map(Sql::Integer).into_iter().collect::<Vec<_>>();
    for c in columns {
        values.push(sql(value.get(*c).unwrap_or(&Value::Null))?);
    }
    let names = parent
        .map(|_| "parent")
        .into_iter()
        .chain(columns.iter().copied())
        .collect::<Vec<_>>();
    let marks = vec!["?"; names.len()].join(",");
    conn.prepare_cached(&format!(
        "INSERT INTO {table} ({}) VALUES ({marks})",
        names.join(", ")
    ))?
    .execute(rusqlite::params_from_iter(values))?;
    Ok(())
}
