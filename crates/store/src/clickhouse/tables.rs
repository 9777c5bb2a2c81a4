//! The tables the sink writes, each defined once from the lists SQLite's
//! tables come from: calls and streams from [`crate::columns`], what the
//! trackers produce (registrations, users, the time series and its items,
//! alerts, SIP messages, interval reports, KPIs) from [`crate::tracked`].
//! A table's name, its link to a parent row, its columns and its sort key
//! are read from here by the schema, the insert and the rows alike.

use crate::columns::{self, Type};
use crate::tracked::{Items, TrackedTable, TRACKED};
use rusqlite::types::Value as Sql;
use serde_json::Value;
use std::sync::OnceLock;

/// A table the sink writes: an index into [`all`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table(u8);

/// Where a table's rows come from.
#[derive(Clone, Copy)]
pub(crate) enum Source {
    Calls,
    Streams,
    /// A tracker's lines of this kind.
    Tracked(&'static TrackedTable),
    /// The items of an array field of a tracker's lines, one row each.
    Items(&'static TrackedTable, &'static Items),
}

/// One table.
pub(crate) struct Def {
    pub(crate) name: &'static str,
    pub(crate) source: Source,
    /// Columns after the head (probe, record_id, the parent's id, day):
    /// name, type, and whether it is never NULL (the sort key's are not:
    /// 18.16 refuses a Nullable key, and a row lacking one gets its zero).
    pub(crate) columns: Vec<(&'static str, Type, bool)>,
    /// The sort key before `record_id` (which makes each key unique:
    /// `ReplacingMergeTree` keeps one row per key).
    pub(crate) order: &'static [&'static str],
}

/// The sort keys of the trackers' tables: how the console reads them.
const ORDER: &[(&str, &[&str])] = &[
    ("registrations", &["ts_ns"]),
    ("users", &["aor"]),
    ("traffic", &["start_ns"]),
    ("alerts", &["ts_ns"]),
    ("sip_messages", &["call_id", "ts_ns"]),
    ("stream_intervals", &["ssrc", "start_ns"]),
    ("kpi", &["dimension", "start_ns"]),
];

/// Every table, calls and streams first.
pub(crate) fn all() -> &'static [Def] {
    static ALL: OnceLock<Vec<Def>> = OnceLock::new();
    ALL.get_or_init(|| {
        let of = |cols: Vec<(&'static str, Type)>, order: &'static [&'static str]| {
            cols.into_iter().map(|(n, t)| (n, t, order.contains(&n))).collect()
        };
        let mut all = vec![
            Def {
                name: "calls",
                source: Source::Calls,
                columns: columns::CALLS.iter().map(|c| (c.name, c.ty, c.required)).collect(),
                order: &["invite_ns"],
            },
            Def {
                name: "streams",
                source: Source::Streams,
                columns: columns::STREAMS.iter().map(|c| (c.name, c.ty, c.required)).collect(),
                order: &[],
            },
        ];
        for t in TRACKED {
            let order = ORDER.iter().find(|(n, _)| *n == t.table).map_or(&[][..], |o| o.1);
            all.push(Def {
                name: t.table,
                source: Source::Tracked(t),
                columns: of(t.typed_columns(), order),
                order,
            });
            for i in t.items {
                all.push(Def {
                    name: i.table,
                    source: Source::Items(t, i),
                    columns: of(i.columns.to_vec(), &[]),
                    order: &[],
                });
            }
        }
        all
    })
}

impl Table {
    /// One row per call.
    pub const CALLS: Table = Table(0);
    /// One row per RTP stream, with its call's `record_id`.
    pub const STREAMS: Table = Table(1);

    /// Every table.
    pub fn all() -> impl Iterator<Item = Table> {
        (0..all().len() as u8).map(Table)
    }

