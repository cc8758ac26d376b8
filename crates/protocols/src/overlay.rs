//! `overlay`: an overlay network as a stack layer (issue 16 §2; seed 000 §3.1.1, the overlay
//! socket: "an overlay node runs a protocol that establishes and maintains the overlay network
//! topology", and "all application messages are transmitted along trees that are embedded in
//! the overlay network topology").
//!
//! # Role
//!
//! The session runs one topology engine of `viastack-overlay` — the Delaunay triangulation
//! ([`viastack_overlay::dt`]) or the hypercube ([`viastack_overlay::hypercube`]) — and the
//! forwarding engine ([`viastack_overlay::forward`]) over the device below. The substrate
//! address of a node is its device address (its [`NodeId`]); its logical address is, on DT, a
//! point drawn from the scenario seed and the node id ([`dt_coordinates`], the same on every
//! node, so any node can name any other), and on the hypercube the label the protocol assigns.
//!
//! - It starts with the first channel that starts (`ChannelInit`), joins through the
//!   `buddies`, and keeps its timers as kernel one-shot timers (one pending at a time, at the
//!   engine's `poll_timeout`).
//! - A sendable from above addressed to [`Dest::Broadcast`] is multicast down the tree rooted
//!   at this node (or flooded, `broadcast = "flood"`); one addressed to a node is unicast up the
//!   tree rooted at that node's logical address. On DT every node computes every node's point.
//!   On the hypercube labels are assigned at run time, so a node knows the labels of its
//!   neighbours and of the nodes in its *directory*: labels learned from the messages
//!   delivered to it (the source's label in the overlay header, its node in the payload) and
//!   from tree queries that carry a root's label (the `messagestore` carries its messages'
//!   root labels, `docs/WIRE.md`). A unicast to a node whose label is unknown is refused and
//!   counted `refused` and `no_label`; [`OverlayTarget::Label`] names a label directly.
//!   The directory is a cache: a label that moved (the HRoot filling a hole) is stale until a
//!   newer message corrects it.
//! - Messages for this node go up as sendables from their source node, to this node.
//! - Neighbourhood changes go up every bound channel as [`NEIGHBOUR_ADDED`] /
//!   [`NEIGHBOUR_REMOVED`] notices about the neighbour's node.
//! - A [`TREE_QUERY`] from above (a root node, with its hypercube label when the asker knows
//!   it) is answered at once with a [`TREE`] event: this node's parent, children and
//!   neighbours in the tree rooted at that node, and its own label (the `messagestore` layer
//!   reads its services' node information this way). On the hypercube the tree is the bit
//!   rule's ([`viastack_overlay::tree::hc_parent`]) rooted at the root's label; with no label
//!   known for the root only the neighbours are given. Answers are remembered per root while
//!   the *shape* the trees are computed from is unchanged: a stream of messages on one tree
//!   costs one tree computation, not one per message.
//! - **Topology generation** (for the layer above's own cache of answers). After every input
//!   that may change the topology engine (a control datagram, a rendezvous answer, a timer,
//!   the start, the leave) the layer compares the shape every tree answer is computed from —
//!   on DT its point and each neighbour's point, `cw`/`ccw` and node; on the hypercube its
//!   label, the HRoot's label and each neighbour's label and node — with the shape before,
//!   and when it differs bumps its *generation*. Each [`TreeInfo`] carries the generation it
//!   holds for (or none when it may not be reused: a hypercube root whose label came from the
//!   layer's directory rather than the query); once a layer above has asked a tree, each bump
//!   goes up as a [`GENERATION`] notice before anything else that input sends up, so the
//!   asker drops the answers it keeps before it handles a message of the new topology (the
//!   kernel's FIFO queue and one input run to completion at a time: the asker never sees a
//!   message that arrived after a change before the change's notice). A hello that only
//!   refreshes a neighbour changes nothing.
//! - An [`OVERLAY_SEND`] from above (an [`OverlaySend`]: delivery mode, target, payload) is
//!   sent as it says: multicast, flood, or unicast to a node or to a logical address (the
//!   overlay socket API of `viastack::overlay` sends this way, whatever `broadcast` says).
//! - [`OverlaySession::status`] is a snapshot for applications: logical address, neighbours
//!   (as nodes), leader, last neighbourhood change.
//! - When the channel closes (the node leaves) it says goodbye (DT `Goodbye`, hypercube
//!   `Leave`) and stops.
//!
//! # Wire format
//!
//! Every datagram is an overlay datagram of `docs/WIRE.md` ("Overlay"): DT or hypercube
//! control, or an application message whose payload extension is the source's node id (u32,
//! big-endian) followed by the upper layers' bytes. Substrate addresses in control messages
//! are of kind 1 (a node number).
//!
//! # Counters
//!
//! Under the layer's name: `malformed` (not an overlay datagram, or an undecodable one),
//! `unsupported` (a message of the other topology), `refused` (a send before the node has an
//! address, or a node send on the hypercube), and the forwarder's `sent`, `delivered`,
//! `forwarded`, `no_route` (no next hop), `not_from_parent` (the previous-hop check),
//! `duplicates`, `hop_limit`, `forgotten` (duplicate-suppression memory full), `own` (its own
//! messages coming back); `short_payload` (a payload without its 4-byte source),
//! `neighbour_added`, `neighbour_removed`.
//!
//! # Memory
//!
//! Bounded by the engines: the DT neighbour table (`max_neighbours`), the hypercube's
//! neighbour table (one per bit), the forwarder's duplicate memory (`remember`).

use std::collections::BTreeMap;

