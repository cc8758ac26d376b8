//! The stack-file model: what a parsed and validated stack file says, as plain data.
//!
//! A stack file declares layers (a name, a [kind](crate::catalog::LayerKind) and its validated
//! [`Params`]), QoSs (ordered layer names, bottom first), channels (instances of a QoS, in file
//! order, with explicit session bindings), optional named sessions and an optional simulation
//! [`Scenario`]. Every value here has passed validation ([`crate::parse()`]): names resolve, ranges
//! hold, node indices are below `nodes`. Line numbers are kept so later stages (building, the
//! CLI) can point back into the file. Part of issue 2 §3 / DESIGN.md §6.10.

use std::collections::BTreeMap;

use viastack_kernel::Duration;

use crate::catalog::Params;

/// A parsed, validated stack file.
#[derive(Debug, Clone, PartialEq)]
pub struct StackFile {
    /// The file's name, as given to [`crate::parse()`] (used in diagnostics).
    pub path: String,
    /// Layers by name.
    pub layers: BTreeMap<String, LayerDecl>,
    /// QoSs by name.
    pub qos: BTreeMap<String, QosDecl>,
    /// Channels, in file order (channel ids follow this order on every node).
    pub channels: Vec<ChannelDecl>,
    /// Declared named sessions by name (sessions used in `bind` need not be declared).
    pub sessions: BTreeMap<String, SessionDecl>,
    /// The simulation scenario, if the file has one.
    pub scenario: Option<Scenario>,
    /// The multi-hop network (`[topology]`), if the file has one.
    pub topology: Option<TopologyDecl>,
}

impl StackFile {
    /// The channel named `name`.
    pub fn channel(&self, name: &str) -> Option<&ChannelDecl> {
        self.channels.iter().find(|c| c.name == name)
    }
}

/// `[layers.NAME]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerDecl {
    /// The layer's name (also the built layer's [`name`](viastack_kernel::Layer::name)).
    pub name: String,
    /// The catalog kind.
    pub kind: String,
    /// Validated parameters, defaults filled in.
    pub params: Params,
    /// Line of the `[layers.NAME]` header (or first key).
    pub line: usize,
}

/// `[qos.NAME]`.
#[derive(Debug, Clone, PartialEq)]
pub struct QosDecl {
    /// The QoS's name.
    pub name: String,
    /// Layer names, bottom (device) first.
    pub layers: Vec<String>,
    /// Line of the header.
    pub line: usize,
}

/// `[channels.NAME]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelDecl {
    /// The channel's name.
    pub name: String,
    /// The QoS it instantiates.
    pub qos: String,
    /// Explicit bindings: layer name → named session.
    pub bind: BTreeMap<String, String>,
    /// Line of the header.
    pub line: usize,
}

/// `[sessions.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDecl {
    /// The session's name.
    pub name: String,
    /// The layer it is a session of.
    pub layer: String,
    /// Line of the header.
    pub line: usize,
}

/// What the scenario's run must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expect {
    /// Nothing is checked.
    #[default]
    None,
    /// Messages that arrive arrive in send order (per sender).
    Fifo,
    /// Every message arrives exactly once.
    Reliable,
    /// Every message arrives exactly once, in send order per sender.
    ReliableFifo,
    /// An `overlay` layer's topology has converged by the end: on DT every live node's
    /// neighbours are its neighbours in the Delaunay triangulation of the live nodes' points,
    /// with one leader; on the hypercube the labels are G(0)…G(N−1), each held once, and every
    /// node's neighbours are the labels one bit away.
    OverlayConverged,
    /// `overlay-converged`, and every `multicast` workload message from a node that stayed up
    /// reached every other node that stayed up exactly once (and no node twice).
    OverlayMulticast,
    /// A group stack's history (views installed, `multicast` messages sent and delivered per
    /// member) passes the group checker: view agreement and monotonicity, virtual synchrony,
    /// self-delivery, no creation, no duplication, and liveness after the last fault.
    VirtualSynchrony,
    /// `virtual-synchrony`, and members that go from one view to the same next view deliver
    /// that view's messages in the same order (total-order agreement).
    TotalOrder,
    /// `virtual-synchrony`, and no member delivers a message before one that causally
    /// precedes it (delivered or sent by its sender before it sent it).
    CausalOrder,
    /// Multicast with group membership (`[[scenario.group]]`, issue 17): every `multicast`
    /// workload message from a sender that never crashed reached every host that joined
    /// before the workload started and never left nor crashed, exactly once, unless its
    /// sender's stack reported it (`SendRefused`); no node received a message twice; no
    /// `McastUnrecoverable` notice.
    ReliableMulticast,
    /// `reliable-multicast`, and each such host received each sender's messages in order.
    ReliableOrderedMulticast,
    /// `total-order` on every channel that has views, and across channels: members that go
    /// from one view to the same next one deliver the messages of all channels in it in one
    /// order (seed 001 §1, a session shared by several channels; `stacks/cross-channel.toml`).
    CrossChannelOrder,
}

