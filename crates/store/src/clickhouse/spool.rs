//! Batches ClickHouse has not taken yet, oldest first: in files under the
//! configured spool directory (so they outlive the process and are sent by
//! the next run), or in memory when no directory is given. Either way the
//! spool is bounded in bytes; a batch that does not fit is dropped and
//! counted, never waited for.
//!
//! A batch is the request's whole body: its insert statement (so a batch
//! spooled by an older version goes into the columns it was made for),
//! then its rows in RowBinary. A file is `SEQ-TABLE-ROWS.rows`, written as
//! `.part` with `O_EXCL | O_NOFOLLOW`, 0600, synced, renamed, and the
//! directory synced, so a crash leaves either a whole batch or a `.part`
//! that is removed on open. A batch the server refuses for good is renamed
//! `.rejected` and kept for the operator (its bytes still count).
//!
//! The directory must be this user's alone (0700), and one process uses
//! it at a time (a lock file): another user could otherwise plant batches
//! or links, and two probes would send each other's batches twice.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::Table;

/// One batch of rows for one table.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The table the rows are for.
    pub table: Table,
    /// How many.
    pub rows: u64,
    /// The insert statement, then the rows.
    pub body: Vec<u8>,
}

/// Where a spooled batch is.
enum Held {
    Memory(Batch),
    File { path: PathBuf, table: Table, rows: u64, bytes: u64 },
}

impl Held {
    fn bytes(&self) -> u64 {
        match self {
            Held::Memory(b) => b.body.len() as u64,
            Held::File { bytes, .. } => *bytes,
        }
    }
    fn rows(&self) -> u64 {
        match self {
            Held::Memory(b) => b.rows,
            Held::File { rows, .. } => *rows,
        }
    }
}

/// Why a batch was not spooled.
#[derive(Debug)]
pub enum Refused {
    /// The spool holds its most bytes already.
    Full,
    /// Writing the file failed (a full disk, permissions).
    Io(io::Error),
}

/// Rows a spool file's name may claim: more is not a batch of ours.
const MOST_ROWS: u64 = 1 << 32;

/// The spool.
pub struct Spool {
    dir: Option<PathBuf>,
    /// Held while the spool is open: one process per directory.
    _lock: Option<File>,
    max_bytes: u64,
    held: VecDeque<Held>,
    bytes: u64,
    next_seq: u64,
}

fn refused(dir: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {why}", dir.display()))
}

/// This process's user (the owner of `/proc/self`).
fn own_uid() -> io::Result<u32> {
    Ok(fs::metadata("/proc/self")?.uid())
}