use rand::RngCore;

use viastack_kernel::event::{
    EventTypeDef, CHANNEL_CLOSE, CHANNEL_EVENT, CHANNEL_INIT, INBOUND, SENDABLE, TIMER,
};
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Dest, Direction, Event, EventType, Instant, Layer, Message,
    NodeId, Sendable, Session, TimerId,
};
use viastack_overlay::forward::{self, Change, DtTopology, Forwarder, HcTopology, Topology};
use viastack_overlay::rendezvous::{self, Client, ClientConfig, Server, ServerConfig};
use viastack_overlay::wire::app::DeliveryMode;
use viastack_overlay::wire::{self, Kind};
use viastack_overlay::{dt, hypercube, DtAddr, HcLabel};

use crate::events;

/// A neighbour joined this node's neighbourhood (a [`events::PeerNotice`] about its node).
pub static NEIGHBOUR_ADDED: EventTypeDef =
    EventTypeDef::new("OverlayNeighbourAdded", Some(&CHANNEL_EVENT));
/// A neighbour left this node's neighbourhood.
pub static NEIGHBOUR_REMOVED: EventTypeDef =
    EventTypeDef::new("OverlayNeighbourRemoved", Some(&CHANNEL_EVENT));

/// A layer above asks for this node's place in the tree rooted at a node (a down-going event
/// whose body is a [`TreeQuery`]); the overlay answers at once with an up-going [`TREE`].
pub static TREE_QUERY: EventTypeDef = EventTypeDef::new("OverlayTreeQuery", Some(&CHANNEL_EVENT));
/// The answer to a [`TREE_QUERY`]: a [`TreeInfo`] (this node's parent, children and
/// neighbours, as node ids, in the tree rooted at the queried node).
pub static TREE: EventTypeDef = EventTypeDef::new("OverlayTree", Some(&CHANNEL_EVENT));

/// The trees changed: an up-going event whose body is a [`TopologyGeneration`], sent once a
/// layer above has asked a [`TREE_QUERY`] (see the module doc, "Topology generation").
pub static GENERATION: EventTypeDef = EventTypeDef::new("OverlayGeneration", Some(&CHANNEL_EVENT));

/// The body of a [`GENERATION`] notice: the overlay's new topology generation. Tree answers of
/// an older generation no longer hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyGeneration(pub u64);

/// A layer above (or the application) sends a message with an explicit delivery mode: a
/// down-going event whose body is an [`OverlaySend`].
pub static OVERLAY_SEND: EventTypeDef = EventTypeDef::new("OverlaySend", Some(&CHANNEL_EVENT));

/// Where a unicast goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlayTarget {
    /// A node of the deployment (on DT, up the tree rooted at its point).
    Node(NodeId),
    /// A logical address (DT only): up the tree rooted at that point, delivered by the node
    /// that has it.
    Logical(DtAddr),
    /// A hypercube label (hypercube only): up the bit-rule tree rooted at that label,
    /// delivered by the node that holds it.
    Label(HcLabel),
}

/// The body of an [`OVERLAY_SEND`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlaySend {
    /// Multicast (down the tree rooted at this node), flood, or unicast.
    pub mode: DeliveryMode,
    /// The addressee of a unicast (ignored otherwise).
    pub to: Option<OverlayTarget>,
    /// The application's bytes.
    pub payload: Vec<u8>,
}

/// A snapshot of an overlay node ([`OverlaySession::status`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OverlayStatus {
    /// `"dt"` or `"hypercube"`.
    pub topology: &'static str,
    /// The logical address as text (a DT point `(x,y)`, a hypercube label), `None` before the
    /// node has one.
    pub logical: Option<String>,
    /// The current neighbours' nodes, sorted.
    pub neighbours: Vec<NodeId>,
    /// Whether this node is the leader (DT: no neighbour greater; hypercube: the HRoot).
    pub leader: bool,
    /// When the neighbourhood last changed (DT; the start on the hypercube).
    pub last_change: Option<Instant>,
    /// Whether the node has left.
    pub left: bool,
}

/// The body of a [`TREE_QUERY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeQuery {
    /// The root of the tree.
    pub root: NodeId,
    /// Given back in the answer.
    pub token: u64,
    /// The root's hypercube label, when the asker knows it (the `messagestore` carries it in
    /// its messages, `docs/WIRE.md` "MessageStore"): on the hypercube a node cannot compute
    /// another node's label, so the tree of a root is known only through it (or through the
    /// layer's directory of labels seen, or for this node's own tree and a neighbour's).
    /// Ignored on DT, where every node computes every node's point.
    pub root_label: Option<HcLabel>,
}

/// The body of a [`TREE`] answer. On the hypercube, when the root's label is not known (not
/// in the query, not this node's, not a neighbour's, not in the directory) and before the
/// node has joined, only the neighbours are given (no parent, no children).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TreeInfo {
    /// The queried root.
    pub root: NodeId,
    /// The query's token.
    pub token: u64,
    /// This node's parent in the tree (`None` at the root, or unknown).
    pub parent: Option<NodeId>,
    /// This node's children in the tree.
    pub children: Vec<NodeId>,
    /// This node's current neighbours.
    pub neighbours: Vec<NodeId>,
    /// This node's own hypercube label (`None` on DT and before the node has one): the
    /// `messagestore` stamps it on the messages this node roots.
    pub label: Option<HcLabel>,
    /// The topology generation this answer holds for: the asker may reuse it for the same
    /// root (and root label) until a [`GENERATION`] notice names a greater one. `None`: not to
    /// be reused (a hypercube root whose label the overlay took from its directory).
    pub generation: Option<u64>,
}

