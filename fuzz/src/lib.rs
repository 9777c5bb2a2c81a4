//! What the fuzz targets share: how one input becomes a sequence of
//! records (packets, fragments, segments, datagrams).

/// Splits fuzz input into records: a header of `head` bytes, then a body
/// as long as `len` reads from the header, cut at the input's end. Stops
/// where less than a header is left.
pub fn records<'a>(
    data: &'a [u8],
    head: usize,
    len: impl Fn(&[u8]) -> usize + 'a,
) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.len() < head {
            return None;
        }
        let (h, tail) = rest.split_at(head);
        let (body, tail) = tail.split_at(len(h).min(tail.len()));
        rest = tail;
        Some((h, body))
    })
}

/// A big-endian 16-bit length at `at` of a header.
pub fn be16(at: usize) -> impl Fn(&[u8]) -> usize {
    move |h| usize::from(u16::from_be_bytes([h[at], h[at + 1]]))
}
