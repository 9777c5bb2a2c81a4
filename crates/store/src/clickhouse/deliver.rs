//! The delivery thread: sends batches oldest first (the spool's, then
//! those just handed over), creates the tables before the first, and when
//! the server does not answer puts what it holds in the spool and tries
//! again later, waiting longer each time (1 s, doubling, to 30 s).
//!
//! A batch the servers refuse (an error status: an overloaded server, a
//! proxy in trouble) stays the oldest and is tried again, [`ATTEMPTS`]
//! times in all; then it is set aside (kept as `.rejected` in a spool
//! directory) and counted as rejected with the server's message, and the
//! run fails saying so, so one bad batch cannot hold back the rest for ever.

use super::http::{Endpoint, HttpError};
use super::spool::{Batch, Refused, Spool};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tries of a batch the server refuses.
const ATTEMPTS: u32 = 5;
const FIRST_WAIT: Duration = Duration::from_secs(1);
const LONGEST_WAIT: Duration = Duration::from_secs(30);
/// How long the end of a run keeps trying a server that does not answer
/// when the rows have nowhere else to go (no spool directory).
const LAST_TRIES: Duration = Duration::from_secs(10);

pub(super) enum Msg {
    Batch(Batch),
    /// The run ended: deliver what can be, then stop.
    Finish,
}

/// Delivery so far, in rows.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Report {
    /// Taken by the server.
    pub sent: u64,
    /// Put in the spool (the server down or slow).
    pub spooled: u64,
    /// In the spool now.
    pub waiting: u64,
    /// Sent from the spool (kept there after a failure, or a full queue).
    pub retried: u64,
    /// Refused by the server [`ATTEMPTS`] times, or by the check of the
    /// tables: set aside (kept as `.rejected` in a spool directory).
    pub rejected: u64,
    /// Lost: the spool was full or could not be written.
    pub dropped: u64,
    /// Requests that failed.
    pub failures: u64,
    /// Days dropped by `--clickhouse-keep-days` (partitions, on all servers).
    pub partitions_dropped: u64,
    /// The last failure, as the server or the network said it.
    pub last_error: Option<String>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "clickhouse   sent {} rows, spooled {}, waiting in the spool {}, retried {}, rejected {}, dropped {}",
            self.sent, self.spooled, self.waiting, self.retried, self.rejected, self.dropped
        )?;
        if self.partitions_dropped > 0 {
            write!(
                f,
                "; {} old partitions (one table's day each) dropped",
                self.partitions_dropped
            )?;
        }
        if let Some(e) = &self.last_error {
            write!(f, "; last failure: {e}")?;
        }
        Ok(())
    }
}

/// What the sink and the thread share.
pub(super) struct Shared {
    spool: Mutex<Spool>,
    sent: AtomicU64,
    spooled: AtomicU64,
    retried: AtomicU64,
    rejected: AtomicU64,
    dropped: AtomicU64,
    failures: AtomicU64,
    /// The newest day a row was written for, plus one (0: none yet).
    newest_day: AtomicU64,
    partitions_dropped: AtomicU64,
    last_error: Mutex<Option<String>>,
    say: Box<dyn Fn(&str) + Send + Sync>,
}

impl Shared {
    pub(super) fn new(spool: Spool, say: Box<dyn Fn(&str) + Send + Sync>) -> Shared {
        Shared {
            spool: Mutex::new(spool),
            sent: AtomicU64::new(0),
            spooled: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            newest_day: AtomicU64::new(0),
            partitions_dropped: AtomicU64::new(0),
            last_error: Mutex::new(None),
            say,
        }
    }

    fn spool_lock(&self) -> std::sync::MutexGuard<'_, Spool> {
        self.spool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts a batch in the spool, or counts it dropped and says why.
    pub(super) fn spool(&self, b: Batch) {
        let rows = b.rows;
        match self.spool_lock().push(b) {
            Ok(()) => {
                self.spooled.fetch_add(rows, Relaxed);
            }
            Err(why) => {
                self.dropped.fetch_add(rows, Relaxed);
                let why = match why {
                    Refused::Full => "the spool is full".to_string(),
                    Refused::Io(e) => format!("the spool cannot be written: {e}"),
                };
                self.failed(&format!("{rows} rows dropped: {why}"));
            }
        }
    }

