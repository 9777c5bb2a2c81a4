//! Why reading a capture stopped, with the byte offset of the damage.

use std::fmt;
use std::io;

/// Why reading a capture stopped.
#[derive(Debug)]
pub enum CaptureError {
    /// The first bytes match neither pcap nor pcapng.
    NotACapture {
        /// The first four bytes found.
        magic: [u8; 4],
    },
    /// The file ends inside a record.
    Truncated {
        /// Offset of the record that is cut short.
        offset: u64,
        /// Bytes the record needs.
        needed: u64,
        /// Bytes that were there.
        available: u64,
    },
    /// A record's fields are impossible (length too large or too small).
    Corrupt {
        /// Offset of the bad record.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The operating system failed to read.
    Io(io::Error),
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::NotACapture { magic } => {
                let shown: String = magic
                    .iter()
                    .map(|&b| match b {
                        b' '..=b'~' => char::from(b).to_string(),
                        _ => format!("\\x{b:02x}"),
                    })
                    .collect();
                write!(
                    f,
                    "not a capture file (pcap or pcapng): it begins with \"{shown}\""
                )
            }
            CaptureError::Truncated { offset: 0, available: 0, .. } => {
                write!(f, "empty file: no capture header")
            }
            CaptureError::Truncated { offset: 0, available, .. } => {
                write!(f, "too short for a capture header: {available} bytes")
            }
            CaptureError::Truncated { offset, needed, available } => write!(
                f,
                "truncated capture: record at byte offset {offset} needs {needed} bytes, only {available} present"
            ),
            CaptureError::Corrupt { offset, reason } => {
                write!(f, "corrupt capture at byte offset {offset}: {reason}")
            }
            CaptureError::Io(e) => write!(f, "read error: {e}"),
        }
    }
}

impl std::error::Error for CaptureError {}

impl From<io::Error> for CaptureError {
    fn from(e: io::Error) -> Self {
        CaptureError::Io(e)
    }
}
