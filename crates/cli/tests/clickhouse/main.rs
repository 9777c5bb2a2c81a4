//! `--clickhouse`: calls and streams written to a real ClickHouse server
//! (Debian's, started by each test) equal the SQLite run's, field by field
//! and in both directions; a batch sent twice is stored once; rows wait in
//! the spool while the server is down and are sent when it answers; what
//! cannot be kept is counted and fails the run, saying why. One binary.

#[path = "../common/mod.rs"]
mod common;

#[path = "../console/browser.rs"]
mod browser;
mod cluster;
mod compare;
mod console;
mod delivery;
mod equality;
mod run;
#[path = "../console/server.rs"]
mod server;
