//! viastack's deterministic discrete-event network simulator, generic over the [`Node`] it drives.
//!
//! This crate realizes DESIGN.md §4.2 "deterministic simulation first": protocols are sans-IO
//! state machines (§4.1), and [`Sim`] is their driver in virtual time — it owns the clock, the
//! network and every random choice, so a run is a pure function of its [`SimConfig`] (including
//! the seed) and of the nodes' behaviour. [`Sim::trace_hash`] proves two runs bit-identical.
//!
//! # The contract with a node (quinn-proto style, DESIGN.md §6)
//! After every `handle_*` call, and once after the node is built (at start or restart), the
//! simulator drains [`Node::poll_transmit`] until it returns `None`, then reads
//! [`Node::poll_timeout`]. Each [`Transmit`] is routed at once (see [`LinkConfig`] for the
//! per-datagram decisions); the deadline becomes a wake-up event.
//!
//! # Wake-ups
//! The simulator keeps at most one *useful* wake-up per node: a new one is queued only when the
//! node's deadline is earlier than the one already queued (a deadline in the past is treated as
//! "now"). When a wake-up is popped it is **skipped** if the node is down or a later
//! `poll_timeout` superseded it. Otherwise the simulator asks `poll_timeout` again and calls
//! `handle_timeout` only if the deadline is due (`<= now`); if the node moved its deadline
//! later, or cancelled it, the wake-up is skipped and re-queued for the new deadline. So
//! `handle_timeout` is never called before the deadline the node currently reports — though
//! nodes must still tolerate spurious calls, as the [`Node`] contract says.
//!
//! # Partitions
//! A [`Partition`] is checked when a datagram is sent and again when it arrives: a datagram in
//! flight when a partition starts is dropped on arrival; one in flight when it heals is
//! delivered. Partition, crash and restart events are queued before anything else, so at equal
//! times they take effect before any datagram or wake-up of that instant.
//!
//! # Topologies
//! Without a [`Topology`] every node reaches every other directly (full mesh, per directed link
//! [`LinkConfig`]s). With one, a datagram travels one link of it: the port is the sender's
//! interface number, a broadcast reaches the other nodes of that link only, and links go down,
//! up or change conditions in time. See the [`topology`] module.
//!
//! # Crashes
//! A crashed node's state is dropped at once. Datagrams it sent earlier stay in flight;
//! datagrams arriving while it is down are counted in [`NetStats::dropped_down`]; its pending
//! wake-up is ignored. A restart calls the factory again with the restart time.
//!
//! # Pauses
//! [`Sim::pause`] stops a node for a while without losing its state — a process stopped
//! (`SIGSTOP`), a virtual machine paused, a laptop suspended: its clock-driven work does not run,
//! datagrams that reach it wait (as in a socket buffer), and at the end of the pause it gets
//! them all first, in arrival order, then one `handle_timeout` for everything that fell due
//! meanwhile (the order `viastack`'s event loop reads a socket and fires timers after a stop).
//! Its peers run on and see a silent node. A crash during a pause ends it (the waiting
//! datagrams are dropped, counted in [`NetStats::dropped_down`]).
//!
//! # Errors
//! [`Sim::new`] rejects an invalid scenario; the driving methods fail with
//! [`SimError::StepCapExceeded`] once more than `step_cap` events have been processed.
//!
//! # Panics
//! None on any configuration or node behaviour (DESIGN.md §4.6); the factory and the nodes may
//! of course panic themselves.
#![deny(unsafe_code)]

pub mod config;
pub mod error;
mod link;
mod queue;
pub mod topology;
mod trace;

use fnv::FnvHashMap;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use viastack_kernel::{Dest, Duration, Instant, NodeId};

pub use config::{CrashPlan, LinkConfig, LinkOverride, Partition, SimConfig};
pub use error::{LinkRef, SimError};
pub use topology::{LinkChange, LinkEvent, TopoLink, Topology};

use link::{Fate, LinkState};
use queue::EventQueue;
use topology::TopoMap;
use trace::{TraceHash, TraceKind};

