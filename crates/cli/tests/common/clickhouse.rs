//! A real ClickHouse server for a test: Debian's `clickhouse-server`,
//! started on loopback ports in a directory of its own (scripts/test.sh
//! installs it), with a password, and stopped when dropped.

use super::hostile::{Pcap, CALLEE, CALLER, SEC, T0};
use super::{scratch, skip_requested};
use calliper_store::clickhouse::Endpoint;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The test server's password for its `default` user.
pub const PASSWORD: &str = "calliper-test-password";
/// A user that may only read (and set its queries' own limits), as
/// docs/scale-out.md advises for the console.
pub const READER: &str = "reader";

/// The cluster every test server's configuration names (all the servers
/// started together, one shard each).
pub const CLUSTER: &str = "calliper_test";

pub struct Server {
    child: Option<Child>,
    dir: PathBuf,
    pub port: u16,
    pub url: String,
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

const BINARY: &str = "/usr/sbin/clickhouse-server";

impl Server {
    /// A server on a free port, or None when `clickhouse` is in
    /// `CALLIPER_SKIP` and the server is not installed.
    pub fn start(name: &str) -> Option<Server> {
        Self::start_on(name, free_port())
    }

    /// A server whose HTTP interface is on `port`.
    pub fn start_on(name: &str, port: u16) -> Option<Server> {
        Self::cluster_on(name, &[port]).map(|mut v| v.remove(0))
    }

    /// `n` servers forming [`CLUSTER`], one shard each.
    pub fn cluster(name: &str, n: usize) -> Option<Vec<Server>> {
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        Self::cluster_on(name, &ports)
    }

    fn cluster_on(name: &str, http_ports: &[u16]) -> Option<Vec<Server>> {
        if !std::path::Path::new(BINARY).exists()
            && skip_requested(
                "clickhouse",
                "clickhouse-server is not installed (the README's test command installs it)",
            )
        {
            return None;
        }
        let tcp_ports: Vec<u16> = http_ports.iter().map(|_| free_port()).collect();
        let shards: String = tcp_ports
            .iter()
            .map(|p| format!("<shard><replica><host>127.0.0.1</host><port>{p}</port><user>default</user><password>{PASSWORD}</password></replica></shard>"))
            .collect();
        let mut servers: Vec<Server> = http_ports
            .iter()
            .zip(&tcp_ports)
            .enumerate()
            .map(|(i, (&port, &tcp))| {
                let dir = scratch(&format!("clickhouse-{name}-{i}"));
                std::fs::create_dir_all(&dir).unwrap();
                write_config(&dir, port, tcp, &shards);
                Server { child: None, dir, port, url: format!("http://127.0.0.1:{port}") }
            })
            .collect();
        for s in &mut servers {
            s.spawn();
        }
        for s in &mut servers {
            s.wait_ready();
        }
        Some(servers)
    }

