//! WAV files of 16-bit stereo PCM (RIFF, format 1): the header and the
//! two channels' samples, interleaved.

use std::io::{self, Write};

/// The data size of a stereo WAV of `frames` sample pairs, if it fits the
/// format's 32-bit sizes: checked before a file is created for it.
pub fn stereo_size(frames: usize) -> io::Result<u32> {
    frames
        .checked_mul(4)
        .and_then(|d| u32::try_from(d).ok())
        .filter(|&d| d <= u32::MAX - 36)
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "over 4 GiB of audio: too long for WAV")
        })
}

/// Writes a stereo WAV at `rate` Hz, `left` and `right` interleaved (the
/// shorter padded with silence), in pieces: no copy of the whole.
pub fn write_stereo(
    out: &mut impl Write,
    rate: u32,
    left: &[i16],
    right: &[i16],
) -> io::Result<()> {
    let frames = left.len().max(right.len());
    let data = stereo_size(frames)?;
    let mut header = Vec::with_capacity(44);
    header.extend_from_slice(b"RIFF");
    header.extend_from_slice(&(36 + data).to_le_bytes());
    header.extend_from_slice(b"WAVEfmt ");
    header.extend_from_slice(&16u32.to_le_bytes());
    header.extend_from_slice(&1u16.to_le_bytes());
    header.extend_from_slice(&2u16.to_le_bytes());
    header.extend_from_slice(&rate.to_le_bytes());
    header.extend_from_slice(&(rate * 4).to_le_bytes());
    header.extend_from_slice(&4u16.to_le_bytes());
    header.extend_from_slice(&16u16.to_le_bytes());
    header.extend_from_slice(b"data");
    header.extend_from_slice(&data.to_le_bytes());
    out.write_all(&header)?;
    let mut piece = Vec::with_capacity(64 * 1024);
    for i in 0..frames {
        piece.extend_from_slice(&left.get(i).copied().unwrap_or(0).to_le_bytes());
        piece.extend_from_slice(&right.get(i).copied().unwrap_or(0).to_le_bytes());
        if piece.len() >= 64 * 1024 - 4 {
            out.write_all(&piece)?;
            piece.clear();
        }
    }
    out.write_all(&piece)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stereo_header_as_the_format_has_it() {
        let mut out = Vec::new();
        write_stereo(&mut out, 8000, &[1, 2], &[3]).unwrap();
        assert_eq!(&out[..4], b"RIFF");
        assert_eq!(u32::from_le_bytes(out[4..8].try_into().unwrap()), 36 + 8);
        assert_eq!(&out[8..16], b"WAVEfmt ");
        assert_eq!(u16::from_le_bytes([out[22], out[23]]), 2);
        assert_eq!(u32::from_le_bytes(out[24..28].try_into().unwrap()), 8000);
        assert_eq!(u32::from_le_bytes(out[28..32].try_into().unwrap()), 32000);
        assert_eq!(&out[36..40], b"data");
        assert_eq!(&out[44..], [1, 0, 3, 0, 2, 0, 0, 0]);
    }
}
