//! `calliper serve`: the web console over a call database.

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The environment variable that may hold the token instead of a file.
const TOKEN_ENV: &str = "CALLIPER_TOKEN";

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("store").required(true).multiple(false)))]
#[command(
    long_about = "Serve the web console over a database written with --db: the call search, each call's SIP \
ladder, streams and quality charts, a CSV export, a JSON API under /api/ and Prometheus metrics at /metrics \
(docs/console.md).\n\n\
It listens on loopback (127.0.0.1:8080) unless --http says otherwise. Anywhere else it needs a token, from \
--token-file or the CALLIPER_TOKEN environment variable (never a flag: flags show in `ps`); every request \
must then carry it, as `Authorization: Bearer TOKEN` or as the password of basic auth (a browser asks for \
it). The console only reads: the database is opened read-only, so a probe or analysis may write it meanwhile.\n\n\
Stop it with SIGINT or SIGTERM. Exit status: 0 stopped; 2 it could not start (the reason is printed).",
    after_help = "Examples:\n  calliper analyze testdata/sipp_hold_dtmf.pcap --db calls.db && calliper serve --db calls.db\n  \
head -c 24 /dev/urandom | base64 > console.token && chmod 600 console.token\n  \
calliper serve --db calls.db --http 0.0.0.0:8081 --token-file console.token\n  \
curl -s 'http://127.0.0.1:8080/api/calls?caller=sipp&status=2xx&limit=10'"
)]
pub struct ServeArgs {
    /// The database to show (written by `analyze --db` or `probe --db`).
    #[arg(long, group = "store")]
    db: Option<PathBuf>,
    /// Show the calls many probes wrote to ClickHouse (`--clickhouse` of
    /// `analyze` and `probe`) instead: `http://HOST:PORT`, or several nodes
    /// of one cluster, comma-separated, asked in turn (it finds the
    /// Distributed tables itself; --clickhouse-database must be the
    /// probes'). Served: the search (every filter, plus the probe) and its
    /// CSV export, each call in full (SIP ladder, streams, charts, alerts),
    /// the KPI page, alerts and registrations. Not: recordings, which stay
    /// on each probe's disk (docs/scale-out.md).
    #[arg(long, value_name = "http://HOST:PORT[,...]", group = "store")]
    clickhouse: Option<String>,
    #[command(flatten)]
    login: crate::clickhouse::Login,
    /// Address and port to listen on (`ADDR:PORT`, `localhost:PORT` or a
    /// port alone for loopback); anything but loopback needs a token.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080", value_parser = listen_address)]
    http: SocketAddr,
    /// A file holding the token requests must carry: at least 16
    /// characters, no spaces (surrounding whitespace ignored), readable by
    /// its owner only (chmod 600). Without it, the CALLIPER_TOKEN
    /// environment variable is read.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The recordings' directory (`--record-dir` of the run that wrote the
    /// database): each recorded call's pcap can then be downloaded, and its
    /// audio played on its page.
    #[arg(long, value_name = "DIR")]
    record_dir: Option<PathBuf>,
}

/// `ADDR:PORT`, `localhost:PORT` or `PORT` (loopback).
pub(crate) fn listen_address(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Some(port) = s.strip_prefix("localhost:").and_then(|p| p.parse::<u16>().ok()) {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| {
        format!("{s:?}: give ADDR:PORT (127.0.0.1:8080, 0.0.0.0:8080, [::1]:8080), localhost:PORT or a port")
    })
}

/// The token, from the file (which must be private) or the environment.
pub(crate) fn token(file: Option<&PathBuf>) -> Result<Option<String>> {
    token_from(file, TOKEN_ENV)
}

/// A token from `file` (which must be private) or the environment variable `env`.
pub(crate) fn token_from(file: Option<&PathBuf>, env: &str) -> Result<Option<String>> {
    let Some(f) = file else {
        return Ok(std::env::var(env).ok().filter(|t| !t.is_empty()));
    };
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(f)
        .with_context(|| format!("cannot read the token file {}", f.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        bail!("the token file {} can be read by others: `chmod 600 {}`", f.display(), f.display());
    }
    let t = calliper_store::files::read_small(f, 4096)
        .with_context(|| format!("cannot read the token file {}", f.display()))?;
    Ok(Some(t.trim().to_string()))
}

/// A database file, there.
fn check_database(db: &std::path::Path) -> Result<()> {
    if db.is_dir() {
        bail!("{} is a directory: --db names a database file", db.display());
    }
    if !db.is_file() {
        bail!(
            "{}: no such database (write one with `calliper analyze CAPTURE --db {}`)",
            db.display(),
            db.display()
        );
    }
    Ok(())
}

pub fn run(a: ServeArgs) -> Result<()> {
    let token = token(a.token_file.as_ref())?;
    if let Some(db) = &a.db {
        check_database(db)?;
    }
    let clickhouse = match &a.clickhouse {
        Some(urls) => Some(a.login.reader(urls)?),
        None => None,
    };
    if let Some(dir) = a.record_dir.as_ref().filter(|d| !d.is_dir()) {
        bail!(
            "{}: no such directory (--record-dir names the directory the run recorded into)",
            dir.display()
        );
    }
    let cfg = calliper_console::Config {
        listen: a.http,
        db: a.db,
        clickhouse,
        live: None,
        health: None,
        rules: None,
        write_token: None,
        recordings: a.record_dir.clone(),
        token,
    };
    let guarded = cfg.token.is_some();
    calliper_console::serve(cfg, |addr| {
        eprintln!(
            "calliper: console on http://{addr}/{}",
            if guarded { " (token required)" } else { "" }
        );
    })
    .map_err(|e| anyhow::Error::msg(explain(e)))
}

/// A start-up failure, with what to do about it where that is clear.
pub(crate) fn explain(e: String) -> String {
    if e.contains("Address already in use") {
        format!(
            "{e}: another program listens there; choose another port with --http 127.0.0.1:PORT"
        )
    } else {
        e
    }
}
