//! Hostile query strings through the console's search: parameter checks,
//! then (when they pass) the SQL over a small real database. Never a
//! panic, and a search that is taken always runs. Also the time and
//! network parsers on the raw text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// A calliper database with one call (made once per process).
fn database() -> &'static std::path::Path {
    static DB: OnceLock<std::path::PathBuf> = OnceLock::new();
    DB.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("calliper-fuzz-console-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&p);
        drop(calliper_store::Sqlite::open(&p).unwrap());
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch(
            "INSERT INTO calls (call_id, from_user, to_user, invite_ns, end_ns, state, final_status, labels, caller_ip)
             VALUES ('a@b', 'alice', 'bob', 1, 2, 'completed', 200, '[\"vip\"]', '10.0.0.1');
             INSERT INTO streams (call, src, dst, codec, loss_percent) VALUES (1, '10.0.0.1', '10.0.0.2', 'PCMU', 1.5);",
        )
        .unwrap();
        p
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = calliper_store::parse_rfc3339(text);
    if let Some(n) = calliper_store::Network::parse(text) {
        assert!(n.contains(&n.addr.to_string()));
    }
    if let Ok(search) = calliper_console::search_from_query(text) {
        let conn = calliper_store::open_searchable(database()).unwrap();
        match calliper_store::search_calls(&conn, &search) {
            Ok((calls, _)) => assert!(calls.len() <= search.limit as usize),
            // One probe's SQLite file cannot filter by probe: a 404 that says why.
            Err(calliper_store::StoreError::NotStored(_)) if search.probe.is_some() => {}
            Err(e) => panic!("a search that was taken failed: {e}"),
        }
    }
});
