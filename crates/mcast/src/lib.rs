//! viastack's multicast service of seed 004 ("Building a Reliable Multicast Service based on
//! Composite Protocols"), sans-IO: the **global memory** objects shared by its composite
//! protocols ([`memory`]: neighbour table, routing table; [`tree`]: source tree, prune table;
//! [`groups`]: group table — typed read/write functions, invariants, change notification), the
//! routing components ([`dvmrp`]: neighbour discovery, route exchange and spanning tree of
//! draft-ietf-idmr-dvmrp-v3, with its wire format [`wire`]; [`prune`]: pruning and grafting),
//! group management ([`igmp`]: IGMPv2, RFC 2236), the data path ([`forward`]: multicast
//! forwarding, [`serial`]: RFC 1982 sequence comparison and the wrap-safe in-order buffer) and
//! a router's and a host's deployment of them ([`node`]).
//!
//! Nothing here opens a socket or reads a clock (DESIGN.md §4.1). The kernel layer `dvmrp`
//! (crates/protocols) wraps [`dvmrp::Dvmrp`] and [`prune::Pruner`] for stack files, the layers
//! `igmp` and `mcast-forward` the others; tests drive them directly in the simulator's
//! multi-hop topologies (routes against a central Dijkstra, seed 004's operational scenario,
//! pruned delivery trees over random networks).
#![deny(unsafe_code)]

pub mod addr;
pub mod dvmrp;
pub mod forward;
pub mod groups;
pub mod igmp;
pub mod memory;
pub mod node;
pub mod prune;
pub mod reliable;
pub mod serial;
pub mod tree;
pub mod wire;

pub use addr::{node_addr, Addr, Prefix};
pub use memory::GlobalMemory;
