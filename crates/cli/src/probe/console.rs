//! The console inside the probe (`--http`): the live page from the
//! engine's events, and the stored calls when the probe writes a database.

use anyhow::{anyhow, Result};
use std::net::SocketAddr;

/// Starts the console `cfg` describes on its own thread; returns once it
/// listens (or could not).
pub(super) fn start(cfg: calliper_console::Config) -> Result<SocketAddr> {
    let (tx, rx) = std::sync::mpsc::channel();
    let failed = tx.clone();
    std::thread::Builder::new().name("console".into()).spawn(move || {
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