/// What the simulator drives. Implemented elsewhere by an adapter around the protocol kernel.
pub trait Node {
    /// A datagram arrived on `port` (a device/port number chosen by the sender) from `from`.
    fn handle_datagram(&mut self, now: Instant, port: u16, from: NodeId, bytes: Vec<u8>);
    /// Called at (or after) the deadline last returned by `poll_timeout`; handling a timeout
    /// early/twice must be harmless for implementors, so the sim may call it with stale
    /// deadlines.
    fn handle_timeout(&mut self, now: Instant);
    /// The next instant the node wants `handle_timeout`, if any.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Datagrams the node wants sent; drained by the sim after every handle_* call.
    fn poll_transmit(&mut self) -> Option<Transmit>;
}

/// A datagram a node wants sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Device/port number, passed unchanged to the receiver's `handle_datagram`.
    pub port: u16,
    /// One node (itself included: loopback) or every other node.
    pub dest: Dest,
    /// The datagram.
    pub bytes: Vec<u8>,
}

/// Network counters. Every datagram copy is accounted for: once the simulator is idle,
/// `sent + duplicated == delivered + lost + dropped_partition + dropped_down +
/// dropped_link_down`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams handed to a link: one per destination (a broadcast to `k` others counts `k`).
    pub sent: u64,
    /// Copies handed to a node's `handle_datagram`.
    pub delivered: u64,
    /// Datagrams dropped by link loss.
    pub lost: u64,
    /// Extra copies created by link duplication.
    pub duplicated: u64,
    /// Copies whose bits were flipped.
    pub corrupted: u64,
    /// Datagrams or copies dropped because a partition separated their ends (at send or at
    /// arrival).
    pub dropped_partition: u64,
    /// Copies that arrived at a down node.
    pub dropped_down: u64,
    /// Datagrams addressed to a node id outside the scenario (not counted in `sent`).
    pub dropped_unknown_dest: u64,
    /// With a topology: copies sent on, or arriving over, a link that is down.
    pub dropped_link_down: u64,
    /// With a topology: datagrams sent on a port that is not one of the sender's interfaces, or
    /// to a node that is not on that link (not counted in `sent`).
    pub dropped_no_route: u64,
    /// Total bytes of delivered copies.
    pub bytes_delivered: u64,
    /// Copies that arrived at a paused node and waited for its resumption (also counted in
    /// `delivered` once handed over).
    pub held_paused: u64,
}

/// What the event queue holds: small tags; datagram bytes live in the in-flight table.
#[derive(Clone, Copy, Debug)]
enum Event {
    /// Arrival of the in-flight datagram in this slot.
    Arrival(u32),
    /// Wake-up of this node.
    Wake(u32),
    Crash(u32),
    Restart(u32),
    /// Start of the partition with this index.
    PartitionStart(u32),
    PartitionHeal(u32),
    /// The link event with this index in the topology.
    Link(u32),
    /// This node stops running ([`Sim::pause`]).
    Pause(u32),
    /// This node runs again.
    Resume(u32),
}

/// A datagram that reached a paused node: (port, from, bytes), delivered at its resumption.
type Held = (u16, u32, Vec<u8>);

/// `InFlight::link` of a datagram that crosses no topology link.
const NO_LINK: u32 = u32::MAX;

/// A datagram copy on its way.
struct InFlight {
    from: u32,
    to: u32,
    /// The port handed to the receiver (its interface number, with a topology).
    port: u16,
    /// The topology link crossed, or `NO_LINK`.
    link: u32,
    bytes: Vec<u8>,
}

/// A partition as a lookup table: the group index of every node.
struct PartitionMap {
    group_of: Vec<u32>,
    /// The group of unlisted nodes.
    rest: u32,
}

impl PartitionMap {
    fn new(p: &Partition, nodes: u32) -> Self {
        let rest = u32::try_from(p.groups.len()).unwrap_or(u32::MAX);
        let mut group_of = vec![rest; nodes as usize];
        for (g, members) in p.groups.iter().enumerate() {
            let g = u32::try_from(g).unwrap_or(u32::MAX);
            for n in members {
                if let Some(slot) = group_of.get_mut(n.0 as usize) {
                    *slot = g;
                }
            }
        }
        PartitionMap { group_of, rest }
    }