/// At most this many node → label entries are kept in a hypercube node's directory (the
/// oldest learned is forgotten first).
pub const DIRECTORY_MAX: usize = 4096;

/// Which topology the layer builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyKind {
    /// The Delaunay triangulation.
    Dt,
    /// The hypercube.
    Hypercube,
}

/// The layer's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The topology.
    pub topology: TopologyKind,
    /// DT protocol parameters (buddies included).
    pub dt: dt::Config<NodeId>,
    /// Hypercube protocol parameters (buddies included).
    pub hypercube: hypercube::Config<NodeId>,
    /// Forwarding parameters.
    pub forward: forward::Config,
    /// How a broadcast from above travels: multicast or flood.
    pub broadcast: DeliveryMode,
    /// DT coordinates are drawn in `0..span` on each axis.
    pub span: u32,
    /// The rendezvous server's node, if the overlay has one: that node runs the server (and
    /// is no member of the overlay); every other node asks it for members while it has no
    /// place in the overlay and registers once it has one ([`viastack_overlay::rendezvous`]).
    pub rendezvous: Option<NodeId>,
    /// How often a node queries or registers with the rendezvous server.
    pub rendezvous_every: viastack_kernel::Duration,
    /// The rendezvous server's own limits (member timeout, members remembered), used on the
    /// server's node.
    pub rendezvous_server: ServerConfig,
}

/// The DT point of node `node` in a run seeded with `seed`: a SplitMix64 draw per axis in
/// `0..span`, so every node computes every other node's point.
pub fn dt_coordinates(seed: u64, node: NodeId, span: u32) -> DtAddr {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let base = seed
        ^ u64::from(node.0)
            .wrapping_add(1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let span = u64::from(span.clamp(1, DtAddr::MAX_COORD as u32));
    let x = (mix(base) % span) as i32;
    let y = (mix(base ^ 0x5555_5555_5555_5555) % span) as i32;
    // In range by construction (span ≤ MAX_COORD).
    DtAddr::new(x, y).unwrap_or_else(|_| unreachable!("coordinates below MAX_COORD"))
}

/// The `overlay` layer for one node.
#[derive(Debug, Clone)]
pub struct Overlay {
    name: String,
    node: NodeId,
    seed: u64,
    config: Config,
}

impl Overlay {
    /// The layer named `name` on node `node` of a run seeded with `seed`.
    pub fn new(name: impl Into<String>, node: NodeId, seed: u64, config: Config) -> Self {
        Overlay {
            name: name.into(),
            node,
            seed,
            config,
        }
    }
}

impl Layer for Overlay {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            CHANNEL_INIT.id(),
            CHANNEL_CLOSE.id(),
            TREE_QUERY.id(),
            OVERLAY_SEND.id(),
        ]
    }
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![
            NEIGHBOUR_ADDED.id(),
            NEIGHBOUR_REMOVED.id(),
            TREE.id(),
            GENERATION.id(),
        ]
    }
    /// Datagrams may be lost on the way; duplicates are suppressed but order is not kept.
    fn delivery(&self, _below: Delivery) -> Delivery {
        Delivery::NONE
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(OverlaySession::new(
            self.node,
            self.seed,
            self.config.clone(),
        ))
    }
}

/// The running topology engine.
#[derive(Debug)]
pub enum Engine {
    /// Not started yet (no channel started).
    Idle,
    /// A DT node.
    Dt(dt::Node<NodeId>),
    /// A hypercube node.
    Hypercube(hypercube::Node<NodeId>),
}

/// The forwarder, typed by topology.
#[derive(Debug)]
enum Fwd {
    Dt(Forwarder<DtAddr>),
    Hc(Forwarder<HcLabel>),
}

/// Session of [`Overlay`]: one per node.
#[derive(Debug)]
pub struct OverlaySession {
    node: NodeId,
    seed: u64,
    config: Config,
    engine: Engine,
    fwd: Fwd,
    channel: Option<ChannelId>,
    timer: Option<(TimerId, Instant)>,
    left: bool,
    stats: forward::Stats,
    /// Current neighbours' nodes, to name a removed neighbour in its notice.
    peers_dt: BTreeMap<DtAddr, NodeId>,
    peers_hc: BTreeMap<HcLabel, NodeId>,
    /// Hypercube: the labels of other nodes, learned from the messages delivered here (the
    /// source's label in the header, its node in the payload) and from tree queries that name
    /// a root's label; bounded by [`DIRECTORY_MAX`] (insertion order in `dir_order`).
    directory: BTreeMap<NodeId, HcLabel>,
    dir_order: std::collections::VecDeque<NodeId>,
    /// This node is the rendezvous server ([`Config::rendezvous`]).
    server: Option<Server<NodeId>>,
    /// This node's rendezvous client ([`Config::rendezvous`] names another node).
    client: Option<Client<NodeId>>,
    /// Answers to tree queries while the shape is unchanged, by root and the root's
    /// hypercube label as resolved for the query (at most [`TREE_CACHE_MAX`]; see
    /// [`OverlaySession::tree_cached`]).
    trees: std::collections::HashMap<(NodeId, Option<HcLabel>), TreeInfo>,
    /// The topology generation: bumped whenever `shape` changes.
    generation: u64,
    /// What every tree answer is computed from, as of the last check.
    shape: Shape,
    /// An input may have changed the engine since `shape` was taken.
    shape_dirty: bool,
    /// The channel a layer above asked trees on: [`GENERATION`] notices go up it (none before
    /// the first query, so a stack without a tree user sees none).
    tree_channel: Option<ChannelId>,
}

