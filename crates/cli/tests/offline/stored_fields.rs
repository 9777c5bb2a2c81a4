//! Every field of a tracker's JSON line has a column in the database
//! (SQLite's, and so ClickHouse's, made from the same list): a field added
//! to a tracker and forgotten in the store fails here rather than being
//! silently dropped.

use crate::common::{self, captures};

#[test]
fn every_field_of_every_stored_kind_has_a_column() {
    let dir = common::scratch_dir("fields");
    // Items stored in tables of their own, and the alert's unit, which the
    // console derives from its kind.
    let elsewhere = ["type", "protocols", "top_talkers", "unit"];
    let mut seen = std::collections::BTreeSet::new();
    for (n, file) in captures().into_iter().enumerate().take(12) {
        let db = dir.join(format!("{n}.db"));
        std::fs::remove_file(&db).ok();
        let lines = common::calliper_jsonl(&file, &["--db", db.to_str().unwrap()]);
        let conn = rusqlite::Connection::open(&db).unwrap();
        for (kind, table) in [
            ("registration", "registrations"),
            ("user", "users"),
            ("traffic", "traffic"),
            ("kpi", "kpi"),
            ("alert", "alerts"),
        ] {
            let columns: Vec<String> = conn
                .prepare("SELECT name FROM pragma_table_info(?1)")
                .unwrap()
                .query_map([table], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            for line in lines.iter().filter(|l| l["type"] == kind) {
                for field in line.as_object().unwrap().keys() {
                    if !elsewhere.contains(&field.as_str()) {
                        assert!(columns.contains(field), "{table} has no column {field}");
                    }
                }
                seen.insert(kind);
            }
        }
    }
    assert_eq!(seen.len(), 5, "kinds seen: {seen:?}");
}
