//! G.729 (Annex A and B) through Debian's libbcg729, behind the `g729`
//! cargo feature: bcg729 is GPL-3.0, so a binary built with it is covered
//! by the GPL. RTP payload (RFC 3551): 10-byte frames of 10 ms, then
//! possibly one 2-byte comfort-noise (SID) frame of Annex B.

// The one place this crate calls C: bcg729's context is owned by one
// `Decoder`, every buffer passed is as long as the call says it is.
#![allow(unsafe_code)]

use std::ffi::c_void;

/// Output samples per second (and RTP clock).
pub const RATE: u32 = 8_000;
/// Samples per 10-byte frame.
const FRAME_SAMPLES: usize = 80;

#[link(name = "bcg729")]
extern "C" {
    fn initBcg729DecoderChannel() -> *mut c_void;
    fn closeBcg729DecoderChannel(ctx: *mut c_void);
    fn bcg729Decoder(
        ctx: *mut c_void,
        bitstream: *const u8,
        length: u8,
        erased: u8,
        sid: u8,
        rfc3389: u8,
        signal: *mut i16,
    );
}

/// One stream's decoder (G.729 keeps state between frames).
pub struct Decoder {
    ctx: *mut c_void,
}

// The context is plain memory used by one owner at a time.
unsafe impl Send for Decoder {}

impl Default for Decoder {
    fn default() -> Self {
        // SAFETY: no arguments; a null result is checked before every use.
        Decoder { ctx: unsafe { initBcg729DecoderChannel() } }
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        if !self.ctx.is_null() {
            // SAFETY: made by initBcg729DecoderChannel, closed once.
            unsafe { closeBcg729DecoderChannel(self.ctx) }
        }
    }
}

impl Decoder {
    /// Appends `payload`'s samples to `out`; false when it is no G.729
    /// payload (not whole 10-byte frames and at most one 2-byte SID).
    pub fn decode(&mut self, payload: &[u8], out: &mut Vec<i16>) -> bool {
        let sid = payload.len() % 10;
        if self.ctx.is_null() || payload.is_empty() || (sid != 0 && sid != 2) {
            return false;
        }
        let (voice, noise) = payload.split_at(payload.len() - sid);
        for frame in voice.chunks_exact(10).chain(noise.chunks_exact(2)) {
            let mut signal = [0i16; FRAME_SAMPLES];
            // SAFETY: the context is live; `frame` holds `frame.len()` bytes
            // (10, or 2 for a SID frame); `signal` holds the 80 samples
            // bcg729 writes.
            unsafe {
                bcg729Decoder(
                    self.ctx,
                    frame.as_ptr(),
                    frame.len() as u8,
                    0,
                    u8::from(frame.len() == 2),
                    0,
                    signal.as_mut_ptr(),
                )
            };
            out.extend_from_slice(&signal);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[link(name = "bcg729")]
    extern "C" {
        fn initBcg729EncoderChannel(vad: u8) -> *mut c_void;
        fn closeBcg729EncoderChannel(ctx: *mut c_void);
        fn bcg729Encoder(ctx: *mut c_void, input: *const i16, bitstream: *mut u8, length: *mut u8);
    }

    /// A 400 Hz tone encoded by bcg729's encoder comes back as a tone of
    /// that frequency and about its level; malformed payloads are refused.
    #[test]
    fn a_tone_survives_encoding_and_malformed_payloads_are_refused() {
        // SAFETY: the encoder's context is used here only, and closed.
        let enc = unsafe { initBcg729EncoderChannel(0) };
        assert!(!enc.is_null());
        let mut dec = Decoder::default();
        let mut got = Vec::new();
        for packet in 0..100 {
            let mut payload = Vec::new();
            for frame in 0..2 {
                let pcm: Vec<i16> = (0..80)
                    .map(|i| {
                        let t = ((packet * 2 + frame) * 80 + i) as f64 / 8000.0;
                        (6000.0 * (2.0 * std::f64::consts::PI * 400.0 * t).sin()) as i16
                    })
                    .collect();
                let (mut bits, mut len) = ([0u8; 10], 0u8);
                // SAFETY: 80 samples in, up to 10 bytes out.
                unsafe { bcg729Encoder(enc, pcm.as_ptr(), bits.as_mut_ptr(), &mut len) };
                assert_eq!(len, 10, "no VAD: every frame is voice");
                payload.extend_from_slice(&bits);
            }
            assert!(dec.decode(&payload, &mut got));
        }
        // SAFETY: made above, closed once.
        unsafe { closeBcg729EncoderChannel(enc) };
        assert_eq!(got.len(), 100 * 160);
        let tail = &got[got.len() / 2..];
        let rms =
            (tail.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / tail.len() as f64).sqrt();
        assert!((rms - 4243.0).abs() < 1000.0, "rms {rms}");
        let crossings = tail.windows(2).filter(|w| (w[0] < 0) != (w[1] < 0)).count();
        let hz = crossings as f64 / 2.0 / (tail.len() as f64 / 8000.0);
        assert!((hz - 400.0).abs() < 10.0, "{hz} Hz");
        let before = got.len();
        for bad in [&[][..], &[1, 2, 3][..], &[0; 11][..]] {
            assert!(!dec.decode(bad, &mut got), "{bad:?}");
        }
        assert_eq!(got.len(), before);
        assert!(dec.decode(&[0x12, 0x34], &mut got), "a SID frame alone");
        assert_eq!(got.len(), before + 80);
    }
}
