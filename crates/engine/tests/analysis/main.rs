//! The engine's tests through testkit's in-process probe, one binary (each
//! test binary is linked on its own, and linking dominates their build):
//! call flows built message by message, and the figures of every capture
//! against tshark's (streams, events, RTCP, DTMF, quality, encapsulations,
//! sequence restarts, registrations); shards and batches against one
//! engine and one packet at a time, and the capture times the analysis believes.

mod batches;
mod call_flows;
mod calls;
mod captures;
mod encapsulations;
mod events;
mod hep;
mod quality;
mod registrations;
mod restart_jitter;
mod rtcp_xr;
mod shards;
mod time_jumps;
mod traffic;
mod tshark_oracle;
