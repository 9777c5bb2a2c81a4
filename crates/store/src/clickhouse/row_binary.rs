//! ClickHouse's RowBinary: each value in its binary form, in the insert's
//! column order. Exact where text is not: ClickHouse 18.16 parses a
//! float written in text to within one unit in the last place, and a
//! string travels as its bytes, with nothing to escape.

use crate::columns::Type;
use crate::StoreError;
use rusqlite::types::Value as Sql;

/// LEB128 length, then the bytes.
pub(super) fn text(b: &mut Vec<u8>, s: &[u8]) {
    let mut n = s.len() as u64;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            b.push(byte);
            break;
        }
        b.push(byte | 0x80);
    }
    b.extend_from_slice(s);
}

/// A `Nullable(UInt64)`.
pub(super) fn nullable_u64(b: &mut Vec<u8>, v: Option<u64>) {
    match v {
        None => b.push(1),
        Some(v) => {
            b.push(0);
            b.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// A `Date` (days since 1970-01-01, 16 bits) of a time in ns, held to
/// the type's range.
pub(super) fn day(ns: i64) -> u16 {
    ns.div_euclid(86_400_000_000_000).clamp(0, u16::MAX as i64) as u16
}

/// A column's value: a null flag unless it is required, then the value
/// (a required column's value is never NULL; were it, its zero is written).
pub(super) fn value(b: &mut Vec<u8>, ty: Type, required: bool, v: Sql) {
    if !required {
        if matches!(v, Sql::Null) {
            b.push(1);
            return;
        }
        b.push(0);
    }
    match (ty, v) {
        (Type::Integer, Sql::Integer(i)) => b.extend_from_slice(&i.to_le_bytes()),
        (Type::Real, Sql::Real(f)) => b.extend_from_slice(&f.to_le_bytes()),
        (Type::Real, Sql::Integer(i)) => b.extend_from_slice(&(i as f64).to_le_bytes()),
        (Type::Text, Sql::Text(t)) => text(b, t.as_bytes()),
        (Type::Text, Sql::Blob(t)) => text(b, &t),
        (Type::Integer, _) | (Type::Real, _) => b.extend_from_slice(&[0; 8]),
        (Type::Text, _) => text(b, b""),
    }
}

/// Reads RowBinary as a query answers it, each value by the type the
/// query selected; running short is an error, never a panic.
pub(super) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn new(b: &'a [u8]) -> Self {
        Reader { rest: b }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if n > self.rest.len() {
            return Err(StoreError::Invalid("clickhouse: an answer ended inside a row".into()));
        }
        let (v, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(v)
    }

    fn eight(&mut self) -> Result<[u8; 8], StoreError> {
        let mut v = [0; 8];
        v.copy_from_slice(self.take(8)?);
        Ok(v)
    }

    pub(super) fn text(&mut self) -> Result<&'a [u8], StoreError> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return self.take(usize::try_from(n).unwrap_or(usize::MAX));
            }
        }
        Err(StoreError::Invalid("clickhouse: a string's length does not end".into()))
    }

    /// A column's value as JSON, as SQLite's rows become JSON
    /// ([`crate::readonly::value`]; `json` columns hold JSON text).
    pub(super) fn value(
        &mut self,
        ty: Type,
        required: bool,
        json: bool,
    ) -> Result<serde_json::Value, StoreError> {
        use rusqlite::types::ValueRef;
        if !required && self.take(1)?[0] != 0 {
            return Ok(serde_json::Value::Null);
        }
        Ok(match ty {
            Type::Integer => {
                crate::readonly::value(ValueRef::Integer(i64::from_le_bytes(self.eight()?)), json)
            }
            Type::Real => {
                crate::readonly::value(ValueRef::Real(f64::from_le_bytes(self.eight()?)), json)
            }
            Type::Text => crate::readonly::value(ValueRef::Text(self.text()?), json),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_leb128_and_days_count_from_1970() {
        let mut b = Vec::new();
        text(&mut b, &[b'x'; 300]);
        assert_eq!(&b[..2], &[0xac, 0x02]);
        assert_eq!(b.len(), 302);
        assert_eq!(day(0), 0);
        // 2023-11-14 is day 19 675.
        assert_eq!(day(1_700_000_000 * 1_000_000_000), 19_675);
        assert_eq!(day(-1), 0);
    }

    #[test]
    fn what_is_written_reads_back_and_short_answers_are_errors() {
        let mut b = Vec::new();
        text(&mut b, "tab\there é".as_bytes());
        nullable_u64(&mut b, None);
        nullable_u64(&mut b, Some(7));
        let mut r = Reader::new(&b);
        assert_eq!(r.text().unwrap(), "tab\there é".as_bytes());
        assert!(r.value(Type::Integer, false, false).unwrap().is_null());
        assert_eq!(r.value(Type::Integer, false, false).unwrap(), 7);
        assert!(r.is_empty());
        let mut short = Reader::new(&b[..5]);
        assert!(short.text().is_err());
        let mut endless = Reader::new(&[0xff; 12]);
        assert!(endless.text().is_err());
    }
}
