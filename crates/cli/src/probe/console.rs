//! The console inside the probe (`--http`): the live page from the
//! engine's events, and the stored calls when the probe writes a database.

use anyhow::{anyhow, Result};
use calliper_console::{LiveCalls, ProbeHealth};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Starts the console on its own thread, serving `live`, `health`, the
/// rules and the database `db` if any; returns once it listens (or could not).
pub(super) fn start(
    listen: SocketAddr,
    token: Option<String>,
    write_token: Option<String>,
    db: Option<PathBuf>,
    live: LiveCalls,
    health: ProbeHealth,
    rules: Option<calliper_rules::Rules>,
) -> Result<SocketAddr> {
    let cfg = calliper_console::Config {
        listen,
        db,
        live: Some(live),
        health: Some(health),
        token,
        rules,
        write_token,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let failed = tx.clone();
    std::thread::Builder::new()
        .name("console".into())
        .spawn(move || {
            // The probe handles its own signals; the console lives as long as it.
            let served = calliper_console::serve_until(
                cfg,
                |addr| {
                    let _ = tx.send(Ok(addr));
                },
                std::future::pending(),
            );
            if let Err(e) = served {
                let _ = failed.send(Err(e));
            }
        })?;
    match rx.recv() {
        Ok(Ok(addr)) => Ok(addr),
        Ok(Err(e)) => Err(anyhow!("console: {}", crate::serve::explain(e))),
        Err(_) => Err(anyhow!("console: the server thread ended before listening")),
    }
}
