//! The user tracker's rows in the database: the same as in the JSON lines
//! (those are compared with tshark in crates/engine/tests/analysis).

use crate::common;

use common::captures;

/// SQLite holds the registrations and users the JSON lines report, field
/// for field.
#[test]
fn database_holds_the_registrations_and_users_of_the_json_lines() {
    let mut compared = 0;
    for file in captures() {
        let dir = common::scratch_dir("reg-db");
        let db = dir.join("calls.db");
        std::fs::remove_file(&db).ok();
        let lines = common::calliper_jsonl(&file, &["--db", db.to_str().unwrap()]);
        let conn = rusqlite::Connection::open(&db).unwrap();
        for (kind, table) in [("registration", "registrations"), ("user", "users")] {
            let mut want: Vec<String> = lines
                .iter()
                .filter(|l| l["type"] == kind)
                .map(|l| {
                    let mut l = l.clone();
                    l.as_object_mut().unwrap().remove("type");
                    l.to_string()
                })
                .collect();
            let mut stmt = conn.prepare(&format!("SELECT * FROM {table}")).unwrap();
            let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
            let mut got: Vec<String> = stmt
                .query_map([], |row| {
                    let mut o = serde_json::Map::new();
                    for (i, n) in names.iter().enumerate().skip(1) {
                        let v = match row.get_ref(i)? {
                            rusqlite::types::ValueRef::Null => serde_json::Value::Null,
                            rusqlite::types::ValueRef::Integer(x) => x.into(),
                            rusqlite::types::ValueRef::Real(x) => x.into(),
                            rusqlite::types::ValueRef::Text(t) => {
                                let t = std::str::from_utf8(t).unwrap();
                                // Arrays were stored as JSON text.
                                match serde_json::from_str::<serde_json::Value>(t) {
                                    Ok(v @ serde_json::Value::Array(_)) => v,
                                    _ => t.into(),
                                }
                            }
                            rusqlite::types::ValueRef::Blob(_) => panic!("blob in {table}.{n}"),
                        };
                        o.insert(n.clone(), v);
                    }
                    Ok(serde_json::Value::Object(o).to_string())
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            want.sort();
            got.sort();
            assert_eq!(got, want, "{}: {table} differ from the JSON lines", file.display());
            compared += got.len();
        }
        std::fs::remove_dir_all(&dir).ok();
    }
    let least = common::at_least(10, 4);
    assert!(compared >= least, "only {compared} rows compared");
}
