//! Where a call's capture goes and what it starts with: one pcap file per
//! call under `DIR/YYYY-MM-DD/` (the day of its INVITE, UTC), named by the
//! INVITE's time, the call's number in the run and its Call-ID made safe
//! for a file name; created 0600 in directories made 0700.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest packet a recording keeps whole (the pcap header's snap length).
pub const SNAPLEN: u32 = 262_144;
/// Bytes of a Call-ID kept in a file name.
const NAME_CALL_ID: usize = 64;

/// The file name's Call-ID: ASCII letters, digits, `.`, `-` and `_` kept,
/// anything else (a `/`, `..`, spaces, bytes beyond ASCII) as `_`, so
/// nothing from a packet can name another directory.
pub fn safe_call_id(call_id: &str) -> String {
    call_id
        .bytes()
        .take(NAME_CALL_ID)
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => b as char,
            // A dot only inside a name: never `.` or `..` or a hidden file.
            b'.' => '.',
            _ => '_',
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_string()
}

/// The day directory's name for a time (ns since the epoch, UTC).
pub fn day_dir(ns: i64) -> String {
    calliper_store::rfc3339(ns)[..10].to_string()
}

/// A call's file, relative to the recording directory:
/// `YYYY-MM-DD/HHMMSS.mmm_SERIAL_CALLID.pcap`.
pub fn relative_path(start_ns: i64, serial: u64, call_id: &str) -> PathBuf {
    let t = calliper_store::rfc3339(start_ns);
    // 2026-11-24T10:15:00.123456789Z → 101500.123
    let clock: String = t[11..23].chars().filter(|c| *c != ':').collect();
    Path::new(&day_dir(start_ns)).join(format!("{clock}_{serial}_{}.pcap", safe_call_id(call_id)))
}

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
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(&header(link_type))?;
            Ok((f, true, link_type))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut h = [0u8; 24];
            std::io::Read::read_exact(&mut std::fs::File::open(path)?, &mut h)?;
            let link = u32::from_le_bytes([h[20], h[21], h[22], h[23]]) as u16;
            let f = std::fs::OpenOptions::new().append(true).open(path)?;
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
    fn packet_text_cannot_leave_the_directory() {
        for hostile in [
            "../../etc/passwd",
            "/abs",
            "..",
            ".hidden",
            "a\0b",
            "é/x",
            "a b",
        ] {
            let name = safe_call_id(hostile);
            assert!(
                !name.contains('/') && !name.starts_with('.') && name.is_ascii(),
                "{hostile:?} → {name:?}"
            );
        }
        assert_eq!(safe_call_id("1-836@127.0.1.1"), "1-836_127.0.1.1");
        assert_eq!(safe_call_id(&"x".repeat(500)).len(), 64);
        let p = relative_path(1_795_310_759_440_067_000, 7, "../x");
        assert_eq!(p, Path::new("2026-11-22/012559.440_7__x.pcap"));
        assert_eq!(p.components().count(), 2);
    }
}
