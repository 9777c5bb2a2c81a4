//! Splitting on ASCII bytes with `memchr`: the `str` methods taking a
//! `char` cost several times more on the short values of SIP and SDP.
//! Every separator is ASCII, so both sides of a split are whole characters.

/// The first `b` in `hay`. `memchr` costs about 100 instructions a call
/// before its first compare, more than a plain loop over a short value.
#[inline]
pub(crate) fn find_byte(b: u8, hay: &[u8]) -> Option<usize> {
    if hay.len() < 32 {
        hay.iter().position(|&c| c == b)
    } else {
        memchr::memchr(b, hay)
    }
}

/// The lines of a header section, each without its CR: found with
/// `memchr` (a byte-at-a-time split was a tenth of the parse).
pub(crate) fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(head);
    std::iter::from_fn(move || {
        let r = rest?;
        let line = match find_byte(b'\n', r) {
            Some(i) => {
                rest = Some(&r[i + 1..]);
                &r[..i]
            }
            None => {
                rest = None;
                r
            }
        };
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    })
}

/// `s` around the first `sep`.
pub(crate) fn split_once_on(s: &str, sep: u8) -> Option<(&str, &str)> {
    let i = find_byte(sep, s.as_bytes())?;
    Some((&s[..i], &s[i + 1..]))
}

/// The pieces of `s` between `sep` bytes, as `str::split` gives them.
pub(crate) fn split_on(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let r = rest?;
        Some(match split_once_on(r, sep) {
            Some((piece, after)) => {
                rest = Some(after);
                piece
            }
            None => {
                rest = None;
                r
            }
        })
    })
}
