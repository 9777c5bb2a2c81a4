//! The least HTTP/1.1 ClickHouse's HTTP interface needs: a POST whose body
//! is the query (and, for an insert, its rows after it, in RowBinary), one
//! connection per request, basic authentication, a deadline for the whole
//! exchange, and a response read whole up to a cap. Queries and rows
//! travel in the body, so nothing is spliced into a URL or a header.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Time to connect, and to wait on each read or write.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of a response kept (an error's message, a query's rows).
const MAX_RESPONSE: usize = 64 << 20;

/// Why a request failed.
#[derive(Debug)]
pub enum HttpError {
    /// No answer: the server is down, unreachable or too slow (worth retrying).
    Network(io::Error),
    /// The server answered with an error status and this message.
    Server {
        /// The HTTP status (0: refused by the sink's own check of the answer).
        status: u16,
        /// The start of the body: ClickHouse's exception.
        message: String,
    },
}

impl HttpError {
    /// True for what passes by itself and is waited out rather than
    /// counted against a batch: no answer, a refused login (the password
    /// may be fixed while rows wait), a proxy's 502-504, 408 and 429.
    pub fn passes(&self) -> bool {
        match self {
            HttpError::Network(_) => true,
            HttpError::Server { status, .. } => {
                matches!(status, 401 | 403 | 407 | 408 | 429 | 502 | 503 | 504)
            }
        }
    }

    /// What to check, for the errors an operator fixes.
    pub fn hint(&self) -> &'static str {
        match self {
            HttpError::Server {
                status: 401 | 403, ..
            } => " (the login was refused: check --clickhouse-user and the password from --clickhouse-password-file or CALLIPER_CLICKHOUSE_PASSWORD)",
            _ => "",
        }
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Network(e) => write!(f, "no answer: {e}"),
            HttpError::Server { status: 0, message } => f.write_str(message),
            HttpError::Server { status, message } => {
                write!(f, "HTTP {status}: {}", message.trim())
            }
        }
    }
}

/// Where a ClickHouse server's HTTP interface is, and who we are to it.
#[derive(Clone)]
pub struct Endpoint {
    /// `HOST:PORT`, resolved at each connection (a service name that is
    /// not up yet, or a server that moved, is found when it answers).
    host: String,
    /// `Basic ...`.
    authorization: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the credentials.
        write!(f, "Endpoint({})", self.host)
    }
}

/// The whole of one request and its answer, at most: a server that
/// trickles its answer byte by byte cannot hold the thread for longer.
const REQUEST_DEADLINE: Duration = Duration::from_secs(60);
/// The same for a console's query: a little over the server's own limit
/// (`max_execution_time`), so a node that hangs costs a request seconds,
/// not a minute.
pub const READ_DEADLINE: Duration = Duration::from_secs(12);

impl Endpoint {
    /// `http://HOST:PORT`, or with a trailing slash (a path is refused: the
    /// database is given apart). HTTPS is not spoken: put ClickHouse or a
    /// TLS proxy on this host or a private network.
    pub fn new(url: &str, user: &str, password: &str) -> Result<Endpoint, String> {
        // Never repeat what may hold a password (`http://user:pw@host`).
        let shown = match url.rsplit_once('@') {
            Some((_, host)) => format!("http://...@{host}"),
            None => url.to_string(),
        };
        let Some(rest) = url.strip_prefix("http://") else {
            let why = if url.starts_with("https://") {
                "https is not spoken: put a TLS proxy on this host, or use a private network"
            } else {
                "give the HTTP interface as http://HOST:PORT"
            };
            return Err(format!("{shown:?}: {why}"));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let plain = |b: u8| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b);
        let port = rest.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
        if rest.is_empty() || !rest.bytes().all(plain) || port.is_none() {
            return Err(format!(
                "{shown:?}: only http://HOST:PORT, such as http://127.0.0.1:8123 (the database, user and password have options of their own)"
            ));
        }
        let authorization = format!("Basic {}", base64(format!("{user}:{password}").as_bytes()));
        Ok(Endpoint { host: rest.to_string(), authorization })
    }

    /// `HOST:PORT`, for messages.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// A connection to the first of the host's addresses that answers.
    fn connect(&self) -> io::Result<TcpStream> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the host has no address");
        for addr in self.host.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// POSTs `body` (a query, then any data) and returns the response's
    /// body. An answer other than 200, or a 200 that reports an exception
    /// (ClickHouse sends one after its headers when it streams progress),
    /// is the server's error.
    pub fn post(&self, body: &[u8]) -> Result<Vec<u8>, HttpError> {
        self.exchange("/", "", body, Exchange::Write)
    }

