//! Where callpcaps (recordings) live: one pcap file per call under `DIR/YYYY-MM-DD/`
//! (the UTC day of its INVITE), named `HHMMSS.mmm_N_HASH_CALLID.pcap`: the
//! INVITE's time, the call's number in its run (with `-K` when a file of
//! that name was already there: another run's, or not ours), a hash of the
//! whole Call-ID (calls whose Call-IDs read alike once made safe stay
//! apart) and the Call-ID made safe for a file name. Written by
//! `calliper-callpcap`; found again from a stored call's Call-ID and
//! INVITE time.

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

/// FNV-1a (32 bits) of the whole Call-ID, as 8 hex digits.
fn call_id_hash(call_id: &str) -> String {
    let h =
        call_id.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    format!("{h:08x}")
}

/// The day directory's name for a time (ns since the epoch, UTC).
pub fn day_dir(ns: i64) -> String {
    crate::rfc3339(ns)[..10].to_string()
}

/// `HHMMSS.mmm` of a time.
fn clock(ns: i64) -> String {
    let t = crate::rfc3339(ns);
    t[11..23].chars().filter(|c| *c != ':').collect()
}

/// A call's file, relative to the recording directory; `variant` > 0 when
/// the plain name was taken.
pub fn relative_path(start_ns: i64, serial: u64, call_id: &str, variant: u32) -> PathBuf {
    let number = match variant {
        0 => serial.to_string(),
        k => format!("{serial}-{k}"),
    };
    Path::new(&day_dir(start_ns)).join(format!(
        "{}_{number}_{}_{}.pcap",
        clock(start_ns),
        call_id_hash(call_id),
        safe_call_id(call_id)
    ))
}

/// True for a file name [`relative_path`] makes
/// (`HHMMSS.mmm_N[-K]_HASH_CALLID.pcap`): the recordings' budget and age
/// limit delete only these, never another `.pcap` an operator keeps there.
pub fn is_recording_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".pcap") else {
        return false;
    };
    let mut parts = stem.splitn(4, '_');
    let (Some(clock), Some(number), Some(hash), Some(id)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let clock_ok = clock.len() == 10
        && clock.as_bytes()[6] == b'.'
        && digits(&clock[..6])
        && digits(&clock[7..]);
    let number_ok = match number.split_once('-') {
        Some((n, k)) => digits(n) && digits(k),
        None => digits(number),
    };
    let hash_ok = hash.len() == 8 && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    clock_ok && number_ok && hash_ok && id == safe_call_id(id) && id.len() <= NAME_CALL_ID
}

/// The recordings of the call with this Call-ID and INVITE time under
/// `dir` (normally one; two runs may have recorded the same call), regular
/// files only.
pub fn find(dir: &Path, start_ns: i64, call_id: &str) -> Vec<PathBuf> {
    let prefix = format!("{}_", clock(start_ns));
    let suffix = format!("_{}_{}.pcap", call_id_hash(call_id), safe_call_id(call_id));
    let day = dir.join(day_dir(start_ns));
    let mut found: Vec<PathBuf> = std::fs::read_dir(&day)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            // Between them only the call's number (and a variant).
            n.len() > prefix.len() + suffix.len()
                && n.starts_with(&prefix)
                && n.ends_with(&suffix)
                && n[prefix.len()..n.len() - suffix.len()]
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b == b'-')
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
        for hostile in ["../../etc/passwd", "/abs", "..", ".hidden", "a\0b", "é/x", "a b"] {
            let name = safe_call_id(hostile);
            assert!(
                !name.contains('/') && !name.starts_with('.') && name.is_ascii(),
                "{hostile:?} → {name:?}"
            );
        }
        assert_eq!(safe_call_id("1-836@127.0.1.1"), "1-836_127.0.1.1");
        assert_eq!(safe_call_id(&"x".repeat(500)).len(), 64);
        let p = relative_path(1_795_310_759_440_067_000, 7, "../x", 0);
        assert!(p.to_string_lossy().starts_with("2026-11-22/012559.440_7_"), "{p:?}");
        assert!(p.to_string_lossy().ends_with("__x.pcap"), "{p:?}");
        assert_eq!(p.components().count(), 2);
    }

    #[test]
    fn only_names_calliper_makes_are_recordings() {
        for (variant, id) in [(0, "1-836@127.0.1.1"), (2, "../x"), (0, ""), (1, &"é".repeat(80))] {
            let p = relative_path(1_795_310_759_440_067_000, 7, id, variant);
            let name = p.file_name().unwrap().to_str().unwrap();
            assert!(is_recording_name(name), "{name}");
        }
        for other in [
            "capture.pcap",
            "012559.440_7_0a1b2c3d_x.pcapng",
            "012559.440_7_0A1B2C3D_x.pcap",
            "012559.440_x_0a1b2c3d_x.pcap",
            "012559-440_7_0a1b2c3d_x.pcap",
            "012559.440_7_0a1b2c3d_a b.pcap",
            "012559.440_7_0a1b2c3d_.hidden.pcap",
        ] {
            assert!(!is_recording_name(other), "{other}");
        }
    }

    #[test]
    fn a_recording_is_found_by_call_id_and_time_only() {
        let dir = std::env::temp_dir().join(format!("calliper-find-{}", std::process::id()));
        let t = 1_795_310_759_440_067_000;
        // Alike once made safe, told apart by the hash; a stray name never matches.
        for (serial, id, variant) in
            [(7, "a@b", 0), (8, "a@b.c", 0), (12, "a@b", 2), (9, "a_b", 0), (3, "1@a@b", 0)]
        {
            let p = dir.join(relative_path(t, serial, id, variant));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"").unwrap();
        }
        std::fs::write(dir.join("2026-11-22/012559.440_a_b.pcap"), b"").unwrap();
        let found = find(&dir, t, "a@b");
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(find(&dir, t, "a_b").len(), 1);
        assert!(find(&dir, t + 1_000_000, "a@b").is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