impl Expect {
    /// The names accepted in a file.
    pub const NAMES: &'static [&'static str] = &[
        "none",
        "fifo",
        "reliable",
        "reliable-fifo",
        "overlay-converged",
        "overlay-multicast",
        "virtual-synchrony",
        "total-order",
        "causal-order",
        "reliable-multicast",
        "reliable-ordered-multicast",
        "cross-channel-order",
    ];

    /// The value named `name`.
    pub fn from_name(name: &str) -> Option<Expect> {
        match name {
            "none" => Some(Expect::None),
            "fifo" => Some(Expect::Fifo),
            "reliable" => Some(Expect::Reliable),
            "reliable-fifo" => Some(Expect::ReliableFifo),
            "overlay-converged" => Some(Expect::OverlayConverged),
            "overlay-multicast" => Some(Expect::OverlayMulticast),
            "virtual-synchrony" => Some(Expect::VirtualSynchrony),
            "total-order" => Some(Expect::TotalOrder),
            "causal-order" => Some(Expect::CausalOrder),
            "reliable-multicast" => Some(Expect::ReliableMulticast),
            "reliable-ordered-multicast" => Some(Expect::ReliableOrderedMulticast),
            "cross-channel-order" => Some(Expect::CrossChannelOrder),
            _ => None,
        }
    }

    /// The name written in a file.
    pub fn name(self) -> &'static str {
        match self {
            Expect::None => "none",
            Expect::Fifo => "fifo",
            Expect::Reliable => "reliable",
            Expect::ReliableFifo => "reliable-fifo",
            Expect::OverlayConverged => "overlay-converged",
            Expect::OverlayMulticast => "overlay-multicast",
            Expect::VirtualSynchrony => "virtual-synchrony",
            Expect::TotalOrder => "total-order",
            Expect::CausalOrder => "causal-order",
            Expect::ReliableMulticast => "reliable-multicast",
            Expect::ReliableOrderedMulticast => "reliable-ordered-multicast",
            Expect::CrossChannelOrder => "cross-channel-order",
        }
    }
}

/// Whom each sender of a workload sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pattern {
    /// Round robin over the other nodes.
    #[default]
    AllToAll,
    /// To node `(self + 1) % nodes`.
    Ring,
    /// Everything to node 0.
    ToFirst,
    /// To every node ([`viastack_kernel::Dest::Broadcast`]): a multicast, delivered at every
    /// other node (an `overlay` layer carries it down its tree).
    Multicast,
}

impl Pattern {
    /// The names accepted in a file.
    pub const NAMES: &'static [&'static str] = &["all-to-all", "ring", "to-first", "multicast"];

    /// The value named `name`.
    pub fn from_name(name: &str) -> Option<Pattern> {
        match name {
            "all-to-all" => Some(Pattern::AllToAll),
            "ring" => Some(Pattern::Ring),
            "to-first" => Some(Pattern::ToFirst),
            "multicast" => Some(Pattern::Multicast),
            _ => None,
        }
    }

    /// The name written in a file.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::AllToAll => "all-to-all",
            Pattern::Ring => "ring",
            Pattern::ToFirst => "to-first",
            Pattern::Multicast => "multicast",
        }
    }
}

/// Behaviour of a directed link (`[scenario.link]`, defaults for every link).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpec {
    /// One-way delay.
    pub latency: Duration,
    /// Extra delay, uniform in `0..=jitter`.
    pub jitter: Duration,
    /// Bits per second; `None` is unlimited.
    pub bandwidth: Option<u64>,
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability a datagram is held back by `reorder_delay`.
    pub reorder: f64,
    /// How long a reordered datagram is held back.
    pub reorder_delay: Duration,
    /// Probability one byte of a datagram is flipped.
    pub corrupt: f64,
}

impl Default for LinkSpec {
    /// The defaults of `[scenario.link]` (see `docs/STACK_FILES.md`): 1 ms latency, no jitter,
    /// unlimited bandwidth, no faults, 5 ms reorder delay.
    fn default() -> Self {
        LinkSpec {
            latency: Duration::from_millis(1),
            jitter: Duration::ZERO,
            bandwidth: None,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(5),
            corrupt: 0.0,
        }
    }
}

