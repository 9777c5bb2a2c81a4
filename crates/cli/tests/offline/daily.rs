//! A multi-day run simulated from files: the same capture shifted by whole
//! days (editcap), read by `calliper probe --read`, lands in one database
//! per day, and retention by age and by disk budget deletes the oldest days.

use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;

const DAY: i64 = 86_400;

/// `testdata/sipp_hold_dtmf.pcap` moved 400 days back, then shifted by
/// 0..days days, in `dir`: days well before the clock's today and
/// yesterday, which retention never deletes.
fn shifted_days(dir: &Path, days: i64) -> Vec<PathBuf> {
    let src = common::sample_capture();
    (0..days)
        .map(|d| {
            let out = dir.join(format!("day{d}.pcap"));
            let st = Command::new("editcap")
                .args(["-t", &((d - 400) * DAY).to_string()])
                .arg(&src)
                .arg(&out)
                .status()
                .unwrap_or_else(|e| panic!("editcap cannot run ({e}): run the README's test command, which installs it"));
            assert!(st.success());
            out
        })
        .collect()
}

fn probe(files: &[PathBuf], db_dir: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_calliper"))
        .args(["probe", "--format", "jsonl", "-o", "/dev/null", "--db-dir"])
        .arg(db_dir)
        .args(extra)
        .arg("--read")
        .args(files)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{log}");
    log
}

/// (file name, calls, traffic rows outside the file's day, runs) per day file.
fn contents(dir: &Path) -> Vec<(String, i64, i64, i64)> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".db"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let c = rusqlite::Connection::open(dir.join(&n)).unwrap();
            let one = |q: &str| c.query_row(q, [], |r| r.get::<_, i64>(0)).unwrap();
            let calls = one("SELECT count(*) FROM calls");
            assert!(calls > 0, "{n}: no calls");
            let day_start = one("SELECT min(invite_ns) / 86400000000000 * 86400000000000 FROM calls");
            let outside = c
                .query_row(
                    "SELECT count(*) FROM traffic WHERE start_ns < ?1 OR start_ns >= ?1 + 86400000000000",
                    [day_start],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap();
            (n, calls, outside, one("SELECT count(*) FROM runs"))
        })
        .collect()
}

#[test]
fn days_land_in_their_own_databases_and_old_days_are_deleted() {
    let dir = common::scratch_dir("daily");
    let files = shifted_days(&dir, 4);

    let all = dir.join("all");
    probe(&files, &all, &[]);
    let days = contents(&all);
    assert_eq!(days.len(), 4, "{days:?}");
    for (i, (name, calls, outside, runs)) in days.iter().enumerate() {
        assert!(name.starts_with("calliper-") && name.ends_with(".db"), "{name}");
        assert_eq!((*calls, *outside), (3, 0), "{name}: each day its three calls and its own rows");
        assert_eq!(*runs, (i == 3) as i64, "{name}: the run's row in the newest day");
    }
    // Day databases are private.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(all.join(&days[0].0)).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");

    let kept = dir.join("kept");
    let log = probe(&files, &kept, &["--keep-days", "2"]);
    let names: Vec<String> = contents(&kept).into_iter().map(|d| d.0).collect();
    assert_eq!(names, vec![days[2].0.clone(), days[3].0.clone()], "{log}");
    assert_eq!(log.matches("retention: deleted").count(), 2, "{log}");

    // A budget smaller than one day keeps today and yesterday only.
    let small = dir.join("small");
    probe(&files, &small, &["--max-db-mib", "0"]);
    let names: Vec<String> = contents(&small).into_iter().map(|d| d.0).collect();
    assert_eq!(names, vec![days[2].0.clone(), days[3].0.clone()]);
    std::fs::remove_dir_all(&dir).ok();
}
