//! Delivery: the spool, what cannot be kept, refusals at the start, retention.

use crate::common::clickhouse::{free_port, storable_strings, Server, CLUSTER, PASSWORD};
use crate::common::scratch;
use crate::compare::*;
use crate::run::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn rows_wait_in_the_spool_while_the_server_is_down_and_are_sent_when_it_answers() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let spool = scratch("spool");
    let (a, b) = (&capture("sipp_calls"), &capture("rtp_rtcp_sip"));
    let (db_a, db_b) = (db("spool-a"), db("spool-b"));
    let spool_arg = spool.to_str().unwrap();
    // Nothing listens: the run finishes, its rows wait in the spool.
    let err = succeeded(&analyze(a, &db_a, &url, "a", &["--clickhouse-spool", spool_arg]), "down");
    let waiting = reported(&err, "waiting in the spool ");
    assert!(waiting > 0, "{err}");
    assert_eq!(reported(&err, "spooled "), waiting);
    assert_eq!(reported(&err, "sent "), 0);
    assert!(err.contains("rows wait in the spool"), "{err}");
    assert_eq!(std::fs::metadata(&spool).unwrap().permissions().mode() & 0o777, 0o700);
    for f in std::fs::read_dir(&spool).unwrap() {
        let m = f.unwrap().metadata().unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
    }
    let Some(ch) = Server::start_on("spool", port) else {
        return;
    };
    // clickhouse-flush sends what waited, with no input.
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["clickhouse-flush", "--clickhouse", &url, "--clickhouse-spool", spool_arg])
        .env("CALLIPER_CLICKHOUSE_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    let flushed = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{flushed}");
    assert_eq!(reported(&flushed, "retried "), waiting, "{flushed}");
    assert_eq!(assert_equal(&ch, &db_a, "a", "flushed") as u64, waiting);
    // The next run finds nothing waiting, and sends its own.
    let err = succeeded(&analyze(b, &db_b, &url, "b", &["--clickhouse-spool", spool_arg]), "up");
    assert_eq!(reported(&err, "retried "), 0, "{err}");
    assert_eq!(reported(&err, "waiting in the spool "), 0, "{err}");
    let batches = std::fs::read_dir(&spool)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name() != ".lock")
        .count();
    assert_eq!(batches, 0);
    assert_eq!(assert_equal(&ch, &db_a, "a", "spooled run") as u64, waiting);
    assert!(assert_equal(&ch, &db_b, "b", "next run") > 0);
}

#[test]
fn rows_that_cannot_be_kept_fail_the_run_and_say_why() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let file = &capture("sipp_calls");
    // A spool with no room (a batch set aside earlier fills its 1 MiB):
    // the analysis still finishes and its database is whole.
    let (dbf, spool) = (db("full"), scratch("full-spool"));
    std::fs::create_dir(&spool).unwrap();
    std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(spool.join("00000000000000000000-calls-1.rejected"), vec![0u8; 1 << 20])
        .unwrap();
    let out = analyze(
        file,
        &dbf,
        &url,
        "full",
        &["--clickhouse-spool", spool.to_str().unwrap(), "--clickhouse-spool-mib", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the spool is full") && err.contains("are lost"), "{err}");
    let dropped = reported(&err, "dropped ");
    let sqlite: usize = ["calls", "streams"]
        .iter()
        .chain(TRACKED)
        .map(|t| sqlite_rows(&dbf, &format!("SELECT * FROM {t}"), &[]).len())
        .sum();
    assert_eq!(dropped as usize, sqlite, "{err}");
    // No spool directory and no server: held in memory, then lost at the end, and said.
    let out = analyze(file, &db("memory"), &url, "memory", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("give --clickhouse-spool DIR"), "{err}");
    assert_eq!(reported(&err, "dropped ") as usize, sqlite, "{err}");
}

#[test]
fn a_database_of_another_layout_is_refused_by_name() {
    let Some(ch) = Server::start("layout") else {
        return;
    };
    let file = &capture("sipp_calls");
    succeeded(&analyze(file, &db("plain"), &ch.url, "plain", &[]), "without a cluster");
    // The same database, now as a cluster's: its calls table is not Distributed.
    let out = analyze(file, &db("layout"), &ch.url, "layout", &["--clickhouse-cluster", CLUSTER]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("calliper.calls is ReplacingMergeTree")
            && err.contains("use another --clickhouse-database"),
        "{err}"
    );
    // Said at the start, before any row.
    assert!(!err.contains("clickhouse   sent"), "{err}");
    // Nothing of the refused run was written anywhere.
    assert_eq!(ch.query("SELECT count() FROM calliper.calls WHERE probe = 'layout'").trim(), "0");
}

#[test]
fn keep_days_drops_the_days_before_the_kept_ones_and_no_others() {
    let Some(ch) = Server::start("keep") else {
        return;
    };
    // Calls of 2023-11-14 (the crafted strings), then of 2026 (SIPp's).
    let old = storable_strings().save("keep-old");
    let (new, new_db) = (&capture("sipp_calls"), db("keep-new"));
    succeeded(&analyze(&old, &db("keep-old"), &ch.url, "keep", &[]), "old");
    let days =
        |ch: &Server| ch.query("SELECT DISTINCT day FROM calliper.calls ORDER BY day FORMAT TSV");
    assert_eq!(days(&ch).lines().count(), 1);
    let err =
        succeeded(&analyze(new, &new_db, &ch.url, "keep", &["--clickhouse-keep-days", "2"]), "new");
    // That day, in every table that had it (calls, streams, SIP messages, ...).
    assert!(
        reported(&err, "dropped 0; ") > 1
            && err.contains("old partitions (one table's day each) dropped"),
        "{err}"
    );
    let left = days(&ch);
    assert!(!left.contains("2023-11-14"), "{left}");
    let parts =
        ch.query("SELECT count() FROM system.parts WHERE active AND partition = '2023-11-14'");
    assert_eq!(parts.trim(), "0");
    assert!(assert_equal(&ch, &new_db, "keep", "the kept day") > 0);
    // A day kept is not enough: calls span midnight.
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["analyze", "--clickhouse-keep-days", "1", "x.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "keep-days 1 is refused");
}

#[test]
fn a_refused_login_stops_the_run_at_its_start_and_says_where_the_password_comes_from() {
    let Some(ch) = Server::start("login") else {
        return;
    };
    let file = &capture("sipp_calls");
    let out = analyze_command(file, &db("login"), &ch.url, "login", &[])
        .env("CALLIPER_CLICKHOUSE_PASSWORD", "not-the-password")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("CALLIPER_CLICKHOUSE_PASSWORD"), "{err}");
    // A password in the URL is never repeated back.
    let url = "http://u:secret-word@127.0.0.1:1";
    let out = analyze(file, &db("login-url"), url, "login", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("secret-word"), "{err}");
}
