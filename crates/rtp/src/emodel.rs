//! ITU-T G.107 E-model, simplified as in Cole & Rosenbluth (2001).

/// R with all G.107 default inputs (Ro − Is − Id(0) + A).
pub const R_DEFAULT: f64 = 93.2;

/// Equipment impairment of a codec: (Ie, Bpl) from ITU-T G.113 Appendix I.
pub fn codec_impairment(codec: &str) -> (f64, f64) {
    let c = codec.to_ascii_uppercase();
    match c.as_str() {
        "PCMU" | "PCMA" | "G711" => (0.0, 25.1), // G.711 with Appendix I PLC
        "G729" | "G729A" => (11.0, 19.0),
        "G723" => (15.0, 16.1),
        "GSM" => (20.0, 10.0),
        "G728" => (7.0, 10.0),
        _ => (0.0, 25.1),
    }
}

/// Delay impairment Id for one-way mouth-to-ear delay `d_ms`.
pub fn delay_impairment(d_ms: f64) -> f64 {
    let mut id = 0.024 * d_ms;
    if d_ms > 177.3 {
        id += 0.11 * (d_ms - 177.3);
    }
    id
}

/// Effective equipment impairment for packet loss `ppl` (percent) and burst ratio.
pub fn effective_ie(ie: f64, bpl: f64, ppl: f64, burst_r: f64) -> f64 {
    if ppl <= 0.0 {
        return ie;
    }
    ie + (95.0 - ie) * ppl / (ppl / burst_r + bpl)
}

/// The rating factor R.
pub fn r_factor(codec: &str, loss_percent: f64, burst_r: f64, delay_ms: f64) -> f64 {
    let (ie, bpl) = codec_impairment(codec);
    R_DEFAULT - delay_impairment(delay_ms) - effective_ie(ie, bpl, loss_percent, burst_r.max(1.0))
}

/// G.107 Annex B: R to estimated MOS.
pub fn mos(r: f64) -> f64 {
    if r <= 0.0 {
        1.0
    } else if r >= 100.0 {
        4.5
    } else {
        1.0 + 0.035 * r + r * (r - 60.0) * (100.0 - r) * 7e-6
    }
}

/// A passive probe's estimate (R, MOS) from measured loss and jitter: the
/// delay is taken as a jitter buffer of twice the jitter plus 20 ms of
/// packetisation, since a probe does not see mouth-to-ear delay. R is kept
/// to G.107's range 0–100 (absurd jitter from hostile timing would
/// otherwise drive it far below zero).
pub fn estimate(codec: &str, loss_percent: f64, jitter_ms: f64) -> (f64, f64) {
    let r = r_factor(codec, loss_percent, 1.0, 20.0 + 2.0 * jitter_ms).clamp(0.0, 100.0);
    (r, mos(r))
}
