//! The console's speed on a large database: fills one with synthetic calls
//! (if it does not exist), serves it, and measures over HTTP a search by
//! caller and one day (p50, p95, max), the same over a week, and what the
//! call list page weighs.
//!
//! `cargo run --release -p calliper-console --example search_bench -- DB CALLS [REQUESTS]`
//!
//! The calls: CALLS spread over 30 days, 200 000 callers and callees
//! (Zipf-like: a few users make most calls), two streams each, the status
//! and codec mixes of a carrier; rows written with the store's own schema.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

const DAYS: i64 = 30;
const USERS: u64 = 200_000;
const START_NS: i64 = 1_790_000_000_000_000_000;
const DAY_NS: i64 = 86_400_000_000_000;

/// xorshift64*: reproducible and fast.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A user, skewed: squaring a uniform draw favours low numbers.
    fn user(&mut self) -> String {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        format!("+4420{:07}", (u * u * USERS as f64) as u64)
    }
}

/// One synthetic call: who, when, how it ended, its quality.
struct Synthetic {
    call_id: String,
    from: String,
    to: String,
    user_agent: &'static str,
    caller_ip: String,
    callee_ip: String,
    invite: i64,
    answer: Option<i64>,
    end: i64,
    duration_ms: f64,
    setup_ms: f64,
    status: Option<u16>,
    reason: &'static str,
    state: &'static str,
    loss: f64,
    mos: Option<f64>,
}

impl Synthetic {
    /// Call `i` of `calls`, spread evenly over the days.
    fn draw(rng: &mut Rng, i: u64, calls: u64) -> Synthetic {
        let invite = START_NS + (i as i64 * (DAYS * DAY_NS / calls as i64));
        let (from, to) = (rng.user(), rng.user());
        let (status, reason, state) = match rng.below(100) {
            0..=64 => (Some(200), "OK", "completed"),
            65..=79 => (Some(486), "Busy Here", "failed"),
            80..=87 => (Some(487), "Request Terminated", "cancelled"),
            88..=94 => (Some(404), "Not Found", "failed"),
            95..=98 => (Some(503), "Service Unavailable", "failed"),
            _ => (None, "", "no_final_response"),
        };
        let answered = status == Some(200);
        let duration_ms = if answered { rng.below(600_000) as f64 } else { 0.0 };
        let setup_ms = 50.0 + rng.below(3000) as f64;
        let answer = answered.then(|| invite + (setup_ms * 1e6) as i64 + 2_000_000_000);
        let loss = if rng.below(20) == 0 {
            rng.below(1500) as f64 / 100.0
        } else {
            rng.below(50) as f64 / 100.0
        };
        let caller_ip = format!("10.{}.{}.{}", rng.below(4), rng.below(256), rng.below(256));
        let callee_ip = format!("192.0.2.{}", rng.below(256));
        let call_id = format!("{i:x}-{}@sbc.example", rng.next());
        let agents = ["Polycom/7.1", "Yealink SIP-T46S", "Linphone/5.2", "Cisco-SIPGateway/IOS-16"];
        Synthetic {
            call_id,
            from,
            to,
            user_agent: agents[rng.below(4) as usize],
            caller_ip,
            callee_ip,
            invite,
            answer,
            end: answer.unwrap_or(invite) + (duration_ms * 1e6) as i64,
            duration_ms,
            setup_ms,
            status,
            reason,
            state,
            loss,
            mos: answered.then_some(4.4 - loss * 0.12),
        }
    }
}

