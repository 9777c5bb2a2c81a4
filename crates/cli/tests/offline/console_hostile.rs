//! The console against hostile databases and clients (from an attacker
//! review): a database may come from anywhere, and a client may leave
//! mid-request. Each case is one the review showed hurting the server.

use crate::server;

use rusqlite::Connection;
use server::{sample_db, temp, Server};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A database of the sample capture, then `sql` run on it.
fn crafted(name: &str, sql: &str) -> PathBuf {
    let db = sample_db(name);
    Connection::open(&db).unwrap().execute_batch(sql).unwrap();
    db
}

/// `calliper serve` on `db` must refuse to start, saying `why`.
fn refused(db: &Path, why: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["serve", "--http", "127.0.0.1:0", "--db"])
        .arg(db)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(why), "{err}");
}

#[test]
fn crafted_schemas_are_refused_at_start() {
    refused(
        &crafted(
            "view.db",
            "ALTER TABLE calls RENAME TO c2; CREATE VIEW calls AS SELECT * FROM c2;",
        ),
        "no calls table",
    );
    refused(
        &crafted(
            "generated.db",
            "ALTER TABLE calls ADD COLUMN boom TEXT GENERATED ALWAYS AS (printf('%.*c', 4000000, 'a')) VIRTUAL;",
        ),
        "computed or hidden columns",
    );
    let mut views = String::new();
    for i in 0..1200 {
        views += &format!("CREATE VIEW v{i} AS SELECT 1;");
    }
    refused(&crafted("views.db", &views), "schema entries");
    let text = temp("text.db");
    std::fs::write(&text, b"not a database at all, just text\n".repeat(200)).unwrap();
    refused(&text, "not an SQLite database");
}

#[test]
fn hostile_rows_get_clear_answers_and_the_server_goes_on() {
    let db = crafted(
        "rows.db",
        "UPDATE calls SET labels = 'not json' WHERE id = 1;
         UPDATE calls SET callee_ip = CAST(X'31302EFF' AS TEXT) WHERE id = 2;
         UPDATE calls SET worst_mos = 'x', final_status = 'lots' WHERE id = 3;
         UPDATE streams SET packets = 9223372036854775807;
         INSERT INTO sip_messages (ts_ns, call_id, method) VALUES (1, 'x', X'00FF');
         ALTER TABLE calls ADD COLUMN \"=HYPERLINK(\"\"http://evil.example\"\")\" TEXT;
         UPDATE calls SET from_user = printf('%.*c', 300000, 'a') WHERE id = 3;",
    );
    let s = Server::on(&db);
    assert_eq!(s.get("/api/calls?label=x", &[]).status, 200);
    assert_eq!(s.get("/api/calls?ip=10.0.0.0%2F8", &[]).status, 200);
    // The oversized value (longer than calliper writes) is refused with a reason.
    let r = s.get("/api/calls", &[]);
    assert_eq!(r.status, 500);
    assert!(
        r.json()["error"].as_str().unwrap().contains("too big") || r.text().contains("big"),
        "{}",
        r.text()
    );
    assert_eq!(s.get("/api/calls?caller=sipp", &[]).status, 200);
    // Metrics take rows of the wrong type as absent, scrape after scrape.
    for _ in 0..2 {
        let m = s.get("/metrics", &[]);
        assert_eq!(m.status, 200, "{}", m.text());
        assert!(
            m.text().contains("calliper_stream_packets_total 18446744073709551615\n"),
            "saturates"
        );
    }
    // The CSV's header is neutralised like its fields.
    let csv = s.get("/api/calls.csv?caller=sipp", &[]).text();
    let header = csv.lines().next().unwrap();
    assert!(header.contains("\"'=HYPERLINK(\"\"http://evil.example\"\")\""), "{header}");
}

