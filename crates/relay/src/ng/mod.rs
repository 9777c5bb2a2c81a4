//! rtpengine's ng control protocol on an edge node, sans-I/O: a SIP proxy
//! (Kamailio's or OpenSIPS's `rtpengine` module) asks the edge to carry a
//! call's media with `offer` and `answer`, and ends it with `delete`
//! (`docs/relay.md`, "Calls from SIP proxies").
//!
//! Each call has two parties. An SDP from one party goes to the other, so
//! it is rewritten to name the ports the *other* party must send to (the
//! ports facing it), and the sender's own addresses are kept as where its
//! media goes. Media arriving on the ports facing party X (from X) leaves
//! through the ports facing party Y, to Y's addresses: both parties see the
//! edge as their peer, symmetric, as with rtpengine.
//!
//! A request is `COOKIE SPACE BENCODE-DICT`; a request repeated with the
//! same cookie (the proxy retransmits after a timeout) gets the reply
//! already given, so an offer is not done twice.

pub mod bencode;
mod calls;
mod media;
mod replies;
pub mod sdp;
#[cfg(test)]
mod tests;

pub use calls::{Control, ControlConfig, ControlCounters, Forward};
pub use media::Source;