impl Spool {
    /// A spool in `dir` (created 0700 if missing; batches a previous run
    /// left are taken up, oldest first), or in memory; at most `max_bytes`.
    pub fn open(dir: Option<&Path>, max_bytes: u64) -> io::Result<Spool> {
        let mut spool = Spool {
            dir: dir.map(Path::to_path_buf),
            _lock: None,
            max_bytes,
            held: VecDeque::new(),
            bytes: 0,
            next_seq: 0,
        };
        let Some(dir) = dir else {
            return Ok(spool);
        };
        if fs::symlink_metadata(dir).is_err() {
            // Only the last part: a mistyped path makes no tree of directories.
            fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| {
                refused(dir, &format!("cannot create the spool ({e}; its parent must exist)"))
            })?;
        }
        let meta = fs::symlink_metadata(dir)?;
        if !meta.is_dir() {
            return Err(refused(dir, "not a directory (a symbolic link or a file): not a spool"));
        }
        let uid = own_uid()?;
        if meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
            return Err(refused(
                dir,
                &format!(
                    "owned by user {} with mode {:o}: a spool must be this user's ({uid}) alone (chmod 700)",
                    meta.uid(),
                    meta.permissions().mode() & 0o777
                ),
            ));
        }
        let lock = open_private(&dir.join(".lock"), true)?;
        // A child forked by any thread of this process holds a copy of the
        // lock until it execs: a lock held briefly is waited for, up to 1 s.
        let mut tries = 0;
        while lock.try_lock().is_err() {
            tries += 1;
            if tries == 20 {
                return Err(refused(dir, "another process uses this spool (its .lock is held)"));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        spool._lock = Some(lock);
        let mut found = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            // Only regular files of our own naming: a link placed here is not followed.
            if !entry.file_type()?.is_file() {
                continue;
            }
            if name.ends_with(".part") {
                fs::remove_file(entry.path())?;
            } else if let Some(rejected) = name.strip_suffix(".rejected") {
                spool.bytes += entry.metadata()?.len();
                // Numbered after those set aside too: a new batch never takes a kept one's name.
                if let Some((seq, ..)) = parse_name(&format!("{rejected}.rows")) {
                    spool.next_seq = spool.next_seq.max(seq.saturating_add(1));
                }
            } else if let Some((seq, table, rows)) = parse_name(name) {
                found.push((seq, table, rows, entry.path(), entry.metadata()?.len()));
            }
        }
        found.sort_by_key(|f| f.0);
        for (seq, table, rows, path, bytes) in found {
            spool.next_seq = spool.next_seq.max(seq.saturating_add(1));
            spool.bytes += bytes;
            spool.held.push_back(Held::File { path, table, rows, bytes });
        }
        Ok(spool)
    }

    /// True when batches are kept in files (they outlive the process).
    pub fn on_disk(&self) -> bool {
        self.dir.is_some()
    }

    /// Batches held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Rows held.
    pub fn rows(&self) -> u64 {
        self.held.iter().map(Held::rows).sum()
    }

    /// Keeps a batch after those held.
    pub fn push(&mut self, b: Batch) -> Result<(), Refused> {
        let len = b.body.len() as u64;
        if self.bytes.saturating_add(len) > self.max_bytes {
            return Err(Refused::Full);
        }
        let held = match &self.dir {
            None => Held::Memory(b),
            Some(dir) => {
                let name = format!("{:020}-{}-{}", self.next_seq, b.table.name(), b.rows);
                let path = dir.join(format!("{name}.rows"));
                write_file(dir, &dir.join(format!("{name}.part")), &path, &b.body)
                    .map_err(Refused::Io)?;
                Held::File { path, table: b.table, rows: b.rows, bytes: len }
            }
        };
        self.next_seq += 1;
        self.bytes += len;
        self.held.push_back(held);
        Ok(())
    }

    /// The oldest batch held (read from its file: a regular file of this
    /// user's with one name, no larger than the spool, never through a
    /// link, never blocking on a FIFO put in its place).
    pub fn front(&self) -> Option<io::Result<Batch>> {
        Some(match self.held.front()? {
            Held::Memory(b) => Ok(b.clone()),
            Held::File { path, table, rows, .. } => read_private(path, self.max_bytes)
                .map(|body| Batch { table: *table, rows: *rows, body }),
        })
    }

    /// Forgets the oldest batch (sent, or unreadable), removing its file.
    pub fn pop_front(&mut self) -> io::Result<()> {
        if let Some(h) = self.held.pop_front() {
            self.bytes -= h.bytes();
            if let Held::File { path, .. } = h {
                fs::remove_file(path)?;
            }
        }
        Ok(())
    }

    /// Sets the oldest batch aside for good: its file is renamed
    /// `.rejected` and kept (its bytes still count); in memory it is gone.
    pub fn reject_front(&mut self) -> io::Result<()> {
        match self.held.pop_front() {
            Some(Held::File { path, .. }) => fs::rename(&path, path.with_extension("rejected")),
            Some(h @ Held::Memory(_)) => {
                self.bytes -= h.bytes();
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// `SEQ-TABLE-ROWS.rows`.
fn parse_name(name: &str) -> Option<(u64, Table, u64)> {
    let mut parts = name.strip_suffix(".rows")?.split('-');
    let seq = parts.next()?.parse().ok().filter(|&s| s < u64::MAX)?;
    let table = Table::from_name(parts.next()?)?;
    let rows = parts.next()?.parse().ok().filter(|&r| r <= MOST_ROWS)?;
    parts.next().is_none().then_some((seq, table, rows))
}

/// Opens (`create`: creating) a file of the spool, never through a link
/// and never waiting on a FIFO, and checks it is a regular file of this
/// user's with no other name.
fn open_private(path: &Path, create: bool) -> io::Result<File> {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() || m.nlink() != 1 || m.uid() != own_uid()? {
        return Err(refused(path, "not a regular file of this user's with one name"));
    }
    Ok(f)
}

fn read_private(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let f = open_private(path, false)?;
    if f.metadata()?.len() > max {
        return Err(refused(path, "larger than the spool"));
    }
    let mut body = Vec::new();
    f.take(max).read_to_end(&mut body)?;
    Ok(body)
}

/// Writes `body` to `part` (exclusively, 0600, never through a link),
/// syncs it, renames it to `path`, and syncs the directory.
fn write_file(dir: &Path, part: &Path, path: &Path, body: &[u8]) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(part)?;
    let written = f.write_all(body).and_then(|()| f.sync_all());
    if let Err(e) = written {
        let _ = fs::remove_file(part);
        return Err(e);
    }
    fs::rename(part, path)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: u8) -> Batch {
        Batch {
            table: if n.is_multiple_of(2) { Table::CALLS } else { Table::STREAMS },
            rows: n as u64,
            body: vec![b'a' + n; 10],
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("calliper-spool-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn batches_come_back_in_order_and_outlive_the_spool() {
        let dir = scratch("order");
        let mut s = Spool::open(Some(&dir), 1000).unwrap();
        for n in 0..3 {
            s.push(batch(n)).unwrap();
        }
        fs::write(dir.join("00000000000000000009-calls-1.part"), b"cut").unwrap();
        drop(s);
        let mut s = Spool::open(Some(&dir), 1000).unwrap();
        assert_eq!((s.len(), s.rows()), (3, 3));
        assert!(!dir.join("00000000000000000009-calls-1.part").exists());
        s.push(batch(3)).unwrap();
        for n in 0..4 {
            assert_eq!(s.front().unwrap().unwrap(), batch(n));
            s.pop_front().unwrap();
        }
        assert!(s.front().is_none());
        drop(s);
        // Only the lock file is left.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_new_batch_never_takes_the_name_of_one_set_aside() {
        let dir = scratch("aside");
        let mut s = Spool::open(Some(&dir), 1000).unwrap();
        s.push(batch(2)).unwrap();
        s.reject_front().unwrap();
        drop(s);
        let mut s = Spool::open(Some(&dir), 1000).unwrap();
        s.push(batch(2)).unwrap();
        let names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != ".lock")
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_full_spool_refuses_and_memory_holds_in_order() {
        let mut s = Spool::open(None, 25).unwrap();
        s.push(batch(1)).unwrap();
        s.push(batch(2)).unwrap();
        assert!(matches!(s.push(batch(3)), Err(Refused::Full)));
        assert_eq!(s.front().unwrap().unwrap(), batch(1));
        s.pop_front().unwrap();
        s.push(batch(3)).unwrap();
        assert_eq!(s.rows(), 5);
    }

    #[test]
    fn a_shared_or_open_directory_and_planted_files_are_refused() {
        let dir = scratch("trust");
        let s = Spool::open(Some(&dir), 1000).unwrap();
        // One process at a time.
        let e = Spool::open(Some(&dir), 1000).err().unwrap();
        assert!(e.to_string().contains("another process"), "{e}");
        drop(s);
        // A directory others may write to.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let e = Spool::open(Some(&dir), 1000).err().unwrap();
        assert!(e.to_string().contains("chmod 700"), "{e}");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        // A link and a FIFO named as batches; an absurd row count.
        std::os::unix::fs::symlink("/etc/passwd", dir.join("00000000000000000000-calls-1.rows"))
            .unwrap();
        let fifo = dir.join("00000000000000000001-calls-1.rows");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        fs::write(dir.join("00000000000000000002-calls-99999999999999999999.rows"), b"x").unwrap();
        let s = Spool::open(Some(&dir), 1000).unwrap();
        assert_eq!(s.len(), 0);
        drop(s);
        // A FIFO swapped in after opening is refused, not waited on.
        let mut s = Spool::open(Some(&dir), 1000).unwrap();
        s.push(batch(2)).unwrap();
        let path = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("-calls-2.rows"))
            .unwrap();
        fs::remove_file(&path).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&path).status().unwrap().success());
        assert!(s.front().unwrap().is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
