//! The captures the comparisons run on: `../shared/pcaps` (public and
//! generated), or only the repository's `testdata/` when `shared-pcaps`
//! is in `CALLIPER_SKIP`.

use crate::skip_requested;
use std::path::{Path, PathBuf};

/// The capture directories compared against: ../shared/pcaps (public and
/// generated), or only the repository's testdata/ when `shared-pcaps` is
/// in `CALLIPER_SKIP`.
pub fn capture_dirs() -> Vec<PathBuf> {
    let root = repo_root();
    let shared = root.join("../shared/pcaps");
    if shared.is_dir() {
        vec![shared.join("public"), shared.join("generated")]
    } else {
        skip_requested(
            "shared-pcaps",
            &format!("{} not found: the captures the tests compare on", shared.display()),
        );
        vec![root.join("testdata")]
    }
}

/// The least a comparison must cover: `shared` on ../shared/pcaps, or
/// `testdata_only` when only the repository's own captures (`testdata/`) are there.
pub fn at_least(shared: usize, testdata_only: usize) -> usize {
    if capture_dirs()[0].ends_with("public") {
        shared
    } else {
        testdata_only
    }
}

pub fn captures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = capture_dirs()
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap_or_else(|e| panic!("{}: {e}", d.display())))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no captures found");
    v
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every frame of a one-link capture file: (timestamp ns, frame), and
/// its link type (what [`write_pcap`] takes back).
pub fn read_frames(path: &Path) -> (Vec<(i64, Vec<u8>)>, u16) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = calliper_capture::CaptureReader::new(&bytes[..]).unwrap();
    let (mut frames, mut link) = (Vec::new(), 0);
    while let Some(p) = r.next_packet().unwrap() {
        link = p.link_type;
        frames.push((p.ts_ns, p.data.to_vec()));
    }
    (frames, link)
}

/// Writes a nanosecond pcap of `link_type` holding (timestamp ns, frame).
pub fn write_pcap(path: &Path, link_type: u32, packets: &[(i64, Vec<u8>)]) {
    use calliper_capture::pcap_out::{file_header, record_header, Resolution};
    let mut out = file_header(link_type, 262_144, Resolution::Nanos).to_vec();
    for (ts, f) in packets {
        let len = f.len() as u32;
        out.extend_from_slice(&record_header(*ts, len, len, Resolution::Nanos));
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).unwrap();
}

/// A path that no other test of this run uses, in this test process's
/// directory ([`scratch_root`]): the tests of one binary share it, so a
/// counter tells them apart.
pub fn scratch(name: &str) -> PathBuf {
    static TAKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    scratch_root().join(format!("{n}-{name}"))
}

/// This test process's directory for its files: `calliper-tests/PID`
/// under the system's temporary directory. Its first use removes the
/// directories of processes that have ended (libtest has no hook at the
/// end of a binary, and a suite's run left about 500 MB), so a run leaves
/// no more than its own files behind, until the next run.
pub fn scratch_root() -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let base = std::env::temp_dir().join("calliper-tests");
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&base);
        // Never through a link, nor in a directory someone else made: its
        // cleanup removes directories. Kept private (0700).
        let me = std::fs::metadata("/proc/self").map(|p| p.uid()).ok();
        let ours = std::fs::symlink_metadata(&base)
            .is_ok_and(|m| m.file_type().is_dir() && Some(m.uid()) == me);
        assert!(
            ours,
            "{} must be a directory of this user's, not a link: remove it",
            base.display()
        );
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let pid = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = base.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
    .clone()
}

/// The capture with each SIP datagram sent as HEP, 300 µs after it was
/// captured, from port 5060 as Kamailio's siptrace sends it (HEP from a SIP
/// port is HEP, not SIP); `mangle` may spoil each HEP message.
pub fn as_hep_feed(path: &Path, mangle: impl Fn(&mut Vec<u8>)) -> (Vec<(i64, Vec<u8>)>, usize) {
    let data = std::fs::read(path).unwrap();
    let mut r = calliper_capture::CaptureReader::new(&data[..]).unwrap();
    let (mut out, mut sip) = (Vec::new(), 0);
    while let Some(p) = r.next_packet().unwrap() {
        let f = calliper_wire::decode(p.link_type, p.data).unwrap();
        let frame = match f.transport {
            calliper_wire::Transport::Udp { sport, dport, payload }
                if payload.first().is_some_and(u8::is_ascii_alphabetic) =>
            {
                sip += 1;
                use calliper_wire::hep::{kind, Hep};
                let (src, dst) = ((f.src, sport), (f.dst, dport));
                let mut hep =
                    Hep { capture_id: 2001, ..Hep::udp(kind::SIP, src, dst, p.ts_ns, payload) }
                        .emit()
                        .unwrap();
                mangle(&mut hep);
                let ip =
                    calliper_wire::emit::Ipv4::new([10, 9, 9, 9].into(), [10, 9, 9, 10].into(), 17)
                        .emit(&calliper_wire::emit::udp(5060, 9060, &hep));
                out.push((p.ts_ns + 300_000, calliper_wire::emit::ethernet(&[], 0x0800, &ip)));
                continue;
            }
            _ => p.data.to_vec(),
        };
        assert_eq!(p.link_type, 1, "an Ethernet capture");
        out.push((p.ts_ns, frame));
    }
    out.sort_by_key(|p| p.0);
    (out, sip)
}