    /// A `FORMAT TSV` query's answer as text (invalid UTF-8 replaced), for
    /// the schema's and retention's questions about system tables; callers
    /// walk its lines as they need, building nothing per row.
    pub(crate) fn tsv(&self, query: &str) -> Result<String, HttpError> {
        let answer = self.post(query.as_bytes())?;
        Ok(String::from_utf8(answer)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// Runs `sql` (text of ours: it travels in the URL) with `tables` as
    /// external data, ClickHouse's temporary tables sent beside a query:
    /// what a search has from its user reaches the server as rows of
    /// these, never as SQL (18.16 has no query parameters). `settings`
    /// are names and values of ours too. The server answers once the query
    /// has ended (`wait_end_of_query`), so an error is its status, never
    /// text inside rows; the whole exchange takes at most [`READ_DEADLINE`].
    pub fn query(
        &self,
        sql: &str,
        tables: &[External],
        settings: &[(&str, &str)],
    ) -> Result<Vec<u8>, HttpError> {
        let mut target = format!("/?wait_end_of_query=1&query={}", percent(sql.as_bytes()));
        for (name, value) in settings {
            target += &format!("&{name}={}", percent(value.as_bytes()));
        }
        let mut boundary = String::from("calliper-external-data");
        while tables
            .iter()
            .any(|t| t.rows.windows(boundary.len()).any(|w| w == boundary.as_bytes()))
        {
            boundary.push('-');
        }
        let mut body = Vec::new();
        for t in tables {
            target += &format!(
                "&{0}_structure={1}&{0}_format=RowBinary",
                t.name,
                percent(t.structure.as_bytes())
            );
            body.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"{0}\"; filename=\"{0}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n",
                    t.name
                )
                .as_bytes(),
            );
            body.extend_from_slice(&t.rows);
            body.extend_from_slice(b"\r\n");
        }
        let content_type = match tables.is_empty() {
            true => String::new(),
            false => {
                body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
                format!("Content-Type: multipart/form-data; boundary={boundary}\r\n")
            }
        };
        self.exchange(&target, &content_type, &body, Exchange::Read)
    }

    /// One request to `target` with `headers` (each ending in CRLF) and
    /// `body`, and its answer's body.
    fn exchange(
        &self,
        target: &str,
        headers: &str,
        body: &[u8],
        kind: Exchange,
    ) -> Result<Vec<u8>, HttpError> {
        let deadline = Instant::now()
            + match kind {
                Exchange::Write => REQUEST_DEADLINE,
                Exchange::Read => READ_DEADLINE,
            };
        let mut s = self.connect().map_err(HttpError::Network)?;
        let head = format!(
            "POST {target} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\nAuthorization: {}\r\n{headers}\r\n",
            self.host,
            body.len(),
            self.authorization
        );
        write_by(&mut s, head.as_bytes(), deadline).map_err(HttpError::Network)?;
        write_by(&mut s, body, deadline).map_err(HttpError::Network)?;
        let reader = Deadline { s, deadline };
        let r = read_response(BufReader::new(reader)).map_err(HttpError::Network)?;
        // A streamed answer (an insert's) reports a late exception in its
        // body; a query's rows could hold that text, and need no such look
        // (its answer waited for its end).
        let streamed = kind == Exchange::Write;
        let exception = r.exception
            || (streamed && r.status == 200 && r.body.windows(15).any(|w| w == b"DB::Exception: "));
        if r.status == 200 && !exception {
            Ok(r.body)
        } else {
            Err(HttpError::Server {
                status: r.status,
                // Never a control character (a forged log line, a terminal escape).
                message: String::from_utf8_lossy(&r.body[..r.body.len().min(4096)])
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect(),
            })
        }
    }
}

/// A statement that writes (answered as it runs), or a query that reads
/// (answered once it has ended).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exchange {
    Write,
    Read,
}

/// A temporary table sent with a query: its name, its columns (`a
/// String, b Int64`) and its rows in RowBinary.
pub struct External {
    /// The name the query reads it by.
    pub name: &'static str,
    /// Its columns and types.
    pub structure: String,
    /// Its rows.
    pub rows: Vec<u8>,
}

