//! Accepting connections with bounds: at most [`MAX_CONNECTIONS`] at once
//! and [`MAX_PER_CLIENT`] from one address (a new one beyond is closed at
//! once and counted), so one client cannot lock the others out; request
//! headers that
//! must arrive within [`HEADER_TIMEOUT`] and fit in [`MAX_HEADER_BYTES`],
//! and no connection kept longer than [`MAX_CONNECTION_TIME`] — so idle or
//! trickling clients cannot hold the server's memory or file descriptors.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

/// Most connections open at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Most connections open at once from one address (a browser opens six).
pub const MAX_PER_CLIENT: usize = 32;
/// Longest wait for a request's headers (also on an idle kept-alive
/// connection).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a connection lives, whatever it does.
pub const MAX_CONNECTION_TIME: Duration = Duration::from_secs(300);
/// Largest request head (request line and headers).
pub const MAX_HEADER_BYTES: usize = 64 << 10;

/// Connections closed because [`MAX_CONNECTIONS`] were open.
pub(crate) static REFUSED: AtomicU64 = AtomicU64::new(0);
/// Connections closed because their address had [`MAX_PER_CLIENT`] open.
pub(crate) static REFUSED_PER_CLIENT: AtomicU64 = AtomicU64::new(0);

/// Connections open per client (at most [`MAX_CONNECTIONS`] entries: an
/// entry lives while its client has a connection). A client is an IPv4
/// address or an IPv6 /64 (what one host is given). On loopback every
/// address is its own client: a local process that binds many of them can
/// still take every place of a console without a token, whose users it
/// shares a machine and a trust with (docs/console.md).
#[derive(Clone, Default)]
struct PerClient(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// The client an address belongs to.
fn client(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v) if !v.is_loopback() => match v.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v) & (!0u128 << 64)).into()),
        },
        other => other,
    }
}

/// A client's place, given back when its connection ends.
struct ClientSlot(PerClient, IpAddr);

impl PerClient {
    fn take(&self, ip: IpAddr) -> Option<ClientSlot> {
        let ip = client(ip);
        let mut open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_default();
        if *n >= MAX_PER_CLIENT {
            return None;
        }
        *n += 1;
        Some(ClientSlot(self.clone(), ip))
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.0 .0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.1);
            }
        }
    }
}

/// The connections refused, as Prometheus counters.
pub(crate) fn render_metrics(out: &mut String) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP calliper_console_connections_refused_total Connections closed at once: too many open in all, or from one address.\n\
         # TYPE calliper_console_connections_refused_total counter\n\
         calliper_console_connections_refused_total{{why=\"total\"}} {}\n\
         calliper_console_connections_refused_total{{why=\"per_client\"}} {}",
        REFUSED.load(Ordering::Relaxed),
        REFUSED_PER_CLIENT.load(Ordering::Relaxed)
    );
}

/// Serves `app` on `listener` until `stop` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl std::future::Future<Output = ()>,
) {
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let clients = PerClient::default();
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                // Out of descriptors and the like: wait, then go on.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => return,
        };
        let Some(slot) = clients.take(peer.ip()) else {
            REFUSED_PER_CLIENT.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
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
            drop((permit, slot));
        });
    }
}
