//! viastack's multicast service of seed 004 ("Building a Reliable Multicast Service based on
//! Composite Protocols"), sans-IO: the **global memory** objects shared by its composite
//! protocols ([`memory`]: neighbour table, routing table, with typed read/write functions,
//! invariants and change notification) and the **DVMRP routing** component ([`dvmrp`]:
//! neighbour discovery and route exchange of draft-ietf-idmr-dvmrp-v3) with its wire format
//! ([`wire`]).
//!
//! Nothing here opens a socket or reads a clock (DESIGN.md §4.1). The kernel layer `dvmrp`
//! (crates/protocols) wraps [`dvmrp::Dvmrp`] for stack files; tests drive it directly in the
//! simulator's multi-hop topologies and compare the routes with a central Dijkstra.
#![deny(unsafe_code)]

pub mod addr;
pub mod dvmrp;
pub mod forward;
pub mod groups;
pub mod igmp;
pub mod memory;
pub mod node;
pub mod prune;
pub mod tree;
pub mod wire;

pub use addr::{node_addr, Addr, Prefix};
pub use memory::GlobalMemory;
