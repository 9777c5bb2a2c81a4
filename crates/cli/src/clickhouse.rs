//! `--clickhouse`: where `analyze` and `probe` also write calls and
//! streams, for many probes to share one database (docs/scale-out.md).

use anyhow::{bail, Context, Result};
use calliper_store::clickhouse::{self, ClickHouse, Config};
use std::path::PathBuf;

/// The environment variable a password may come from.
pub const PASSWORD_VARIABLE: &str = "CALLIPER_CLICKHOUSE_PASSWORD";

#[derive(clap::Args, Debug, Clone)]
pub struct ClickHouseArgs {
    /// Also write calls and streams to ClickHouse's HTTP interface,
    /// `http://HOST:PORT`, or several nodes of one cluster (with
    /// --clickhouse-cluster), comma-separated, tried in turn. The tables are
    /// made on each if missing. A server that is down never stops the run:
    /// rows wait in the spool and are sent when one answers; `probe` never
    /// waits for a slow one either, `analyze` does. docs/scale-out.md.
    #[arg(long, value_name = "http://HOST:PORT[,...]")]
    pub clickhouse: Option<String>,
    #[command(flatten)]
    pub login: Login,
    /// With --clickhouse: write through Distributed tables over this cluster
    /// (named in the servers' remote_servers): rows are kept in each
    /// table's *_local on each shard (calls_local, streams_local, ...),
    /// sharded by record id.
    #[arg(long, value_name = "NAME", requires = "clickhouse")]
    pub clickhouse_cluster: Option<String>,
    /// With --clickhouse: keep rows the server has not taken in this
    /// directory (created 0700), so they outlive this run and the next run
    /// with the same directory sends them. Without it they wait in memory
    /// (64 MiB at most) and are lost if the run ends before the server answers.
    #[arg(long, value_name = "DIR", requires = "clickhouse")]
    pub clickhouse_spool: Option<PathBuf>,
    /// With --clickhouse-spool: the most it holds, MiB (what does not fit is
    /// dropped and counted).
    #[arg(long, value_name = "MIB", default_value_t = clickhouse::DEFAULT_SPOOL_BYTES >> 20, requires = "clickhouse_spool", value_parser = clap::value_parser!(u64).range(1..))]
    pub clickhouse_spool_mib: u64,
    /// With --clickhouse: keep this many days (at least 2), dropping older
    /// ones (whole partitions, every probe's rows of that day) once an hour
    /// on each server listed; days count back from the newest row written,
    /// never from later than today.
    #[arg(long, value_name = "DAYS", requires = "clickhouse", value_parser = clap::value_parser!(u16).range(2..))]
    pub clickhouse_keep_days: Option<u16>,
    /// With --clickhouse: rows per insert, at most.
    #[arg(long, value_name = "ROWS", default_value_t = clickhouse::DEFAULT_BATCH_ROWS, requires = "clickhouse")]
    pub clickhouse_batch_rows: usize,
    /// With --clickhouse: how long a row waits for its insert to fill, ms.
    #[arg(long, value_name = "MS", default_value_t = clickhouse::DEFAULT_BATCH_INTERVAL.as_millis() as u64, requires = "clickhouse")]
    pub clickhouse_batch_ms: u64,
    /// With --clickhouse: the name every row carries, telling the probes
    /// apart (default: the host's name).
    #[arg(long, value_name = "NAME", requires = "clickhouse")]
    pub probe_name: Option<String>,
}

/// The database, and who we are to the server: for writing and reading.
#[derive(clap::Args, Debug, Clone)]
pub struct Login {
    /// With --clickhouse: the database (letters, digits and _).
    #[arg(long, value_name = "NAME", default_value = clickhouse::DEFAULT_DATABASE, requires = "clickhouse")]
    pub clickhouse_database: String,
    /// With --clickhouse: the user.
    #[arg(long, value_name = "NAME", default_value = "default", requires = "clickhouse")]
    pub clickhouse_user: String,
    /// With --clickhouse: a file holding the user's password (its first
    /// line; a regular file). Without it, the environment variable
    /// CALLIPER_CLICKHOUSE_PASSWORD, if set, gives it.
    #[arg(long, value_name = "FILE", requires = "clickhouse")]
    pub clickhouse_password_file: Option<PathBuf>,
}

impl Login {
    /// The password, from the file or the environment (empty for none).
    pub fn password(&self) -> Result<String> {
        Ok(match &self.clickhouse_password_file {
            Some(f) => calliper_store::files::read_small(f, 4096)
                .with_context(|| format!("cannot read --clickhouse-password-file {}", f.display()))?
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
            None => std::env::var(PASSWORD_VARIABLE).unwrap_or_default(),
        })
    }

