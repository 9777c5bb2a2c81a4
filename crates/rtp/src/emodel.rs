//! ITU-T G.107 E-model, simplified as in Cole & Rosenbluth (2001), with
//! the codec table of G.113 Appendix I and the G.107.1 wideband scale.
//!
//! A codec without a published (or clearly derived) value gets no score:
//! a MOS computed as if it were G.711 would be a number nobody should trust.

use serde::Serialize;

/// R with all G.107 default inputs (Ro − Is − Id(0) + A).
pub const R_DEFAULT: f64 = 93.2;
/// G.107.1: the wideband scale's R with default inputs (Ro,WB; Is and A 0).
pub const R_DEFAULT_WIDEBAND: f64 = 129.0;
/// Fewest packets a stream needs for a MOS: one second at 20 ms packets.
pub const MIN_SCORED_PACKETS: u64 = 50;

/// The rating scale a score is on; the two are never mixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// G.107, R up to 100 (telephone band).
    Narrowband,
    /// G.107.1, R up to 129, mapped to MOS through R / 1.29.
    Wideband,
}

/// Why a stream has no MOS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unscored {
    /// Telephone events, comfort noise, video, T.38: not speech.
    NotVoice,
    /// No E-model value is published for the codec.
    NoCodecValue,
    /// Fewer than [`MIN_SCORED_PACKETS`] packets.
    TooShort,
}

/// A codec's E-model inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CodecModel {
    /// Equipment impairment Ie (Ie,WB on the wideband scale).
    pub ie: f64,
    /// Packet-loss robustness Bpl.
    pub bpl: f64,
    /// Which scale `ie` is on.
    pub scale: Scale,
    /// The encoder's look-ahead, ms: delay beyond the packet time (the
    /// speech a packet carries must be collected before it is sent).
    pub lookahead_ms: f64,
}

const fn model(ie: f64, bpl: f64, scale: Scale, lookahead_ms: f64) -> Option<CodecModel> {
    Some(CodecModel { ie, bpl, scale, lookahead_ms })
}

const fn nb(ie: f64, bpl: f64, lookahead_ms: f64) -> Option<CodecModel> {
    model(ie, bpl, Scale::Narrowband, lookahead_ms)
}

/// G.711 without concealment (G.113 Appendix I): the Bpl taken for codecs
/// without a published one and without a concealment of their own.
const BPL_NO_PLC: f64 = 4.3;

