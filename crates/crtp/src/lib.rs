//! RTP header compression, cRTP (RFC 2508), as carried on PPP (RFC 3544):
//! a sans-I/O compressor and decompressor. Each takes and gives byte
//! slices; the caller owns the link, the clock and the buffers, so the
//! same code runs in `calliper crtp` on captures and on a relay's link.
//!
//! A flow (addresses, ports, SSRC) gets a context on both ends. The first
//! packet, and every refresh, crosses as FULL_HEADER: the datagram itself
//! with the context id and a 4-bit link sequence in its two length fields.
//! Later packets cross as COMPRESSED_RTP: the context id, one flag byte
//! (M S T I and the link sequence) and only the deltas that changed, so a
//! steady voice stream needs 2 bytes of header instead of 40 (4 with a UDP
//! checksum). A change in the RTP header's usual constants crosses as
//! COMPRESSED_UDP (RTP header uncompressed). A gap in the link sequence
//! invalidates the context at the decompressor, which says so with
//! CONTEXT_STATE; the compressor then refreshes it.
//!
//! Formats, the delta table and the defaults were checked against the
//! texts of RFC 2508 (§3.3) and RFC 2507 (§14, the defaults). RTP contexts
//! are IPv4; other UDP over IPv4, and IPv6/UDP, take non-TCP contexts
//! (COMPRESSED_NON_TCP, RFC 2507 §6).
//! RFC 3545's enhancements are built: the header checksum (§2.2), and
//! robust operation by repeated updates (§2.1, §2.3; [`enhanced`]).

mod compressor;
mod decompressor;
pub mod delta;
mod enhanced;
mod header;
mod non_tcp;

pub use compressor::{Compressor, CompressorStats};
pub use decompressor::{Decompressor, DecompressorStats, Error};
pub use header::{set_ip_checksum, MAX_HEADER};

/// PPP protocol numbers (RFC 3544 §2 and RFC 2509): what a packet is.
pub use calliper_wire::ppp_protocol as protocol;

/// Largest N for RFC 3545's repeats. A gap is read from a 4-bit link
/// sequence, so a packet r places late (a link that reorders) looks like
/// a gap of 15 − r; up to 7 it cannot pass for a gap of N or fewer, which
/// would be bridged with the wrong context (the checksums do not cover the
/// IP header: a stale TTL would come back).
pub const MAX_REPEATS: u8 = 7;

/// The settings both ends of a link must share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Contexts (flows compressed at once), 1..=[`Config::MAX_CONTEXTS`]; above 256 the
    /// context id takes 16 bits. RFC 2509's NON_TCP_SPACE default is 15
    /// (16 contexts); this implementation defaults to 256.
    pub contexts: u32,
    /// A FULL_HEADER at least every this many packets of a context
    /// (RFC 2507's F_MAX_PERIOD, default 256); 0: never for age alone.
    pub max_period: u32,
    /// ... and at least every this many nanoseconds (F_MAX_TIME, default
    /// 5 s); 0: never for age alone.
    pub max_time_ns: u64,
    /// RFC 3545's header checksum: flows without a UDP checksum carry a
    /// 16-bit checksum of their headers in its place, so the decompressor
    /// catches context damage their link sequence misses. Off by default
    /// (plain RFC 2508); both ends must agree.
    pub header_checksum: bool,
    /// RFC 3545's robust operation, N: every change crosses in N+1
    /// packets in a row (FULL_HEADERs and COMPRESSED_UDP with absolute
    /// values), so the decompressor bridges a gap of up to N packets with
    /// the "twice" algorithm, checked by the UDP or header checksum. 0:
    /// plain RFC 2508. Both ends take the same N. (RFC 3545 lets the
    /// decompressor count N from the repeated FULL_HEADERs instead; a lost
    /// one would lower it, and the configured N is what the compressor
    /// uses. With another compressor, N here must not exceed its N.)
    pub repeats: u8,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            contexts: 256,
            max_period: 256,
            max_time_ns: 5_000_000_000,
            header_checksum: false,
            repeats: 0,
        }
    }
}

impl Config {
    /// Most contexts a link can have (16-bit context ids).
    pub const MAX_CONTEXTS: u32 = 65536;

    /// Whether context ids take 16 bits.
    pub fn wide(&self) -> bool {
        self.contexts > 256
    }

    /// A configuration error, said plainly.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=Self::MAX_CONTEXTS).contains(&self.contexts) {
            let max = Self::MAX_CONTEXTS;
            return Err(format!("contexts must be 1-{max}, not {}", self.contexts));
        }
        if self.repeats > MAX_REPEATS {
            return Err(format!("repeats must be 0-{MAX_REPEATS}, not {}", self.repeats));
        }
        Ok(())
    }
}

/// The kinds of packet on the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Left uncompressed (not IPv4/UDP/RTP, or not safely compressible).
    Ip,
    /// FULL_HEADER.
    FullHeader,
    /// COMPRESSED_RTP.
    CompressedRtp,
    /// COMPRESSED_UDP.
    CompressedUdp,
    /// COMPRESSED_NON_TCP.
    CompressedNonTcp,
}

impl Kind {
    /// The PPP protocol number of this kind of packet with `config`'s ids.
    pub fn protocol(self, config: &Config) -> u16 {
        match (self, config.wide()) {
            (Kind::Ip, _) => protocol::IPV4,
            (Kind::FullHeader, _) => protocol::FULL_HEADER,
            (Kind::CompressedRtp, false) => protocol::COMPRESSED_RTP_8,
            (Kind::CompressedRtp, true) => protocol::COMPRESSED_RTP_16,
            (Kind::CompressedUdp, false) => protocol::COMPRESSED_UDP_8,
            (Kind::CompressedUdp, true) => protocol::COMPRESSED_UDP_16,
            (Kind::CompressedNonTcp, _) => protocol::COMPRESSED_NON_TCP,
        }
    }
}

#[cfg(test)]
mod tests;