/// What tree answers are computed from (see the module doc, "Topology generation").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Shape {
    #[default]
    Idle,
    /// This node's point; each neighbour's point, angular neighbours around it and node.
    Dt(DtAddr, Vec<DtNeighbourShape>),
    /// This node's label, the HRoot's label, each neighbour's label and node.
    Hc(Option<HcLabel>, Option<HcLabel>, Vec<(HcLabel, NodeId)>),
}

/// A DT neighbour as tree answers see it: point, (cw, ccw), node.
type DtNeighbourShape = (DtAddr, (Option<DtAddr>, Option<DtAddr>), NodeId);

impl Shape {
    fn of(engine: &Engine) -> Shape {
        match engine {
            Engine::Dt(n) => Shape::Dt(
                n.addr(),
                n.neighbours()
                    .map(|(a, i)| (a, i.around, i.substrate))
                    .collect(),
            ),
            Engine::Hypercube(n) => Shape::Hc(
                n.label(),
                n.root_label(),
                n.neighbours().map(|(l, i)| (l, i.substrate)).collect(),
            ),
            Engine::Idle => Shape::Idle,
        }
    }
}

/// Tree answers kept at most (roots of the messages in flight; all are dropped when full).
pub const TREE_CACHE_MAX: usize = 256;

impl OverlaySession {
    fn new(node: NodeId, seed: u64, config: Config) -> Self {
        let fwd = match config.topology {
            TopologyKind::Dt => Fwd::Dt(Forwarder::new(config.forward, 0)),
            TopologyKind::Hypercube => Fwd::Hc(Forwarder::new(config.forward, 0)),
        };
        OverlaySession {
            node,
            seed,
            config,
            engine: Engine::Idle,
            fwd,
            channel: None,
            timer: None,
            left: false,
            stats: forward::Stats::default(),
            peers_dt: BTreeMap::new(),
            peers_hc: BTreeMap::new(),
            directory: BTreeMap::new(),
            dir_order: std::collections::VecDeque::new(),
            server: None,
            client: None,
            trees: std::collections::HashMap::new(),
            generation: 0,
            shape: Shape::Idle,
            shape_dirty: false,
            tree_channel: None,
        }
    }

    /// Whether this node is the overlay's rendezvous server (and no member).
    pub fn is_rendezvous_server(&self) -> bool {
        self.server.is_some()
    }

    /// The rendezvous server's counters and member count, on the server's node.
    pub fn rendezvous_stats(&self) -> Option<(rendezvous::ServerStats, usize)> {
        self.server
            .as_ref()
            .map(|s| (s.stats(), s.members().count()))
    }

    /// The topology engine (for inspection: neighbours, leader, labels).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether the node has left the overlay (its channel closed).
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// The forwarding counters.
    pub fn forward_stats(&self) -> forward::Stats {
        match &self.fwd {
            Fwd::Dt(f) => f.stats(),
            Fwd::Hc(f) => f.stats(),
        }
    }

    fn start(&mut self, ctx: &mut Context<'_>) {
        self.topology_may_change();
        let now = ctx.now();
        self.channel = Some(ctx.channel());
        // Fresh message ids per incarnation: a restarted node must not look like a duplicate.
        let first_id = ctx.rng().next_u64() & !(u64::MAX >> 1);
        let first_id = first_id | (now.as_nanos() & (u64::MAX >> 2));
        if let Some(rdv) = self.config.rendezvous {
            if rdv == self.node {
                self.server = Some(Server::new(self.config.rendezvous_server));
                return;
            }
            self.client = Some(Client::new(
                ClientConfig {
                    server: rdv,
                    every: self.config.rendezvous_every,
                },
                self.node,
                now,
            ));
        }
        match self.config.topology {
            TopologyKind::Dt => {
                let me = dt_coordinates(self.seed, self.node, self.config.span);
                self.engine = Engine::Dt(dt::Node::new(self.config.dt.clone(), me, self.node, now));
                self.fwd = Fwd::Dt(Forwarder::new(self.config.forward, first_id));
            }
            TopologyKind::Hypercube => {
                let mut hc = self.config.hypercube.clone();
                // Cube identifiers this node draws differ from every other node's.
                hc.salt = self.seed ^ u64::from(self.node.0).wrapping_add(1) << 32;
                self.engine = Engine::Hypercube(hypercube::Node::new(hc, self.node, now));
                self.fwd = Fwd::Hc(Forwarder::new(self.config.forward, first_id));
            }
        }
        self.flush(ctx);
    }

