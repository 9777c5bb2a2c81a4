//! A call as a database holds it, read back: what identifies its streams'
//! packets (for `export audio` and the console). Here, not in `store`, so
//! readers of these facts (the audio crate) need no database.

/// A stored call and its streams.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCall {
    /// Record id.
    pub id: i64,
    /// SIP Call-ID.
    pub call_id: String,
    /// When the INVITE was seen, ns since the epoch.
    pub invite_ns: i64,
    /// When the call ended, ns since the epoch.
    pub end_ns: i64,
    /// Its streams.
    pub streams: Vec<StoredStream>,
}

/// A stored stream: what identifies its packets.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredStream {
    /// Source address.
    pub src: String,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst: String,
    /// Destination port.
    pub dst_port: u16,
    /// RTP SSRC.
    pub ssrc: u32,
    /// `caller_to_callee`, `callee_to_caller` or `unknown`.
    pub direction: String,
    /// The payload type the stream carried most (None if unknown).
    pub payload_type: Option<u8>,
    /// Its codec's name (`PCMU`, `opus`...), as resolved from SDP.
    pub codec: Option<String>,
    /// First packet, ns since the epoch.
    pub first_ns: i64,
    /// Last packet, ns since the epoch.
    pub last_ns: i64,
}
