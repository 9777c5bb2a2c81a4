//! Capture files read one after another as one capture: the one reading
//! loop of `analyze`, `probe --read` and the engine's in-process tests.

use crate::{Batch, CaptureReader};
use std::fmt;
use std::fs::File;
use std::io::{Read, Take};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Why the inputs could not be opened, naming the file.
#[derive(Debug)]
pub struct OpenError(String);

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OpenError {}

/// An [`OpenError`] saying `what` of `path`, with the cause.
fn open_error(what: &str, path: &Path, cause: impl fmt::Display) -> OpenError {
    OpenError(format!("{what} {}: {cause}", path.display()))
}

/// Files read in the order given, as one capture. A file that cannot be
/// read is reported and skipped, a damaged one is read up to the damage,
/// and a file that starts before the previous one ended is reported (its
/// packets are still read in file order). A regular file is read up to the
/// length it had when opened: one still being written is read as it was.
pub struct Inputs {
    rest: std::vec::IntoIter<(PathBuf, Take<File>)>,
    /// The file being read, by name.
    current: Option<(String, CaptureReader<Take<File>>)>,
    /// Whether the current file has given a batch yet.
    started: bool,
    /// Bytes read from the files already finished.
    done_bytes: u64,
    /// The latest capture time of the finished files, and of the current one.
    files_end: i64,
    file_end: i64,
    /// False once a file could not be opened or was damaged.
    clean: bool,
    /// The files' sizes, summed when they were opened.
    total_bytes: u64,
    /// The paths and lengths as opened, when every one is a regular file
    /// (another reader can read the same bytes: [`Inputs::reopen`]).
    reopenable: Option<Vec<(PathBuf, u64)>>,
    /// Files reopened when their turn comes, last first.
    pending: Vec<(PathBuf, u64)>,
    /// Why a reopened file could not be opened.
    open_failure: Option<OpenError>,
}

impl Inputs {
    /// Opens every file before any is read, so that a typo or a file that
    /// is not a capture fails before any work; a directory is refused.
    pub fn open(paths: &[PathBuf]) -> Result<Inputs, OpenError> {
        let mut files = Vec::new();
        let mut total_bytes = 0;
        let mut regular = Some(Vec::new());
        for path in paths {
            let f = File::open(path).map_err(|e| open_error("cannot open", path, e))?;
            let meta = f.metadata().map_err(|e| open_error("cannot read", path, e))?;
            if meta.is_dir() {
                return Err(OpenError(format!(
                    "{} is a directory, not a capture file",
                    path.display()
                )));
            }
            if meta.is_file() {
                // A pipe's start cannot be read twice: it is checked when read.
                let mut first = [0u8; 4];
                let n = f.read_at(&mut first, 0).map_err(|e| open_error("cannot read", path, e))?;
                crate::check_start(&first[..n])
                    .map_err(|e| OpenError(format!("{}: {e}", path.display())))?;
            }
            let limit = if meta.is_file() { meta.len() } else { u64::MAX };
            match (&mut regular, meta.is_file()) {
                (Some(r), true) => r.push((path.clone(), meta.len())),
                _ => regular = None,
            }
            total_bytes += meta.len();
            files.push((path.clone(), f.take(limit)));
        }
        Ok(Inputs { total_bytes, reopenable: regular, ..Inputs::new(files) })
    }

    /// The same regular files again, for another reader of the same
    /// capture: each opened when its turn comes (so readers together hold
    /// few descriptors) and read up to the length it had when first opened
    /// (from [`Inputs::reopenable`]). A file that cannot be opened ends the
    /// reading ([`Inputs::open_failure`]): this reader would see another
    /// capture than the first.
    pub fn reopen(files: &[(PathBuf, u64)]) -> Inputs {
        let total_bytes = files.iter().map(|f| f.1).sum();
        Inputs {
            total_bytes,
            reopenable: Some(files.to_vec()),
            pending: files.iter().rev().cloned().collect(),
            ..Inputs::new(Vec::new())
        }
    }

    /// The files, in the order to read them.
    fn new(files: Vec<(PathBuf, Take<File>)>) -> Inputs {
        Inputs {
            total_bytes: 0,
            rest: files.into_iter(),
            current: None,
            started: false,
            done_bytes: 0,
            files_end: i64::MIN,
            file_end: i64::MIN,
            clean: true,
            reopenable: None,
            pending: Vec::new(),
            open_failure: None,
        }
    }

    /// The next file to read: the next opened one, or the next to reopen.
    fn next_file(&mut self) -> Option<(PathBuf, Take<File>)> {
        if let Some(f) = self.rest.next() {
            return Some(f);
        }
        let (path, len) = self.pending.pop()?;
        match File::open(&path) {
            Ok(f) => Some((path, f.take(len))),
            Err(e) => {
                self.open_failure = Some(open_error("cannot open", &path, e));
                self.pending.clear();
                None
            }
        }
    }

    /// Why a file [`Inputs::reopen`] was to read could not be opened: the
    /// reading ended there.
    pub fn open_failure(&self) -> Option<&OpenError> {
        self.open_failure.as_ref()
    }

    /// The paths and lengths as opened, when each is a regular file that
    /// another reader can open and read from its start (not a pipe).
    pub fn reopenable(&self) -> Option<Vec<(PathBuf, u64)>> {
        self.reopenable.clone()
    }

    /// The next batch of at most `max` packets, or None after the last
    /// file. Problems are told to `say`, one line each.
    pub fn next_batch(&mut self, max: usize, say: &mut dyn FnMut(&str)) -> Option<Batch<'_>> {
        loop {
            if self.current.is_none() {
                let (path, file) = self.next_file()?;
                let name = path.display().to_string();
                match CaptureReader::new(file) {
                    Ok(r) => self.current = Some((name, r)),
                    Err(e) => {
                        say(&format!("calliper: {name}: {e}"));
                        self.clean = false;
                    }
                }
                self.started = false;
                continue;
            }
            let (name, reader) = self.current.as_mut()?;
            let read = match reader.next_batch(max) {
                Ok(b) => b.len(),
                Err(e) => {
                    say(&format!("calliper: {name}: {e}; results up to this point are kept"));
                    self.clean = false;
                    0
                }
            };
            if read == 0 {
                self.done_bytes += reader.position();
                self.files_end = self.files_end.max(self.file_end);
                self.current = None;
                continue;
            }
            let (name, reader) = self.current.as_ref()?;
            let batch = reader.last_batch();
            let first = batch.times().next().unwrap_or(i64::MAX);
            if !self.started && first < self.files_end {
                say(&format!(
                    "calliper: warning: {name} starts {:.3} s before the previous file ended: \
                     files are read as one capture in the order given, so give them in time order",
                    // In floating point: a pcapng interface's offset can put
                    // a time at i64::MIN, and the difference would overflow.
                    (self.files_end as f64 - first as f64) / 1e9
                ));
            }
            self.started = true;
            self.file_end = batch.times().fold(self.file_end, i64::max);
            return Some(batch);
        }
    }

    /// Bytes read so far, over all files (for progress).
    pub fn position(&self) -> u64 {
        self.done_bytes + self.current.as_ref().map_or(0, |(_, r)| r.position())
    }

    /// The files' sizes together.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The name of the file being read (empty between files).
    pub fn name(&self) -> &str {
        self.current.as_ref().map_or("", |(n, _)| n)
    }

    /// False once a file could not be opened or was damaged.
    pub fn clean(&self) -> bool {
        self.clean
    }
}