    /// Drains the engines: control messages and forwarded copies down, deliveries and
    /// neighbourhood changes up, counters, and the next timer.
    fn flush(&mut self, ctx: &mut Context<'_>) {
        let Some(channel) = self.channel else { return };
        self.check_shape(ctx);
        let me = self.node;
        let mut down: Vec<(NodeId, Vec<u8>)> = Vec::new();
        let mut changes: Vec<(bool, NodeId)> = Vec::new();
        self.rendezvous_out(ctx.now(), &mut down);
        match (&mut self.engine, &mut self.fwd) {
            (Engine::Dt(n), Fwd::Dt(f)) => {
                while let Some((to, m)) = n.poll_transmit() {
                    let mut b = Vec::new();
                    if wire::dt::Repr::from_message(&m).emit_into(&mut b).is_ok() {
                        down.push((to, b));
                    }
                }
                while let Some(ev) = n.poll_event() {
                    match ev {
                        dt::Event::NeighbourAdded(a) => f.neighbour_added(a),
                        dt::Event::NeighbourRemoved(a, _) => f.neighbour_removed(a),
                        dt::Event::Leader(_) => {}
                    }
                }
                drain_forwarder(
                    f,
                    &DtTopology(&*n),
                    &mut self.peers_dt,
                    &mut down,
                    &mut changes,
                );
            }
            (Engine::Hypercube(n), Fwd::Hc(f)) => {
                while let Some((to, m)) = n.poll_transmit() {
                    let mut b = Vec::new();
                    if wire::hc::Repr::from_message(&m).emit_into(&mut b).is_ok() {
                        down.push((to, b));
                    }
                }
                while let Some(ev) = n.poll_event() {
                    match ev {
                        hypercube::Event::NeighbourAdded(a) => f.neighbour_added(a),
                        hypercube::Event::NeighbourRemoved(a) => f.neighbour_removed(a),
                        _ => {}
                    }
                }
                drain_forwarder(
                    f,
                    &HcTopology(&*n),
                    &mut self.peers_hc,
                    &mut down,
                    &mut changes,
                );
            }
            _ => {}
        }
        for (to, bytes) in down {
            let s = Sendable::new(me, Dest::Node(to), Message::from_wire(bytes));
            ctx.go(Event::sendable(SENDABLE.id(), Direction::Down, channel, s));
        }
        for (added, peer) in changes {
            let (def, what) = if added {
                (&NEIGHBOUR_ADDED, "neighbour_added")
            } else {
                (&NEIGHBOUR_REMOVED, "neighbour_removed")
            };
            ctx.count(what);
            for ch in ctx.my_channels() {
                ctx.go(events::notice(def, ch, peer));
            }
        }
        self.deliver(ctx, channel);
        self.count(ctx);
        self.arm(ctx);
    }

    /// The rendezvous messages due: the server's answers, the client's query or registration
    /// (a node is *placed* once it has a hypercube label, or DT neighbours — or the server
    /// said it is the first; it registers as a leader when it is the DT leader or the HRoot).
    fn rendezvous_out(&mut self, now: Instant, down: &mut Vec<(NodeId, Vec<u8>)>) {
        let mut msgs = Vec::new();
        if let Some(s) = &mut self.server {
            while let Some(m) = s.poll_transmit() {
                msgs.push(m);
            }
        }
        if let Some(c) = &mut self.client {
            let (placed, leader) = match &self.engine {
                Engine::Dt(n) => (n.neighbours().next().is_some() || c.alone(), n.is_leader()),
                Engine::Hypercube(n) => (n.label().is_some(), n.is_root()),
                Engine::Idle => (false, false),
            };
            if !self.left && !matches!(self.engine, Engine::Idle) {
                if let Some(m) = c.poll(now, placed, leader) {
                    msgs.push(m);
                }
            }
        }
        for (to, m) in msgs {
            let mut b = Vec::new();
            if wire::rdv::Repr::from_message(&m).emit_into(&mut b).is_ok() {
                down.push((to, b));
            }
        }
    }

    /// A rendezvous message: the server takes registrations and queries, a client the
    /// members it is told of (its engine's new buddies; a hypercube node told twice, its
    /// first answer included, that nobody is there founds the cube).
    fn on_rendezvous(&mut self, ctx: &mut Context<'_>, bytes: &[u8]) {
        let now = ctx.now();
        let Some(msg) = wire::rdv::Repr::parse_bytes(bytes)
            .ok()
            .and_then(|r| r.to_message::<NodeId>())
        else {
            ctx.count("malformed");
            return;
        };
        if let Some(s) = &mut self.server {
            let before = s.stats();
            s.handle_message(now, msg);
            let after = s.stats();
            ctx.count("rendezvous_handled");
            // The server's limits at work: members forgotten for silence or for room.
            if after.expired > before.expired {
                ctx.count_n("rendezvous_expired", after.expired - before.expired);
            }
            if after.evicted > before.evicted {
                ctx.count_n("rendezvous_evicted", after.evicted - before.evicted);
            }
            return;
        }
        let Some(c) = &mut self.client else {
            ctx.count("unsupported");
            return;
        };
        let members = c.handle_message(msg);
        ctx.count("rendezvous_answers");
        let alone = members.is_empty() && c.alone();
        match &mut self.engine {
            Engine::Dt(n) => {
                for b in members {
                    n.add_buddy(b);
                }
            }
            Engine::Hypercube(n) => {
                for b in members {
                    n.add_buddy(b);
                }
                if alone {
                    n.bootstrap(now);
                }
            }
            Engine::Idle => {}
        }
    }

    fn deliver(&mut self, ctx: &mut Context<'_>, channel: ChannelId) {
        let me = self.node;
        let mut up = Vec::new();
        match &mut self.fwd {
            Fwd::Dt(f) => {
                while let Some(d) = f.poll_delivery() {
                    up.push((None, d.payload));
                }
            }
            Fwd::Hc(f) => {
                while let Some(d) = f.poll_delivery() {
                    up.push((Some(d.src), d.payload));
                }
            }
        }
        for (label, p) in up {
            let Some((src, rest)) = p.split_first_chunk::<4>() else {
                ctx.count("short_payload");
                continue;
            };
            let src = NodeId(u32::from_be_bytes(*src));
            if let Some(l) = label {
                self.learn(src, l);
            }
            let s = Sendable::new(src, Dest::Node(me), Message::from_payload(rest));
            ctx.go(Event::sendable(SENDABLE.id(), Direction::Up, channel, s));
        }
    }