/// A codec's E-model inputs by its normalised name ([`crate::codec`]), or
/// why it is not scored. Values are G.113 Appendix I (Ie: Table I.1; Bpl:
/// the packet-loss table) unless a comment says where else they come from;
/// `docs/quality.md` lists them with their sources.
pub fn codec_model(codec: &str) -> Result<CodecModel, Unscored> {
    let model = match codec {
        // G.711 with its Appendix I concealment, as endpoints run it.
        "PCMU" | "PCMA" => nb(0.0, 25.1, 0.0),
        // SDP does not tell G.729 from Annex A: Annex A with VAD, the one
        // with a published Bpl and what endpoints run.
        "G729" => nb(11.0, 19.0, 5.0),
        // 6.3 kbit/s (Ie 15, Bpl 16.1 with VAD).
        "G723" => nb(15.0, 16.1, 7.5),
        // ADPCM has no concealment: Bpl as G.711 without PLC.
        "G726-40" => nb(2.0, BPL_NO_PLC, 0.0),
        "G726-32" | "G721" => nb(7.0, BPL_NO_PLC, 0.0),
        "G726-24" => nb(25.0, BPL_NO_PLC, 0.0),
        "G726-16" => nb(50.0, BPL_NO_PLC, 0.0),
        // 16 kbit/s; no published Bpl: G.711's without PLC.
        "G728" => nb(7.0, BPL_NO_PLC, 0.0),
        // GSM full rate and EFR; FR has no published Bpl: EFR's.
        "GSM" => nb(20.0, 10.0, 0.0),
        "GSM-EFR" => nb(5.0, 10.0, 0.0),
        // AMR's 12.2 kbit/s mode is GSM-EFR bit for bit; lower modes
        // (not signalled per stream) would score lower.
        "AMR" => nb(5.0, 10.0, 5.0),
        // G.722 at 64 kbit/s on the wideband scale: quoted as 13 and as 14
        // (not checked against the ITU text; 13 taken, docs/quality.md);
        // Bpl as for G.711 without PLC.
        "G722" => model(13.0, BPL_NO_PLC, Scale::Wideband, 1.5),
        // AMR-WB at 12.65 kbit/s, the usual mode (G.113 Appendix IV as
        // quoted: Ie,WB 13, Bpl 4.3).
        "AMR-WB" => model(13.0, 4.3, Scale::Wideband, 5.0),
        "telephone-event" | "CN" | "T38" | "H261" | "H263" | "H263-1998" | "H263-2000" | "H264"
        | "H265" | "VP8" | "VP9" | "AV1" | "JPEG" | "MPV" | "MP2T" | "red" | "ulpfec" | "rtx"
        | "t140" => return Err(Unscored::NotVoice),
        _ => None,
    };
    model.ok_or(Unscored::NoCodecValue)
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

/// The rating factor R of a codec on its own scale.
pub fn r_factor(m: &CodecModel, loss_percent: f64, burst_r: f64, delay_ms: f64) -> f64 {
    let ro = match m.scale {
        Scale::Narrowband => R_DEFAULT,
        Scale::Wideband => R_DEFAULT_WIDEBAND,
    };
    ro - delay_impairment(delay_ms) - effective_ie(m.ie, m.bpl, loss_percent, burst_r.max(1.0))
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

/// A score on one scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    /// R, kept to 0..=Ro of its scale.
    pub r: f64,
    /// Estimated MOS (G.107.1 Annex A on the wideband scale: MOS of R / 1.29).
    pub mos: f64,
    /// The scale R is on.
    pub scale: Scale,
}

/// What a stream's one-way delay is made of, ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DelayInputs {
    /// Round trip through the network, when RTCP measured it: half counts.
    pub rtt_ms: Option<f64>,
    /// The jitter buffer's delay.
    pub buffer_ms: f64,
    /// The speech each packet carries (its timestamp step), when measured.
    pub packet_ms: Option<f64>,
}

/// Packet time taken when a stream never showed two consecutive packets.
pub const DEFAULT_PACKET_MS: f64 = 20.0;

/// Mouth-to-ear delay as a passive probe can estimate it: half the
/// network round trip (0 without RTCP), the jitter buffer, the packet time
/// and the codec's look-ahead.
pub fn one_way_delay_ms(m: &CodecModel, d: &DelayInputs) -> f64 {
    d.rtt_ms.map_or(0.0, |rtt| rtt / 2.0)
        + d.buffer_ms
        + d.packet_ms.unwrap_or(DEFAULT_PACKET_MS)
        + m.lookahead_ms
}

/// A stream's score from its loss after the jitter buffer (with its burst
/// ratio, [`crate::SeqTracker::burst_ratio`]) and its delay. R is kept to
/// its scale's range (absurd delays from hostile timing would otherwise
/// drive it far below zero).
pub fn estimate(
    codec: &str,
    loss_percent: f64,
    burst_r: f64,
    delay: &DelayInputs,
) -> Result<Score, Unscored> {
    let m = codec_model(codec)?;
    let r = r_factor(&m, loss_percent, burst_r, one_way_delay_ms(&m, delay));
    // R's range, and the factor G.107.1 Annex A divides wideband R by.
    let (r_max, per_narrowband) = match m.scale {
        Scale::Narrowband => (100.0, 1.0),
        Scale::Wideband => (R_DEFAULT_WIDEBAND, 1.29),
    };
    let r = r.clamp(0.0, r_max);
    Ok(Score { r, mos: mos(r / per_narrowband), scale: m.scale })
}