    /// True when the spool keeps batches in files.
    pub(super) fn on_disk(&self) -> bool {
        self.spool_lock().on_disk()
    }

    /// A row of `day` (days since 1970) was written.
    pub(super) fn note_day(&self, day: u16) {
        self.newest_day.fetch_max(u64::from(day) + 1, Relaxed);
    }

    /// Passes a line to whoever listens (the CLI prints it).
    pub(super) fn say(&self, line: &str) {
        (self.say)(line);
    }

    fn failed(&self, why: &str) {
        self.failures.fetch_add(1, Relaxed);
        let mut last = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
        // Said when it changes, not at every retry.
        if last.as_deref() != Some(why) {
            (self.say)(&format!("clickhouse: {why}"));
        }
        *last = Some(why.to_string());
    }

    pub(super) fn report(&self) -> Report {
        Report {
            sent: self.sent.load(Relaxed),
            spooled: self.spooled.load(Relaxed),
            waiting: self.spool_lock().rows(),
            retried: self.retried.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            failures: self.failures.load(Relaxed),
            partitions_dropped: self.partitions_dropped.load(Relaxed),
            last_error: self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

/// The thread's state.
pub(super) struct Worker {
    /// The servers, in the order tried; inserts go to `current` while it answers.
    endpoints: Vec<Endpoint>,
    current: usize,
    /// Which servers have the tables (made before the first insert to each).
    ready: Vec<bool>,
    /// When the servers not yet ready are next asked to make the tables.
    next_schema_try: Instant,
    schema: super::Schema,
    shared: Arc<Shared>,
    rx: Receiver<Msg>,
    /// Batches handed over and not yet sent (newer than the spool's).
    queue: VecDeque<Batch>,
    /// No server answered the last try: batches go to the spool meanwhile.
    outage: bool,
    /// Times the servers refused the oldest batch.
    refusals: u32,
    wait: Duration,
    next_try: Instant,
    retention: Option<super::retention::Retention>,
}

/// What became of one try of the oldest batch.
enum Sent {
    Taken,
    /// Refused for good (the tables are not ours), or refused too often.
    Rejected(HttpError),
    /// Try again later (no answer, or a refusal that may pass).
    Later(HttpError),
}

impl Worker {
    pub(super) fn new(
        endpoints: Vec<Endpoint>,
        schema: super::Schema,
        shared: Arc<Shared>,
        rx: Receiver<Msg>,
        keep_days: Option<u16>,
        first_ready: bool,
    ) -> Worker {
        let mut ready = vec![false; endpoints.len()];
        ready[0] = first_ready;
        Worker {
            ready,
            endpoints,
            current: 0,
            next_schema_try: Instant::now(),
            schema,
            shared,
            rx,
            queue: VecDeque::new(),
            outage: false,
            refusals: 0,
            wait: FIRST_WAIT,
            next_try: Instant::now(),
            retention: keep_days.map(super::retention::Retention::new),
        }
    }

    pub(super) fn run(mut self) {
        let mut finishing = None;
        loop {
            // Batches are taken while the queue has room; when it is full
            // they wait in the channel, where the sink spools them (a live
            // probe) or waits (an offline run: nothing lost, no hurry).
            if self.queue.len() < super::QUEUE || finishing.is_some() {
                self.receive(&mut finishing);
            }
            // A full queue is sent at once, but never during a backoff:
            // a refusal is waited out, not retried by every burst.
            let full = self.queue.len() >= super::QUEUE && self.refusals == 0 && !self.outage;
            if Instant::now() >= self.next_try || finishing.is_some() || full {
                self.deliver(finishing);
            }
            self.keep_days();
            if let Some(deadline) = finishing {
                if self.done(deadline) {
                    return;
                }
            }
        }
    }

    /// Takes what the sink handed over, waiting until the next try at most.
    fn receive(&mut self, finishing: &mut Option<Instant>) {
        let timeout =
            self.next_try.saturating_duration_since(Instant::now()).max(Duration::from_millis(50));
        let mut next = self.rx.recv_timeout(timeout);
        loop {
            match next {
                Ok(Msg::Batch(b)) => self.take(b),
                Ok(Msg::Finish) | Err(RecvTimeoutError::Disconnected) => {
                    finishing.get_or_insert(Instant::now() + LAST_TRIES);
                }
                Err(RecvTimeoutError::Timeout) => return,
            }
            if self.queue.len() >= super::QUEUE && finishing.is_none() {
                return;
            }
            next = match self.rx.try_recv() {
                Ok(m) => Ok(m),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) if finishing.is_some() => return,
                Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
            };
        }
    }

    /// Queues a batch handed over; while no server answers it goes to the spool.
    fn take(&mut self, b: Batch) {
        if self.outage {
            self.shared.spool(b);
        } else {
            self.queue.push_back(b);
        }
    }

    /// True when the thread may stop: nothing waits, or what waits is
    /// safe in a spool directory, or the last tries are over (then what
    /// is held in memory is lost, and counted).
    fn done(&mut self, deadline: Instant) -> bool {
        if self.outage || Instant::now() >= deadline {
            // What is queued waits with the spool.
            for b in std::mem::take(&mut self.queue) {
                self.shared.spool(b);
            }
        }
        let mut spool = self.shared.spool_lock();
        if self.queue.is_empty() && (spool.len() == 0 || spool.on_disk()) {
            return true;
        }
        if Instant::now() < deadline {
            drop(spool);
            std::thread::sleep(
                self.next_try
                    .saturating_duration_since(Instant::now())
                    .min(deadline - Instant::now()),
            );
            return false;
        }
        let rows = spool.rows();
        while spool.len() > 0 {
            let _ = spool.pop_front();
        }
        drop(spool);
        self.shared.dropped.fetch_add(rows, Relaxed);
        self.shared.failed(&format!(
            "{rows} rows dropped at the end of the run: the server did not take them"
        ));
        true
    }

    /// The oldest batch waiting: the spool's, else the queue's.
    fn oldest(&mut self) -> Option<(Batch, bool)> {
        loop {
            let front = self.shared.spool_lock().front();
            match front {
                None => return self.queue.pop_front().map(|b| (b, false)),
                Some(Ok(b)) => return Some((b, true)),
                Some(Err(e)) => {
                    // An unreadable spool file is dropped, not retried for ever.
                    let mut spool = self.shared.spool_lock();
                    let before = spool.rows();
                    let _ = spool.pop_front();
                    let lost = before - spool.rows();
                    drop(spool);
                    self.shared.dropped.fetch_add(lost, Relaxed);
                    self.shared.failed(&format!(
                        "a spooled batch cannot be read ({e}): {lost} rows dropped"
                    ));
                }
            }
        }
    }

    /// Sends batches oldest first until none is left, one fails, or (at
    /// the end of a run, with a spool directory) the last tries are over.
    fn deliver(&mut self, finishing: Option<Instant>) {
        while let Some((b, spooled)) = self.oldest() {
            // A batch is set aside only from a spool directory (as a file
            // kept), or when there is none: one from the queue goes to the
            // spool first, as on any failure.
            let may_reject = spooled || !self.shared.on_disk();
            let outcome = match self.send(&b) {
                Ok(()) => Sent::Taken,
                Err(e @ HttpError::Server { status: 0, .. }) if may_reject => Sent::Rejected(e),
                Err(e @ HttpError::Server { .. })
                    if may_reject && !e.passes() && self.refusals + 1 >= ATTEMPTS =>
                {
                    Sent::Rejected(e)
                }
                Err(e) => Sent::Later(e),
            };
            match outcome {
                Sent::Taken => {
                    self.shared.sent.fetch_add(b.rows, Relaxed);
                    if spooled {
                        self.shared.retried.fetch_add(b.rows, Relaxed);
                        let _ = self.shared.spool_lock().pop_front();
                    }
                }
                Sent::Rejected(e) => {
                    self.shared.rejected.fetch_add(b.rows, Relaxed);
                    let kept = if spooled {
                        let mut spool = self.shared.spool_lock();
                        let kept = spool.on_disk();
                        let _ = spool.reject_front();
                        kept
                    } else {
                        false
                    };
                    let aside = if kept { " (kept as .rejected in the spool)" } else { "" };
                    self.shared.failed(&format!("{} rows rejected{aside}: {e}", b.rows));
                }
                Sent::Later(e) => {
                    // No answer, or one that says wait (authentication, a
                    // proxy's 502-504, 429): like an outage, never rejected.
                    self.outage = e.passes();
                    if self.outage {
                        self.refusals = 0;
                    } else {
                        self.refusals += 1;
                    }
                    self.shared.failed(&format!(
                        "{}: {e}{}; rows wait in the spool",
                        self.server_names(),
                        e.hint()
                    ));
                    if !spooled {
                        // The queue's oldest, with the spool empty: it goes first there.
                        self.shared.spool(b);
                    }
                    for b in std::mem::take(&mut self.queue) {
                        self.shared.spool(b);
                    }
                    self.next_try = Instant::now() + self.wait;
                    self.wait = (self.wait * 2).min(LONGEST_WAIT);
                    return;
                }
            }
            self.outage = false;
            self.refusals = 0;
            self.wait = FIRST_WAIT;
            let on_disk = self.shared.spool_lock().on_disk();
            if finishing.is_some_and(|d| Instant::now() >= d) && on_disk {
                // The rest waits in the spool for the next run.
                for b in std::mem::take(&mut self.queue) {
                    self.shared.spool(b);
                }
                return;
            }
        }
    }

    /// Drops the days `--clickhouse-keep-days` no longer keeps, on every
    /// server with the tables, once an hour while the servers answer.
    fn keep_days(&mut self) {
        let newest = self.shared.newest_day.load(Relaxed);
        let Some(r) = self.retention.as_mut().filter(|r| r.due()) else {
            return;
        };
        if self.outage || newest == 0 {
            return;
        }
        let tables = self.schema.stored_tables();
        for (e, ready) in self.endpoints.iter().zip(&self.ready) {
            if !ready {
                continue;
            }
            let database = self.schema.database();
            match r.apply(e, database, &tables, (newest - 1) as u16) {
                Ok(n) => {
                    self.shared.partitions_dropped.fetch_add(n, Relaxed);
                }
                Err(err) => {
                    self.shared.failed(&format!("{}: dropping old days failed: {err}", e.host()))
                }
            }
        }
    }

    /// The servers, for messages.
    fn server_names(&self) -> String {
        let names: Vec<&str> = self.endpoints.iter().map(Endpoint::host).collect();
        names.join(", ")
    }

    /// Inserts a batch into the current server, else into the next that
    /// takes it (any node of a cluster takes any row). The error is a
    /// refusal if any server refused, else the last server's silence.
    fn send(&mut self, b: &Batch) -> Result<(), HttpError> {
        self.make_tables_elsewhere();
        let n = self.endpoints.len();
        let (mut refused, mut unanswered) = (None, None);
        for k in 0..n {
            let i = (self.current + k) % n;
            match self.send_to(i, b) {
                Ok(()) => {
                    self.current = i;
                    return Ok(());
                }
                Err(e @ HttpError::Server { status: 0, .. }) => return Err(e),
                Err(e @ HttpError::Server { .. }) => refused = Some(e),
                Err(e) => unanswered = Some(e),
            }
        }
        Err(refused
            .or(unanswered)
            .unwrap_or_else(|| HttpError::Network(std::io::ErrorKind::NotFound.into())))
    }

    fn send_to(&mut self, i: usize, b: &Batch) -> Result<(), HttpError> {
        if !self.ready[i] {
            self.schema.make(&self.endpoints[i])?;
            self.ready[i] = true;
        }
        self.endpoints[i].post(&b.body).map(drop)
    }

    /// Every server listed needs the tables, not only the one inserted
    /// into (a cluster's `Distributed` table forwards rows to the others'
    /// local tables): those that lacked them are asked again every 30 s.
    fn make_tables_elsewhere(&mut self) {
        if Instant::now() < self.next_schema_try || self.ready.iter().all(|&r| r) {
            return;
        }
        self.next_schema_try = Instant::now() + LONGEST_WAIT;
        for i in 0..self.endpoints.len() {
            if !self.ready[i] {
                self.ready[i] = self.schema.make(&self.endpoints[i]).is_ok();
            }
        }
    }
}
