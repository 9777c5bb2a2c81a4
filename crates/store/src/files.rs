//! Files the tools write and the small files they read, opened one way
//! everywhere (docs/hostile-input.md, files):
//!
//! - an output is never opened through a symbolic link, never a FIFO,
//!   socket, device or directory (`/dev/null` aside), never a file with
//!   other names (a hard link: writing would change the file under its
//!   other names, perhaps an input or another tool's), is created 0600 (an
//!   existing one made 0600), and is cut to nothing only once it has passed
//!   these checks, so a refused path is left as it was;
//! - a file read whole (a configuration, a token) must be a regular file,
//!   opened without blocking, so a FIFO in its place cannot hang start-up;
//! - two paths are the same file when their device and inode are, so a
//!   hard link to an input is known for what it is.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{} {why}", path.display()))
}

/// Opens an output for writing (`append`: at its end) by the rules above.
fn open_output(path: &Path, append: bool) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(append)
        .write(true)
        .append(append)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refused(path, "is a symbolic link: refusing to write through it"),
            Some(libc::ENXIO) => refused(path, "is a FIFO or socket: not a file to write"),
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let null = std::fs::metadata("/dev/null")
            .is_ok_and(|n| (n.dev(), n.ino()) == (meta.dev(), meta.ino()));
        if null {
            return Ok(file);
        }
        return Err(refused(
            path,
            "is not a regular file (a FIFO, device or directory): not a file to write",
        ));
    }
    if meta.nlink() > 1 {
        return Err(refused(
            path,
            "has other names (hard links): refusing to write over a file that is also elsewhere",
        ));
    }
    if meta.permissions().mode() & 0o777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    if !append {
        file.set_len(0)?;
    }
    Ok(file)
}

/// Creates (or empties) an output readable and writable by its owner only
/// (0600: call records name people and numbers), by the rules above.
pub fn create_private(path: &Path) -> io::Result<File> {
    open_output(path, false)
}

/// Opens an output for appending, by the rules above: a restarted probe
/// adds to its output. A last line cut short (a full disk, a crash) is
/// ended first, so the next record starts on a line of its own.
pub fn append_private(path: &Path) -> io::Result<File> {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let mut f = open_output(path, true)?;
    let len = f.metadata()?.len();
    let mut last = [0u8];
    if len > 0 && f.read_at(&mut last, len - 1)? == 1 && last[0] != b'\n' {
        f.write_all(b"\n")?;
    }
    Ok(f)
}

/// A small file's text, at most `max` bytes: a regular file only (a FIFO,
/// device or directory is refused at once, never waited on).
pub fn read_small(path: &Path, max: u64) -> io::Result<String> {
    let file = open_regular(path, 0)?;
    let mut text = String::new();
    file.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(refused(path, &format!("is larger than {max} bytes")));
    }
    Ok(text)
}

/// Opens `path` for reading without waiting (a FIFO would), and only if
/// what was opened is a regular file (a device or directory is refused).
/// `flags`: more open flags (`O_NOFOLLOW`).
fn open_regular(path: &Path, flags: i32) -> io::Result<File> {
    let file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | flags).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(refused(path, "is not a regular file (a FIFO, device or directory)"));
    }
    Ok(file)
}

/// Creates `dir` (and its parents) readable by its owner only; a file
/// already at `dir` is said to be one, not "File exists".
pub fn private_dir(dir: &Path) -> io::Result<()> {
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(io::Error::other("a file, not a directory"));
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Whether `path` is a SQLite database (a regular file of at least one
/// 512-byte page, beginning with SQLite's header string): a file a report
/// must not be written over. Opened without waiting and judged by what was
/// opened, so a FIFO, a terminal or a /proc file is never read.
pub fn is_sqlite_database(path: &Path) -> bool {
    let Ok(mut file) = open_regular(path, libc::O_NOFOLLOW) else { return false };
    let mut head = [0u8; 16];
    file.metadata().is_ok_and(|m| m.len() >= 512)
        && file.read_exact(&mut head).is_ok()
        && &head == b"SQLite format 3\0"
}

/// True when both paths name one existing file (by device and inode: any
/// name, hard links included).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_refuse_links_fifos_and_devices_and_leave_them_as_they_were() {
        let dir = std::env::temp_dir().join(format!("calliper-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("precious");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("link")).unwrap();
        assert!(create_private(&dir.join("link")).is_err());
        assert!(append_private(&dir.join("link")).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo (coreutils) is needed");
        assert!(create_private(&fifo).is_err(), "no reader: refused, not blocked");
        assert!(read_small(&fifo, 1 << 20).is_err(), "a FIFO is not read");
        assert!(create_private(&dir).is_err());
        assert!(create_private(Path::new("/dev/null")).is_ok());
        std::fs::hard_link(&target, dir.join("hard")).unwrap();
        assert!(same_file(&target, &dir.join("hard")));
        assert!(create_private(&dir.join("hard")).is_err(), "a hard link is refused");
        assert!(append_private(&dir.join("hard")).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(!same_file(&target, &dir.join("fifo")));
        let f = create_private(&dir.join("new")).unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read_small(&target, 100).unwrap(), "precious");
        assert!(read_small(&target, 3).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
