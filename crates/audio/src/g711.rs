//! G.711 (ITU-T, 1988): one byte per 8 kHz sample, µ-law (North America,
//! Japan; RTP payload type 0) or A-law (elsewhere; payload type 8). Each
//! byte expands to a 14-bit (µ-law) or 13-bit (A-law) linear value, here
//! scaled to 16 bits as the recommendation's tables and every common
//! implementation do.

/// The linear value of a µ-law byte.
pub fn ulaw_to_linear(byte: u8) -> i16 {
    const BIAS: i32 = 0x84;
    let u = !byte;
    let t = ((((u & 0x0F) as i32) << 3) + BIAS) << ((u & 0x70) >> 4);
    (if u & 0x80 != 0 { BIAS - t } else { t - BIAS }) as i16
}

/// The linear value of an A-law byte.
pub fn alaw_to_linear(byte: u8) -> i16 {
    // Even bits are inverted on the line (the AMI mask).
    let a = byte ^ 0x55;
    let mut i = ((a & 0x0F) as i32) << 4;
    let segment = (a & 0x70) >> 4;
    if segment > 0 {
        i = (i + 0x108) << (segment - 1);
    } else {
        i += 8;
    }
    (if a & 0x80 != 0 { i } else { -i }) as i16
}

/// The two laws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Law {
    /// µ-law (PCMU).
    Mu,
    /// A-law (PCMA).
    A,
}

/// Appends the samples of a G.711 payload to `out`.
pub fn decode(law: Law, payload: &[u8], out: &mut Vec<i16>) {
    let table = match law {
        Law::Mu => &*ULAW,
        Law::A => &*ALAW,
    };
    out.extend(payload.iter().map(|&b| table[b as usize]));
}

static ULAW: std::sync::LazyLock<[i16; 256]> =
    std::sync::LazyLock::new(|| std::array::from_fn(|b| ulaw_to_linear(b as u8)));
static ALAW: std::sync::LazyLock<[i16; 256]> =
    std::sync::LazyLock::new(|| std::array::from_fn(|b| alaw_to_linear(b as u8)));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recommendation_end_points() {
        // µ-law: 0xFF and 0x7F are the two zeros, 0x00 and 0x80 the peaks.
        assert_eq!(ulaw_to_linear(0xFF), 0);
        assert_eq!(ulaw_to_linear(0x7F), 0);
        assert_eq!(ulaw_to_linear(0x80), 32124);
        assert_eq!(ulaw_to_linear(0x00), -32124);
        // A-law: 0xD5 and 0x55 are the smallest steps, 0xAA and 0x2A the peaks.
        assert_eq!(alaw_to_linear(0xD5), 8);
        assert_eq!(alaw_to_linear(0x55), -8);
        assert_eq!(alaw_to_linear(0xAA), 32256);
        assert_eq!(alaw_to_linear(0x2A), -32256);
    }
}
