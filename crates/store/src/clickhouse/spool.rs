//! Batches ClickHouse has not taken yet, oldest first: in files under the
//! configured spool directory (so they outlive the process and are sent by
//! the next run), or in memory when no directory is given. Either way the
//! spool is bounded in bytes; a batch that does not fit is dropped and
//! counted, never waited for.
//!
//! A file is `SEQ-TABLE-ROWS.rows` (its rows as JSON lines), written as
//! `.part` with `O_EXCL | O_NOFOLLOW`, 0600, synced, then renamed, so a
//! crash leaves either a whole batch or a `.part` that is removed on open.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::Table;

/// One batch of rows for one table.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The table the rows are for.
    pub table: Table,
    /// How many.
    pub rows: u64,
    /// The rows, one JSON object per line.
    pub body: Vec<u8>,
}

/// Where a spooled batch is.
enum Held {
    Memory(Batch),
    File {
        path: PathBuf,
        table: Table,
        rows: u64,
        bytes: u64,
    },
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

/// The spool.
pub struct Spool {
    dir: Option<PathBuf>,
    max_bytes: u64,
    held: VecDeque<Held>,
    bytes: u64,
    next_seq: u64,
}

impl Spool {
    /// A spool in `dir` (created 0700 if missing; batches a previous run
    /// left are taken up, oldest first), or in memory; at most `max_bytes`.
    pub fn open(dir: Option<&Path>, max_bytes: u64) -> io::Result<Spool> {
        let mut spool = Spool {
            dir: dir.map(Path::to_path_buf),
            max_bytes,
            held: VecDeque::new(),
            bytes: 0,
            next_seq: 0,
        };
        let Some(dir) = dir else {
            return Ok(spool);
        };
        if !dir.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let meta = fs::symlink_metadata(dir)?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a directory (a symbolic link or a file): not a spool",
                    dir.display()
                ),
            ));
        }
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
                continue;
            }
            if let Some((seq, table, rows)) = parse_name(name) {
                found.push((seq, table, rows, entry.path(), entry.metadata()?.len()));
            }
        }
        found.sort_by_key(|f| f.0);
        for (seq, table, rows, path, bytes) in found {
            spool.next_seq = seq + 1;
            spool.bytes += bytes;
            spool.held.push_back(Held::File {
                path,
                table,
                rows,
                bytes,
            });
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
        if self.bytes + len > self.max_bytes {
            return Err(Refused::Full);
        }
        let held = match &self.dir {
            None => Held::Memory(b),
            Some(dir) => {
                let name = format!("{:020}-{}-{}", self.next_seq, b.table.name(), b.rows);
                let path = dir.join(format!("{name}.rows"));
                write_file(&dir.join(format!("{name}.part")), &path, &b.body)
                    .map_err(Refused::Io)?;
                Held::File {
                    path,
                    table: b.table,
                    rows: b.rows,
                    bytes: len,
                }
            }
        };
        self.next_seq += 1;
        self.bytes += len;
        self.held.push_back(held);
        Ok(())
    }

    /// The oldest batch held (read from its file).
    pub fn front(&self) -> Option<io::Result<Batch>> {
        Some(match self.held.front()? {
            Held::Memory(b) => Ok(b.clone()),
            Held::File {
                path, table, rows, ..
            } => fs::read(path).map(|body| Batch {
                table: *table,
                rows: *rows,
                body,
            }),
        })
    }

    /// Forgets the oldest batch (sent, or dropped), removing its file.
    pub fn pop_front(&mut self) -> io::Result<()> {
        if let Some(h) = self.held.pop_front() {
            self.bytes -= h.bytes();
            if let Held::File { path, .. } = h {
                fs::remove_file(path)?;
            }
        }
        Ok(())
    }
}

/// `SEQ-TABLE-ROWS.rows`.
fn parse_name(name: &str) -> Option<(u64, Table, u64)> {
    let mut parts = name.strip_suffix(".rows")?.split('-');
    let seq = parts.next()?.parse().ok()?;
    let table = Table::from_name(parts.next()?)?;
    let rows = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((seq, table, rows))
}

/// Writes `body` to `part` (exclusively, 0600, never through a link),
/// syncs it, and renames it to `path`.
fn write_file(part: &Path, path: &Path, body: &[u8]) -> io::Result<()> {
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
    fs::rename(part, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: u8) -> Batch {
        Batch {
            table: if n.is_multiple_of(2) {
                Table::Calls
            } else {
                Table::Streams
            },
            rows: n as u64,
            body: vec![b'a' + n; 10],
        }
    }

    #[test]
    fn batches_come_back_in_order_and_outlive_the_spool() {
        let dir = std::env::temp_dir().join(format!("calliper-spool-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
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
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
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
}
