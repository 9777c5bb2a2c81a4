//! A call's capture file: created 0600 (in directories made 0700) with a
//! pcap header, then packet records; where it goes is
//! [`calliper_store::recordings`].

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

pub use calliper_store::recordings::{day_dir, relative_path, safe_call_id};

/// Largest packet a recording keeps whole (the pcap header's snap length).
pub const SNAPLEN: u32 = 262_144;
/// Creates `dir` (and its parents) readable by its owner only.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Opens a call's file: created 0600 with a pcap header (nanosecond
/// times, `link_type`) when new, else for appending (a call whose file was
/// closed to make room for others). Returns the file, whether it was new
/// and its link type (an existing file's, from its header).
pub fn open(path: &Path, link_type: u16) -> std::io::Result<(std::fs::File, bool, u16)> {
    if let Some(parent) = path.parent() {
        private_dir(parent)?;
        // The day directory must be one of ours, not a link to elsewhere.
        if !std::fs::symlink_metadata(parent)?.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a directory (a symbolic link?)",
                parent.display()
            )));
        }
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(&header(link_type))?;
            Ok((f, true, link_type))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Never through a symbolic link someone put in its place.
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)?;
            if !f.metadata()?.is_file() {
                return Err(std::io::Error::other(format!(
                    "{} is not a file",
                    path.display()
                )));
            }
            let mut h = [0u8; 24];
            std::io::Read::read_exact(&mut f, &mut h)?;
            let link = u32::from_le_bytes([h[20], h[21], h[22], h[23]]) as u16;
            Ok((f, false, link))
        }
        Err(e) => Err(e),
    }
}

/// A pcap file header: nanosecond resolution, little-endian.
fn header(link_type: u16) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
    h[20..24].copy_from_slice(&u32::from(link_type).to_le_bytes());
    h
}

/// A packet record: its header and the captured bytes (cut at [`SNAPLEN`]).
pub fn record(out: &mut Vec<u8>, ts_ns: i64, frame: &[u8], orig_len: u32) {
    let ts = ts_ns.max(0);
    let caplen = frame.len().min(SNAPLEN as usize);
    out.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
    out.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
    out.extend_from_slice(&(caplen as u32).to_le_bytes());
    out.extend_from_slice(&orig_len.max(caplen as u32).to_le_bytes());
    out.extend_from_slice(&frame[..caplen]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_in_the_recordings_are_not_followed() {
        let dir = std::env::temp_dir().join(format!("calliper-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("day")).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("day/call.pcap")).unwrap();
        assert!(open(&dir.join("day/call.pcap"), 1).is_err());
        std::os::unix::fs::symlink(dir.join("day"), dir.join("linked-day")).unwrap();
        assert!(open(&dir.join("linked-day/new.pcap"), 1).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        // A file of ours is appended to, its link type read back.
        let (_, new, _) = open(&dir.join("day/own.pcap"), 113).unwrap();
        assert!(new);
        let (_, new, link) = open(&dir.join("day/own.pcap"), 1).unwrap();
        assert!(!new && link == 113);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
