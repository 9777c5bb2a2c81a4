//! Recordings taken out: `calliper export pcap` gives a call's recording
//! and `export audio` the same WAV from it as from the whole capture (also
//! on standard output); the console sends the same pcap and WAV.

use crate::common;
use crate::server;

use common::calliper;
use common::calliper_jsonl;
use common::callpcaps::{calls, temp};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The sample capture analysed into a database with every call recorded:
/// (capture, recordings' directory, database), named after `name`.
fn recorded_sample(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let pcap = common::sample_capture();
    let (dir, db) = (temp(name), temp(&format!("{name}.db")));
    let (dir_s, db_s) = (dir.to_str().unwrap(), db.to_str().unwrap());
    calliper_jsonl(&pcap, &["--record", "all", "--record-dir", dir_s, "--db", db_s]);
    (pcap, dir, db)
}

#[test]
fn export_gives_the_recording_and_the_same_audio_as_the_capture() {
    let (pcap, dir, db) = recorded_sample("export");
    let call = "2-836@127.0.1.1";
    let (db_s, dir_s) = (db.to_str().unwrap(), dir.to_str().unwrap());
    // `calliper export WHAT` of the call from its recording, to `to`.
    let from_recording = |what: &str, to: &str| {
        calliper(&["export", what, call, "--db", db_s, "--record-dir", dir_s, "-o", to])
    };
    let out = temp("call.pcap");
    common::succeeded(&from_recording("pcap", out.to_str().unwrap()));
    assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o600);
    let alone = calliper_jsonl(&out, &[]);
    let alone = calls(&alone);
    assert_eq!(alone.len(), 1);
    assert_eq!(alone[0]["call_id"], call);
    // The audio from the recording is the audio from the whole capture.
    let (a, b) = (temp("from-capture.wav"), temp("from-recording.wav"));
    let (pcap_s, a_s) = (pcap.to_str().unwrap(), a.to_str().unwrap());
    common::succeeded(&common::export_audio(call, db_s, pcap_s, a_s));
    common::succeeded(&from_recording("audio", b.to_str().unwrap()));
    let (a, b) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert!(a.len() > 100_000);
    assert!(a == b, "the WAVs differ");
    // `-o -` writes to standard output (a player, a pipe), not a file named "-".
    for (what, want) in [("audio", &a), ("pcap", &std::fs::read(&out).unwrap())] {
        let piped = from_recording(what, "-");
        common::succeeded(&piped);
        assert!(&piped.stdout == want, "export {what} -o - is not the file's bytes");
    }
    assert!(!Path::new("-").exists(), "a file named -");
    // A call never recorded says so; so does a directory that is not there.
    let (x, empty) = (temp("x.pcap"), temp("empty"));
    std::fs::create_dir_all(&empty).unwrap();
    for (dir, says) in
        [(empty.to_str().unwrap(), "no recording of call"), ("/nonexistent", "does not exist")]
    {
        let none = calliper(&[
            "export",
            "pcap",
            call,
            "--db",
            db_s,
            "--record-dir",
            dir,
            "-o",
            x.to_str().unwrap(),
        ]);
        assert!(!none.status.success());
        assert!(String::from_utf8_lossy(&none.stderr).contains(says), "{dir}");
    }
    // Never into the recordings: another call's file is not replaced.
    let other = &common::callpcaps::files(&dir)[0];
    let before = std::fs::read(other).unwrap();
    let into = from_recording("audio", other.to_str().unwrap());
    assert!(!into.status.success());
    assert!(String::from_utf8_lossy(&into.stderr).contains("inside the recordings"));
    assert_eq!(std::fs::read(other).unwrap(), before);
}

#[test]
fn the_console_sends_a_recorded_calls_pcap_and_audio() {
    let (_, dir, db) = recorded_sample("console");
    let s =
        server::Server::start(&db, "127.0.0.1:0", &["--record-dir", dir.to_str().unwrap()], &[]);
    let calls = s.get("/api/calls", &[]).json()["calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 3);
    let mut audio = 0;
    for c in &calls {
        let id = c["id"].as_i64().unwrap();
        let detail = s.get(&format!("/api/calls/{id}"), &[]).json();
        let link = detail["recording_pcap"].as_str().unwrap().to_string();
        assert_eq!(link, format!("/api/calls/{id}/pcap"));
        let r = s.get(&link, &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/vnd.tcpdump.pcap"));
        let file = calliper_store::callpcap_paths::find(
            &dir,
            c["invite_ns"].as_i64().unwrap(),
            c["call_id"].as_str().unwrap(),
        );
        assert_eq!(file.len(), 1);
        assert!(r.body == std::fs::read(&file[0]).unwrap(), "call {id}: not the file's bytes");
        // Its audio: what `calliper export audio` makes of the same recording.
        assert_eq!(detail["recording_audio"], format!("/api/calls/{id}/audio"));
        let wav = temp(&format!("console-{id}.wav"));
        let export = calliper(&[
            "export",
            "audio",
            "--db",
            db.to_str().unwrap(),
            "--record-dir",
            dir.to_str().unwrap(),
            "-o",
            wav.to_str().unwrap(),
            &id.to_string(),
        ]);
        let r = s.get(&format!("/api/calls/{id}/audio"), &[]);
        if export.status.success() {
            assert_eq!(r.status, 200, "call {id}: {}", r.text());
            assert_eq!(r.header("content-type"), Some("audio/wav"));
            assert!(r.body == std::fs::read(&wav).unwrap(), "call {id}: not export's WAV");
            audio += 1;
        } else {
            assert_eq!(r.status, 404, "call {id}: {}", r.text());
        }
    }
    assert!(audio >= 1, "no call's audio compared");
    // Another site's page cannot make the browser fetch it (an <audio>
    // pointed at a loopback console without a token); a navigation can come.
    let id = calls[0]["id"].as_i64().unwrap();
    let foreign = [("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "no-cors")];
    let r = s.get(&format!("/api/calls/{id}/audio"), &foreign);
    assert_eq!(r.status, 403, "{}", r.text());
    let own = [("Sec-Fetch-Site", "same-origin"), ("Sec-Fetch-Mode", "cors")];
    assert_eq!(s.get(&format!("/api/calls/{id}/pcap"), &own).status, 200);
    let link = [("Sec-Fetch-Site", "cross-site"), ("Sec-Fetch-Mode", "navigate")];
    assert_eq!(s.get("/", &link).status, 200);
    assert_eq!(s.get("/api/calls/99/audio", &[]).status, 404);
    assert_eq!(s.get("/api/calls/99/pcap", &[]).status, 404);
    assert_eq!(s.get("/api/calls/x/pcap", &[]).status, 400);
    // Without a recordings directory: no link, and a 404 that says why.
    let s = server::Server::on(&db);
    let id = calls[0]["id"].as_i64().unwrap();
    assert_eq!(s.get(&format!("/api/calls/{id}"), &[]).json()["recording_pcap"], Value::Null);
    let r = s.get(&format!("/api/calls/{id}/pcap"), &[]);
    assert_eq!(r.status, 404);
    assert!(r.text().contains("--record-dir"));
}