    fn group(&self, node: u32) -> u32 {
        self.group_of
            .get(node as usize)
            .copied()
            .unwrap_or(self.rest)
    }
}

/// Everything but the nodes and the factory, so that a node can be borrowed mutably while its
/// transmits are routed.
struct Net {
    now: Instant,
    seed: u64,
    node_count: u32,
    step_cap: u64,
    steps: u64,
    rng: ChaCha8Rng,
    queue: EventQueue<Event>,
    /// Slab of in-flight copies, indexed by `Event::Arrival`; `free` lists empty slots.
    in_flight: Vec<Option<InFlight>>,
    free: Vec<u32>,
    /// Per node: the earliest useful wake-up queued.
    wake: Vec<Option<Instant>>,
    default_link: LinkConfig,
    overrides: FnvHashMap<u64, LinkConfig>,
    /// Queue state of bandwidth-limited links only.
    link_state: FnvHashMap<u64, LinkState>,
    partitions: Vec<PartitionMap>,
    /// The multi-hop network, if any.
    topo: Option<TopoMap>,
    /// Transmit queue state of bandwidth-limited topology links, per (link, sender).
    topo_state: FnvHashMap<u64, LinkState>,
    /// Indices of the active partitions.
    active: Vec<u32>,
    /// Nodes handed out by `node_mut`, to be drained before the next event.
    touched: Vec<u32>,
    /// Per node: `Some` while paused, with the datagrams waiting for it.
    paused: Vec<Option<Vec<Held>>>,
    stats: NetStats,
    trace: TraceHash,
}

fn link_key(from: u32, to: u32) -> u64 {
    (u64::from(from) << 32) | u64::from(to)
}

impl Net {
    fn separated(&self, a: u32, b: u32) -> bool {
        self.active.iter().any(|&i| {
            self.partitions
                .get(i as usize)
                .is_some_and(|p| p.group(a) != p.group(b))
        })
    }

    /// Route everything `node` wants sent, then queue its wake-up.
    fn drain<N: Node>(&mut self, id: u32, node: &mut N) {
        while let Some(t) = node.poll_transmit() {
            self.route(id, t);
        }
        self.schedule_wake(id, node.poll_timeout());
    }

    fn schedule_wake(&mut self, id: u32, deadline: Option<Instant>) {
        let Some(deadline) = deadline else { return };
        let at = deadline.max(self.now);
        let Some(queued) = self.wake.get_mut(id as usize) else {
            return;
        };
        if queued.is_some_and(|q| q <= at) {
            return;
        }
        *queued = Some(at);
        self.queue.push(at, Event::Wake(id));
    }

    fn route(&mut self, from: u32, t: Transmit) {
        if self.topo.is_some() {
            return self.route_topo(from, t);
        }
        let Transmit { port, dest, bytes } = t;
        match dest {
            Dest::Node(NodeId(to)) if to >= self.node_count => {
                self.stats.dropped_unknown_dest += 1;
                tracing::debug!(from, to, "datagram to unknown node dropped");
            }
            Dest::Node(NodeId(to)) if to == from => {
                // Loopback: no network, no loss, no delay.
                self.stats.sent += 1;
                self.schedule_arrival(self.now, from, to, port, NO_LINK, bytes);
            }
            Dest::Node(NodeId(to)) => self.send_link(from, to, port, bytes),
            Dest::Broadcast => {
                let n = self.node_count;
                let last = if from + 1 == n {
                    from.wrapping_sub(1)
                } else {
                    n - 1
                };
                let mut bytes = bytes;
                for to in (0..n).filter(|&to| to != from) {
                    let copy = if to == last {
                        std::mem::take(&mut bytes)
                    } else {
                        bytes.clone()
                    };
                    self.send_link(from, to, port, copy);
                }
            }
        }
    }