    /// The console's reader of the tables at `urls` (comma-separated).
    pub fn reader(&self, urls: &str) -> Result<clickhouse::Reader> {
        let urls: Vec<String> = urls.split(',').map(|u| u.trim().to_string()).collect();
        let reader = clickhouse::Reader::new(
            &urls,
            &self.clickhouse_database,
            &self.clickhouse_user,
            &self.password()?,
        )
        .context("--clickhouse")?;
        Ok(reader)
    }
}

impl ClickHouseArgs {
    /// The sink these options ask for, if any; `lossy` (a live probe):
    /// never wait for a slow server, spool instead. `say` prints what the
    /// delivery thread reports while it runs.
    pub fn sink(
        &self,
        lossy: bool,
        say: Box<dyn Fn(&str) + Send + Sync>,
    ) -> Result<Option<ClickHouse>> {
        let Some(url) = &self.clickhouse else {
            return Ok(None);
        };
        let probe = match &self.probe_name {
            Some(p) => p.clone(),
            None => host_name()?,
        };
        if probe.is_empty() || probe.len() > 255 {
            bail!("--probe-name: give 1 to 255 bytes");
        }
        let mut cfg = Config::new(url, &probe);
        cfg.database = self.login.clickhouse_database.clone();
        cfg.cluster = self.clickhouse_cluster.clone();
        cfg.user = self.login.clickhouse_user.clone();
        cfg.password = self.login.password()?;
        cfg.spool_dir = self.clickhouse_spool.clone();
        cfg.spool_bytes = self.clickhouse_spool_mib.saturating_mul(1 << 20);
        cfg.batch_rows = self.clickhouse_batch_rows;
        cfg.batch_interval = std::time::Duration::from_millis(self.clickhouse_batch_ms);
        cfg.wait_when_slow = !lossy;
        cfg.keep_days = self.clickhouse_keep_days;
        let sink = ClickHouse::open(&cfg, say).context("--clickhouse")?;
        Ok(Some(sink))
    }
}

/// The host's name, as the kernel has it.
fn host_name() -> Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("cannot read the host's name (give --probe-name)")?;
    Ok(name.trim().to_string())
}

#[derive(clap::Args, Debug)]
pub struct SchemaArgs {
    /// The database (letters, digits and _).
    #[arg(long, value_name = "NAME", default_value = clickhouse::DEFAULT_DATABASE)]
    pub clickhouse_database: String,
    /// The tables for writing through Distributed tables over this cluster
    /// (run the statements on every node).
    #[arg(long, value_name = "NAME")]
    pub clickhouse_cluster: Option<String>,
}

/// `calliper clickhouse-schema`: each statement, ended by `;`.
pub fn print_schema(a: &SchemaArgs) -> Result<()> {
    let statements =
        clickhouse::checked_schema(&a.clickhouse_database, a.clickhouse_cluster.as_deref())?;
    let mut out = std::io::stdout().lock();
    for s in statements {
        std::io::Write::write_all(&mut out, format!("{s};\n\n").as_bytes())?;
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct FlushArgs {
    /// Where to send it: `http://HOST:PORT`, or several nodes of one
    /// cluster (with --clickhouse-cluster), comma-separated, tried in turn.
    /// Each batch goes to the table it was meant for, whatever
    /// --clickhouse-database says.
    #[arg(long, value_name = "http://HOST:PORT[,...]", required = true)]
    pub clickhouse: Option<String>,
    #[command(flatten)]
    pub login: Login,
    /// The cluster the probe wrote through (as its --clickhouse-cluster).
    #[arg(long, value_name = "NAME")]
    pub clickhouse_cluster: Option<String>,
    /// The spool directory to send (the probe's --clickhouse-spool).
    #[arg(long, value_name = "DIR", required = true)]
    pub clickhouse_spool: Option<PathBuf>,
}

/// `calliper clickhouse-flush`: sends what waits in the spool, and ends.
pub fn flush(a: &FlushArgs) -> Result<bool> {
    let args = ClickHouseArgs {
        clickhouse: a.clickhouse.clone(),
        login: a.login.clone(),
        clickhouse_cluster: a.clickhouse_cluster.clone(),
        clickhouse_spool: a.clickhouse_spool.clone(),
        clickhouse_spool_mib: clickhouse::DEFAULT_SPOOL_BYTES >> 20,
        clickhouse_keep_days: None,
        clickhouse_batch_rows: clickhouse::DEFAULT_BATCH_ROWS,
        clickhouse_batch_ms: clickhouse::DEFAULT_BATCH_INTERVAL.as_millis() as u64,
        // No new rows are written: the name is never stored.
        probe_name: Some("clickhouse-flush".into()),
    };
    let say = Box::new(|m: &str| eprintln!("calliper: {m}"));
    let Some(mut sink) = args.sink(false, say)? else {
        bail!("give --clickhouse URL: where to send the spool");
    };
    let finished = calliper_store::Sink::finish(&mut sink, "", &serde_json::Value::Null);
    eprintln!("{}", sink.report());
    finished?;
    Ok(sink.report().waiting == 0)
}