/// `[[scenario.links]]`: an override for one directed link; unset fields come from
/// [`Scenario::link`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LinkOverride {
    /// Sending node.
    pub from: u32,
    /// Receiving node.
    pub to: u32,
    /// See [`LinkSpec::latency`].
    pub latency: Option<Duration>,
    /// See [`LinkSpec::jitter`].
    pub jitter: Option<Duration>,
    /// See [`LinkSpec::bandwidth`].
    pub bandwidth: Option<u64>,
    /// See [`LinkSpec::loss`].
    pub loss: Option<f64>,
    /// See [`LinkSpec::duplicate`].
    pub duplicate: Option<f64>,
    /// See [`LinkSpec::reorder`].
    pub reorder: Option<f64>,
    /// See [`LinkSpec::reorder_delay`].
    pub reorder_delay: Option<Duration>,
    /// See [`LinkSpec::corrupt`].
    pub corrupt: Option<f64>,
    /// Line of the `[[scenario.links]]` entry.
    pub line: usize,
}

impl LinkOverride {
    /// `base` with this override's fields applied.
    pub fn apply(&self, base: &LinkSpec) -> LinkSpec {
        LinkSpec {
            latency: self.latency.unwrap_or(base.latency),
            jitter: self.jitter.unwrap_or(base.jitter),
            bandwidth: self.bandwidth.or(base.bandwidth),
            loss: self.loss.unwrap_or(base.loss),
            duplicate: self.duplicate.unwrap_or(base.duplicate),
            reorder: self.reorder.unwrap_or(base.reorder),
            reorder_delay: self.reorder_delay.unwrap_or(base.reorder_delay),
            corrupt: self.corrupt.unwrap_or(base.corrupt),
        }
    }
}

/// `[[scenario.partition]]`: from `at` (until `heal`) nodes only reach nodes of their group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSpec {
    /// When the partition starts.
    pub at: Duration,
    /// When it heals, if it does (after `at`).
    pub heal: Option<Duration>,
    /// Disjoint groups of nodes; a node in no group is isolated.
    pub groups: Vec<Vec<u32>>,
    /// Line of the entry.
    pub line: usize,
}

/// `[[scenario.crash]]`: node `node` stops at `at` (and restarts, fresh, at `restart`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashSpec {
    /// The node.
    pub node: u32,
    /// When it crashes.
    pub at: Duration,
    /// When it restarts, if it does (after `at`).
    pub restart: Option<Duration>,
    /// Line of the entry.
    pub line: usize,
}

/// `[[scenario.leave]]`: node `node`'s application leaves at `at`: it closes its channels, so
/// its layers say goodbye (an `overlay` layer leaves the overlay), and it sends nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaveSpec {
    /// The node.
    pub node: u32,
    /// When it leaves.
    pub at: Duration,
    /// Line of the entry.
    pub line: usize,
}

/// `[[scenario.move]]`: node `node`'s application moves light channel `channel`'s light group
/// to the heavy group of light channel `to` (both bound to one `lwg` session) at `at`: every
/// member of the light group moves (crates/group/src/lwg.rs, "Mapping light groups to heavy
/// groups").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveSpec {
    /// The node that asks for the move.
    pub node: u32,
    /// The light channel whose group moves.
    pub channel: String,
    /// A light channel on the destination heavy group.
    pub to: String,
    /// When.
    pub at: Duration,
    /// Line of the entry.
    pub line: usize,
}

/// `[[scenario.group]]`: a host's application joins or leaves a multicast group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEventSpec {
    /// The host.
    pub node: u32,
    /// Join (else leave).
    pub join: bool,
    /// The group address (class D).
    pub group: u32,
    /// When.
    pub at: Duration,
    /// Line of the entry.
    pub line: usize,
}

/// `[[scenario.workload]]`: messages the application sends on a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// The channel.
    pub channel: String,
    /// Messages per sending node.
    pub messages: u64,
    /// Payload bytes per message.
    pub size: u64,
    /// Time between two messages of one sender.
    pub interval: Duration,
    /// When the first message is sent.
    pub start: Duration,
    /// Whom each sender sends to.
    pub pattern: Pattern,
    /// The sending nodes; `None` is every node.
    pub senders: Option<Vec<u32>>,
    /// Line of the entry.
    pub line: usize,
}