    fn send_link(&mut self, from: u32, to: u32, port: u16, bytes: Vec<u8>) {
        self.stats.sent += 1;
        if self.separated(from, to) {
            self.stats.dropped_partition += 1;
            return;
        }
        let key = link_key(from, to);
        let cfg = self.overrides.get(&key).unwrap_or(&self.default_link);
        let mut scratch = LinkState::default();
        let state = if cfg.bandwidth_bps.is_some() {
            self.link_state.entry(key).or_default()
        } else {
            &mut scratch
        };
        let fate = link::fate(&mut self.rng, cfg, state, self.now, bytes.len());
        self.apply_fate(fate, from, to, port, NO_LINK, bytes);
    }

    fn apply_fate(&mut self, fate: Fate, from: u32, to: u32, port: u16, via: u32, bytes: Vec<u8>) {
        let mut bytes = bytes;
        match fate {
            Fate::Lost => self.stats.lost += 1,
            Fate::Delivered { first, duplicate } => {
                let second = duplicate.map(|d| (d, bytes.clone()));
                if first.corrupt && link::corrupt(&mut self.rng, &mut bytes) > 0 {
                    self.stats.corrupted += 1;
                }
                self.schedule_arrival(first.at, from, to, port, via, bytes);
                if let Some((d, mut copy)) = second {
                    self.stats.duplicated += 1;
                    if d.corrupt && link::corrupt(&mut self.rng, &mut copy) > 0 {
                        self.stats.corrupted += 1;
                    }
                    self.schedule_arrival(d.at, from, to, port, via, copy);
                }
            }
        }
    }

    /// Route a transmit over the topology: `t.port` is the sender's interface.
    fn route_topo(&mut self, from: u32, t: Transmit) {
        let Transmit { port, dest, bytes } = t;
        if dest == Dest::Node(NodeId(from)) {
            self.stats.sent += 1;
            self.schedule_arrival(self.now, from, from, port, NO_LINK, bytes);
            return;
        }
        let Some(topo) = self.topo.as_ref() else {
            return;
        };
        let Some(link) = topo.link_of(from, port) else {
            self.stats.dropped_no_route += 1;
            tracing::debug!(
                from,
                port,
                "datagram on a port that is no interface dropped"
            );
            return;
        };
        let members = topo.members.get(link as usize);
        let targets: Vec<(u32, u16)> = match dest {
            Dest::Node(NodeId(to)) => members
                .into_iter()
                .flatten()
                .filter(|&&(n, _)| n == to)
                .copied()
                .collect(),
            Dest::Broadcast => members
                .into_iter()
                .flatten()
                .filter(|&&(n, _)| n != from)
                .copied()
                .collect(),
        };
        if targets.is_empty() {
            self.stats.dropped_no_route += 1;
            tracing::debug!(from, port, "datagram to a node not on the link dropped");
            return;
        }
        let mut bytes = bytes;
        let last = targets.len() - 1;
        for (i, (to, to_port)) in targets.into_iter().enumerate() {
            let copy = if i == last {
                std::mem::take(&mut bytes)
            } else {
                bytes.clone()
            };
            self.send_topo(from, to, to_port, link, copy);
        }
    }

    fn send_topo(&mut self, from: u32, to: u32, to_port: u16, link: u32, bytes: Vec<u8>) {
        self.stats.sent += 1;
        let Some(topo) = self.topo.as_ref() else {
            return;
        };
        if !topo.is_up(link) {
            self.stats.dropped_link_down += 1;
            return;
        }
        if self.separated(from, to) {
            self.stats.dropped_partition += 1;
            return;
        }
        let Some(cfg) = topo.config.get(link as usize) else {
            return;
        };
        let key = link_key(link, from);
        let mut scratch = LinkState::default();
        let state = if cfg.bandwidth_bps.is_some() {
            self.topo_state.entry(key).or_default()
        } else {
            &mut scratch
        };
        let fate = link::fate(&mut self.rng, cfg, state, self.now, bytes.len());
        self.apply_fate(fate, from, to, to_port, link, bytes);
    }

