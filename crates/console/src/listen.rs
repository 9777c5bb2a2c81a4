//! Accepting connections with bounds: at most [`MAX_CONNECTIONS`] at once
//! (a new one beyond is closed at once and counted), request headers that
//! must arrive within [`HEADER_TIMEOUT`] and fit in [`MAX_HEADER_BYTES`],
//! and no connection kept longer than [`MAX_CONNECTION_TIME`] — so idle or
//! trickling clients cannot hold the server's memory or file descriptors.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Most connections open at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Longest wait for a request's headers (also on an idle kept-alive
/// connection).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a connection lives, whatever it does.
pub const MAX_CONNECTION_TIME: Duration = Duration::from_secs(300);
/// Largest request head (request line and headers).
pub const MAX_HEADER_BYTES: usize = 64 << 10;

/// Connections closed because [`MAX_CONNECTIONS`] were open.
pub(crate) static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Serves `app` on `listener` until `stop` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl std::future::Future<Output = ()>,
) {
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                // Out of descriptors and the like: wait, then go on.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => return,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES);
            let conn = http.serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(MAX_CONNECTION_TIME, conn).await;
            drop(permit);
        });
    }
}
