//! `calliper serve`: the web console over a call database.

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The environment variable that may hold the token instead of a file.
const TOKEN_ENV: &str = "CALLIPER_TOKEN";

#[derive(clap::Args)]
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
calliper serve --db calls.db --http 0.0.0.0:8443 --token-file /etc/calliper/console.token\n  \
curl -s 'http://127.0.0.1:8080/api/calls?caller=alice*&status=4xx&limit=10'"
)]
pub struct ServeArgs {
    /// The database to show (written by `analyze --db` or `probe --db`).
    #[arg(long)]
    db: PathBuf,
    /// Address and port to listen on; anything but loopback needs a token.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// A file holding the token requests must carry (surrounding
    /// whitespace ignored; at least 16 characters).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

pub fn run(a: ServeArgs) -> Result<()> {
    let token = match &a.token_file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("cannot read the token file {}", f.display()))?
                .trim()
                .to_string(),
        ),
        None => std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()),
    };
    if !a.db.is_file() {
        bail!(
            "{}: no such database (write one with `calliper analyze CAPTURE --db {}`)",
            a.db.display(),
            a.db.display()
        );
    }
    let cfg = calliper_console::Config {
        listen: a.http,
        db: a.db,
        token,
    };
    let guarded = cfg.token.is_some();
    calliper_console::serve(cfg, |addr| {
        eprintln!(
            "calliper: console on http://{addr}/{}",
            if guarded { " (token required)" } else { "" }
        );
    })
    .map_err(anyhow::Error::msg)
}