    /// Apply link event `i` of the topology.
    fn link_event(&mut self, i: u32) {
        let Some(topo) = self.topo.as_mut() else {
            return;
        };
        let Some(e) = topo.events.get(i as usize) else {
            return;
        };
        let link = e.link;
        match &e.change {
            topology::LinkChange::Down => {
                if let Some(up) = topo.up.get_mut(link) {
                    *up = false;
                }
            }
            topology::LinkChange::Up => {
                if let Some(up) = topo.up.get_mut(link) {
                    *up = true;
                }
            }
            topology::LinkChange::Condition(c) => {
                let c = c.clone();
                if let Some(slot) = topo.config.get_mut(link) {
                    *slot = c;
                }
            }
        }
        tracing::debug!(event = i, link, now = %self.now, "link event");
    }

    fn schedule_arrival(
        &mut self,
        at: Instant,
        from: u32,
        to: u32,
        port: u16,
        link: u32,
        bytes: Vec<u8>,
    ) {
        let packet = Some(InFlight {
            from,
            to,
            port,
            link,
            bytes,
        });
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let Ok(slot) = u32::try_from(self.in_flight.len()) else {
                    // Four billion datagrams in flight: treat one more as lost rather than panic.
                    self.stats.lost += 1;
                    return;
                };
                self.in_flight.push(None);
                slot
            }
        };
        if let Some(entry) = self.in_flight.get_mut(slot as usize) {
            *entry = packet;
            self.queue.push(at, Event::Arrival(slot));
        }
    }

    fn take_in_flight(&mut self, slot: u32) -> Option<InFlight> {
        let packet = self.in_flight.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        Some(packet)
    }
}

/// The simulator: virtual clock, event queue, simulated network and the nodes it drives.
///
/// Node `i` is `NodeId(i)` for `i` in `0..config.nodes`.
pub struct Sim<N: Node> {
    nodes: Vec<Option<N>>,
    net: Net,
    factory: Box<dyn FnMut(NodeId, Instant) -> N>,
}

