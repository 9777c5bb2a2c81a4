//! G.722 (ITU-T, 1988) at 64 kbit/s: each byte holds a 6-bit low-band and
//! a 2-bit high-band ADPCM code for one pair of 16 kHz samples, split and
//! joined by a 24-tap quadrature mirror filter. RTP carries it as payload
//! type 9 with an 8 kHz clock (RFC 3551), one byte per timestamp tick.
//!
//! The blocks are those of the recommendation (INVQAL, LOGSCL, SCALEL,
//! block 4's predictor update, and their high-band twins), in 16-bit fixed
//! point with its saturations, so the output is the reference decoder's,
//! sample for sample: `tests/spandsp.rs` compares it with spandsp's.

/// Inverse quantiser, high band (2 bits).
const QM2: [i32; 4] = [-7408, -1616, 7408, 1616];
/// Inverse quantiser, low band, 4 bits (the predictor's input).
const QM4: [i32; 16] = [
    0, -20456, -12896, -8968, -6288, -4240, -2584, -1200, 20456, 12896, 8968, 6288, 4240, 2584,
    1200, 0,
];
/// Inverse quantiser, low band, 6 bits (the output at 64 kbit/s).
const QM6: [i32; 64] = [
    -136, -136, -136, -136, -24808, -21904, -19008, -16704, -14984, -13512, -12280, -11192, -10232,
    -9360, -8576, -7856, -7192, -6576, -6000, -5456, -4944, -4464, -4008, -3576, -3168, -2776,
    -2400, -2032, -1688, -1360, -1040, -728, 24808, 21904, 19008, 16704, 14984, 13512, 12280,
    11192, 10232, 9360, 8576, 7856, 7192, 6576, 6000, 5456, 4944, 4464, 4008, 3576, 3168, 2776,
    2400, 2032, 1688, 1360, 1040, 728, 432, 136, -432, -136,
];
/// Inverse log scale (scale factor from its logarithm).
const ILB: [i32; 32] = [
    2048, 2093, 2139, 2186, 2233, 2282, 2332, 2383, 2435, 2489, 2543, 2599, 2656, 2714, 2774, 2834,
    2896, 2960, 3025, 3091, 3158, 3228, 3298, 3371, 3444, 3520, 3597, 3676, 3756, 3838, 3922, 4008,
];
/// Log scale factor adaptation, low band, by quantiser magnitude.
const WL: [i32; 8] = [-60, -30, 58, 172, 334, 538, 1198, 3042];
const RL42: [usize; 16] = [0, 7, 6, 5, 4, 3, 2, 1, 7, 6, 5, 4, 3, 2, 1, 0];
/// ... and high band.
const WH: [i32; 3] = [0, -214, 798];
const RH2: [usize; 4] = [2, 1, 2, 1];
/// The receive QMF's coefficients.
const QMF: [i32; 12] = [3, -11, 12, 32, -210, 951, 3876, -805, 362, -156, 53, -11];

fn sat16(x: i32) -> i32 {
    x.clamp(i16::MIN as i32, i16::MAX as i32)
}

/// One sub-band's ADPCM state.
#[derive(Clone, Copy, Debug, Default)]
struct Band {
    /// Signal estimate.
    s: i32,
    /// Pole section's and zero section's outputs.
    sp: i32,
    sz: i32,
    /// Reconstructed signals and partial reconstructions, delayed.
    r: i32,
    p: [i32; 2],
    /// Pole and zero predictor coefficients.
    a: [i32; 2],
    b: [i32; 6],
    /// Quantised differences, delayed.
    d: [i32; 7],
    /// Log scale factor and scale factor.
    nb: i32,
    det: i32,
}

