//! The relay overlay: media relays that recover lost packets hop by hop
//! within the voice delay budget and route around bad links by an
//! expected-latency metric (Amir et al., Spines).
//!
//! - [`batch_io`]: recvmmsg/sendmmsg batches for the UDP node.
//! - [`packet`]: the datagrams.
//! - [`node`]: the protocol as a sans-I/O state machine.
//! - [`edge`]: the ng endpoint on sockets (control and media).
//! - [`ng`]: rtpengine's ng control protocol, so SIP proxies steer calls to an edge.
//! - [`routing`]: link costs and shortest paths.
//! - [`emu`]: seeded loss (Gilbert–Elliott), delay and jitter.
//! - [`limits`]: the range of every number read from a file.
//! - [`sim`]: a deterministic simulator running real nodes over emulated links.
//! - [`udp`]: the node on a UDP socket, and the client API.

pub mod batch_io;
pub mod edge;
pub mod emu;
pub mod limits;
pub mod ng;
pub mod node;
pub mod packet;
pub mod routing;
pub mod sim;
pub mod udp;
