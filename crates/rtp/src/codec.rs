//! Payload types, codec names and clock rates.

/// How a payload type's timestamps advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockRate {
    /// Samples per second.
    Hz(u32),
    /// RFC 4733 telephone-event at this clock (Hz; 8000 when the rtpmap
    /// gives none): timestamps repeat per event, no jitter.
    Event(u32),
    /// Unknown (dynamic type without `a=rtpmap`): no jitter.
    Unknown,
}

/// A static payload type (RFC 3551 table 4 and 5): name and clock.
pub fn static_type(pt: u8) -> Option<(&'static str, u32)> {
    Some(match pt {
        0 => ("PCMU", 8000),
        1 => ("1016", 8000),
        2 => ("G721", 8000),
        3 => ("GSM", 8000),
        4 => ("G723", 8000),
        5 => ("DVI4", 8000),
        6 => ("DVI4", 16000),
        7 => ("LPC", 8000),
        8 => ("PCMA", 8000),
        // G.722 samples at 16 kHz but its RTP clock is 8 kHz (RFC 3551 §4.5.2).
        9 => ("G722", 8000),
        10 => ("L16", 44100),
        11 => ("L16", 44100),
        12 => ("QCELP", 8000),
        13 => ("CN", 8000),
        14 => ("MPA", 90000),
        15 => ("G728", 8000),
        16 => ("DVI4", 11025),
        17 => ("DVI4", 22050),
        18 => ("G729", 8000),
        19 => ("CN", 8000),
        25 => ("CelB", 90000),
        26 => ("JPEG", 90000),
        28 => ("nv", 90000),
        31 => ("H261", 90000),
        32 => ("MPV", 90000),
        33 => ("MP2T", 90000),
        34 => ("H263", 90000),
        _ => return None,
    })
}

/// Clock rates of common dynamic encodings when `a=rtpmap` omits or zeroes the rate.
fn dynamic_default_rate(name: &str) -> u32 {
    const TABLE: &[(&str, u32)] = &[
        ("AMR-WB", 16000),
        ("AMR", 8000),
        ("EVS", 16000),
        ("G7221", 16000),
        ("G726", 8000),
        ("G729", 8000),
        ("GSM-EFR", 8000),
        ("H263", 90000),
        ("H264", 90000),
        ("opus", 48000),
        ("red", 1000),
        ("SILK", 16000),
        ("speex", 8000),
        ("t140", 1000),
        ("VP8", 90000),
    ];
    TABLE.iter().find(|(n, _)| starts_with_ignore_case(name, n)).map_or(0, |(_, r)| *r)
}

/// The RTP clock a codec's payload format fixes, whatever an `a=rtpmap`
/// says: a wrong rate there (PCMU/16000) would halve every time the stream
/// is measured in. Codecs whose rate varies (L16, speex, DVI4) are absent.
fn fixed_rate(name: &str) -> Option<u32> {
    // (name, rate, whether longer names count: G726-32, G729A)
    const TABLE: &[(&str, u32, bool)] = &[
        ("PCMU", 8000, false),
        ("PCMA", 8000, false),
        ("GSM", 8000, false),
        ("GSM-EFR", 8000, false),
        ("G723", 8000, false),
        // G.722's RTP clock is 8 kHz although it samples at 16 (RFC 3551 §4.5.2).
        ("G722", 8000, false),
        ("G728", 8000, false),
        ("G729", 8000, true),
        ("G726", 8000, true),
        ("AMR", 8000, false),
        ("AMR-WB", 16000, false),
        ("iLBC", 8000, false),
        ("opus", 48000, false),
    ];
    TABLE
        .iter()
        .find(
            |(n, _, prefix)| {
                if *prefix {
                    starts_with_ignore_case(name, n)
                } else {
                    name.eq_ignore_ascii_case(n)
                }
            },
        )
        .map(|(_, r, _)| *r)
}

