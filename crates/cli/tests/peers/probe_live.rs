//! `calliper probe` live on the loopback interface, with calls the test
//! makes itself over UDP (SIP INVITE/200/ACK with SDP, RTP both ways, from
//! addresses of its own in 127.0.0.0/8 so other tests' traffic on `lo` does
//! not matter): SIGTERM writes the open call marked ongoing; a call is
//! written as it ends, so SIGKILL afterwards loses nothing; packets the
//! kernel ring dropped while the probe was stalled are in the call's record
//! and the summary; SIGHUP reloads the rules; `--filter` runs in the kernel; HEP to
//! the collector (`--hep-listen`) that crosses `lo` is read once. Needs CAP_NET_RAW; skipped
//! only when `CALLIPER_SKIP` names `live`.

#![allow(unsafe_code)] // libc::kill, to signal the probe

use crate::common;
use serde_json::Value;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Probe {
    child: Child,
    dir: PathBuf,
}

impl Probe {
    /// Starts the probe on `lo`, writing JSON lines; None when capturing is
    /// not permitted here and `live` is in CALLIPER_SKIP.
    fn start(name: &str, extra: &[&str]) -> Option<Probe> {
        let dir = calliper_testkit::captures::scratch_root().join(format!("live-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_calliper"))
            .args(["probe", "-i", "lo", "--format", "jsonl", "--status-every", "0"])
            .args(["--block-timeout", "5"])
            .arg("-o")
            .arg(dir.join("out.jsonl"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .unwrap();
        let mut p = Probe { child, dir };
        // Wait for the ring to be open (the start line) or the probe to fail.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !p.log().contains("event=start") {
            if let Ok(Some(status)) = p.child.try_wait() {
                let log = p.log();
                if log.contains("CAP_NET_RAW")
                    && common::skip_requested("live", &format!("cannot capture here: {log}"))
                {
                    return None;
                }
                panic!("probe exited with {status}:\n{log}");
            }
            assert!(Instant::now() < deadline, "probe did not start:\n{}", p.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(p)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// The output's lines so far.
    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("out.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Sends `sig`, waits for the exit, returns the output and the exit code.
    fn stop(mut self, sig: i32) -> (Vec<Value>, Option<i32>, String) {
        self.signal(sig);
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "probe did not stop:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = (self.lines(), status.code(), self.log());
        std::fs::remove_dir_all(&self.dir).ok();
        out
    }
}

/// Waits until `pred` holds for the probe's output.
fn wait_for(p: &Probe, what: &str, pred: impl Fn(&[Value]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !pred(&p.lines()) {
        assert!(Instant::now() < deadline, "no {what}:\n{}", p.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One end of a test call: a SIP socket and an RTP socket on its own address.
struct Side {
    sip: UdpSocket,
    rtp: UdpSocket,
    seq: u16,
}

impl Side {
    fn new(addr: &str) -> Side {
        Side {
            sip: UdpSocket::bind((addr, 0)).unwrap(),
            rtp: UdpSocket::bind((addr, 0)).unwrap(),
            seq: 0,
        }
    }
    fn sdp(&self) -> String {
        let a = self.rtp.local_addr().unwrap();
        format!(
            "v=0\r\no=- 1 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\nm=audio {port} RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\n",
            ip = a.ip(),
            port = a.port()
        )
    }
    fn rtp_to(&mut self, to: &Side, n: u16, ssrc: u32) {
        let dst = to.rtp.local_addr().unwrap();
        for _ in 0..n {
            let mut pkt = vec![0x80, 8];
            pkt.extend_from_slice(&self.seq.to_be_bytes());
            pkt.extend_from_slice(&(self.seq as u32 * 160).to_be_bytes());
            pkt.extend_from_slice(&ssrc.to_be_bytes());
            pkt.extend_from_slice(&[0xd5; 160]);
            self.rtp.send_to(&pkt, dst).unwrap();
            self.seq = self.seq.wrapping_add(1);
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

/// A call between two test addresses.
struct Call {
    id: String,
    a: Side,
    b: Side,
}

impl Call {
    fn new(tag: u8) -> Call {
        Call {
            id: format!("live-{tag}-{}@calliper.test", std::process::id()),
            a: Side::new(&format!("127.77.{tag}.1")),
            b: Side::new(&format!("127.77.{tag}.2")),
        }
    }
    fn sip(&self, from_a: bool, first_line: &str, cseq: &str, body: &str) {
        let (s, to) = if from_a { (&self.a, &self.b) } else { (&self.b, &self.a) };
        let src = s.sip.local_addr().unwrap();
        let msg = format!(
            "{first_line}\r\nVia: SIP/2.0/UDP {src};branch=z9hG4bK{cseq_tag}\r\nFrom: <sip:alice@calliper.test>;tag=a1\r\nTo: <sip:bob@calliper.test>{to_tag}\r\nCall-ID: {id}\r\nCSeq: {cseq}\r\nContact: <sip:x@{src}>\r\nContent-Type: application/sdp\r\nContent-Length: {len}\r\n\r\n{body}",
            cseq_tag = cseq.replace(' ', ""),
            to_tag = if first_line.starts_with("INVITE") { "" } else { ";tag=b1" },
            id = self.id,
            len = body.len()
        );
        s.sip.send_to(msg.as_bytes(), to.sip.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    fn answer(&mut self) {
        let uri = format!("INVITE sip:bob@{} SIP/2.0", self.b.sip.local_addr().unwrap());
        self.sip(true, &uri, "1 INVITE", &self.a.sdp());
        self.sip(false, "SIP/2.0 200 OK", "1 INVITE", &self.b.sdp());
        let ack = format!("ACK sip:bob@{} SIP/2.0", self.b.sip.local_addr().unwrap());
        self.sip(true, &ack, "1 ACK", "");
    }
    fn media(&mut self, n: u16) {
        let Call { a, b, .. } = self;
        a.rtp_to(b, n, 0x1111);
        b.rtp_to(a, n, 0x2222);
    }
    fn hang_up(&self) {
        let bye = format!("BYE sip:bob@{} SIP/2.0", self.b.sip.local_addr().unwrap());
        self.sip(true, &bye, "2 BYE", "");
        self.sip(false, "SIP/2.0 200 OK", "2 BYE", "");
    }
    fn record<'a>(&self, lines: &'a [Value]) -> Option<&'a Value> {
        lines.iter().find(|l| l["type"] == "call" && l["call_id"] == self.id.as_str())
    }
}

/// A call answered with `packets` of media each way, then SIGTERM:
/// the output lines, the call's record (which must be there) and the log.
fn call_then_sigterm(p: Probe, call: &mut Call, packets: u16) -> (Vec<Value>, Value, String) {
    call.answer();
    call.media(packets);
    std::thread::sleep(Duration::from_millis(300));
    let (lines, code, log) = p.stop(libc::SIGTERM);
    assert_eq!(code, Some(0), "{log}");
    let c = call.record(&lines).unwrap_or_else(|| panic!("no call:\n{log}")).clone();
    (lines, c, log)
}

#[test]
fn sigterm_writes_the_open_call_as_ongoing() {
    let _turn = crate::turn();
    let Some(p) = Probe::start("term", &[]) else {
        return;
    };
    let mut call = Call::new(1);
    let (lines, c, log) = call_then_sigterm(p, &mut call, 50);
    assert_eq!(c["ongoing"], true, "{c}");
    assert_eq!(c["state"], "answered");
    let streams = c["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "{c}");
    for s in streams {
        assert_eq!((s["packets"].as_u64(), s["lost"].as_u64()), (Some(50), Some(0)), "{s}");
    }
    let summary = lines.iter().find(|l| l["type"] == "summary").expect("summary");
    assert!(summary["capture"]["received"].as_u64().unwrap() >= 100 + 3);
    assert!(log.contains("event=stopping reason=signal"), "{log}");
}

#[test]
fn a_call_is_written_when_it_ends_so_sigkill_loses_nothing_before() {
    let _turn = crate::turn();
    let Some(p) = Probe::start("kill", &["--call-grace", "0"]) else {
        return;
    };
    let mut call = Call::new(2);
    call.answer();
    call.media(20);
    call.hang_up();
    // Written and flushed within about a second of its end, while the probe runs.
    wait_for(&p, "record of the ended call", |l| call.record(l).is_some());
    let (lines, code, _) = p.stop(libc::SIGKILL);
    assert_eq!(code, None, "killed");
    let c = call.record(&lines).expect("the call survives SIGKILL");
    assert_eq!(c["state"], "completed");
    assert!(c.get("ongoing").is_none(), "{c}");
    assert!(!lines.iter().any(|l| l["type"] == "summary"), "no summary after SIGKILL");
}

#[test]
fn packets_the_ring_dropped_are_in_the_call_and_the_summary() {
    let _turn = crate::turn();
    // One 64 KiB block: a stalled probe overflows it quickly.
    let Some(p) = Probe::start("drops", &["--block-size", "65536", "--block-count", "1"]) else {
        return;
    };
    let mut call = Call::new(3);
    call.answer();
    call.media(10);
    std::thread::sleep(Duration::from_millis(200));
    p.signal(libc::SIGSTOP);
    call.media(1000);
    p.signal(libc::SIGCONT);
    call.media(10);
    // Drops are read once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let (lines, code, log) = p.stop(libc::SIGTERM);
    assert_eq!(code, Some(0), "{log}");
    let summary = lines.iter().find(|l| l["type"] == "summary").expect("summary");
    let dropped = summary["capture"]["dropped"].as_u64().unwrap();
    assert!(dropped > 0, "a stalled probe with a 64 KiB ring dropped nothing: {summary}");
    let c = call.record(&lines).unwrap_or_else(|| panic!("no call:\n{log}"));
    // Every drop happened while the call was open.
    assert_eq!(c["capture_dropped"].as_u64(), Some(dropped), "{c}");
    let lost: u64 =
        c["streams"].as_array().unwrap().iter().map(|s| s["lost"].as_u64().unwrap()).sum();
    assert!(lost > 0 && lost <= dropped, "lost {lost}, dropped {dropped}");
}

#[test]
fn sighup_reloads_the_rules() {
    let _turn = crate::turn();
    let dir = common::scratch_dir("live-rules");
    let rules = dir.join("rules.toml");
    let write = |label: &str| {
        std::fs::write(
            &rules,
            format!("[[rule]]\nfrom_user = \"alice\"\naction = \"label\"\nlabel = \"{label}\"\n"),
        )
        .unwrap()
    };
    write("before");
    let Some(p) = Probe::start("hup", &["--call-grace", "0", "--rules", rules.to_str().unwrap()])
    else {
        return;
    };
    let mut first = Call::new(4);
    first.answer();
    first.hang_up();
    wait_for(&p, "first call", |l| first.record(l).is_some());
    write("after");
    p.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.log().contains("event=rules_reloaded") {
        assert!(Instant::now() < deadline, "no reload:\n{}", p.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut second = Call::new(5);
    second.answer();
    second.hang_up();
    wait_for(&p, "second call", |l| second.record(l).is_some());
    let (lines, _, log) = p.stop(libc::SIGTERM);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(first.record(&lines).unwrap()["labels"], serde_json::json!(["before"]), "{log}");
    assert_eq!(second.record(&lines).unwrap()["labels"], serde_json::json!(["after"]), "{log}");
}

#[test]
fn the_filter_runs_in_the_kernel_on_the_live_interface() {
    let _turn = crate::turn();
    // Everything but b's media: the call is seen, b's stream is not.
    let Some(p) = Probe::start(
        "filter",
        &["--filter", "not (src host 127.77.6.2 and udp and not port 5060)"],
    ) else {
        return;
    };
    let mut call = Call::new(6);
    let (_, c, _) = call_then_sigterm(p, &mut call, 40);
    let a_rtp = call.a.rtp.local_addr().unwrap();
    let streams = c["streams"].as_array().unwrap();
    let seen: Vec<(String, u64, u64)> = streams
        .iter()
        .filter(|s| s["packets"].as_u64() > Some(0))
        .map(|s| {
            let src = s["src"].as_str().unwrap_or_default().to_string();
            (src, s["src_port"].as_u64().unwrap(), s["packets"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        seen,
        [(a_rtp.ip().to_string(), u64::from(a_rtp.port()), 40)],
        "only a's stream passes the filter: {c}"
    );
}

/// With `-i lo` and `--hep-listen` on loopback, HEP sent to the collector
/// crosses the captured interface too: it is read once, from the collector
/// (where a key would be checked), and the ring's copies are left out and
/// counted; the SIP it carries makes the call.
#[test]
fn hep_through_a_captured_interface_is_read_once() {
    let _turn = crate::turn();
    use calliper_wire::hep::{kind, Hep};
    let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("udp:127.0.0.1:{port}");
    let Some(p) = Probe::start("hep", &["--hep-listen", &listen]) else {
        return;
    };
    let agent = UdpSocket::bind("127.0.0.61:0").unwrap();
    let call_id = format!("hep-lo-{}@127.0.0.61", std::process::id());
    let invite = format!(
        "INVITE sip:b@127.0.0.62 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.61:5060;branch=z9hG4bK1\r\nFrom: <sip:a@127.0.0.61>;tag=1\r\nTo: <sip:b@127.0.0.62>\r\nCall-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
    );
    let busy = format!(
        "SIP/2.0 486 Busy Here\r\nVia: SIP/2.0/UDP 127.0.0.61:5060;branch=z9hG4bK1\r\nFrom: <sip:a@127.0.0.61>;tag=1\r\nTo: <sip:b@127.0.0.62>;tag=2\r\nCall-ID: {call_id}\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
    );
    for (i, (msg, from, to)) in [(&invite, 61, 62), (&busy, 62, 61)].into_iter().enumerate() {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as i64;
        let (src, dst) = (([127, 0, 0, from].into(), 5060), ([127, 0, 0, to].into(), 5060));
        let m = Hep { capture_id: 9, ..Hep::udp(kind::SIP, src, dst, now, msg.as_bytes()) }
            .emit()
            .unwrap();
        agent.send_to(&m, ("127.0.0.1", port)).unwrap();
        if i == 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // The call ends at its failure, after the grace.
    std::thread::sleep(Duration::from_millis(500));
    let (lines, code, log) = p.stop(libc::SIGTERM);
    assert_eq!(code, Some(0), "{log}");
    let summary = lines.iter().find(|l| l["type"] == "summary").unwrap();
    let hep = &summary["hep_listen"];
    assert_eq!(hep["received"], 2, "{summary}");
    assert_eq!(summary["hep"], 2, "each message read once: {summary}");
    assert!(hep["ring_skipped"].as_u64().unwrap() >= 2, "{summary}");
    let call = lines
        .iter()
        .find(|l| l["type"] == "call" && l["call_id"] == call_id.as_str())
        .unwrap_or_else(|| panic!("no call from HEP:\n{log}"));
    assert_eq!((&call["final_status"], &call["invites"]), (&486.into(), &1.into()));
}
