//! `relay run --stats`: the node's counters as JSON, written when it stops
//! and, with `--stats-every`, while it runs, from a thread of their own so
//! a slow disk never holds up forwarding.

use anyhow::{Context, Result};
use calliper_relay::edge::EdgeCounters;
use calliper_relay::udp::UdpNode;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::thread::JoinHandle;

/// A node's counters as `--stats` writes them (`edge` once it has stopped).
pub fn node_stats(node: &mut UdpNode, edge: Option<EdgeCounters>) -> serde_json::Value {
    serde_json::json!({
        "protocol": node.protocol_counters(),
        "socket": node.counters(),
        "links": node.link_stats(),
        "edge": edge,
    })
}

/// Where `--stats` goes, checked before the node starts.
#[derive(Clone)]
struct Target {
    path: PathBuf,
    /// A regular file (replaced whole each time); else a device such as
    /// /dev/null, written directly.
    regular: bool,
}

impl Target {
    /// Refuses the node's own inputs, then creates (0600) or empties the
    /// file by the store's rules: a regular file of one name, never
    /// through a symbolic link, or /dev/null.
    fn check(path: &Path, inputs: &[&Path]) -> Result<Target> {
        if let Some(input) = inputs.iter().find(|i| calliper_store::files::same_file(path, i)) {
            anyhow::bail!(
                "--stats {}: that is {}, an input of the node, not a file to write",
                path.display(),
                input.display()
            );
        }
        let file = calliper_store::create_private(path)
            .with_context(|| format!("cannot write --stats {}", path.display()))?;
        Ok(Target { path: path.to_path_buf(), regular: file.metadata()?.is_file() })
    }

    /// Writes `v` whole: a regular file through a new private file beside
    /// it (created exclusively, never through a link), synced and renamed
    /// over it, so a reader never sees half of it.
    fn write(&self, v: &serde_json::Value) -> Result<()> {
        let failed = || format!("cannot write {}", self.path.display());
        if !self.regular {
            let mut f = calliper_store::create_private(&self.path).with_context(failed)?;
            return f.write_all(v.to_string().as_bytes()).with_context(failed);
        }
        let mut name = self.path.file_name().unwrap_or_default().to_owned();
        name.push(format!(".{}.part", std::process::id()));
        let beside = self.path.with_file_name(name);
        // Exclusive: a file of that name is never ours to write or remove.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&beside)
            .with_context(|| format!("{}: cannot create it", beside.display()))
            .with_context(failed)?;
        let written = file
            .write_all(v.to_string().as_bytes())
            .and_then(|()| file.sync_data())
            .and_then(|()| std::fs::rename(&beside, &self.path));
        if written.is_err() {
            let _ = std::fs::remove_file(&beside);
        }
        written.with_context(failed)
    }
}

/// The `--stats` file and its writer while the node runs.
pub struct StatsWriter {
    target: Option<Target>,
    every: Option<f64>,
    next: f64,
    to_thread: Option<SyncSender<serde_json::Value>>,
    thread: Option<JoinHandle<()>>,
    /// Periodic writes skipped because the last was still being written.
    skipped: u64,
}

impl StatsWriter {
    /// Checks `path` (if any) against the node's inputs (its file `config`
    /// and the key files `cfg` names) and starts the periodic writer if
    /// `every` seconds is set.
    pub fn start(
        path: Option<&Path>,
        every: Option<f64>,
        config: &Path,
        cfg: &calliper_relay::udp::NodeConfig,
    ) -> Result<Self> {
        let keys = cfg.neighbours.iter().filter_map(|n| n.key_file.as_deref());
        let inputs: Vec<&Path> = std::iter::once(config).chain(keys).collect();
        let target = path.map(|p| Target::check(p, &inputs)).transpose()?;
        let (mut to_thread, mut thread) = (None, None);
        if let (Some(t), Some(_)) = (&target, every) {
            let (tx, rx) = sync_channel::<serde_json::Value>(1);
            let t = t.clone();
            thread = Some(std::thread::spawn(move || {
                let mut warned = false;
                for v in rx {
                    if let Err(e) = t.write(&v) {
                        // Once: the node goes on relaying, and the last
                        // write says again if the file is still unwritable.
                        if !std::mem::replace(&mut warned, true) {
                            eprintln!("calliper relay: {e:#} (--stats-every goes on trying)");
                        }
                    }
                }
            }));
            to_thread = Some(tx);
        }
        Ok(StatsWriter {
            target,
            every,
            next: every.unwrap_or(f64::INFINITY),
            to_thread,
            thread,
            skipped: 0,
        })
    }

    /// At `t` seconds into the run: hands the writer the counters if a
    /// periodic write is due (skipped if the last is still being written).
    pub fn tick(&mut self, t: f64, node: &mut UdpNode) {
        let (Some(tx), Some(every)) = (&self.to_thread, self.every) else {
            return;
        };
        if t < self.next {
            return;
        }
        self.next = t + every;
        if let Err(TrySendError::Full(_)) = tx.try_send(node_stats(node, None)) {
            self.skipped += 1;
        }
    }

    /// Writes the final counters (to standard error without --stats).
    pub fn finish(mut self, node: &mut UdpNode, edge: Option<EdgeCounters>) -> Result<()> {
        self.to_thread = None;
        if let Some(h) = self.thread.take() {
            h.join().map_err(|_| anyhow::anyhow!("the --stats-every writer panicked"))?;
        }
        if self.skipped > 0 {
            eprintln!(
                "calliper relay: {} periodic --stats writes skipped (the disk was slower than --stats-every)",
                self.skipped
            );
        }
        let v = node_stats(node, edge);
        match &self.target {
            Some(t) => t.write(&v),
            None => {
                eprintln!("{v}");
                Ok(())
            }
        }
    }
}