impl<N: Node> Sim<N> {
    /// Build the scenario: validate `config`, queue its partitions and crashes, create every
    /// node by calling `factory(id, Instant::ZERO)` in id order, then drain each node's
    /// transmits and timeout in id order. A restart calls `factory(id, restart_time)` again.
    ///
    /// # Errors
    /// A [`SimError`] describing the first invalid part of `config`.
    pub fn new(
        config: SimConfig,
        factory: impl FnMut(NodeId, Instant) -> N + 'static,
    ) -> Result<Self, SimError> {
        config::validate(&config)?;
        let SimConfig {
            seed,
            nodes: node_count,
            link: default_link,
            links,
            partitions,
            crashes,
            topology,
            step_cap,
        } = config;

        let mut queue = EventQueue::default();
        let mut active = Vec::new();
        let mut maps = Vec::with_capacity(partitions.len());
        for (i, p) in partitions.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            maps.push(PartitionMap::new(p, node_count));
            // A partition starting at time zero already separates the nodes' first datagrams.
            if p.start == Instant::ZERO {
                active.push(i);
            }
            queue.push(p.start, Event::PartitionStart(i));
            if let Some(heal) = p.heal {
                queue.push(heal, Event::PartitionHeal(i));
            }
        }
        let topo = topology.map(|t| TopoMap::new(t, node_count));
        for (i, e) in topo.iter().flat_map(|t| t.events.iter()).enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            queue.push(e.at, Event::Link(i));
        }
        for c in &crashes {
            queue.push(c.at, Event::Crash(c.node.0));
            if let Some(r) = c.restart {
                queue.push(r, Event::Restart(c.node.0));
            }
        }

        let overrides = links
            .into_iter()
            .map(|o| (link_key(o.from.0, o.to.0), o.config))
            .collect();

        let mut net = Net {
            now: Instant::ZERO,
            seed,
            node_count,
            step_cap,
            steps: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue,
            in_flight: Vec::new(),
            free: Vec::new(),
            wake: vec![None; node_count as usize],
            default_link,
            overrides,
            link_state: FnvHashMap::default(),
            partitions: maps,
            topo,
            topo_state: FnvHashMap::default(),
            active,
            touched: Vec::new(),
            paused: vec![None; node_count as usize],
            stats: NetStats::default(),
            trace: TraceHash::default(),
        };

        // Link events at time zero already apply to the nodes' first datagrams (they are
        // applied again, idempotently, when their queued event is processed).
        let zero: Vec<u32> = net
            .topo
            .iter()
            .flat_map(|t| t.events.iter())
            .enumerate()
            .filter(|(_, e)| e.at == Instant::ZERO)
            .map(|(i, _)| u32::try_from(i).unwrap_or(u32::MAX))
            .collect();
        for i in zero {
            net.link_event(i);
        }

        let mut factory: Box<dyn FnMut(NodeId, Instant) -> N> = Box::new(factory);
        let nodes = (0..node_count)
            .map(|id| Some(factory(NodeId(id), Instant::ZERO)))
            .collect();
        let mut sim = Sim {
            nodes,
            net,
            factory,
        };
        for (id, node) in (0..node_count).zip(sim.nodes.iter_mut()) {
            if let Some(node) = node {
                sim.net.drain(id, node);
            }
        }
        Ok(sim)
    }

    /// Process the next event. Returns `Ok(false)` when there is nothing left to do.
    ///
    /// # Errors
    /// [`SimError::StepCapExceeded`] if `step_cap` events have already been processed and
    /// another is due.
    pub fn step(&mut self) -> Result<bool, SimError> {
        self.drain_touched();
        if self.net.queue.is_empty() {
            return Ok(false);
        }
        if self.net.steps >= self.net.step_cap {
            return Err(SimError::StepCapExceeded {
                steps: self.net.steps,
                seed: self.net.seed,
            });
        }
        let Some((time, event)) = self.net.queue.pop() else {
            return Ok(false);
        };
        self.net.steps += 1;
        self.net.now = self.net.now.max(time);
        self.process(event);
        Ok(true)
    }

    fn process(&mut self, event: Event) {
        let now = self.net.now;
        let net = &mut self.net;
        match event {
            Event::Arrival(slot) => {
                let Some(p) = net.take_in_flight(slot) else {
                    return;
                };
                let node = self.nodes.get_mut(p.to as usize).and_then(Option::as_mut);
                let Some(node) = node else {
                    net.stats.dropped_down += 1;
                    net.trace
                        .record(now, TraceKind::DroppedDown, p.from, p.to, p.port, &[]);
                    return;
                };
                if p.link != NO_LINK && !net.topo.as_ref().is_some_and(|t| t.is_up(p.link)) {
                    net.stats.dropped_link_down += 1;
                    net.trace
                        .record(now, TraceKind::DroppedLinkDown, p.from, p.to, p.port, &[]);
                    return;
                }
                if net.separated(p.from, p.to) {
                    net.stats.dropped_partition += 1;
                    net.trace
                        .record(now, TraceKind::DroppedPartition, p.from, p.to, p.port, &[]);
                    return;
                }
                if let Some(Some(held)) = net.paused.get_mut(p.to as usize) {
                    net.stats.held_paused += 1;
                    net.trace
                        .record(now, TraceKind::HeldPaused, p.from, p.to, p.port, &p.bytes);
                    held.push((p.port, p.from, p.bytes));
                    return;
                }
                net.stats.delivered += 1;
                net.stats.bytes_delivered += p.bytes.len() as u64;
                net.trace
                    .record(now, TraceKind::Delivered, p.from, p.to, p.port, &p.bytes);
                node.handle_datagram(now, p.port, NodeId(p.from), p.bytes);
                net.drain(p.to, node);
            }
            Event::Wake(id) => {
                let node = self.nodes.get_mut(id as usize).and_then(Option::as_mut);
                let queued = net.wake.get_mut(id as usize);
                let (Some(node), Some(queued)) = (node, queued) else {
                    net.trace
                        .record(now, TraceKind::WakeStale, id, u32::MAX, 0, &[]);
                    return;
                };
                if *queued != Some(now) {
                    // Superseded by an earlier wake-up, or left over from before a crash.
                    net.trace
                        .record(now, TraceKind::WakeStale, id, u32::MAX, 0, &[]);
                    return;
                }
                *queued = None;
                if net.paused.get(id as usize).is_some_and(Option::is_some) {
                    // Not running: the resumption handles what fell due.
                    net.trace
                        .record(now, TraceKind::WakePaused, id, u32::MAX, 0, &[]);
                    return;
                }
                if node.poll_timeout().is_some_and(|d| d <= now) {
                    net.trace
                        .record(now, TraceKind::Timeout, id, u32::MAX, 0, &[]);
                    node.handle_timeout(now);
                } else {
                    net.trace
                        .record(now, TraceKind::WakeSkipped, id, u32::MAX, 0, &[]);
                }
                net.drain(id, node);
            }
            Event::Crash(id) => {
                let Some(slot) = self.nodes.get_mut(id as usize) else {
                    return;
                };
                if slot.take().is_some() {
                    tracing::debug!(node = id, %now, "node crashed");
                    if let Some(w) = net.wake.get_mut(id as usize) {
                        *w = None;
                    }
                }
                if let Some(held) = net.paused.get_mut(id as usize).and_then(Option::take) {
                    net.stats.dropped_down += held.len() as u64;
                }
                net.trace
                    .record(now, TraceKind::Crash, id, u32::MAX, 0, &[]);
            }
            Event::Restart(id) => {
                net.trace
                    .record(now, TraceKind::Restart, id, u32::MAX, 0, &[]);
                let Some(slot) = self.nodes.get_mut(id as usize) else {
                    return;
                };
                if slot.is_none() {
                    tracing::debug!(node = id, %now, "node restarted");
                    let node = slot.insert((self.factory)(NodeId(id), now));
                    net.drain(id, node);
                }
            }
            Event::PartitionStart(i) => {
                if !net.active.contains(&i) {
                    net.active.push(i);
                }
                tracing::debug!(partition = i, %now, "partition started");
                net.trace
                    .record(now, TraceKind::PartitionStart, i, u32::MAX, 0, &[]);
            }
            Event::Link(i) => {
                net.link_event(i);
                net.trace
                    .record(now, TraceKind::LinkEvent, i, u32::MAX, 0, &[]);
            }
            Event::Pause(id) => {
                let up = self.nodes.get(id as usize).is_some_and(Option::is_some);
                if let (true, Some(p)) = (up, net.paused.get_mut(id as usize)) {
                    if p.is_none() {
                        tracing::debug!(node = id, %now, "node paused");
                        *p = Some(Vec::new());
                    }
                }
                net.trace
                    .record(now, TraceKind::Pause, id, u32::MAX, 0, &[]);
            }
            Event::Resume(id) => {
                net.trace
                    .record(now, TraceKind::Resume, id, u32::MAX, 0, &[]);
                let Some(held) = net.paused.get_mut(id as usize).and_then(Option::take) else {
                    return;
                };
                let Some(node) = self.nodes.get_mut(id as usize).and_then(Option::as_mut) else {
                    return;
                };
                tracing::debug!(node = id, %now, held = held.len(), "node resumed");
                for (port, from, bytes) in held {
                    net.stats.delivered += 1;
                    net.stats.bytes_delivered += bytes.len() as u64;
                    net.trace
                        .record(now, TraceKind::Delivered, from, id, port, &bytes);
                    node.handle_datagram(now, port, NodeId(from), bytes);
                    net.drain(id, node);
                }
                if node.poll_timeout().is_some_and(|d| d <= now) {
                    net.trace
                        .record(now, TraceKind::Timeout, id, u32::MAX, 0, &[]);
                    node.handle_timeout(now);
                }
                // The wake-up skipped during the pause is queued again here.
                if let Some(w) = net.wake.get_mut(id as usize) {
                    *w = None;
                }
                net.drain(id, node);
            }
            Event::PartitionHeal(i) => {
                net.active.retain(|&a| a != i);
                tracing::debug!(partition = i, %now, "partition healed");
                net.trace
                    .record(now, TraceKind::PartitionHeal, i, u32::MAX, 0, &[]);
            }
        }
    }

    /// Route transmits and queue wake-ups of nodes handed out by [`Sim::node_mut`].
    fn drain_touched(&mut self) {
        if self.net.touched.is_empty() {
            return;
        }
        let touched = std::mem::take(&mut self.net.touched);
        for &id in &touched {
            if let Some(node) = self.nodes.get_mut(id as usize).and_then(Option::as_mut) {
                self.net.drain(id, node);
            }
        }
        // Keep the allocation for next time.
        self.net.touched = touched;
        self.net.touched.clear();
    }

    /// Pauses node `node` from `at` until `until` (see "Pauses" in the crate documentation).
    /// Times before now count as now; a pause of an unknown node, or of a node down at `at`,
    /// does nothing. Pauses of one node should not overlap (an overlapping one ends at the
    /// first resumption).
    pub fn pause(&mut self, node: NodeId, at: Instant, until: Instant) {
        if node.0 >= self.net.node_count {
            return;
        }
        let at = at.max(self.net.now);
        self.net.queue.push(at, Event::Pause(node.0));
        self.net.queue.push(until.max(at), Event::Resume(node.0));
    }

    /// Whether node `id` is paused now.
    pub fn is_paused(&self, id: NodeId) -> bool {
        self.net
            .paused
            .get(id.0 as usize)
            .is_some_and(Option::is_some)
    }

    /// Process events until none is left.
    ///
    /// # Errors
    /// [`SimError::StepCapExceeded`], see [`Sim::step`].
    pub fn run_until_idle(&mut self) -> Result<(), SimError> {
        while self.step()? {}
        Ok(())
    }

    /// Process every event due within `d` from now, then advance the clock to `now + d`.
    ///
    /// # Errors
    /// [`SimError::StepCapExceeded`], see [`Sim::step`].
    pub fn run_for(&mut self, d: Duration) -> Result<(), SimError> {
        self.run_until(self.net.now.saturating_add(d))
    }

    /// Process every event due at or before `t`, then advance the clock to `t` (if it is
    /// later than now).
    ///
    /// # Errors
    /// [`SimError::StepCapExceeded`], see [`Sim::step`].
    pub fn run_until(&mut self, t: Instant) -> Result<(), SimError> {
        loop {
            self.drain_touched();
            match self.net.queue.peek_time() {
                Some(next) if next <= t => {
                    self.step()?;
                }
                _ => break,
            }
        }
        self.net.now = self.net.now.max(t);
        Ok(())
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.net.now
    }

    /// The seed of this run.
    pub fn seed(&self) -> u64 {
        self.net.seed
    }

    /// Events processed so far (what `step_cap` limits).
    pub fn steps(&self) -> u64 {
        self.net.steps
    }

    /// The node `id`, if it exists and is up.
    pub fn node(&self, id: NodeId) -> Option<&N> {
        self.nodes.get(id.0 as usize)?.as_ref()
    }

    /// The node `id`, if it exists and is up, for inspection or to give it a command. Its
    /// transmits and deadline are collected before the next event is processed, at the
    /// current time.
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut N> {
        let node = self.nodes.get_mut(id.0 as usize)?.as_mut()?;
        if self.net.touched.last() != Some(&id.0) {
            self.net.touched.push(id.0);
        }
        Some(node)
    }

    /// Whether node `id` exists and is up.
    pub fn is_up(&self, id: NodeId) -> bool {
        self.node(id).is_some()
    }

    /// With a topology: whether link `link` (an index in `Topology::links`) is up now; `None`
    /// without a topology or for an unknown link.
    pub fn link_is_up(&self, link: usize) -> Option<bool> {
        self.net.topo.as_ref()?.up.get(link).copied()
    }

    /// Network counters.
    pub fn stats(&self) -> &NetStats {
        &self.net.stats
    }

    /// FNV-1a digest of every event processed so far: time, kind, node ids, port and the full
    /// bytes of delivered datagrams. Equal seeds and equal node behaviour give equal hashes.
    pub fn trace_hash(&self) -> u64 {
        self.net.trace.value()
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod topo_tests;