    pub(crate) fn def(self) -> &'static Def {
        &all()[self.0 as usize]
    }

    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }

    /// Its name in the database.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    pub(crate) fn from_name(name: &str) -> Option<Table> {
        Table::all().find(|t| t.name() == name)
    }

    /// The table a tracker's lines of `kind` go to.
    pub(crate) fn of_kind(kind: &str) -> Option<Table> {
        Table::all().find(|t| matches!(t.def().source, Source::Tracked(tr) if tr.kind == kind))
    }

    /// The tables of `self`'s items (the time series' protocols and talkers).
    pub(crate) fn item_tables(self) -> impl Iterator<Item = (Table, &'static Items)> {
        Table::all().filter_map(move |t| match t.def().source {
            Source::Items(parent, items) if Table::of_kind(parent.kind) == Some(self) => {
                Some((t, items))
            }
            _ => None,
        })
    }

    /// The column holding the parent row's id, and its type.
    pub(crate) fn parent(self) -> Option<(&'static str, &'static str)> {
        match self.def().source {
            Source::Streams => Some(("call_record_id", "Nullable(UInt64)")),
            Source::Items(..) => Some(("parent_record_id", "UInt64")),
            Source::Calls | Source::Tracked(_) => None,
        }
    }

    /// The columns, head first (probe, record_id, the parent's id, day),
    /// with their ClickHouse types.
    pub(crate) fn clickhouse_columns(self) -> Vec<(String, String)> {
        let mut head = vec![
            ("probe".to_string(), "String".to_string()),
            ("record_id".to_string(), "UInt64".to_string()),
        ];
        if let Some((name, ty)) = self.parent() {
            head.push((name.into(), ty.into()));
        }
        head.push(("day".into(), "Date".into()));
        head.extend(self.def().columns.iter().map(|(n, t, required)| {
            let ty = t.clickhouse();
            let ty = match required {
                true => ty.to_string(),
                false => format!("Nullable({ty})"),
            };
            (n.to_string(), ty)
        }));
        head
    }

    /// `ORDER BY`'s columns.
    pub(crate) fn order_by(self) -> String {
        let mut key: Vec<&str> = self.def().order.to_vec();
        key.push("record_id");
        key.join(", ")
    }
}

/// A JSON value as a column of type `ty` wants it: arrays and objects as
/// JSON text (as SQLite keeps them); a value of another type is NULL.
pub(crate) fn typed(v: &Value, ty: Type) -> Sql {
    match (ty, v) {
        (_, Value::Null) => Sql::Null,
        (Type::Integer, Value::Bool(b)) => Sql::Integer(i64::from(*b)),
        (Type::Integer, Value::Number(n)) => Sql::Integer(match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i,
            (None, Some(f)) if n.is_f64() => f as i64,
            _ => i64::MAX,
        }),
        (Type::Real, Value::Number(n)) => n.as_f64().map_or(Sql::Null, Sql::Real),
        (Type::Text, Value::String(s)) => Sql::Text(s.clone()),
        (Type::Text, v) => Sql::Text(v.to_string()),
        (Type::Integer | Type::Real, _) => Sql::Null,
    }
}

/// The time a tracker's line is of, for its day (its partition): a users
/// line (the state at the run's end) has its last success or failure.
pub(crate) fn line_ns(v: &Value) -> i64 {
    ["ts_ns", "start_ns", "last_success_ns", "last_failure_ns"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_i64))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tracked_table_is_there_once_with_a_key_of_required_columns() {
        let names: Vec<&str> = Table::all().map(Table::name).collect();
        for t in crate::tracked::TABLES {
            assert_eq!(names.iter().filter(|n| *n == t).count(), 1, "{t}");
        }
        assert!(names.contains(&"traffic_protocols") && names.contains(&"traffic_talkers"));
        for t in Table::all() {
            for k in t.def().order {
                let col = t.def().columns.iter().find(|c| c.0 == *k).unwrap();
                assert!(col.2, "{}.{k} is in the key and may be NULL", t.name());
            }
        }
        let traffic = Table::of_kind("traffic").unwrap();
        assert_eq!(traffic.item_tables().count(), 2);
        assert_eq!(Table::of_kind("call"), None);
    }

    #[test]
    fn json_values_take_their_columns_types() {
        use serde_json::json;
        assert_eq!(typed(&json!(true), Type::Integer), Sql::Integer(1));
        assert_eq!(typed(&json!(2.0), Type::Real), Sql::Real(2.0));
        assert_eq!(typed(&json!(3), Type::Real), Sql::Real(3.0));
        assert_eq!(typed(&json!(u64::MAX), Type::Integer), Sql::Integer(i64::MAX));
        assert_eq!(typed(&json!(["a"]), Type::Text), Sql::Text("[\"a\"]".into()));
        assert_eq!(typed(&json!("x"), Type::Integer), Sql::Null);
        assert_eq!(line_ns(&json!({"last_failure_ns": 5})), 5);
    }
}