    /// Remembers that `node` holds hypercube label `label` (bounded, see [`DIRECTORY_MAX`]).
    fn learn(&mut self, node: NodeId, label: HcLabel) {
        if node == self.node {
            return;
        }
        if self.directory.insert(node, label).is_none() {
            self.dir_order.push_back(node);
            while self.dir_order.len() > DIRECTORY_MAX {
                if let Some(old) = self.dir_order.pop_front() {
                    self.directory.remove(&old);
                }
            }
        }
    }

    /// The label of `node` as this hypercube node knows it: its own, a neighbour's (current,
    /// from the protocol), or the directory's (learned, possibly stale).
    pub fn label_of(&self, node: NodeId) -> Option<HcLabel> {
        let Engine::Hypercube(n) = &self.engine else {
            return None;
        };
        if node == self.node {
            return n.label();
        }
        n.neighbours()
            .find(|(_, e)| e.substrate == node)
            .map(|(l, _)| l)
            .or_else(|| self.directory.get(&node).copied())
    }

    /// Adds the forwarder's counter increments since the last call to the kernel counters.
    fn count(&mut self, ctx: &mut Context<'_>) {
        let now = self.forward_stats();
        let was = self.stats;
        let pairs: [(&'static str, u64, u64); 11] = [
            ("sent", now.sent, was.sent),
            ("delivered", now.delivered, was.delivered),
            ("forwarded", now.forwarded, was.forwarded),
            ("malformed", now.malformed, was.malformed),
            ("unsupported", now.unsupported, was.unsupported),
            ("not_from_parent", now.not_from_parent, was.not_from_parent),
            ("duplicates", now.duplicates, was.duplicates),
            ("hop_limit", now.hop_limit, was.hop_limit),
            ("no_route", now.no_route, was.no_route),
            ("forgotten", now.forgotten, was.forgotten),
            ("own", now.own, was.own),
        ];
        for (name, a, b) in pairs {
            if a > b {
                ctx.count_n(name, a - b);
            }
        }
        self.stats = now;
    }

    /// Keeps one kernel timer at the engine's next deadline.
    fn arm(&mut self, ctx: &mut Context<'_>) {
        let want = match &self.engine {
            Engine::Dt(n) => n.poll_timeout(),
            Engine::Hypercube(n) => n.poll_timeout(),
            Engine::Idle => None,
        };
        let want = match (&self.client, want) {
            (Some(c), Some(w)) if !self.left => Some(w.min(c.poll_timeout())),
            (Some(c), None) if !self.left && !matches!(self.engine, Engine::Idle) => {
                Some(c.poll_timeout())
            }
            _ => want,
        };
        if self.timer.map(|(_, t)| t) == want {
            return;
        }
        if let Some((id, _)) = self.timer.take() {
            ctx.cancel_timer(id);
        }
        if let Some(t) = want {
            let t = t.max(ctx.now());
            self.timer = Some((ctx.set_timer_at(t, 1), t));
        }
    }

    fn on_timer(&mut self, ctx: &mut Context<'_>, id: TimerId) {
        if self.timer.map(|(i, _)| i) != Some(id) {
            return;
        }
        self.timer = None;
        self.topology_may_change();
        let now = ctx.now();
        match &mut self.engine {
            Engine::Dt(n) => n.handle_timeout(now),
            Engine::Hypercube(n) => n.handle_timeout(now),
            Engine::Idle => {}
        }
        self.flush(ctx);
    }

    fn on_datagram(&mut self, ctx: &mut Context<'_>, from: NodeId, bytes: &[u8]) {
        let now = ctx.now();
        let kind = wire::classify(bytes);
        if !matches!(kind, Ok(Kind::Application)) {
            self.topology_may_change();
        }
        match kind {
            Ok(Kind::Application) => match (&self.engine, &mut self.fwd) {
                (Engine::Dt(n), Fwd::Dt(f)) => f.handle_message(&DtTopology(n), bytes),
                (Engine::Hypercube(n), Fwd::Hc(f)) => f.handle_message(&HcTopology(n), bytes),
                _ => ctx.count("unsupported"),
            },
            Ok(Kind::DtControl) => {
                let msg = wire::dt::Repr::parse_bytes(bytes)
                    .ok()
                    .and_then(|r| r.to_message::<NodeId>());
                match (&mut self.engine, msg) {
                    (Engine::Dt(n), Some(m)) => n.handle_message(now, from, m),
                    (_, None) => ctx.count("malformed"),
                    _ => ctx.count("unsupported"),
                }
            }
            Ok(Kind::HcControl) => {
                let msg = wire::hc::Repr::parse_bytes(bytes)
                    .ok()
                    .and_then(|r| r.to_message::<NodeId>());
                match (&mut self.engine, msg) {
                    (Engine::Hypercube(n), Some(m)) => n.handle_message(now, from, m),
                    (_, None) => ctx.count("malformed"),
                    _ => ctx.count("unsupported"),
                }
            }
            Ok(Kind::Rendezvous) => self.on_rendezvous(ctx, bytes),
            Ok(Kind::Unknown(_)) | Err(_) => ctx.count("malformed"),
        }
        self.flush(ctx);
    }

    fn on_send(&mut self, ctx: &mut Context<'_>, dest: Dest, upper: &[u8]) {
        let (mode, to) = match dest {
            Dest::Broadcast => (self.config.broadcast, None),
            Dest::Node(n) => (DeliveryMode::Unicast, Some(OverlayTarget::Node(n))),
        };
        self.send_as(ctx, mode, to, upper);
    }

    /// Sends `upper` (prefixed with this node's id) as `mode`, to `to` for a unicast.
    fn send_as(
        &mut self,
        ctx: &mut Context<'_>,
        mode: DeliveryMode,
        to: Option<OverlayTarget>,
        upper: &[u8],
    ) {
        let mut payload = Vec::with_capacity(4 + upper.len());
        payload.extend_from_slice(&self.node.0.to_be_bytes());
        payload.extend_from_slice(upper);
        let to = if mode == DeliveryMode::Unicast {
            to
        } else {
            None
        };
        let node_label = match to {
            Some(OverlayTarget::Node(k)) => self.label_of(k),
            _ => None,
        };
        let result = match (&self.engine, &mut self.fwd) {
            (Engine::Dt(n), Fwd::Dt(f)) => {
                let dest = match to {
                    Some(OverlayTarget::Node(k)) => {
                        Some(dt_coordinates(self.seed, k, self.config.span))
                    }
                    Some(OverlayTarget::Logical(a)) => Some(a),
                    Some(OverlayTarget::Label(_)) | None => None,
                };
                if mode == DeliveryMode::Unicast && dest.is_none() {
                    Err(forward::SendError::NoDestination)
                } else {
                    f.send(&DtTopology(n), mode, dest, &payload).map(|_| ())
                }
            }
            (Engine::Hypercube(n), Fwd::Hc(f)) => {
                let dest = match to {
                    Some(OverlayTarget::Label(l)) => Some(l),
                    Some(OverlayTarget::Node(_)) => {
                        if node_label.is_none() {
                            ctx.count("no_label");
                        }
                        node_label
                    }
                    Some(OverlayTarget::Logical(_)) | None => None,
                };
                if mode == DeliveryMode::Unicast && dest.is_none() {
                    Err(forward::SendError::NoDestination)
                } else {
                    f.send(&HcTopology(n), mode, dest, &payload).map(|_| ())
                }
            }
            _ => Err(forward::SendError::NoAddress),
        };
        if result.is_err() {
            ctx.count("refused");
        }
        self.flush(ctx);
    }

    /// A snapshot of this node for applications.
    pub fn status(&self) -> OverlayStatus {
        let mut st = OverlayStatus {
            left: self.left,
            ..OverlayStatus::default()
        };
        match &self.engine {
            Engine::Dt(n) => {
                st.topology = "dt";
                st.logical = Some(n.addr().to_string());
                st.neighbours = n.neighbours().map(|(_, e)| e.substrate).collect();
                st.leader = n.is_leader();
                st.last_change = Some(n.last_change());
            }
            Engine::Hypercube(n) => {
                st.topology = "hypercube";
                st.logical = n.label().map(|l| l.to_string());
                st.neighbours = n.neighbours().map(|(_, e)| e.substrate).collect();
                st.leader = n.is_root();
            }
            Engine::Idle => {
                st.topology = match self.config.topology {
                    TopologyKind::Dt => "dt",
                    TopologyKind::Hypercube => "hypercube",
                };
            }
        }
        st.neighbours.sort();
        st.neighbours.dedup();
        st
    }

    /// This node's place in the tree rooted at `q.root` (see [`TREE_QUERY`]).
    pub fn tree(&self, q: TreeQuery) -> TreeInfo {
        let mut info = TreeInfo {
            root: q.root,
            token: q.token,
            ..TreeInfo::default()
        };
        match &self.engine {
            Engine::Dt(n) => {
                let topo = DtTopology(n);
                let root = dt_coordinates(self.seed, q.root, self.config.span);
                info.parent = topo.parent(root).and_then(|a| topo.substrate(a));
                info.children = topo
                    .children(root)
                    .into_iter()
                    .filter_map(|a| topo.substrate(a))
                    .collect();
                info.neighbours = topo
                    .neighbours()
                    .into_iter()
                    .filter_map(|a| topo.substrate(a))
                    .collect();
            }
            Engine::Hypercube(n) => {
                let topo = HcTopology(n);
                info.label = n.label();
                // The query's label first (carried with the message), else what this node
                // knows of the root.
                let root = if q.root == self.node {
                    n.label()
                } else {
                    q.root_label.or_else(|| self.label_of(q.root))
                };
                if let (Some(root), Some(_)) = (root, n.label()) {
                    info.parent = topo.parent(root).and_then(|a| topo.substrate(a));
                    info.children = topo
                        .children(root)
                        .into_iter()
                        .filter_map(|a| topo.substrate(a))
                        .collect();
                }
                info.neighbours = topo
                    .neighbours()
                    .into_iter()
                    .filter_map(|a| topo.substrate(a))
                    .collect();
            }
            Engine::Idle => {}
        }
        info
    }

    /// [`Self::tree`], remembered until the topology engine next changes: the messagestore
    /// asks for every input (a payload and each child's acknowledgement), and a tree is a
    /// compass-routing test per neighbour. The answers are dropped whenever the engine may
    /// have changed (a control datagram, a rendezvous answer, a timer, the start, the leave:
    /// [`Self::topology_may_change`]); an application datagram or a send leaves the engine as
    /// it is, so a remembered answer is the one [`Self::tree`] would give.
    fn tree_cached(&mut self, q: TreeQuery) -> TreeInfo {
        let label = match &self.engine {
            Engine::Hypercube(n) if q.root == self.node => n.label(),
            Engine::Hypercube(_) => q.root_label.or_else(|| self.label_of(q.root)),
            _ => None,
        };
        let key = (q.root, label);
        // Reusable by the asker only when the answer depends on nothing but the query and
        // the shape: on the hypercube, a root label from the directory may change unseen.
        let reusable = match &self.engine {
            Engine::Hypercube(_) => q.root == self.node || q.root_label.is_some(),
            _ => true,
        };
        let generation = reusable.then_some(self.generation);
        if let Some(info) = self.trees.get(&key) {
            let mut info = info.clone();
            info.token = q.token;
            info.generation = generation;
            // Every simulator test checks that the shape decides the answers.
            debug_assert_eq!(
                info,
                TreeInfo {
                    generation,
                    ..self.tree(TreeQuery {
                        root_label: label,
                        ..q
                    })
                },
                "a remembered tree differs from the tree computed now"
            );
            return info;
        }
        let mut info = self.tree(TreeQuery {
            root_label: label,
            ..q
        });
        info.generation = generation;
        if self.trees.len() >= TREE_CACHE_MAX {
            self.trees.clear();
        }
        self.trees.insert(key, info.clone());
        info
    }

    /// The topology engine may change: the shape is compared at the next [`Self::flush`].
    fn topology_may_change(&mut self) {
        self.shape_dirty = true;
    }

    /// After an input that may have changed the engine: when the shape trees are computed
    /// from differs, the generation is bumped, remembered answers are dropped and a layer
    /// above that asks trees hears of it ([`GENERATION`]).
    fn check_shape(&mut self, ctx: &mut Context<'_>) {
        if !std::mem::take(&mut self.shape_dirty) {
            return;
        }
        let shape = Shape::of(&self.engine);
        if shape == self.shape {
            return;
        }
        self.shape = shape;
        self.generation += 1;
        self.trees.clear();
        if let Some(ch) = self.tree_channel {
            ctx.go(Event::new(
                GENERATION.id(),
                Direction::Up,
                ch,
                Body::Custom(Box::new(TopologyGeneration(self.generation))),
            ));
        }
    }

    /// The topology generation (see the module doc).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn leave(&mut self, ctx: &mut Context<'_>) {
        self.topology_may_change();
        let now = ctx.now();
        match &mut self.engine {
            Engine::Dt(n) => n.leave(now),
            Engine::Hypercube(n) => n.leave(now),
            Engine::Idle => {}
        }
        self.flush(ctx);
        self.left = true;
        if let Some((id, _)) = self.timer.take() {
            ctx.cancel_timer(id);
        }
    }
}