/// `[scenario]`: a simulated run of the stack.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// How many nodes (numbered from 0).
    pub nodes: u32,
    /// The seed of every random choice of the run.
    pub seed: u64,
    /// How long the run lasts (virtual time).
    pub duration: Duration,
    /// What the run must show.
    pub expect: Expect,
    /// Defaults for every directed link.
    pub link: LinkSpec,
    /// Overrides for particular directed links, in file order.
    pub links: Vec<LinkOverride>,
    /// Partitions, in file order.
    pub partitions: Vec<PartitionSpec>,
    /// Crashes, in file order.
    pub crashes: Vec<CrashSpec>,
    /// Graceful leaves, in file order.
    pub leaves: Vec<LeaveSpec>,
    /// Light-group moves, in file order.
    pub moves: Vec<MoveSpec>,
    /// Workloads, in file order.
    pub workloads: Vec<Workload>,
    /// Group joins and leaves, in file order.
    pub groups: Vec<GroupEventSpec>,
    /// Link failures of the `[topology]` links, in file order.
    pub link_failures: Vec<LinkFailureSpec>,
    /// The file's `[topology]`: with one, datagrams travel its links (and `link`/`links` are
    /// only the defaults of its links' conditions).
    pub topology: Option<TopologyDecl>,
    /// Line of `[scenario]` (or its first key).
    pub line: usize,
}

impl Scenario {
    /// The behaviour of the directed link `from → to`: [`Scenario::link`] with the overrides
    /// for that link applied in file order.
    pub fn link_between(&self, from: u32, to: u32) -> LinkSpec {
        self.links
            .iter()
            .filter(|o| o.from == from && o.to == to)
            .fold(self.link, |acc, o| o.apply(&acc))
    }
}

/// What a node of a `[topology]` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Forwards between its links and runs routing.
    #[default]
    Router,
    /// An end system: sends and receives, routes nothing.
    Host,
}

impl Role {
    /// The names a file may write.
    pub const NAMES: &'static [&'static str] = &["router", "host"];

    /// From its name.
    pub fn from_name(name: &str) -> Option<Role> {
        match name {
            "router" => Some(Role::Router),
            "host" => Some(Role::Host),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Router => "router",
            Role::Host => "host",
        }
    }
}

/// `[[topology.node]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopoNodeDecl {
    /// Its name (unique); the node's index is its position among the `[[topology.node]]`s.
    pub name: String,
    /// Router or host.
    pub role: Role,
    /// Line of the entry.
    pub line: usize,
}

/// `[[topology.link]]`: a point-to-point link (two nodes) or a LAN segment (more).
#[derive(Debug, Clone, PartialEq)]
pub struct TopoLinkDecl {
    /// Its name (unique): given, or the node names joined by `-`.
    pub name: String,
    /// The attached nodes' indices, in the order written.
    pub nodes: Vec<u32>,
    /// Its own conditions; unset fields come from `[scenario.link]` (or its defaults).
    pub conditions: LinkOverride,
    /// Line of the entry.
    pub line: usize,
}

/// `[topology]`: the nodes and links of a multi-hop network.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopologyDecl {
    /// The nodes, in index order.
    pub nodes: Vec<TopoNodeDecl>,
    /// The links, in file order (a node's interface numbers follow this order).
    pub links: Vec<TopoLinkDecl>,
    /// Line of `[topology]` (or its first entry).
    pub line: usize,
}

impl TopologyDecl {
    /// The index of the node named `name`.
    pub fn node_index(&self, name: &str) -> Option<u32> {
        let i = self.nodes.iter().position(|n| n.name == name)?;
        u32::try_from(i).ok()
    }

    /// The index of the link named `name`.
    pub fn link_index(&self, name: &str) -> Option<usize> {
        self.links.iter().position(|l| l.name == name)
    }

    /// What a layer of node `node` knows of the network: its role and, per interface (port),
    /// the index of the link.
    pub fn node_view(&self, node: u32) -> NodeTopology {
        NodeTopology {
            role: self
                .nodes
                .get(node as usize)
                .map(|n| n.role)
                .unwrap_or_default(),
            links: self
                .links
                .iter()
                .enumerate()
                .filter(|(_, l)| l.nodes.contains(&node))
                .map(|(i, _)| u32::try_from(i).unwrap_or(u32::MAX))
                .collect(),
        }
    }
}

/// One node's view of the `[topology]`, handed to layer factories
/// ([`crate::catalog::BuildEnv::topology`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeTopology {
    /// The node's role.
    pub role: Role,
    /// Per interface (the port a datagram is sent on), the index of its link.
    pub links: Vec<u32>,
}

/// `[[scenario.link_failure]]`: a `[topology]` link fails, and may be repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkFailureSpec {
    /// Index of the link in `[topology]`.
    pub link: usize,
    /// When it fails.
    pub at: Duration,
    /// When it is repaired, if ever.
    pub repair: Option<Duration>,
    /// Line of the entry.
    pub line: usize,
}
