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
