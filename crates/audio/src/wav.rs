//! WAV files of 16-bit PCM (RIFF, format 1): the header and the samples,
//! interleaved when stereo.

use std::io::{self, Write};

/// Writes a WAV file of `channels` interleaved channels at `rate` Hz.
pub fn write(out: &mut impl Write, rate: u32, channels: u16, samples: &[i16]) -> io::Result<()> {
    let data = u32::try_from(samples.len() * 2)
        .ok()
        .filter(|&d| d <= u32::MAX - 36)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "over 4 GiB of audio: too long for WAV",
            )
        })?;
    let block = channels as u32 * 2;
    let mut header = Vec::with_capacity(44);
    header.extend_from_slice(b"RIFF");
    header.extend_from_slice(&(36 + data).to_le_bytes());
    header.extend_from_slice(b"WAVEfmt ");
    header.extend_from_slice(&16u32.to_le_bytes());
    header.extend_from_slice(&1u16.to_le_bytes());
    header.extend_from_slice(&channels.to_le_bytes());
    header.extend_from_slice(&rate.to_le_bytes());
    header.extend_from_slice(&(rate * block).to_le_bytes());
    header.extend_from_slice(&(block as u16).to_le_bytes());
    header.extend_from_slice(&16u16.to_le_bytes());
    header.extend_from_slice(b"data");
    header.extend_from_slice(&data.to_le_bytes());
    out.write_all(&header)?;
    let mut bytes = Vec::with_capacity(samples.len() * 2);
    for s in samples {
        bytes.extend_from_slice(&s.to_le_bytes());
    }
    out.write_all(&bytes)
}

/// Interleaves two channels (the shorter padded with silence).
pub fn interleave(left: &[i16], right: &[i16]) -> Vec<i16> {
    let n = left.len().max(right.len());
    let mut out = Vec::with_capacity(2 * n);
    for i in 0..n {
        out.push(left.get(i).copied().unwrap_or(0));
        out.push(right.get(i).copied().unwrap_or(0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stereo_header_as_the_format_has_it() {
        let mut out = Vec::new();
        write(&mut out, 8000, 2, &interleave(&[1, 2], &[3])).unwrap();
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
