//! ClickHouse's RowBinary: each value in its binary form, in the insert's
//! column order. Exact where text is not: ClickHouse 18.16 parses a
//! float written in text to within one unit in the last place, and a
//! string travels as its bytes, with nothing to escape.

use crate::columns::{Column, Type};
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
pub(super) fn value<R>(b: &mut Vec<u8>, c: &Column<R>, v: Sql) {
    if !c.required {
        if matches!(v, Sql::Null) {
            b.push(1);
            return;
        }
        b.push(0);
    }
    match (c.ty, v) {
        (Type::Integer, Sql::Integer(i)) => b.extend_from_slice(&i.to_le_bytes()),
        (Type::Real, Sql::Real(f)) => b.extend_from_slice(&f.to_le_bytes()),
        (Type::Real, Sql::Integer(i)) => b.extend_from_slice(&(i as f64).to_le_bytes()),
        (Type::Text, Sql::Text(t)) => text(b, t.as_bytes()),
        (Type::Text, Sql::Blob(t)) => text(b, &t),
        (Type::Integer, _) | (Type::Real, _) => b.extend_from_slice(&[0; 8]),
        (Type::Text, _) => text(b, b""),
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
}
