//! Where recordings live: one pcap file per call under `DIR/YYYY-MM-DD/`
//! (the UTC day of its INVITE), named `HHMMSS.mmm_N_CALLID.pcap` (the
//! INVITE's time, the call's number in its run, its Call-ID made safe for
//! a file name). Written by `calliper-recorder`; found again from a stored
//! call's Call-ID and INVITE time.

use std::path::{Path, PathBuf};

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
    crate::rfc3339(ns)[..10].to_string()
}

/// A call's file, relative to the recording directory:
/// `YYYY-MM-DD/HHMMSS.mmm_SERIAL_CALLID.pcap`.
pub fn relative_path(start_ns: i64, serial: u64, call_id: &str) -> PathBuf {
    let t = crate::rfc3339(start_ns);
    // 2026-11-24T10:15:00.123456789Z → 101500.123
    let clock: String = t[11..23].chars().filter(|c| *c != ':').collect();
    Path::new(&day_dir(start_ns)).join(format!("{clock}_{serial}_{}.pcap", safe_call_id(call_id)))
}

/// The recordings of the call with this Call-ID and INVITE time under
/// `dir` (normally one; two runs may have recorded the same call).
pub fn find(dir: &Path, start_ns: i64, call_id: &str) -> Vec<PathBuf> {
    let name = relative_path(start_ns, 0, call_id);
    let Some(file) = name.file_name().map(|f| f.to_string_lossy().to_string()) else {
        return Vec::new();
    };
    // `HHMMSS.mmm_0_CALLID.pcap`: the time before the number, the Call-ID after.
    let (Some((clock, _)), Some((_, rest))) = (file.split_once('_'), file.split_once("_0_")) else {
        return Vec::new();
    };
    let (prefix, suffix) = (format!("{clock}_"), format!("_{rest}"));
    let day = dir.join(day_dir(start_ns));
    let mut found: Vec<PathBuf> = std::fs::read_dir(&day)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.starts_with(&prefix)
                && n.ends_with(&suffix)
                && n[prefix.len()..n.len() - suffix.len()]
                    .bytes()
                    .all(|b| b.is_ascii_digit())
        })
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
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

    #[test]
    fn a_recording_is_found_by_call_id_and_time_only() {
        let dir = std::env::temp_dir().join(format!("calliper-find-{}", std::process::id()));
        let t = 1_795_310_759_440_067_000;
        for (serial, id) in [(7, "a@b"), (8, "a@b.c"), (12, "a@b")] {
            let p = dir.join(relative_path(t, serial, id));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"").unwrap();
        }
        let found = find(&dir, t, "a@b");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(find(&dir, t + 1_000_000, "a@b").is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
