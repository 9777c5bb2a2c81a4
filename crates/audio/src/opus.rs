//! Opus (RFC 6716, RTP payload RFC 7587) through libopus, the reference
//! decoder (the `opus` crate builds it from source). RTP's Opus clock is
//! always 48 kHz whatever the audio bandwidth, so the output is too; mono,
//! as a listener's one ear of the call.

/// Output samples per second (and RTP clock).
pub const RATE: u32 = 48_000;
/// Longest packet: 120 ms at 48 kHz.
const MAX_SAMPLES: usize = 5_760;

/// One stream's decoder (Opus keeps state between packets).
pub struct Decoder {
    inner: Option<opus::Decoder>,
    buf: Vec<i16>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            inner: opus::Decoder::new(RATE, opus::Channels::Mono).ok(),
            buf: vec![0; MAX_SAMPLES],
        }
    }
}

impl Decoder {
    /// Appends `payload`'s samples to `out`; false when it is no Opus
    /// packet (nothing appended).
    pub fn decode(&mut self, payload: &[u8], out: &mut Vec<i16>) -> bool {
        let Some(d) = self.inner.as_mut() else {
            return false;
        };
        if payload.is_empty() {
            // An empty payload would ask libopus to conceal a loss.
            return false;
        }
        match d.decode(payload, &mut self.buf, false) {
            Ok(n) => {
                out.extend_from_slice(&self.buf[..n.min(MAX_SAMPLES)]);
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 440 Hz tone encoded by libopus's encoder comes back as a tone of
    /// that frequency and level; garbage is refused, not decoded.
    #[test]
    fn a_tone_survives_encoding_and_garbage_is_refused() {
        let mut enc =
            opus::Encoder::new(RATE, opus::Channels::Mono, opus::Application::Voip).unwrap();
        let mut dec = Decoder::default();
        let (mut sent, mut got) = (Vec::new(), Vec::new());
        let mut packet = vec![0u8; 1500];
        for frame in 0..50 {
            let pcm: Vec<i16> = (0..960)
                .map(|i| {
                    let t = (frame * 960 + i) as f64 / f64::from(RATE);
                    (8000.0 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()) as i16
                })
                .collect();
            let n = enc.encode(&pcm, &mut packet).unwrap();
            assert!(dec.decode(&packet[..n], &mut got));
            sent.extend(pcm);
        }
        assert_eq!(got.len(), sent.len(), "20 ms a packet");
        // Past the codec's start-up, the level is the tone's (RMS 8000/√2).
        let tail = &got[got.len() / 2..];
        let rms =
            (tail.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / tail.len() as f64).sqrt();
        assert!((rms - 5657.0).abs() < 600.0, "rms {rms}");
        // Its frequency: zero crossings per second.
        let crossings = tail.windows(2).filter(|w| (w[0] < 0) != (w[1] < 0)).count();
        let hz = crossings as f64 / 2.0 / (tail.len() as f64 / f64::from(RATE));
        assert!((hz - 440.0).abs() < 5.0, "{hz} Hz");
        let before = got.len();
        assert!(!dec.decode(&[0xFF, 0xFF, 0xFF], &mut got), "no valid Opus packet");
        assert!(!dec.decode(&[], &mut got));
        assert_eq!(got.len(), before);
    }
}