/// `bytes` percent-encoded for a URL's query (all but the unreserved).
fn percent(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

/// Writes `data` by pieces, each waiting at most until `deadline`: a
/// server that reads a few bytes at a time cannot hold the thread longer.
fn write_by(s: &mut TcpStream, data: &[u8], deadline: Instant) -> io::Result<()> {
    for piece in data.chunks(64 << 10) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the server took over a minute to take the request",
            ));
        }
        s.set_write_timeout(Some(left.min(IO_TIMEOUT)))?;
        s.write_all(piece)?;
    }
    Ok(())
}

/// A connection whose every read waits at most until one deadline.
struct Deadline {
    s: TcpStream,
    deadline: Instant,
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the server took over a minute to answer",
            ));
        }
        self.s.set_read_timeout(Some(left.min(IO_TIMEOUT)))?;
        self.s.read(buf)
    }
}

/// What came back.
#[derive(Debug, PartialEq)]
struct Response {
    status: u16,
    /// An `X-ClickHouse-Exception-Code` header was there.
    exception: bool,
    body: Vec<u8>,
}

/// The status and body of a response (chunked, sized, or up to the close).
fn read_response(mut r: impl BufRead) -> io::Result<Response> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    let mut line = String::new();
    r.by_ref().take(8192).read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("not an HTTP response"))?;
    let (mut chunked, mut length, mut exception) = (false, None, false);
    for _ in 0..200 {
        line.clear();
        r.by_ref().take(8192).read_line(&mut line)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or((header, ""));
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("x-clickhouse-exception-code") {
            exception = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.by_ref().take(64).read_line(&mut line)?;
            let digits = line.trim().split(';').next().unwrap_or("");
            if digits.is_empty() || digits.len() > 8 {
                return Err(bad("a chunk without a size, or too large"));
            }
            let size =
                usize::from_str_radix(digits, 16).map_err(|_| bad("a chunk without a size"))?;
            if size == 0 {
                break;
            }
            let end = body.len().checked_add(size).filter(|&e| e <= MAX_RESPONSE);
            let Some(end) = end else {
                return Err(bad("response too long"));
            };
            let start = body.len();
            body.resize(end, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(n) = length {
        if n > MAX_RESPONSE {
            return Err(bad("response too long"));
        }
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.take(MAX_RESPONSE as u64).read_to_end(&mut body)?;
    }
    Ok(Response { status, exception, body })
}

/// Standard base64 with padding (RFC 4648), for basic authentication.
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
    }

    #[test]
    fn responses_are_read_sized_chunked_or_to_the_close() {
        let ok = |status, body: &[u8]| Response { status, exception: false, body: body.to_vec() };
        let sized = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef";
        assert_eq!(read_response(&sized[..]).unwrap(), ok(200, b"abc"));
        let chunked = b"HTTP/1.1 500 Internal\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        assert_eq!(read_response(&chunked[..]).unwrap(), ok(500, b"abcde"));
        let closed = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        assert_eq!(read_response(&closed[..]).unwrap(), ok(200, b"all of it"));
        // A chunk size that would wrap the length is refused, not a panic.
        let huge =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\nffffffffffffffff\r\n";
        assert!(read_response(&huge[..]).is_err());
        let big = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\nfffffff\r\n";
        assert!(read_response(&big[..]).is_err());
        let exception =
            b"HTTP/1.1 200 OK\r\nX-ClickHouse-Exception-Code: 252\r\nContent-Length: 0\r\n\r\n";
        assert!(read_response(&exception[..]).unwrap().exception);
        assert!(read_response(&b"SSH-2.0-x\r\n"[..]).is_err());
        assert!(read_response(&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..])
            .is_err());
    }

    #[test]
    fn urls_carry_only_unreserved_bytes() {
        assert_eq!(percent(b"SELECT 1 FROM t"), "SELECT%201%20FROM%20t");
        assert_eq!(percent("a&b=c\r\né".as_bytes()), "a%26b%3Dc%0D%0A%C3%A9");
    }

    #[test]
    fn only_plain_host_and_port_urls_are_taken() {
        assert!(Endpoint::new("http://127.0.0.1:8123", "default", "").is_ok());
        assert!(Endpoint::new("http://127.0.0.1:8123/", "default", "").is_ok());
        for bad in [
            "https://127.0.0.1:8123",
            "127.0.0.1:8123",
            "http://127.0.0.1:8123/db",
            "http://u:p@127.0.0.1:8123",
            "http://127.0.0.1",
            "http://evil\r\nX-Injected: 1:8123",
            "http://host name:8123",
        ] {
            assert!(Endpoint::new(bad, "default", "").is_err(), "{bad}");
        }
    }
}
