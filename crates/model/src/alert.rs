//! What an alert's figures measure, by its kind: one table for the text
//! report, the JSON rows and the console, so a value is never shown bare.

/// The unit of an alert's value and threshold (empty for a bare count).
pub fn unit(kind: &str) -> &'static str {
    match kind {
        "low_mos" => "MOS",
        "high_loss" | "low_asr" => "%",
        // How long the call was answered without the media.
        "one_way_audio" | "no_rtp" => "s",
        "scanning" => "refused requests in a minute",
        _ => "",
    }
}
