//! Node addresses as the kernel sees them (DESIGN.md §6.5: distinct types for distinct
//! addresses).
//!
//! A [`NodeId`] names a node of a scenario (node 0, node 1, …). Drivers map it to a substrate
//! address: the simulator to its virtual network, the network driver to a socket address from
//! the scenario's peer table. Protocols only ever see `NodeId`s.

use std::fmt;

/// A node of a scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// Where a sendable event goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dest {
    /// One node.
    Node(NodeId),
    /// Every other node reachable through the device.
    Broadcast,
}

impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dest::Node(n) => n.fmt(f),
            Dest::Broadcast => f.write_str("*"),
        }
    }
}