fn fill(db: &Path, calls: u64) {
    // The schema is the store's: opening with its sink creates it.
    drop(calliper_store::Sqlite::open(db).expect("create the database"));
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF; BEGIN").unwrap();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let started = Instant::now();
    {
        let mut call = conn
            .prepare(
                "INSERT INTO calls (call_id, from_uri, from_user, to_uri, to_user, caller_user_agent,
                 caller_ip, caller_port, callee_ip, callee_port, invite_ns, answer_ns, end_ns,
                 duration_ms, setup_delay_ms, final_status, final_reason, state, sip_messages, worst_mos, mos_scale)
                 VALUES (?,?,?,?,?,?,?,5060,?,5060,?,?,?,?,?,?,?,?,?,?,'narrowband')",
            )
            .unwrap();
        let mut stream = conn
            .prepare(
                "INSERT INTO streams (call, src, src_port, dst, dst_port, ssrc, direction, payload_type, codec,
                 first_ns, last_ns, packets, expected, lost, loss_percent, mean_jitter_ms, mos)
                 VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            )
            .unwrap();
        for i in 0..calls {
            let c = Synthetic::draw(&mut rng, i, calls);
            call.execute(rusqlite::params![
                c.call_id,
                format!("sip:{}@carrier.example", c.from),
                c.from,
                format!("sip:{}@carrier.example", c.to),
                c.to,
                c.user_agent,
                c.caller_ip,
                c.callee_ip,
                c.invite,
                c.answer,
                c.end,
                c.duration_ms,
                c.setup_ms,
                c.status,
                c.reason,
                c.state,
                if c.answer.is_some() { 7 } else { 3 },
                c.mos,
            ])
            .unwrap();
            if c.answer.is_some() {
                insert_streams(&mut stream, &mut rng, conn.last_insert_rowid(), &c);
            }
            if i % 100_000 == 99_999 {
                conn.execute_batch("COMMIT; BEGIN").unwrap();
                let rate = (i + 1) as f64 / started.elapsed().as_secs_f64();
                eprint!("\r{} calls ({rate:.0}/s)", i + 1);
            }
        }
    }
    conn.execute_batch("COMMIT").unwrap();
    eprintln!("\nfilled {calls} calls in {:.0} s", started.elapsed().as_secs_f64());
}

/// An answered call's two streams, one each way.
fn insert_streams(stream: &mut rusqlite::Statement, rng: &mut Rng, id: i64, c: &Synthetic) {
    let codec = ["PCMU", "PCMA", "G729", "G722"][rng.below(4) as usize];
    let packets = (c.duration_ms / 20.0) as i64;
    let lost = (packets as f64 * c.loss / 100.0) as i64;
    for (dir, src, dst) in [
        ("caller_to_callee", &c.caller_ip, &c.callee_ip),
        ("callee_to_caller", &c.callee_ip, &c.caller_ip),
    ] {
        stream
            .execute(rusqlite::params![
                id,
                src,
                20000 + rng.below(10000) as i64,
                dst,
                20000 + rng.below(10000) as i64,
                rng.next() as u32,
                dir,
                0,
                codec,
                c.answer,
                c.end,
                packets - lost,
                packets,
                lost,
                c.loss,
                rng.below(3000) as f64 / 100.0,
                c.mos
            ])
            .unwrap();
    }
}

/// GET over a fresh connection: (status, body bytes).
fn get(port: u16, path: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let status = std::str::from_utf8(&raw[9..12]).unwrap().parse().unwrap();
    (status, raw[end + 4..].to_vec())
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: search_bench DB CALLS [REQUESTS]");
        std::process::exit(2);
    }
    let db = Path::new(&args[1]).to_path_buf();
    let calls: u64 = args[2].parse().unwrap();
    let requests: usize = args.get(3).map_or(200, |r| r.parse().unwrap());
    if !db.exists() {
        fill(&db, calls);
    }
    let port = serve(db);
    let mut rng = Rng(42);
    caller_searches(port, &mut rng, requests);
    partial_searches(port, &mut rng, (requests / 10).max(5));
    page_weight(port);
}

/// The console on the database, on a port of loopback's.
fn serve(db: std::path::PathBuf) -> u16 {
    let (tx, rx) = std::sync::mpsc::channel();
    let cfg = calliper_console::Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: Some(db),
        clickhouse: None,
        live: None,
        health: None,
        rules: None,
        write_token: None,
        recordings: None,
        token: None,
    };
    std::thread::spawn(move || {
        calliper_console::serve(cfg, |a| tx.send(a).unwrap()).unwrap();
    });
    rx.recv().unwrap().port()
}

