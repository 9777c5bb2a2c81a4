//! A real ClickHouse server for a test: Debian's `clickhouse-server`,
//! started on loopback ports in a directory of its own (scripts/test.sh
//! installs it), with a password, and stopped when dropped.

use super::{scratch, skip_requested};
use calliper_store::clickhouse::Endpoint;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The test server's password for its `default` user.
pub const PASSWORD: &str = "calliper-test-password";

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
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
                Server {
                    child: None,
                    dir,
                    port,
                    url: format!("http://127.0.0.1:{port}"),
                }
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
        self.try_query(sql)
            .unwrap_or_else(|e| panic!("ClickHouse refused {sql:?}: {e}"))
    }

    /// Rows of a `SELECT ... FORMAT JSONEachRow`.
    pub fn rows(&self, sql: &str) -> Vec<serde_json::Value> {
        self.query(sql)
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON row"))
            .collect()
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
    <profiles><default></default></profiles>
    <users><default><password>{PASSWORD}</password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users>
    <quotas><default></default></quotas>
</yandex>
"#
    );
    std::fs::write(dir.join("config.xml"), config).unwrap();
    std::fs::write(dir.join("users.xml"), users).unwrap();
}