impl Band {
    /// Block 4: the predictor's update and next estimate, given the
    /// quantised difference `dx`.
    fn block4(&mut self, dx: i32) {
        // RECONS, PARREC.
        let r = sat16(self.s + dx);
        let p = sat16(self.sz + dx);
        let sign_differs = |x: i32, y: i32| (x ^ y) & 0x8000 != 0;
        // UPPOL2.
        let wd1 = sat16(self.a[0] << 2);
        let wd32 = (if sign_differs(p, self.p[0]) { wd1 } else { -wd1 }).min(32767);
        let wd3 = (if sign_differs(p, self.p[1]) { -128 } else { 128 })
            + (wd32 >> 7)
            + ((self.a[1] * 32512) >> 15);
        let a2 = wd3.clamp(-12288, 12288);
        // UPPOL1.
        let wd1 = if sign_differs(p, self.p[0]) { -192 } else { 192 };
        let wd2 = (self.a[0] * 32640) >> 15;
        let limit = sat16(15360 - a2);
        let a1 = sat16(wd1 + wd2).clamp(-limit, limit);
        // FILTEP.
        let wd1 = (a1 * sat16(r + r)) >> 15;
        let wd2 = (a2 * sat16(self.r + self.r)) >> 15;
        self.sp = sat16(wd1 + wd2);
        self.r = r;
        self.a = [a1, a2];
        self.p = [p, self.p[0]];
        // UPZERO, DELAYA, FILTEZ.
        let step = if dx == 0 { 0 } else { 128 };
        self.d[0] = dx;
        let mut sz = 0;
        for i in (0..6).rev() {
            let wd2 = if sign_differs(self.d[i + 1], dx) { -step } else { step };
            let wd3 = (self.b[i] * 32640) >> 15;
            self.b[i] = sat16(wd2 + wd3);
            sz += (self.b[i] * sat16(self.d[i] + self.d[i])) >> 15;
            self.d[i + 1] = self.d[i];
        }
        self.sz = sat16(sz);
        // PREDIC.
        self.s = sat16(self.sp + self.sz);
    }

    /// Blocks 3L/3H: the scale factor's adaptation. `table` is WL or WH,
    /// `ceiling` the log scale factor's limit, `shift` 8 or 10.
    fn scale(&mut self, adaptation: i32, ceiling: i32, shift: i32) {
        self.nb = (((self.nb * 127) >> 7) + adaptation).clamp(0, ceiling);
        let wd1 = ((self.nb >> 6) & 31) as usize;
        let wd2 = shift - (self.nb >> 11);
        let wd3 = if wd2 < 0 { ILB[wd1] << -wd2 } else { ILB[wd1] >> wd2 };
        self.det = (wd3 << 2) as i16 as i32;
    }
}

/// A G.722 decoder at 64 kbit/s, 16 kHz output.
#[derive(Clone, Debug)]
pub struct Decoder {
    low: Band,
    high: Band,
    /// The QMF's last 24 inputs (sum and difference of the bands).
    x: [i32; 24],
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder in the recommendation's reset state.
    pub fn new() -> Decoder {
        Decoder {
            low: Band { det: 32, ..Band::default() },
            high: Band { det: 8, ..Band::default() },
            x: [0; 24],
        }
    }

    /// Appends the 16 kHz samples of `payload` (two per byte) to `out`.
    pub fn decode(&mut self, payload: &[u8], out: &mut Vec<i16>) {
        out.reserve(2 * payload.len());
        for &code in payload {
            let [a, b] = self.decode_byte(code);
            out.extend_from_slice(&[a, b]);
        }
    }

    fn decode_byte(&mut self, code: u8) -> [i16; 2] {
        let (code, ihigh) = ((code & 0x3F) as usize, (code >> 6) as usize);
        // Block 5L (INVQBL, RECONS) and 6L (LIMIT): the low band's output.
        let low = &mut self.low;
        let rlow = (low.s + ((low.det * QM6[code]) >> 15)).clamp(-16384, 16383);
        // Block 2L (INVQAL): the predictor's input, from the top 4 bits.
        let code4 = code >> 2;
        let dlow = (low.det * QM4[code4]) >> 15;
        low.scale(WL[RL42[code4]], 18432, 8);
        low.block4(dlow);
        // The high band.
        let high = &mut self.high;
        let dhigh = (high.det * QM2[ihigh]) >> 15;
        let rhigh = (dhigh + high.s).clamp(-16384, 16383);
        high.scale(WH[RH2[ihigh]], 22528, 10);
        high.block4(dhigh);
        // The receive QMF: two output samples per pair of band samples.
        self.x.copy_within(2.., 0);
        self.x[22] = rlow + rhigh;
        self.x[23] = rlow - rhigh;
        let (mut odd, mut even) = (0i32, 0i32);
        for (i, c) in QMF.iter().enumerate() {
            even += self.x[2 * i] * c;
            odd += self.x[2 * i + 1] * QMF[11 - i];
        }
        [(odd >> 11) as i16, (even >> 11) as i16]
    }
}