#[test]
fn a_call_detail_is_bounded_however_the_rows_multiply() {
    // 200 copies of one stream, and 5 000 interval reports matching each.
    let mut sql = String::from(
        "CREATE TEMP TABLE n(i); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5000) INSERT INTO n SELECT i FROM c;",
    );
    sql += "INSERT INTO streams (call, src, src_port, dst, dst_port, ssrc, first_ns, last_ns)
            SELECT 1, src, src_port, dst, dst_port, ssrc, first_ns, last_ns FROM streams, n WHERE streams.id = 1 AND n.i <= 200;";
    sql += "INSERT INTO stream_intervals (src, src_port, dst, dst_port, ssrc, start_ns, packets)
            SELECT src, src_port, dst, dst_port, ssrc, first_ns, 1 FROM streams, n WHERE streams.id = 1;";
    let db = crafted("amplify.db", &sql);
    let s = Server::on(&db);
    let r = s.get("/api/calls/1", &[]);
    assert_eq!(r.status, 200);
    let d = r.json();
    let intervals: usize = d["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["intervals"].as_array().unwrap().len())
        .sum();
    assert_eq!(intervals, calliper_store::MAX_DETAIL_INTERVALS);
    assert!(d["truncated"].as_array().unwrap().iter().any(|t| t == "intervals"));
    assert!(r.body.len() < 64 << 20);
}

#[test]
fn abandoned_requests_stop_and_do_not_hold_the_console() {
    // Searches that take seconds: every call checked against 20 000 alerts
    // without an index.
    let mut sql = String::from("DROP INDEX IF EXISTS alerts_by_call_id;");
    sql += "CREATE TEMP TABLE n(i); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000) INSERT INTO n SELECT i FROM c;";
    sql += "INSERT INTO calls (call_id, invite_ns, end_ns, state) SELECT 'c' || i, i, i, 'completed' FROM n;";
    sql += "INSERT INTO alerts (ts_ns, kind, call_id) SELECT i, 'low_mos', 'a' || i FROM n;";
    let db = crafted("slow.db", &sql);
    let s = Server::on(&db);
    let slow = "/api/calls?alert=zzz";
    let started = Instant::now();
    let r = s.get(slow, &[]);
    assert_eq!(r.status, 503, "{}", r.text());
    let alone = started.elapsed();
    assert!(alone < Duration::from_secs(12), "stopped after {alone:?}");
    // Forty clients ask and leave at once.
    let port = s.addr.port();
    for _ in 0..40 {
        use std::io::Write;
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(c, "GET {slow} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(c);
    }
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let r = s.get("/api/calls?limit=1", &[]);
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(took < Duration::from_secs(2), "a quick request took {took:?} after abandoned ones");
}

#[test]
fn off_loopback_a_token_is_required_and_on_loopback_a_foreign_host_is_refused() {
    let db = sample_db("auth.db");
    // No token: refuses to start anywhere but loopback.
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["serve", "--db"])
        .arg(&db)
        .args(["--http", "0.0.0.0:0"])
        .env_remove("CALLIPER_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // With a token (listening on every address; the requests stay on loopback).
    let token = "a-token-of-sufficient-length";
    let token_file = temp("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    // A token file others can read is refused.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["serve", "--db"])
        .arg(&db)
        .args(["--http", "0.0.0.0:0", "--token-file"])
        .arg(&token_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let s = Server::start(&db, "0.0.0.0:0", &["--token-file", token_file.to_str().unwrap()], &[]);
    for path in ["/api/calls", "/api/calls/1", "/metrics", "/", "/api/calls.csv"] {
        let r = s.get(path, &[]);
        assert_eq!(r.status, 401, "{path}");
        assert!(r.header("www-authenticate").is_some_and(|v| v.starts_with("Basic")));
        assert_eq!(
            s.get(path, &[("Authorization", "Bearer wrong-token-of-some-length")]).status,
            401
        );
        assert_eq!(
            s.get(path, &[("Authorization", &format!("Bearer {token}"))]).status,
            200,
            "{path}"
        );
    }
    // Basic auth with the token as password (what a browser sends), any Host.
    let basic = server::base64_encode(format!("ops:{token}").as_bytes());
    let r = s.get(
        "/api/calls",
        &[("Authorization", &format!("Basic {basic}")), ("Host", "probe.example.net")],
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["calls"].as_array().unwrap().len(), 3);
    // The token from the environment works as from a file.
    drop(s);
    let s = Server::start(&db, "0.0.0.0:0", &[], &[("CALLIPER_TOKEN", token)]);
    assert_eq!(s.get("/api/calls", &[]).status, 401);
    assert_eq!(s.get("/api/calls", &[("Authorization", &format!("Bearer {token}"))]).status, 200);
    drop(s);
    // Loopback without a token: a page elsewhere that rebinds its name to
    // 127.0.0.1 still names itself in Host, and is refused.
    let s = Server::on(&db);
    assert_eq!(s.get("/api/calls", &[("Host", "attacker.example")]).status, 403);
    assert_eq!(
        s.get("/api/calls", &[("Host", &format!("127.0.0.1:{}", s.addr.port()))]).status,
        200
    );
    // Read-only: anything but GET is refused.
    let r = server::request(
        std::net::SocketAddr::from(([127, 0, 0, 1], s.addr.port())),
        "POST",
        "/api/calls",
        &[("Content-Length", "0")],
    );
    assert_eq!(r.status, 405);
    // Safety headers on every answer.
    let r = s.get("/", &[]);
    assert!(r.header("content-security-policy").is_some_and(|v| v.contains("default-src 'self'")));
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
}

#[test]
fn a_client_that_never_finishes_its_headers_is_cut_off() {
    use std::io::{Read, Write};
    let s = Server::sample("slow.db");
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", s.addr.port())).unwrap();
    slow.write_all(b"GET /api/calls HTTP/1.1\r\nHost: localhost\r\n").unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let started = std::time::Instant::now();
    // Others are served meanwhile.
    assert_eq!(s.get("/api/calls", &[]).status, 200);
    let mut buf = [0u8; 1024];
    let closed = match slow.read(&mut buf) {
        Ok(n) => n == 0 || String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    let waited = started.elapsed().as_secs_f64();
    assert!(closed, "the slow connection was not closed");
    assert!(
        (9.0..20.0).contains(&waited),
        "closed after {waited:.1} s, not the 10 s header timeout"
    );
}
