//! The coordination bus (seed 003, the ToolBus lineage): tools written in any language are
//! coordinated by a T-script, and large values travel from tool to tool by reference.
//!
//! - [`term`]: the term model with maximal sharing, its text syntax and matching;
//! - [`saf`]: the streamable binary term format that keeps the sharing;
//! - [`wire`]: the bus's frames (handshake, REG/PUT/GET/ACK/FIN/END, evaluate/value, do,
//!   event/ack-event, notes), a checked decoder with typed errors;
//! - [`owner_tls`]: TLS on the owners' listeners, the consumer pinning the owner's certificate;
#![deny(unsafe_code)]

pub mod client;
pub mod interp;
pub mod memfd;
pub mod net;
pub mod owner_tls;
pub mod refs;
pub mod saf;
pub mod script;
pub mod term;
pub mod wire;

pub use term::{Arena, Kind, ParseError, RefInfo, Term};
