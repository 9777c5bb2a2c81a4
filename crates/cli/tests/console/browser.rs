//! Headless Chromium driven through WebDriver (chromedriver), for the
//! console's browser tests.
#![allow(dead_code)] // each test binary uses a different subset

use super::common;
use super::server;
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One browser at a time: several Chromiums starting at once on a small
/// machine made a WebDriver request time out (seen once in CI-like runs).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A chromedriver child and one browser session; both ended when dropped.
pub struct Browser {
    /// Held for the browser's life (released after `drop` ends it).
    _turn: MutexGuard<'static, ()>,
    driver: Child,
    addr: SocketAddr,
    session: String,
}

impl Browser {
    pub fn start() -> Option<Browser> {
        let (driver_bin, chromium) = ("/usr/bin/chromedriver", "/usr/bin/chromium");
        if !Path::new(driver_bin).exists() || !Path::new(chromium).exists() {
            common::skip_requested(
                "browser",
                "chromium and chromium-driver (Debian packages) are needed: scripts/test.sh installs them",
            );
            return None;
        }
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let start = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"]
            }
        }}});
        let mut b = Browser { _turn: turn, driver, addr, session: String::new() };
        let r = b.call("POST", "/session", Some(caps));
        b.session = r["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {r}"))
            .to_string();
        Some(b)
    }

    /// A WebDriver command; its `value`.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let r = server::request_with_body(self.addr, method, path, &[], body.as_bytes());
        let v = r.json();
        assert!(r.status == 200, "WebDriver {method} {path}: {} {v}", r.status);
        v.get("value").cloned().unwrap_or(v)
    }

    pub fn go(&self, url: &str) {
        self.call("POST", &format!("/session/{}/url", self.session), Some(json!({ "url": url })));
    }

    /// Runs `script` in the page; its result.
    pub fn js(&self, script: &str) -> Value {
        self.call(
            "POST",
            &format!("/session/{}/execute/sync", self.session),
            Some(json!({ "script": script, "args": [] })),
        )
    }

    /// Waits until `script` returns something other than null or false.
    pub fn wait(&self, what: &str, script: &str) -> Value {
        let start = Instant::now();
        loop {
            let v = self.js(script);
            if !v.is_null() && v != false {
                return v;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "the page never showed {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn screenshot(&self, name: &str) {
        let v = self.call("GET", &format!("/session/{}/screenshot", self.session), None);
        let png = base64_decode(v.as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../console-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), &png).unwrap();
        // The docs' pictures, when asked for (docs/console.md says how).
        if let Some(docs) = std::env::var_os("CALLIPER_SCREENSHOTS_TO") {
            std::fs::write(Path::new(&docs).join(format!("console-{name}")), &png).unwrap();
        }
    }

    /// The elements matching `selector` that stick out of the window
    /// (right edge beyond the viewport's width), as their text's start:
    /// empty when everything fits.
    pub fn overflowing(&self, selector: &str) -> Value {
        self.js(&format!(
            "const w = document.documentElement.clientWidth; return [...document.querySelectorAll('{selector}')].filter(e => e.getBoundingClientRect().right > w + 0.5).map(e => e.textContent.slice(0, 40));"
        ))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = std::panic::catch_unwind(|| {
                server::request(self.addr, "DELETE", &path, &[]);
            });
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=' && !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let n =
            chunk.iter().enumerate().fold(0u32, |n, (i, c)| n | u32::from(val(*c)) << (18 - 6 * i));
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}