    fn spawn(&mut self) {
        let child = Command::new(BINARY)
            .arg(format!("--config-file={}/config.xml", self.dir.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {BINARY}: {e}"));
        self.child = Some(child);
    }

    fn wait_ready(&mut self) {
        let started = Instant::now();
        while self.try_query("SELECT 1").is_err() {
            if let Some(Some(status)) = self.child.as_mut().map(|c| c.try_wait().unwrap()) {
                panic!(
                    "clickhouse-server exited ({status}): {}",
                    std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "clickhouse-server did not answer on port {} within 60 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts a stopped server again, with its data.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the server is running");
        self.spawn();
        self.wait_ready();
    }

    /// The answer to `sql`, or why there is none.
    pub fn try_query(&self, sql: &str) -> Result<String, String> {
        let e = Endpoint::new(&self.url, "default", PASSWORD)?;
        let out = e.post(sql.as_bytes()).map_err(|e| e.to_string())?;
        Ok(String::from_utf8(out).expect("ClickHouse's answer is UTF-8"))
    }

    /// The answer to `sql` (fails the test on an error).
    pub fn query(&self, sql: &str) -> String {
        self.try_query(sql).unwrap_or_else(|e| panic!("ClickHouse refused {sql:?}: {e}"))
    }

    /// Rows of a `SELECT ... FORMAT JSONEachRow`.
    pub fn rows(&self, sql: &str) -> Vec<serde_json::Value> {
        self.query(sql).lines().map(|l| serde_json::from_str(l).expect("a JSON row")).collect()
    }

    /// Stops the server (its data stays in its directory until dropped).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: a signal to our own child, which has not been waited for.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM)
            };
            let started = Instant::now();
            while c.try_wait().unwrap().is_none() {
                if started.elapsed() > Duration::from_secs(20) {
                    let _ = c.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server's configuration: loopback only, its ports, a directory of its
/// own, the test user, and the cluster of all servers started together.
fn write_config(dir: &std::path::Path, port: u16, tcp: u16, shards: &str) {
    let d = dir.display();
    let config = format!(
        r#"<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/error.log</errorlog><console>0</console></logger>
    <listen_host>127.0.0.1</listen_host>
    <http_port>{port}</http_port>
    <tcp_port>{tcp}</tcp_port>
    <path>{d}/data/</path>
    <tmp_path>{d}/tmp/</tmp_path>
    <user_files_path>{d}/user_files/</user_files_path>
    <format_schema_path>{d}/format_schemas/</format_schema_path>
    <users_config>{d}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mark_cache_size>5368709120</mark_cache_size>
    <remote_servers><{CLUSTER}>{shards}</{CLUSTER}></remote_servers>
</yandex>
"#
    );
    let users = format!(
        r#"<?xml version="1.0"?>
<yandex>
    <profiles><default></default><reader><readonly>2</readonly></reader></profiles>
    <users><default><password>{PASSWORD}</password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default>
    <{READER}><password>{PASSWORD}</password><networks><ip>127.0.0.1</ip></networks><profile>reader</profile><quota>default</quota></{READER}></users>
    <quotas><default></default></quotas>
</yandex>
"#
    );
    std::fs::write(dir.join("config.xml"), config).unwrap();
    std::fs::write(dir.join("users.xml"), users).unwrap();
}

/// Calls whose Call-ID, From display name and User-Agent hold what a
/// database's escaping must carry: quotes, backslashes, tabs, a 4-byte
/// UTF-8 character, SQL and JSON metacharacters, and bytes that are not
/// UTF-8; answered, with a few RTP packets each way, then ended.
pub fn storable_strings() -> Pcap {
    let mut p = Pcap::default();
    let nasty: [&[u8]; 4] = [
        b"q\"uo'te\\back\tslash@h",
        "emoji\u{1F600}-\u{10FFFF}@h".as_bytes(),
        b"'); DROP TABLE calls; --{\"a\":1}@h",
        b"not-utf8-\xff\xfe\xc3(@h",
    ];
    for (i, n) in nasty.iter().enumerate() {
        let t = T0 + i as i64 * 10 * SEC;
        let head = |start: &[u8], to_tag: &[u8], cseq: &[u8]| {
            let mut m = Vec::new();
            m.extend_from_slice(start);
            m.extend_from_slice(b"\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK");
            m.extend_from_slice(i.to_string().as_bytes());
            m.extend_from_slice(b"\r\nFrom: \"");
            m.extend_from_slice(n);
            m.extend_from_slice(b"\" <sip:alice@10.0.0.1>;tag=a\r\nTo: <sip:bob@10.0.0.2>");
            m.extend_from_slice(to_tag);
            m.extend_from_slice(b"\r\nCall-ID: ");
            m.extend_from_slice(n);
            m.extend_from_slice(b"\r\nCSeq: ");
            m.extend_from_slice(cseq);
            m.extend_from_slice(b"\r\nUser-Agent: ");
            m.extend_from_slice(n);
            m.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
            m
        };
        let invite = head(b"INVITE sip:bob@10.0.0.2 SIP/2.0", b"", b"1 INVITE");
        let ok = head(b"SIP/2.0 200 OK", b";tag=b", b"1 INVITE");
        let bye = head(b"BYE sip:bob@10.0.0.2 SIP/2.0", b";tag=b", b"2 BYE");
        let bye_ok = head(b"SIP/2.0 200 OK", b";tag=b", b"2 BYE");
        p.udp(t, CALLER, CALLEE, &invite);
        p.udp(t + SEC / 10, CALLEE, CALLER, &ok);
        p.udp(t + 2 * SEC, CALLER, CALLEE, &bye);
        p.udp(t + 2 * SEC + SEC / 100, CALLEE, CALLER, &bye_ok);
    }
    p
}
