//! Voice decoding for call recordings: the payloads of a stream to 16-bit
//! PCM, and PCM to WAV. Sans-I/O: decoders take payload bytes and append
//! samples, [`call`] takes captured frames; the WAV writer takes any [`std::io::Write`].
//!
//! - [`g711`]: µ-law and A-law (ITU-T G.711), 8 kHz.
//! - [`g722`]: G.722 at 64 kbit/s (ITU-T G.722 sub-band ADPCM), 16 kHz.
//! - [`opus`]: Opus through libopus, 48 kHz.
//! - `g729`: G.729 through libbcg729 (GPL), with the `g729` feature only.
//! - [`call`]: a stored call's streams from a capture's packets to two
//!   channels, caller and callee.
//! - [`timeline`]: one direction of a call as the listener heard it
//!   (jitter buffer, concealment, comfort noise, DTMF marks).
//! - [`wav`]: 16-bit stereo PCM WAV files.
//!
//! Both decoders are checked sample for sample against spandsp's
//! (`tests/spandsp.rs`).

pub mod call;
pub mod g711;
pub mod g722;
#[cfg(feature = "g729")]
pub mod g729;
pub mod opus;
pub mod timeline;
pub mod wav;
