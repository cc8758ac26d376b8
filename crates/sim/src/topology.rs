//! Multi-hop topologies: named links (point-to-point or LAN segments) between nodes, each with
//! its own [`LinkConfig`], and link events in time (down, up, new conditions).
//!
//! Part of the deterministic simulator (DESIGN.md §4.2) and the network half of issue 17 §3
//! (seed 004's 15-node test network of routers and hosts): with a [`Topology`] a datagram
//! travels **one link**, never "to any node".
//!
//! # Interfaces
//! A node's interfaces are the links that list it, numbered from 0 in the order of
//! [`Topology::links`]. A node sends with [`crate::Transmit::port`] set to the interface number:
//! - `Dest::Node(n)` reaches `n` only if `n` is on that link (else the datagram is counted in
//!   [`crate::NetStats::dropped_no_route`]); `Dest::Node(self)` is loopback as without a
//!   topology;
//! - `Dest::Broadcast` reaches every other node of that link (link-local broadcast/multicast).
//!
//! The receiver's `handle_datagram` gets **its own** interface number of that link as `port`.
//! A port that is not one of the sender's interfaces counts as `dropped_no_route`.
//!
//! # Link events
//! A link that is down drops what is sent on it and what arrives over it (counted in
//! [`crate::NetStats::dropped_link_down`]); a datagram in flight when the link comes back up is
//! delivered (as with partitions). [`LinkChange::Condition`] replaces a link's configuration from
//! that instant on (datagrams already in flight keep their fate). Link events are queued before
//! anything else, so at equal times they take effect before any datagram or wake-up.
//!
//! # Conditions on LAN segments
//! Every sender on a link has its own transmit queue (bandwidth) and every copy draws its own
//! loss, duplication, jitter, reordering and corruption: a broadcast to `k` neighbours is `k`
//! independent copies, as on a switched segment.

use fnv::FnvHashSet;
use viastack_kernel::{Instant, NodeId};

use crate::config::LinkConfig;
use crate::error::{LinkRef, SimError};

/// One link: a point-to-point link (two nodes) or a LAN segment (more).
#[derive(Clone, Debug, PartialEq)]
pub struct TopoLink {
    /// The attached nodes (at least two, each at most once).
    pub nodes: Vec<NodeId>,
    /// How the link treats each datagram copy (both directions, every sender).
    pub config: LinkConfig,
}

impl TopoLink {
    /// A link between `nodes` with configuration `config`.
    pub fn new(nodes: impl IntoIterator<Item = NodeId>, config: LinkConfig) -> Self {
        TopoLink {
            nodes: nodes.into_iter().collect(),
            config,
        }
    }
}

/// What happens to a link at a [`LinkEvent`].
#[derive(Clone, Debug, PartialEq)]
pub enum LinkChange {
    /// The link fails: nothing crosses it until it comes back up.
    Down,
    /// The link is repaired.
    Up,
    /// The link's conditions change (latency, loss, bandwidth, …).
    Condition(LinkConfig),
}

/// A change of one link at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkEvent {
    /// When it happens.
    pub at: Instant,
    /// Index in [`Topology::links`].
    pub link: usize,
    /// What happens.
    pub change: LinkChange,
}

/// The links of a multi-hop network and their events. Nodes on no link are isolated (loopback
/// only).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// The links; a node's interface numbers follow this order.
    pub links: Vec<TopoLink>,
    /// Link failures, repairs and condition changes, in any order.
    pub events: Vec<LinkEvent>,
}

impl Topology {
    /// The links of `node`, in interface order: `interfaces(n)[i]` is the link index of
    /// interface `i`.
    pub fn interfaces(&self, node: NodeId) -> Vec<usize> {
        self.links
            .iter()
            .enumerate()
            .filter(|(_, l)| l.nodes.contains(&node))
            .map(|(i, _)| i)
            .collect()
    }

    /// The interface number of `link` at `node`, if `node` is on it.
    pub fn interface_of(&self, node: NodeId, link: usize) -> Option<u16> {
        let pos = self.interfaces(node).iter().position(|&l| l == link)?;
        u16::try_from(pos).ok()
    }

    /// Add a point-to-point link and return its index.
    pub fn connect(&mut self, a: NodeId, b: NodeId, config: LinkConfig) -> usize {
        self.links.push(TopoLink::new([a, b], config));
        self.links.len() - 1
    }
}

/// Check a topology against `nodes` nodes.
pub(crate) fn validate(t: &Topology, nodes: u32) -> Result<(), SimError> {
    let mut ports = vec![0u32; nodes as usize];
    for (index, l) in t.links.iter().enumerate() {
        if l.nodes.len() < 2 {
            return Err(SimError::InvalidLink {
                index,
                reason: "a link needs at least two nodes",
            });
        }
        let mut seen = FnvHashSet::default();
        for &n in &l.nodes {
            if n.0 >= nodes {
                return Err(SimError::UnknownNode {
                    what: "topology link",
                    node: n,
                    nodes,
                });
            }
            if !seen.insert(n) {
                return Err(SimError::InvalidLink {
                    index,
                    reason: "a node appears twice on the link",
                });
            }
            if let Some(p) = ports.get_mut(n.0 as usize) {
                *p += 1;
                if *p > u32::from(u16::MAX) {
                    return Err(SimError::InvalidLink {
                        index,
                        reason: "a node has more than 65535 interfaces",
                    });
                }
            }
        }
        l.config.validate(LinkRef::Topology { index })?;
    }
    for (index, e) in t.events.iter().enumerate() {
        if e.link >= t.links.len() {
            return Err(SimError::InvalidLinkEvent {
                index,
                reason: "no such link",
            });
        }
        if let LinkChange::Condition(c) = &e.change {
            c.validate(LinkRef::Topology { index: e.link })?;
        }
    }
    Ok(())
}

/// The topology as lookup tables for the simulator.
pub(crate) struct TopoMap {
    /// Per node: the link index of each interface.
    pub ifaces: Vec<Vec<u32>>,
    /// Per link: its members and their interface number on it.
    pub members: Vec<Vec<(u32, u16)>>,
    /// Per link: its current configuration.
    pub config: Vec<LinkConfig>,
    /// Per link: whether it is up.
    pub up: Vec<bool>,
    /// The link events, indexed by `Event::Link`.
    pub events: Vec<LinkEvent>,
}

impl TopoMap {
    pub fn new(t: Topology, nodes: u32) -> Self {
        let mut ifaces = vec![Vec::new(); nodes as usize];
        let mut members = Vec::with_capacity(t.links.len());
        let mut config = Vec::with_capacity(t.links.len());
        for (i, l) in t.links.into_iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let mut m = Vec::with_capacity(l.nodes.len());
            for n in l.nodes {
                if let Some(list) = ifaces.get_mut(n.0 as usize) {
                    let port = u16::try_from(list.len()).unwrap_or(u16::MAX);
                    list.push(i);
                    m.push((n.0, port));
                }
            }
            members.push(m);
            config.push(l.config);
        }
        let up = vec![true; members.len()];
        TopoMap {
            ifaces,
            members,
            config,
            up,
            events: t.events,
        }
    }

    /// The link of `node`'s interface `port`.
    pub fn link_of(&self, node: u32, port: u16) -> Option<u32> {
        self.ifaces
            .get(node as usize)?
            .get(usize::from(port))
            .copied()
    }

    pub fn is_up(&self, link: u32) -> bool {
        self.up.get(link as usize).copied().unwrap_or(false)
    }
}
