//! What trackers produce, in SQLite: a table per kind whose columns are the
//! JSON fields of the tracker's line (one definition: the field names), so
//! the database holds exactly what the JSON-lines output says.

use crate::columns::Type::{self, Integer, Real, Text};
use crate::StoreError;
use rusqlite::types::Value as Sql;
use rusqlite::Connection;
use serde_json::Value;

/// A tracker's line type, its table and its columns (JSON field names;
/// arrays and objects are stored as JSON text).
pub(crate) struct TrackedTable {
    pub(crate) kind: &'static str,
    pub(crate) table: &'static str,
    /// Names and types (SQLite's columns are untyped, so each value keeps
    /// the type it had in JSON; ClickHouse's are these).
    pub(crate) columns: &'static [(&'static str, Type)],
    /// More columns, integers, from a list defined with the row's type.
    pub(crate) more_columns: &'static [&'static str],
    /// Array fields whose items go to their own tables, one row each,
    /// keyed by the parent's row id (`parent` column).
    pub(crate) items: &'static [Items],
}

impl TrackedTable {
    fn all_columns(&self) -> Vec<&'static str> {
        self.typed_columns().into_iter().map(|(n, _)| n).collect()
    }

    /// Every column, with its type.
    pub(crate) fn typed_columns(&self) -> Vec<(&'static str, Type)> {
        let more = self.more_columns.iter().map(|n| (*n, Integer));
        self.columns.iter().copied().chain(more).collect()
    }
}

/// Rows of an array field.
pub(crate) struct Items {
    pub(crate) field: &'static str,
    pub(crate) table: &'static str,
    pub(crate) columns: &'static [(&'static str, Type)],
}

impl Items {
    fn names(&self) -> Vec<&'static str> {
        self.columns.iter().map(|(n, _)| *n).collect()
    }
}

/// Every kind the database stores. Registrations are one row per REGISTER
/// transaction; users one row per address of record and run (the state at
/// the run's end); KPI rows add up (several may share an interval and key).
pub(crate) const TRACKED: &[TrackedTable] = &[
    TrackedTable {
        kind: "registration",
        table: "registrations",
        columns: &[
            ("ts_ns", Integer),
            ("request_ns", Integer),
            ("aor", Text),
            ("contact", Text),
            ("expires", Integer),
            ("status", Integer),
            ("outcome", Text),
            ("user_agent", Text),
            ("call_id", Text),
            ("cseq", Integer),
            ("client", Text),
            ("client_port", Integer),
            ("registrar", Text),
            ("registrar_port", Integer),
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "user",
        table: "users",
        columns: &[
            ("aor", Text),
            ("contacts", Text),
            ("user_agent", Text),
            ("expires", Integer),
            ("client", Text),
            ("registered", Integer),
            ("unregistered", Integer),
            ("challenged", Integer),
            ("auth_failed", Integer),
            ("failed", Integer),
            ("last_success_ns", Integer),
            ("last_failure_ns", Integer),
            ("last_failure_status", Integer),
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "traffic",
        table: "traffic",
        columns: &[
            ("start_ns", Integer),
            ("end_ns", Integer),
            ("packets", Integer),
            ("bytes", Integer),
            ("calls_open", Integer),
            ("calls_started", Integer),
            ("calls_ended", Integer),
            ("capture_dropped", Integer),
            ("streams", Integer),
            ("stream_packets", Integer),
            ("stream_expected", Integer),
            ("stream_lost", Integer),
            ("mos_mean", Real),
            ("mos_min", Real),
            ("talkers_untracked_packets", Integer),
            ("released_ns", Integer),
        ],
        more_columns: &[],
        items: &[
            Items {
                field: "protocols",
                table: "traffic_protocols",
                columns: &[
                    ("network", Text),
                    ("transport", Text),
                    ("application", Text),
                    ("packets", Integer),
                    ("bytes", Integer),
                ],
            },
            Items {
                field: "top_talkers",
                table: "traffic_talkers",
                columns: &[("address", Text), ("packets", Integer), ("bytes", Integer)],
            },
        ],
    },
    TrackedTable {
        kind: "alert",
        table: "alerts",
        columns: &[
            ("ts_ns", Integer),
            ("kind", Text),
            ("call_id", Text),
            ("source", Text),
            ("key", Text),
            ("value", Real),
            ("threshold", Real),
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "sip_message",
        table: "sip_messages",
        columns: &[
            ("ts_ns", Integer),
            ("call_id", Text),
            ("src", Text),
            ("src_port", Integer),
            ("dst", Text),
            ("dst_port", Integer),
            ("transport", Text),
            ("method", Text),
            ("status", Integer),
            ("cseq_method", Text),
            ("message", Text),
            ("truncated", Integer),
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "stream_interval",
        table: "stream_intervals",
        columns: &[
            ("src", Text),
            ("src_port", Integer),
            ("dst", Text),
            ("dst_port", Integer),
            ("ssrc", Integer),
            ("codec", Text),
            ("start_ns", Integer),
            ("end_ns", Integer),
            ("packets", Integer),
            ("expected", Integer),
            ("lost", Integer),
            ("loss_percent", Real),
            ("duplicates", Integer),
            ("late", Integer),
            ("loss_after_buffer_percent", Real),
            ("buffer_delay_ms", Real),
            ("jitter_ms", Real),
            ("max_delta_ms", Real),
            ("r_factor", Real),
            ("mos", Real),
            ("mos_scale", Text),
            ("last", Integer),
        ],
        more_columns: &[],
        items: &[],
    },
    TrackedTable {
        kind: "kpi",
        table: "kpi",
        columns: &[("start_ns", Integer), ("interval_s", Real), ("dimension", Text), ("key", Text)],
        more_columns: calliper_model::kpi::COUNTER_NAMES,
        items: &[],
    },
];

/// The tables of [`TRACKED`], by name.
pub(crate) const TABLES: &[&str] =
    &["registrations", "users", "traffic", "alerts", "sip_messages", "stream_intervals", "kpi"];

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
                i.names().join(", ")
            );
            s += &format!("CREATE INDEX IF NOT EXISTS {0}_by_parent ON {0}(parent);\n", i.table);
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
        for v in value.get(items.field).and_then(Value::as_array).into_iter().flatten() {
            insert_row(conn, items.table, &items.names(), Some(parent), v)?;
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
    let names =
        parent.map(|_| "parent").into_iter().chain(columns.iter().copied()).collect::<Vec<_>>();
    let marks = vec!["?"; names.len()].join(",");
    conn.prepare_cached(&format!("INSERT INTO {table} ({}) VALUES ({marks})", names.join(", ")))?
        .execute(rusqlite::params_from_iter(values))?;
    Ok(())
}
