//! A call's capture file: created 0600 (in directories made 0700) with a
//! pcap header, then packet records; where it goes is
//! [`calliper_store::callpcap_paths`].

use calliper_capture::pcap_out::{self, Resolution};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub use calliper_store::callpcap_paths::{day_dir, relative_path, safe_call_id};

/// Largest packet a recording keeps whole (the pcap header's snap length).
pub const SNAPLEN: u32 = 262_144;
pub use calliper_store::files::private_dir;

/// Creates a call's file, 0600, with a pcap header (nanosecond times,
/// `link_type`): never over anything already there (a file, a link, a
/// FIFO), which is `AlreadyExists`. The day directory must be a directory
/// of its own, not a link.
pub fn create(path: &Path, link_type: u16) -> std::io::Result<std::fs::File> {
    if let Some(parent) = path.parent() {
        private_dir(parent)?;
        if !std::fs::symlink_metadata(parent)?.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a directory (a symbolic link?)",
                parent.display()
            )));
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(&pcap_out::file_header(u32::from(link_type), SNAPLEN, Resolution::Nanos))?;
    Ok(f)
}

/// Opens a file this run created, to add to it: never through a link, and
/// only a regular file (a FIFO put in its place would block the writer).
pub fn append(path: &Path) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other(format!("{} is not a file", path.display())));
    }
    Ok(f)
}

/// A packet record: its header and the captured bytes (cut at [`SNAPLEN`]).
pub fn record(out: &mut Vec<u8>, ts_ns: i64, frame: &[u8], orig_len: u32) {
    let caplen = frame.len().min(SNAPLEN as usize);
    out.extend_from_slice(&pcap_out::record_header(
        ts_ns,
        caplen as u32,
        orig_len,
        Resolution::Nanos,
    ));
    out.extend_from_slice(&frame[..caplen]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_planted_files_are_never_written_through() {
        let dir = std::env::temp_dir().join(format!("calliper-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("day")).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("day/call.pcap")).unwrap();
        let e = create(&dir.join("day/call.pcap"), 1).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert!(append(&dir.join("day/call.pcap")).is_err());
        std::os::unix::fs::symlink(dir.join("day"), dir.join("linked-day")).unwrap();
        assert!(create(&dir.join("linked-day/new.pcap"), 1).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        let fifo = dir.join("day/fifo.pcap");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(append(&fifo).is_err(), "a FIFO must be refused, not waited on");
        create(&dir.join("day/own.pcap"), 113).unwrap();
        append(&dir.join("day/own.pcap")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
