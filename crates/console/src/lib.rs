//! The web console: a JSON API under `/api/`, a web UI at `/` (its assets
//! compiled into the binary) and Prometheus metrics at `/metrics`, all read
//! from a call database (`docs/console.md`).
//!
//! Safe by default: it listens on loopback unless told otherwise, and then
//! only with a token; every request elsewhere must carry it. A loopback
//! listener without a token still refuses requests whose `Host` is not a
//! loopback name, so a web page cannot reach it through DNS rebinding.
//! Every query parameter is checked (400 with a reason), every value
//! reaches SQLite as a parameter, and a search that runs too long is
//! stopped (503) rather than left to hold a thread.

mod api;
mod auth;
mod callpcap_api;
mod csv;
mod db;
mod exposition;
mod health;
mod listen;
mod lists_api;
mod live;
mod live_api;
mod metrics;
mod offers;
mod params;
mod rules_api;
mod ui;

use axum::routing::{delete, get};
use axum::Router;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Most requests reading the database at once; more get 503 (the machine
/// keeps serving the ones it has).
pub const MAX_CONCURRENT_QUERIES: usize = 8;
/// Longest a request may read the database before it is stopped.
pub const QUERY_TIME_LIMIT: Duration = Duration::from_secs(10);
/// Shortest token accepted: a guessable token is no protection.
pub const MIN_TOKEN_LEN: usize = 16;
pub use health::{HealthReport, ProbeHealth, RingCounts};
pub use listen::{HEADER_TIMEOUT, MAX_CONNECTIONS, MAX_CONNECTION_TIME, MAX_HEADER_BYTES};
pub use live::{LiveCall, LiveCalls, LiveStream, Snapshot, ENDED_KEPT_NS, MAX_LIVE_CALLS};

/// What the console serves and how.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The call database (a probe may run without one: then only the live
    /// page is served, and the database's pages and metrics answer 404).
    pub db: Option<PathBuf>,
    /// The ClickHouse tables many probes write to, read instead of `db`
    /// (the search and calls' detail; the rest answers 404 with why).
    pub clickhouse: Option<calliper_store::clickhouse::Reader>,
    /// The calls a running probe has open (the live page).
    pub live: Option<LiveCalls>,
    /// A running probe's health (the probe page and its metrics).
    pub health: Option<ProbeHealth>,
    /// The token every request must carry (`Authorization: Bearer TOKEN`,
    /// or basic auth with the token as password). Required unless
    /// `listen` is a loopback address.
    pub token: Option<String>,
    /// A running probe's rule table (the rules page).
    pub rules: Option<calliper_rules::Rules>,
    /// The token that may change the rules (`Authorization: Bearer`
    /// only, so a browser never sends it on its own); without it the
    /// console is read-only. It also grants reading.
    pub write_token: Option<String>,
    /// The recordings' directory (`--record-dir`): calls' pcaps to download.
    pub recordings: Option<PathBuf>,
}

impl Config {
    /// Why this configuration must not run, if it must not.
    pub fn check(&self) -> Result<(), String> {
        for (which, t) in [("token", &self.token), ("write token", &self.write_token)] {
            if t.as_ref().is_some_and(|t| {
                t.len() < MIN_TOKEN_LEN || !t.bytes().all(|b| b.is_ascii_graphic())
            }) {
                return Err(format!(
                    "the {which} must be at least {MIN_TOKEN_LEN} characters, ASCII letters, digits or punctuation \
                     (no spaces): make one with `head -c 24 /dev/urandom | base64`"
                ));
            }
        }
        if self.write_token.is_some() && self.write_token == self.token {
            return Err("the write token must differ from the read token".into());
        }
        if self.write_token.is_some() && self.rules.is_none() {
            return Err(
                "a write token without a rule table: only a probe's rules can be changed".into()
            );
        }
        if self.token.is_none() && !self.listen.ip().is_loopback() {
            return Err(format!(
                "{} is not a loopback address: give a token (--token-file FILE, or the CALLIPER_TOKEN environment variable) \
                 so that only those who have it can read the calls; make one with \
                 `head -c 24 /dev/urandom | base64 > console.token && chmod 600 console.token`",
                self.listen
            ));
        }
        Ok(())
    }
}

/// The search a query string (`caller=alice*&status=4xx`) describes, as
/// `GET /api/calls` reads it, or why it cannot be taken (the 400's text).
/// For tests and fuzzing: the server reads the same way.
pub fn search_from_query(query: &str) -> Result<calliper_store::Search, String> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(query).map_err(|e| format!("not a query string: {e}"))?;
    params::search(&pairs, api::PAGE_LIMIT).map_err(|e| e.0)
}

