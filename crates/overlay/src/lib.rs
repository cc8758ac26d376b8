//! Overlay networks of seed 000 (HyperCast, §3.1.1): overlay nodes that build and maintain a
//! topology with protocol messages, sans-IO like the rest of viastack (DESIGN.md §4.1, §6).
//!
//! - [`addr`]: logical addresses per topology ([`DtAddr`], [`HcLabel`]), kept apart from
//!   substrate addresses (a type parameter `S` everywhere).
//! - [`geometry`]: exact integer predicates (orientation, in-circle, the neighbour test).
//! - [`dt`]: the Delaunay triangulation protocol.
//! - [`hypercube`]: the hypercube protocol (compact Gray-code labels, HRoot).
//! - [`tree`]: trees embedded in the overlay, computed locally (compass routing on DT, the bit
//!   rule on the hypercube).
//! - [`rendezvous`]: the rendezvous server and client (joining through a server, partitions
//!   finding each other).
//! - [`forward`]: the forwarding engine (multicast, flood, unicast over the embedded trees).
//! - [`wire`]: the wire formats (application header and extensions, control messages).
//!
//! Every engine takes the current time as an argument, keeps its timers as data and returns
//! what to send through `poll_transmit`; drivers own sockets and clocks.

#![deny(unsafe_code)]

pub mod addr;
pub mod dt;
pub mod forward;
pub mod geometry;
pub mod hypercube;
pub mod rendezvous;
pub mod tree;
pub mod wire;

pub use addr::{AddrError, DtAddr, HcLabel, SimAddr};