/// `name` starts with `prefix`, ASCII case ignored. Compares bytes, so a
/// name with non-ASCII characters (from SDP, anyone's text) cannot split a
/// character and panic.
fn starts_with_ignore_case(name: &str, prefix: &str) -> bool {
    name.as_bytes().get(..prefix.len()).is_some_and(|b| b.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// Encoding names as the IANA registry spells them: an SDP's `pcma` or
/// `OPUS` is reported as `PCMA` or `opus`, so one codec has one name.
const CANONICAL_NAMES: &[&str] = &[
    "PCMU",
    "PCMA",
    "G722",
    "G723",
    "G728",
    "G729",
    "G729D",
    "G729E",
    "GSM",
    "GSM-EFR",
    "GSM-HR-08",
    "G726-16",
    "G726-24",
    "G726-32",
    "G726-40",
    "AMR",
    "AMR-WB",
    "EVS",
    "iLBC",
    "opus",
    "speex",
    "SILK",
    "G7221",
    "G719",
    "L16",
    "DVI4",
    "LPC",
    "QCELP",
    "telephone-event",
    "CN",
    "red",
    "ulpfec",
    "rtx",
    "t140",
    "T38",
    "H261",
    "H263",
    "H263-1998",
    "H263-2000",
    "H264",
    "H265",
    "VP8",
    "VP9",
    "AV1",
    "JPEG",
    "MPV",
    "MP2T",
    "MPA",
];

/// The registry's spelling of an encoding name (`G729a`, Annex A, is
/// G.729 on the wire), or None for a name not in [`CANONICAL_NAMES`].
pub fn normalise(name: &str) -> Option<&'static str> {
    if name.eq_ignore_ascii_case("G729a") {
        return Some("G729");
    }
    CANONICAL_NAMES.iter().find(|c| c.eq_ignore_ascii_case(name)).copied()
}

/// A payload type resolved to a codec, from `a=rtpmap` or the static table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Codec {
    /// Encoding name as signalled (`PCMA`, `telephone-event`, `opus`...).
    pub name: String,
    /// Clock behaviour.
    pub clock: ClockRate,
}

/// The registry's name of a payload type's codec given its `a=rtpmap`
/// entry, if any, when the name is a registered one: [`Codec::resolve`]'s
/// name without allocating (the packet path scores intervals with it).
pub fn canonical(pt: u8, rtpmap: Option<(&str, u32)>) -> Option<&'static str> {
    match rtpmap {
        Some((name, _)) => normalise(name),
        None => static_type(pt).map(|(name, _)| name),
    }
}

impl Codec {
    /// Resolves a payload type given the `a=rtpmap` entry, if any.
    pub fn resolve(pt: u8, rtpmap: Option<(&str, u32)>) -> Codec {
        if let Some((name, rate)) = rtpmap {
            let clock = if starts_with_ignore_case(name, "telephone-event") {
                ClockRate::Event(if rate == 0 { 8000 } else { rate })
            } else if let Some(fixed) = fixed_rate(name) {
                ClockRate::Hz(fixed)
            } else if rate != 0 {
                ClockRate::Hz(rate)
            } else {
                match dynamic_default_rate(name) {
                    0 => ClockRate::Unknown,
                    r => ClockRate::Hz(r),
                }
            };
            return Codec {
                name: normalise(name).map_or_else(|| name.to_string(), str::to_string),
                clock,
            };
        }
        match static_type(pt) {
            Some((name, rate)) => Codec { name: name.to_string(), clock: ClockRate::Hz(rate) },
            None => Codec { name: format!("dynamic-{pt}"), clock: ClockRate::Unknown },
        }
    }

    /// Clock for a payload type without signalling: static table only.
    pub fn static_clock(pt: u8) -> ClockRate {
        match static_type(pt) {
            Some((_, r)) => ClockRate::Hz(r),
            None => ClockRate::Unknown,
        }
    }
}