/// Searches by caller over one day and over a week, which the indexes serve.
fn caller_searches(port: u16, rng: &mut Rng, requests: usize) {
    let (mut found, mut times) = (0usize, Vec::new());
    for (label, days) in [("one day", 1), ("one week", 7)] {
        times.clear();
        for _ in 0..requests {
            let day = rng.below((DAYS - days) as u64) as i64;
            let from = START_NS + day * DAY_NS;
            let path = format!(
                "/api/calls?caller={}&from={from}&to={}",
                rng.user().replace('+', "%2B"),
                from + days * DAY_NS
            );
            let t = Instant::now();
            let (status, body) = get(port, &path);
            times.push(t.elapsed());
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            found += v["calls"].as_array().unwrap().len();
        }
        times.sort();
        println!(
            "caller + {label}: {requests} searches, p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
            percentile(&times, 0.5),
            percentile(&times, 0.95),
            percentile(&times, 1.0)
        );
    }
    println!("calls found in all: {found}");
}

/// Searches an index serves only in part: a day and a quality filter (the
/// day's rows are read), a caller prefix, and no time range at all (every
/// row is read, and may be stopped at 10 s: a 503).
fn partial_searches(port: u16, rng: &mut Rng, few: usize) {
    let day_from = |rng: &mut Rng| START_NS + rng.below(DAYS as u64 - 1) as i64 * DAY_NS;
    type Query = Box<dyn Fn(&mut Rng) -> String>;
    let kinds: Vec<(&str, Query)> = vec![
        (
            "one day, MOS below 3.5",
            Box::new(move |r: &mut Rng| {
                let f = day_from(r);
                format!("/api/calls?mos_below=3.5&from={f}&to={}", f + DAY_NS)
            }),
        ),
        (
            "one day, codec G722, loss above 5 %",
            Box::new(move |r: &mut Rng| {
                let f = day_from(r);
                format!("/api/calls?codec=G722&loss_above=5&from={f}&to={}", f + DAY_NS)
            }),
        ),
        (
            "caller prefix (+44200001*), all time",
            Box::new(|_: &mut Rng| "/api/calls?caller=%2B44200001*".to_string()),
        ),
        (
            "callee exact, all time, sorted by MOS",
            Box::new(|r: &mut Rng| {
                format!("/api/calls?callee={}&sort=mos", r.user().replace('+', "%2B"))
            }),
        ),
        (
            "status 503, all time (no index)",
            Box::new(|_: &mut Rng| "/api/calls?status=503&sort=duration".to_string()),
        ),
    ];
    for (label, query) in kinds {
        let mut t = Vec::new();
        let mut statuses = std::collections::BTreeMap::new();
        for _ in 0..few {
            let path = query(rng);
            let s = Instant::now();
            let (status, _) = get(port, &path);
            t.push(s.elapsed());
            *statuses.entry(status).or_insert(0) += 1;
        }
        t.sort();
        println!(
            "{label}: {few} searches, p50 {:.1} ms, p95 {:.1} ms, statuses {statuses:?}",
            percentile(&t, 0.5),
            percentile(&t, 0.95)
        );
    }
}

/// The newest calls' time, and what the call list page weighs.
fn page_weight(port: u16) {
    let t = Instant::now();
    let (_, list) = get(port, "/api/calls");
    println!("newest 50 calls (no filter): {:.1} ms", t.elapsed().as_secs_f64() * 1000.0);
    let page: usize = ["/", "/assets/app.js", "/assets/style.css"]
        .iter()
        .map(|p| get(port, p).1.len())
        .sum::<usize>()
        + list.len();
    println!(
        "call list page: {page} bytes (page, script, style and the first 50 calls, uncompressed)"
    );
}
