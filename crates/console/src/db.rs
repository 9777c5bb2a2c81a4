//! Database work for requests: on tokio's blocking pool, on pooled
//! read-only connections (a schema is parsed once per connection, not per
//! request), within bounds that hold even when clients misbehave:
//! - a request holds its permit until its query has stopped, not until the
//!   client leaves, so abandoned requests cannot pile up behind the limit;
//! - a query stops when its client goes away, and at the latest
//!   [`crate::QUERY_TIME_LIMIT`] after the request arrived;
//! - the answer is serialised there too, off the threads that serve
//!   connections.

use crate::api::ApiError;
use axum::http::StatusCode;
use calliper_store::Source;
use rusqlite::Connection;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::Semaphore;

/// Read-only connections to one database file, reused; dropped when the
/// file is replaced (another inode) so a rotated database is read afresh.
pub(crate) struct Pool {
    path: PathBuf,
    idle: Mutex<(u64, Vec<Connection>)>,
}

impl Pool {
    pub(crate) fn new(path: PathBuf) -> Self {
        Pool { path, idle: Mutex::new((0, Vec::new())) }
    }

    fn take(&self) -> Result<(u64, Connection), calliper_store::StoreError> {
        let inode = std::fs::metadata(&self.path).map(|m| m.ino())?;
        {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.0 != inode {
                *idle = (inode, Vec::new());
            }
            if let Some(c) = idle.1.pop() {
                return Ok((inode, c));
            }
        }
        Ok((inode, calliper_store::open_searchable(&self.path)?))
    }

    fn give_back(&self, inode: u64, c: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.0 == inode && idle.1.len() < crate::MAX_CONCURRENT_QUERIES {
            idle.1.push(c);
        }
    }
}

/// The store requests read.
pub(crate) enum Store {
    /// One database file.
    Sqlite(Pool),
    /// The tables many probes write to; a query's time is bounded on the
    /// server (`max_execution_time`).
    ClickHouse(calliper_store::clickhouse::Reader),
}

/// Set when the request's future is dropped (its client went away).
struct Abandoned(Arc<AtomicBool>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `work` on the store (a pooled connection to SQLite), with a
/// permit of `permits` (404 when the console has no database).
pub(crate) async fn run<T: Send + 'static>(
    store: &Option<Arc<Store>>,
    permits: &Arc<Semaphore>,
    work: impl FnOnce(Source<'_>) -> Result<T, calliper_store::StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let arrived = Instant::now();
    let Some(store) = store else {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            "this console has no database: start the probe with --db FILE to search stored calls (the live page needs none)".into(),
        ));
    };
    let Ok(permit) = permits.clone().try_acquire_owned() else {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "busy: {} requests are reading the database; try again",
                crate::MAX_CONCURRENT_QUERIES
            ),
        ));
    };
    let gone = Arc::new(AtomicBool::new(false));
    let _guard = Abandoned(gone.clone());
    let store = store.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let pool = match &*store {
            Store::Sqlite(pool) => pool,
            Store::ClickHouse(reader) => return work(Source::ClickHouse(reader)),
        };
        let deadline = arrived + crate::QUERY_TIME_LIMIT;
        let (inode, conn) = pool.take()?;
        // Called every 1 000 virtual machine steps: true interrupts.
        conn.progress_handler(
            1000,
            Some(move || gone.load(Ordering::Relaxed) || Instant::now() > deadline),
        );
        let result = work(Source::Sqlite(&conn));
        conn.progress_handler(0, None::<fn() -> bool>);
        if result.is_ok() {
            pool.give_back(inode, conn);
        }
        result
    })
    .await;
    match joined {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(calliper_store::StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _))))
            if e.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            Err(ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the search took longer than {} s and was stopped: narrow it (a time range, an exact caller or callee)",
                    crate::QUERY_TIME_LIMIT.as_secs()
                ),
            ))
        }
        Ok(Err(calliper_store::StoreError::NotStored(why))) => {
            Err(ApiError(StatusCode::NOT_FOUND, why))
        }
        Ok(Err(calliper_store::StoreError::Busy(why))) => {
            Err(ApiError(StatusCode::SERVICE_UNAVAILABLE, why))
        }
        Ok(Err(calliper_store::StoreError::Invalid(why))) => {
            Err(ApiError(StatusCode::INTERNAL_SERVER_ERROR, why))
        }
        Ok(Err(e)) => Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("database: {e}"),
        )),
        Err(_) => Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the database request failed".into(),
        )),
    }
}
