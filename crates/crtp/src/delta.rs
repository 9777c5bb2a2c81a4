//! The default delta encoding of RFC 2508 §3.3.4 (checked against the RFC
//! text): 0..=127 in one byte; a first byte `10` introduces a 14-bit and
//! `11` a 22-bit big-endian value. Negative values live in the redundant
//! parts of the longer forms: -128..=-1 as `80 00`..`80 7F`, and
//! -16384..=-129 as `C0 00 00`..`C0 3F 7F`.

/// Smallest and largest encodable delta.
pub const MIN: i32 = -16384;
/// See [`MIN`].
pub const MAX: i32 = 4_194_303;

/// Appends the encoding of `value` to `out`; false (and nothing written)
/// when it is outside [`MIN`]..=[`MAX`].
#[inline]
pub fn encode(value: i32, out: &mut Vec<u8>) -> bool {
    match value {
        0..=127 => out.push(value as u8),
        -128..=-1 => out.extend_from_slice(&[0x80, (value + 128) as u8]),
        128..=16383 => out.extend_from_slice(&(0x8000 | value as u16).to_be_bytes()),
        MIN..=-129 => {
            let v = (value + 16384) as u32;
            out.extend_from_slice(&[0xC0, (v >> 8) as u8, v as u8]);
        }
        16384..=MAX => {
            let v = 0xC0_0000 | value as u32;
            out.extend_from_slice(&[(v >> 16) as u8, (v >> 8) as u8, v as u8]);
        }
        _ => return false,
    }
    true
}

/// Decodes one delta at the start of `data`: the value and the bytes it
/// took, or None when `data` ends inside it or the code is not the RFC's.
#[inline]
pub fn decode(data: &[u8]) -> Option<(i32, usize)> {
    let first = *data.first()?;
    match first >> 6 {
        0 | 1 => Some((first as i32, 1)),
        2 => {
            let v = (((first & 0x3F) as i32) << 8) | *data.get(1)? as i32;
            Some((if v < 128 { v - 128 } else { v }, 2))
        }
        _ => {
            let v = (((first & 0x3F) as i32) << 16)
                | ((*data.get(1)? as i32) << 8)
                | *data.get(2)? as i32;
            // C0 3F 80..C0 3F FF are not in the RFC's table (-128..-1
            // have a two-byte form): refused.
            match v {
                0..=16255 => Some((v - 16384, 3)),
                16256..=16383 => None,
                _ => Some((v, 3)),
            }
        }
    }
}

/// Bytes the encoding of `value` takes (0 when it cannot be encoded).
pub fn len(value: i32) -> usize {
    match value {
        0..=127 => 1,
        -128..=-1 | 128..=16383 => 2,
        MIN..=-129 | 16384..=MAX => 3,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RFC's table, every end point of every range.
    #[test]
    fn the_rfc_table() {
        let table: &[(i32, &[u8])] = &[
            (-16384, &[0xC0, 0x00, 0x00]),
            (-129, &[0xC0, 0x3F, 0x7F]),
            (-128, &[0x80, 0x00]),
            (-1, &[0x80, 0x7F]),
            (0, &[0x00]),
            (127, &[0x7F]),
            (128, &[0x80, 0x80]),
            (16383, &[0xBF, 0xFF]),
            (16384, &[0xC0, 0x40, 0x00]),
            (4194303, &[0xFF, 0xFF, 0xFF]),
        ];
        for &(value, bytes) in table {
            let mut out = Vec::new();
            assert!(encode(value, &mut out), "{value}");
            assert_eq!(out, bytes, "{value}");
            assert_eq!(decode(bytes), Some((value, bytes.len())), "{value}");
            assert_eq!(len(value), bytes.len());
        }
    }

    #[test]
    fn out_of_range_and_truncated() {
        let mut out = Vec::new();
        assert!(!encode(MIN - 1, &mut out));
        assert!(!encode(MAX + 1, &mut out));
        assert!(out.is_empty());
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[0x80]), None);
        assert_eq!(decode(&[0xC0, 0x00]), None);
        assert_eq!(decode(&[0xC0, 0x3F, 0x80]), None);
        assert_eq!(decode(&[0xC0, 0x3F, 0xFF]), None);
    }

    proptest::proptest! {
        #[test]
        fn every_value_round_trips(value in MIN..=MAX) {
            let mut out = Vec::new();
            proptest::prop_assert!(encode(value, &mut out));
            proptest::prop_assert_eq!(decode(&out), Some((value, out.len())));
        }
    }
}
