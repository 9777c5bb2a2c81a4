//! Bencode (BEP 3), as rtpengine's ng control protocol carries it: byte
//! strings, integers, lists and dictionaries. A request comes from a SIP
//! proxy over UDP, so it is parsed without recursion (an explicit stack),
//! borrowed from the datagram, and capped in depth and items; replies are
//! written with [`Writer`].

use std::fmt;

/// Deepest nesting taken (a request is a dictionary of strings and lists).
pub const MAX_DEPTH: usize = 8;
/// Most values in one document.
pub const MAX_ITEMS: usize = 4096;

/// A parsed value, borrowing its bytes from the datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// `i42e`.
    Int(i64),
    /// `4:spam`.
    Bytes(&'a [u8]),
    /// `l...e`.
    List(Vec<Value<'a>>),
    /// `d...e`, keys in the order sent.
    Dict(Vec<(&'a [u8], Value<'a>)>),
}

/// Why a document was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Byte offset in the document.
    pub at: usize,
    /// What was wrong.
    pub what: &'static str,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bencode: {} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for Error {}

impl<'a> Value<'a> {
    /// The value of `key` in a dictionary.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Dict(items) => items.iter().find(|(k, _)| *k == key.as_bytes()).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A byte string as UTF-8 text.
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            Value::Bytes(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The text of `key` in a dictionary.
    pub fn str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }
}

/// A container being filled.
enum Open<'a> {
    List(Vec<Value<'a>>),
    /// Items so far, and the key waiting for its value.
    Dict(Vec<(&'a [u8], Value<'a>)>, Option<&'a [u8]>),
}

/// Parses one whole document; bytes after it are an error.
pub fn parse(doc: &[u8]) -> Result<Value<'_>, Error> {
    let err = |at, what| Error { at, what };
    let mut stack: Vec<Open<'_>> = Vec::new();
    let mut at = 0;
    let mut items = 0;
    loop {
        let Some(&b) = doc.get(at) else {
            return Err(err(at, "document ends early"));
        };
        if let Some(Open::Dict(_, key @ None)) = stack.last_mut() {
            if b != b'e' {
                let (bytes, next) = byte_string(doc, at)?;
                *key = Some(bytes);
                at = next;
                continue;
            }
        }
        let value = match b {
            b'e' => {
                at += 1;
                match stack.pop() {
                    Some(Open::List(v)) => Value::List(v),
                    Some(Open::Dict(v, None)) => Value::Dict(v),
                    Some(Open::Dict(_, Some(_))) => {
                        return Err(err(at - 1, "dictionary key without a value"))
                    }
                    None => return Err(err(at - 1, "end outside a list or dictionary")),
                }
            }
            b'i' => {
                let (n, next) = integer(doc, at)?;
                at = next;
                Value::Int(n)
            }
            b'0'..=b'9' => {
                let (bytes, next) = byte_string(doc, at)?;
                at = next;
                Value::Bytes(bytes)
            }
            b'l' | b'd' => {
                if stack.len() >= MAX_DEPTH {
                    return Err(err(at, "nested too deeply"));
                }
                at += 1;
                stack.push(if b == b'l' {
                    Open::List(Vec::new())
                } else {
                    Open::Dict(Vec::new(), None)
                });
                continue;
            }
            _ => return Err(err(at, "not a bencode value")),
        };
        items += 1;
        if items > MAX_ITEMS {
            return Err(err(at, "too many values"));
        }
        match stack.last_mut() {
            None if at == doc.len() => return Ok(value),
            None => return Err(err(at, "bytes after the document")),
            Some(Open::List(v)) => v.push(value),
            Some(Open::Dict(v, key)) => {
                // A key was read before this value (the branch above).
                let k = key.take().ok_or(err(at, "dictionary value without a key"))?;
                v.push((k, value));
            }
        }
    }
}

/// `N:bytes` at `at`: the bytes and the offset after them.
fn byte_string(doc: &[u8], at: usize) -> Result<(&[u8], usize), Error> {
    let colon = doc[at..]
        .iter()
        .take(11)
        .position(|&c| c == b':')
        .ok_or(Error { at, what: "byte string without a length" })?;
    let digits = &doc[at..at + colon];
    let len: usize = std::str::from_utf8(digits)
        .ok()
        .filter(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()))
        .and_then(|d| d.parse().ok())
        .ok_or(Error { at, what: "bad byte string length" })?;
    let start = at + colon + 1;
    let end = start
        .checked_add(len)
        .filter(|&e| e <= doc.len())
        .ok_or(Error { at, what: "byte string runs past the end" })?;
    Ok((&doc[start..end], end))
}

/// `i-42e` at `at`: the number and the offset after it.
fn integer(doc: &[u8], at: usize) -> Result<(i64, usize), Error> {
    let end = doc[at..]
        .iter()
        .take(22)
        .position(|&c| c == b'e')
        .ok_or(Error { at, what: "integer without an end" })?;
    let text = std::str::from_utf8(&doc[at + 1..at + end]).ok();
    let n = text
        .filter(|t| {
            // BEP 3: no leading zeros, no negative zero.
            let digits = t.strip_prefix('-').unwrap_or(t);
            let canonical = digits == "0" && !t.starts_with('-') || !digits.starts_with('0');
            !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) && canonical
        })
        .and_then(|t| t.parse().ok())
        .ok_or(Error { at, what: "bad integer" })?;
    Ok((n, at + end + 1))
}

/// Writes a reply. Dictionaries are written in the order the caller gives
/// keys; bencode asks for sorted keys, which every caller here keeps.
#[derive(Default)]
pub struct Writer {
    /// The document so far.
    pub out: Vec<u8>,
}

impl Writer {
    /// A byte string.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b.len().to_string().as_bytes());
        self.out.push(b':');
        self.out.extend_from_slice(b);
        self
    }

    /// A key and its text value.
    pub fn text(&mut self, key: &str, value: &str) -> &mut Self {
        self.bytes(key.as_bytes()).bytes(value.as_bytes())
    }

    /// A key and its integer value.
    pub fn int(&mut self, key: &str, n: i64) -> &mut Self {
        self.bytes(key.as_bytes());
        self.out.extend_from_slice(format!("i{n}e").as_bytes());
        self
    }

    /// Opens a dictionary (`key` names it inside another; None at the top
    /// or in a list).
    pub fn dict(&mut self, key: Option<&str>) -> &mut Self {
        if let Some(k) = key {
            self.bytes(k.as_bytes());
        }
        self.out.push(b'd');
        self
    }

    /// Opens a list under `key`.
    pub fn list(&mut self, key: &str) -> &mut Self {
        self.bytes(key.as_bytes());
        self.out.push(b'l');
        self
    }

    /// Closes the innermost dictionary or list.
    pub fn end(&mut self) -> &mut Self {
        self.out.push(b'e');
        self
    }
}