/// What every request shares.
pub(crate) struct State {
    pub(crate) db: Option<Arc<db::Store>>,
    pub(crate) live: Option<LiveCalls>,
    pub(crate) health: Option<ProbeHealth>,
    pub(crate) rules: Option<calliper_rules::Rules>,
    pub(crate) write_token: Option<String>,
    pub(crate) recordings: Option<PathBuf>,
    pub(crate) token: Option<String>,
    /// Loopback listener without a token: `Host` must name loopback.
    pub(crate) loopback_only_hosts: bool,
    /// Permits for searches and call details.
    pub(crate) queries: Arc<tokio::sync::Semaphore>,
    /// One scrape at a time, apart from the searches (which cannot starve it).
    pub(crate) scrapes: Arc<tokio::sync::Semaphore>,
    pub(crate) metrics: metrics::Metrics,
    /// Permits for live event streams.
    pub(crate) watchers: Arc<tokio::sync::Semaphore>,
    /// Permits for recordings being sent.
    pub(crate) downloads: Arc<tokio::sync::Semaphore>,
    /// The live snapshot as JSON, and the change it was made at.
    pub(crate) live_json: std::sync::Mutex<(Option<u64>, axum::body::Bytes)>,
}

/// The routes, for a server or a test.
fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/", get(ui::index))
        .route("/assets/{file}", get(ui::asset))
        .route("/api/calls", get(api::calls))
        .route("/api/calls.csv", get(csv::calls))
        .route("/api/calls/{id}", get(api::call))
        .route("/api/calls/{id}/pcap", get(callpcap_api::pcap))
        .route("/api/calls/{id}/audio", get(callpcap_api::audio))
        .route("/api/alerts", get(lists_api::alerts))
        .route("/api/registrations", get(lists_api::registrations))
        .route("/api/kpi", get(lists_api::kpi))
        .route("/api/kpi/load", get(lists_api::load))
        .route("/api/kpi/mos", get(lists_api::mos))
        .route("/api/live", get(live_api::snapshot))
        .route("/api/live/events", get(live_api::events))
        .route("/api/health", get(health::serve))
        .route("/api/console", get(api::parts))
        .route(
            "/api/rules",
            get(rules_api::list)
                .post(rules_api::add)
                .layer(axum::extract::DefaultBodyLimit::max(rules_api::MAX_RULE_BYTES)),
        )
        .route("/api/rules/{id}", delete(rules_api::remove))
        .route("/metrics", get(metrics::serve))
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::check))
        .with_state(state)
}

/// Serves until interrupted (SIGINT or SIGTERM). `ready` is told the
/// address once it listens (the port, when 0 was asked for).
pub fn serve(cfg: Config, ready: impl FnOnce(SocketAddr)) -> Result<(), String> {
    serve_until(cfg, ready, shutdown())
}

/// Serves until `stop` resolves (a probe serves as long as it runs, and
/// handles its signals itself).
pub fn serve_until(
    cfg: Config,
    ready: impl FnOnce(SocketAddr),
    stop: impl std::future::Future<Output = ()> + Send,
) -> Result<(), String> {
    cfg.check()?;
    // Fails early on a missing or foreign database, not at the first request.
    if let Some(db) = &cfg.db {
        calliper_store::open_searchable(db).map_err(|e| e.to_string())?;
    }
    if let Some(reader) = &cfg.clickhouse {
        reader.check().map_err(|e| e.to_string())?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(MAX_CONCURRENT_QUERIES + 1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the server: {e}"))?;
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let state = Arc::new(State {
            loopback_only_hosts: cfg.token.is_none(),
            db: match (cfg.db, cfg.clickhouse) {
                (_, Some(reader)) => Some(Arc::new(db::Store::ClickHouse(reader))),
                (Some(d), None) => Some(Arc::new(db::Store::Sqlite(db::Pool::new(d)))),
                (None, None) => None,
            },
            live: cfg.live,
            health: cfg.health,
            rules: cfg.rules,
            write_token: cfg.write_token,
            recordings: cfg.recordings,
            token: cfg.token,
            queries: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_QUERIES)),
            scrapes: Arc::new(tokio::sync::Semaphore::new(1)),
            metrics: metrics::Metrics::default(),
            watchers: Arc::new(tokio::sync::Semaphore::new(live_api::MAX_WATCHERS)),
            downloads: Arc::new(tokio::sync::Semaphore::new(callpcap_api::MAX_DOWNLOADS)),
            live_json: Default::default(),
        });
        ready(addr);
        listen::serve(listener, router(state), stop).await;
        Ok(())
    });
    // Connections still open and queries still running are not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

/// Resolves at SIGINT or SIGTERM.
async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    let term = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(listen: &str, token: Option<&str>) -> Config {
        Config {
            listen: listen.parse().unwrap(),
            db: None,
            clickhouse: None,
            live: None,
            health: None,
            token: token.map(str::to_string),
            rules: None,
            write_token: None,
            recordings: None,
        }
    }

    #[test]
    fn elsewhere_than_loopback_needs_a_good_token() {
        assert!(cfg("127.0.0.1:8080", None).check().is_ok());
        assert!(cfg("[::1]:8080", None).check().is_ok());
        assert!(cfg("0.0.0.0:8080", None).check().is_err());
        assert!(cfg("192.0.2.1:8080", Some("short")).check().is_err());
        assert!(cfg("0.0.0.0:8080", Some("a-long-enough-token")).check().is_ok());
        assert!(cfg("0.0.0.0:8080", Some("a long enough token")).check().is_err());
    }
}
