//! A `calliper serve` (or probe) child for the tests, a plain HTTP/1.1
//! client, and the databases the tests serve.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running console; stopped (SIGTERM, then waited for) when dropped.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// `calliper serve --db DB --http LISTEN` with `extra` arguments and
    /// environment; waits for it to say where it listens.
    pub fn start(db: &Path, listen: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let db = ["--db", db.to_str().unwrap()];
        Server::serve(&[&db, extra].concat(), listen, env)
    }

    /// `calliper serve --db DB` on a loopback port of its choosing.
    pub fn on(db: &Path) -> Server {
        Server::start(db, "127.0.0.1:0", &[], &[])
    }

    /// [`Server::on`] a fresh copy of the sample database ([`sample_db`]).
    pub fn sample(name: &str) -> Server {
        Server::on(&sample_db(name))
    }

    /// `calliper serve ARGS --http LISTEN` with `env`.
    pub fn serve(args: &[&str], listen: &str, env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_calliper"))
            .arg("serve")
            .args(args)
            .args(["--http", listen])
            .env_remove("CALLIPER_TOKEN")
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("the server did not say where it listens: {line:?}"));
        Server { child, addr }
    }

    /// A request to 127.0.0.1 at the server's port (loopback, whatever it
    /// listens on).
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.addr.port()));
        request(addr, "GET", path, headers)
    }

    /// Each of `paths` is refused: a 400 whose JSON gives the reason in
    /// a non-empty `error`.
    pub fn assert_bad_requests(&self, paths: &[&str]) {
        for q in paths {
            let r = self.get(q, &[]);
            assert_eq!(r.status, 400, "{q}: {}", r.text());
            let why = r.json()["error"].as_str().map(str::to_string);
            assert!(why.is_some_and(|e| !e.is_empty()), "{q}: no reason in {}", r.text());
        }
    }

    /// Every item of a paged list (`PATH` with `limit` and `offset` added
    /// to its query), page by page until `more` is not true: the arrays
    /// under `items` put together. Fails unless each page is a 200.
    pub fn all_pages(&self, path: &str, items: &str, limit: usize) -> Vec<serde_json::Value> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut out = Vec::new();
        loop {
            let r = self.get(&format!("{path}{sep}limit={limit}&offset={}", out.len()), &[]);
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            let body = r.json();
            out.extend(body[items].as_array().unwrap().iter().cloned());
            if body["more"] != true {
                return out;
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// The address a probe's console listens on, from its log on stderr (piped);
/// the rest of the log is read on, so the probe never blocks on it.
pub fn console_address(child: &mut Child) -> SocketAddr {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("the probe ended before its console listened").unwrap();
        if let Some(rest) = line.split("event=console address=http://").nth(1) {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    addr
}

/// A probe replaying a capture with its console on; stopped when dropped.
pub struct Probe {
    child: Child,
    pub addr: SocketAddr,
    pub started: Instant,
}

impl Probe {
    /// Replays `pcap` at its own pace into the database `db`.
    pub fn start(pcap: &Path, db: &Path) -> Probe {
        let db = db.to_str().unwrap();
        Probe::start_with(pcap, &["-o", "/dev/null", "--db", db], &[])
    }

    /// Replays `pcap` at its own pace with `args` (outputs, rules, tokens)
    /// and `env`; waits for its console to listen.
    pub fn start_with(pcap: &Path, args: &[&str], env: &[(&str, &str)]) -> Probe {
        let mut child = Command::new(env!("CARGO_BIN_EXE_calliper"))
            .args(["probe", "--realtime", "--http", "127.0.0.1:0"])
            .args(args)
            .arg("--read")
            .arg(pcap)
            .env_remove("CALLIPER_TOKEN")
            .env_remove("CALLIPER_WRITE_TOKEN")
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let addr = console_address(&mut child);
        Probe { child, addr, started }
    }

    /// True once the probe has ended (its input read).
    pub fn ended(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Waits for the end of its input; true when it exited with success.
    pub fn wait(&mut self) -> bool {
        self.child.wait().unwrap().success()
    }

    pub fn live(&self) -> serde_json::Value {
        let r = request(self.addr, "GET", "/api/live", &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body[..self.body.len().min(300)])
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }
}

/// One request on its own connection (`Connection: close`); `Host` is
/// `localhost` unless `headers` give one.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    request_with_body(addr, method, path, headers, b"")
}

/// [`request`] with a body (its length sent when it is not empty).
pub fn request_with_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    try_request(addr, method, path, headers, body)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// [`request_with_body`], or the error that ended it (a server that went
/// away as it was asked).
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req += "Host: localhost\r\n";
    }
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    if !body.is_empty() {
        req += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len());
    }
    req += "\r\n";
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    // Read the head, then the body by its length (a server may keep the
    // connection open whatever we asked), else to the end.
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let end = loop {
        if let Some(e) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break e;
        }
        // A signal to this test process (a child ending) interrupts a read:
        // read again, as `read_to_end` does.
        let n = match s.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => r?,
        };
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("no end of headers in {:?}", String::from_utf8_lossy(&raw)),
            ));
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head_text = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let length = head_text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse::<usize>().unwrap());
    let chunked = head_text.contains("transfer-encoding: chunked");
    loop {
        let body = &raw[end + 4..];
        let done = match length {
            Some(n) => body.len() >= n,
            None if chunked => body.ends_with(b"0\r\n\r\n"),
            None => false,
        };
        if done {
            break;
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status =
        lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Ok(Response { status, headers, body })
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(
            std::str::from_utf8(&b[..line_end]).unwrap().split(';').next().unwrap().trim(),
            16,
        )
        .unwrap();
        b = &b[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Percent-encodes a query value.
pub fn enc(v: &str) -> String {
    v.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (c as char).to_string()
            }
            _ => format!("%{c:02X}"),
        })
        .collect()
}

/// A file in this test process's own temporary directory.
pub fn temp(name: &str) -> PathBuf {
    let d = calliper_testkit::captures::scratch_root().join("console");
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Analyses `pcap` into `db` and returns the run's call records (JSON
/// lines from the same run).
pub fn analyze(pcap: &Path, db: &Path) -> Vec<serde_json::Value> {
    crate::common::calliper_jsonl(pcap, &["--db", db.to_str().unwrap()])
        .into_iter()
        .filter(|v| v["type"] == "call")
        .collect()
}

/// A fresh database `name` of the sample capture (three SIPp calls).
pub fn sample_db(name: &str) -> PathBuf {
    let db = temp(name);
    let _ = std::fs::remove_file(&db);
    analyze(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/sipp_hold_dtmf.pcap"), &db);
    db
}

/// `name{labels} value` lines of a metric family, summed.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// Standard base64 (basic auth's credentials).
pub fn base64_encode(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, c)| n | u32::from(*c) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The value of the one metric line that starts with `prefix`.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {prefix} in\n{text}"))
}
