//! SP, the Simple Protocol (seed 002): a message-based userspace transport over UDP with
//! per-connection reliability that changes on the fly, four priorities, block-wise messages and
//! ECHO round-trip measurement.
//!
//! - [`wire`]: the 20-byte SP v1 header (view + repr, RFC 1071 checksum);
//! - [`connection`]: one connection, sans-IO (`handle_packet`/`handle_timeout`/`poll_*`);
//! - [`endpoint`]: many connections behind one address, demultiplexed by connection id;
//! - [`layer`]: SP as a kernel layer over a device, for stack files;
//! - [`socket`]: a blocking endpoint on a real UDP socket (the driver: real clock, real IO).
//!
//! The seed's defects are fixed here: one explicit byte format (seed §4.4: the Java port could
//! not talk to the C one), no hang when an END is lost (seed §6.2), and packet sizes that are
//! simply the datagram's length (seed §6.2: "no means of detecting the true packet size").

pub mod connection;
pub mod endpoint;
pub mod layer;
pub mod socket;
pub mod wire;

pub use connection::{
    CloseReason, Config, Connection, DropReason, Event, FailReason, Payload, PayloadRef,
    Reliability, SendError, State, Stats, Transmit,
};
pub use endpoint::{ConnectionHandle, ConnectionTotals, Endpoint, EndpointEvent, EndpointStats};