impl Session for OverlaySession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == TIMER.id() {
            if let Body::Timer(t) = &event.body {
                let id = t.id;
                self.on_timer(ctx, id);
            }
            return;
        }
        if ty == CHANNEL_INIT.id() {
            if matches!(self.engine, Engine::Idle) {
                self.start(ctx);
            }
            ctx.go(event);
            return;
        }
        if ty == CHANNEL_CLOSE.id() {
            if self.channel == Some(event.channel()) && !self.left {
                self.leave(ctx);
            }
            ctx.go(event);
            return;
        }
        if ty == TREE_QUERY.id() {
            let q = match &event.body {
                Body::Custom(b) => b.downcast_ref::<TreeQuery>().copied(),
                _ => None,
            };
            if let Some(q) = q {
                if let (Some(l), TopologyKind::Hypercube) = (q.root_label, self.config.topology) {
                    self.learn(q.root, l);
                }
                self.tree_channel = Some(event.channel());
                let info = self.tree_cached(q);
                ctx.go(Event::new(
                    TREE.id(),
                    Direction::Up,
                    event.channel(),
                    Body::Custom(Box::new(info)),
                ));
            }
            return;
        }
        if self.left {
            return;
        }
        if ty == OVERLAY_SEND.id() {
            if let Body::Custom(b) = &mut event.body {
                if let Some(m) = b.downcast_mut::<OverlaySend>() {
                    let payload = std::mem::take(&mut m.payload);
                    let (mode, to) = (m.mode, m.to);
                    self.send_as(ctx, mode, to, &payload);
                    return;
                }
            }
            ctx.count("malformed");
            return;
        }
        let dir = event.dir();
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        match dir {
            Direction::Down => {
                let dest = s.dest;
                let bytes = std::mem::take(&mut s.message).into_vec();
                self.on_send(ctx, dest, &bytes);
            }
            Direction::Up => {
                let from = s.source;
                let bytes = std::mem::take(&mut s.message).into_vec();
                self.on_datagram(ctx, from, &bytes);
            }
        }
    }
}

/// Drains a forwarding engine: its copies go down to their neighbours' substrate addresses,
/// and its neighbourhood changes update `peers` (logical → substrate) and go into `changes`
/// (`true` for added).
fn drain_forwarder<T: Topology<Substrate = NodeId>>(
    f: &mut Forwarder<T::Addr>,
    topo: &T,
    peers: &mut BTreeMap<T::Addr, NodeId>,
    down: &mut Vec<(NodeId, Vec<u8>)>,
    changes: &mut Vec<(bool, NodeId)>,
) where
    T::Addr: Ord,
{
    while let Some((to, b)) = f.poll_transmit() {
        if let Some(s) = topo.substrate(to) {
            down.push((s, b));
        }
    }
    while let Some(c) = f.poll_event() {
        match c {
            Change::Added(a) => {
                if let Some(s) = topo.substrate(a) {
                    peers.insert(a, s);
                    changes.push((true, s));
                }
            }
            Change::Removed(a) => {
                if let Some(s) = peers.remove(&a) {
                    changes.push((false, s));
                }
            }
        }
    }
}
