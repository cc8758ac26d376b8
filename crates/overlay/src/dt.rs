//! The Delaunay triangulation (DT) overlay protocol, sans-IO (seed 000 §3.1.1.2: the overlay
//! node "runs a protocol that establishes and maintains the overlay network topology using
//! protocol messages"; HyperCast's DT protocol, reimplemented from its published description).
//!
//! Every node has a logical address [`DtAddr`] (a point) and a substrate address `S`. The
//! overlay it builds is the Delaunay triangulation of all points: each node keeps exactly its
//! Delaunay neighbours, decided locally by the exact neighbour test of
//! [`geometry::is_delaunay_edge`].
//!
//! # Messages ([`Message`])
//! - `HelloNeighbor { src, cw, ccw }`: sent to each neighbour every heartbeat; `cw`/`ccw` are the
//!   sender's neighbours just clockwise and counter-clockwise of the receiver around the sender.
//!   The receiver learns them as candidates, and embedded trees use them to find children.
//! - `HelloNotNeighbor { src, cw, ccw }`: "you are not my neighbour", with the same hints, so the
//!   receiver learns the nodes that stand between.
//! - `Goodbye { src }`: the sender leaves.
//! - `NewNode { node, hops }`: a node asks to join; routed greedily (to the neighbour nearest
//!   the new point, at most `hops` more hops) to the node nearest to it, which adds it and says
//!   hello.
//!
//! # How the triangulation forms
//! A node accepts a candidate iff it passes the neighbour test against its current neighbours,
//! and then drops every neighbour that no longer passes. A candidate heard of only second-hand
//! is probed with hellos and becomes a neighbour when it answers (or is forgotten after
//! [`Config::probe_timeout`]). Since a node only knows live points, a
//! dropped edge is never an edge of the full triangulation (adding points only removes Delaunay
//! edges), and a true neighbour, once known, stays. Hellos carry each neighbour's angular
//! neighbours, which is how missing neighbours are found. A neighbour not heard from for
//! [`Config::neighbour_timeout`] is removed.
//!
//! # Join, leader, partitions
//! A node with no neighbour sends `NewNode` to every buddy (the rendezvous list,
//! [`Config::buddies`]) each fast heartbeat. The *leader* is a node with no neighbour greater
//! than itself (in [`DtAddr`]'s order); a connected triangulation has exactly one. Every leader
//! sends `NewNode` about itself to the buddies each [`Config::leader_beacon`]: in the leader's
//! own partition the message is routed back towards it and costs nothing; in another partition
//! it reaches the node nearest the leader there, which adds it — so two leaders mean a
//! partition, and the beacons merge the parts when the network heals.
//!
//! # Call order (quinn style)
//! Feed inputs with [`Node::handle_message`] and [`Node::handle_timeout`] (always with the
//! current time); then drain [`Node::poll_transmit`] and [`Node::poll_event`]; then ask
//! [`Node::poll_timeout`] when to call `handle_timeout` next. Handling a timeout early or twice
//! is harmless.
//!
//! # Errors
//! Messages about a node's own address from elsewhere (a duplicate address) and candidates
//! beyond [`Config::max_neighbours`] are dropped and counted in [`Stats`]; nothing panics.

use std::collections::{BTreeMap, VecDeque};

use viastack_kernel::{Duration, Instant};

use crate::addr::DtAddr;
use crate::geometry;

/// A node's logical and substrate address together, as carried in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer<S> {
    /// The logical address.
    pub addr: DtAddr,
    /// Where to send to it.
    pub substrate: S,
}

/// A DT protocol message (wire form: [`crate::wire::dt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<S> {
    /// "I am your neighbour"; `cw`/`ccw` are the sender's neighbours next to the receiver.
    HelloNeighbor {
        /// The sender's logical address.
        src: DtAddr,
        /// The sender's neighbour clockwise of the receiver, around the sender.
        cw: Option<Peer<S>>,
        /// The sender's neighbour counter-clockwise of the receiver, around the sender.
        ccw: Option<Peer<S>>,
    },
    /// "You are not my neighbour"; `cw`/`ccw` as in `HelloNeighbor`.
    HelloNotNeighbor {
        /// The sender's logical address.
        src: DtAddr,
        /// The sender's neighbour clockwise of the receiver, around the sender.
        cw: Option<Peer<S>>,
        /// The sender's neighbour counter-clockwise of the receiver, around the sender.
        ccw: Option<Peer<S>>,
    },
    /// The sender leaves the overlay.
    Goodbye {
        /// The sender's logical address.
        src: DtAddr,
    },
    /// `node` wants to join; route it to the node nearest `node.addr`.
    NewNode {
        /// The joining node.
        node: Peer<S>,
        /// Forwarding hops left.
        hops: u8,
    },
}

/// A change of the node's neighbourhood, for the application and the forwarding engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A neighbour was added.
    NeighbourAdded(DtAddr),
    /// A neighbour was removed.
    NeighbourRemoved(DtAddr, RemoveReason),
    /// The node became leader (`true`) or stopped being one (`false`).
    Leader(bool),
}

/// Why a neighbour was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoveReason {
    /// A nearer node makes the edge non-Delaunay.
    NotDelaunay,
    /// The neighbour said we are not its neighbour.
    Refused,
    /// Not heard from for the neighbour timeout.
    Timeout,
    /// It said goodbye.
    Goodbye,
}

/// Protocol parameters. Seed 000 has no table of DT timers (its timer tables, 3.2 and 3.4, are
/// the hop-to-hop and end-to-end acknowledgment services'; §3.1.1.2 only names the overlay
/// node's role), so the defaults are chosen here: a heartbeat of a few seconds once stable, a
/// fast one while the neighbourhood changes, a timeout of five missed slow heartbeats. They are
/// what the convergence tests run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config<S> {
    /// Rendezvous: substrate addresses to send `NewNode` to when alone, and leader beacons.
    pub buddies: Vec<S>,
    /// Hello period while the neighbourhood is changing or the node is alone: 250 ms.
    pub fast_heartbeat: Duration,
    /// Hello period once the neighbourhood has been stable for `stable_after`: 2 s.
    pub slow_heartbeat: Duration,
    /// The neighbourhood counts as stable this long after its last change: 2 s.
    pub stable_after: Duration,
    /// A neighbour not heard from this long is removed: 10 s (five slow heartbeats).
    pub neighbour_timeout: Duration,
    /// A candidate learned second-hand that does not answer within this is dropped: 2 s
    /// (eight fast heartbeats).
    pub probe_timeout: Duration,
    /// A leader sends `NewNode` about itself to the buddies this often: 4 s.
    pub leader_beacon: Duration,
    /// Capacity of the neighbour table (candidates beyond it are refused and counted): 64.
    pub max_neighbours: usize,
    /// Hops a `NewNode` may be forwarded: 64.
    pub new_node_hops: u8,
}

impl<S> Default for Config<S> {
    fn default() -> Self {
        Config {
            buddies: Vec::new(),
            fast_heartbeat: Duration::from_millis(250),
            slow_heartbeat: Duration::from_secs(2),
            stable_after: Duration::from_secs(2),
            neighbour_timeout: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(2),
            leader_beacon: Duration::from_secs(4),
            max_neighbours: 64,
            new_node_hops: 64,
        }
    }
}

/// Counters of what the node dropped or refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages that claimed this node's own address (duplicate address or echo).
    pub own_address: u64,
    /// Candidates refused because the neighbour table was full.
    pub table_full: u64,
    /// `NewNode` messages dropped because their hop count ran out.
    pub hops_exhausted: u64,
    /// Messages received after leaving.
    pub after_leave: u64,
}

/// The node's timers (DESIGN.md §6.2: timers are data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// Send hellos (or join requests when alone).
    Heartbeat = 0,
    /// Leader beacon to the buddies.
    Beacon = 1,
}

/// What the node knows of a neighbour (or of a candidate being probed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour<S> {
    /// Where to send to it.
    pub substrate: S,
    /// When it was last heard from (or, for a candidate, when it was learned).
    pub last_heard: Instant,
    /// Its neighbours next to this node around it, from its last hello (clockwise,
    /// counter-clockwise): what embedded trees need to compute children locally.
    pub around: (Option<DtAddr>, Option<DtAddr>),
    /// Heard from directly. A candidate learned second-hand (from a hello's hints or a
    /// `NewNode`) is probed with hellos but is not yet a neighbour: it neither counts in the
    /// neighbour test nor is passed on as a hint, so a crashed node cannot circulate forever
    /// from hint to hint.
    pub confirmed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Active,
    Left,
}

/// One DT overlay node (see the module documentation for the protocol and the call order).
#[derive(Debug, Clone)]
pub struct Node<S> {
    config: Config<S>,
    me: Peer<S>,
    state: State,
    /// Neighbours (confirmed) and candidates being probed.
    entries: BTreeMap<DtAddr, Neighbour<S>>,
    timers: [Option<Instant>; 2],
    last_change: Instant,
    leader: bool,
    transmits: VecDeque<(S, Message<S>)>,
    events: VecDeque<Event>,
    stats: Stats,
}

impl<S: Clone + PartialEq> Node<S> {
    /// A node at `addr`, reachable at `substrate`, starting at `now`: it sends its first join
    /// requests at once.
    pub fn new(config: Config<S>, addr: DtAddr, substrate: S, now: Instant) -> Self {
        let mut n = Node {
            config,
            me: Peer { addr, substrate },
            state: State::Active,
            entries: BTreeMap::new(),
            timers: [None; 2],
            last_change: now,
            leader: true,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        };
        n.timers[Timer::Heartbeat as usize] = Some(now);
        n.timers[Timer::Beacon as usize] = Some(now + n.config.leader_beacon);
        n
    }

    /// This node's logical address.
    pub fn addr(&self) -> DtAddr {
        self.me.addr
    }

    /// The current (confirmed) neighbours, ordered by address.
    pub fn neighbours(&self) -> impl Iterator<Item = (DtAddr, &Neighbour<S>)> {
        self.entries
            .iter()
            .filter(|(_, n)| n.confirmed)
            .map(|(a, n)| (*a, n))
    }

    /// The neighbours' logical addresses, ordered.
    pub fn neighbour_addrs(&self) -> impl Iterator<Item = DtAddr> + '_ {
        self.neighbours().map(|(a, _)| a)
    }

    /// Whether no neighbour is greater than this node.
    pub fn is_leader(&self) -> bool {
        self.leader
    }

    /// What was dropped so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// When the neighbourhood last changed.
    pub fn last_change(&self) -> Instant {
        self.last_change
    }

    /// Adds a rendezvous point learned at run time (from a rendezvous server,
    /// [`crate::rendezvous`]): a node with no neighbour sends it `NewNode`, and the leader's
    /// `NewNode` goes to it (how partitions find each other). At most
    /// [`crate::hypercube::MAX_BUDDIES`] are kept, the oldest dropped first.
    pub fn add_buddy(&mut self, buddy: S) {
        if buddy == self.me.substrate || self.config.buddies.contains(&buddy) {
            return;
        }
        self.config.buddies.push(buddy);
        while self.config.buddies.len() > crate::hypercube::MAX_BUDDIES {
            self.config.buddies.remove(0);
        }
    }

    /// Leaves the overlay: says goodbye to every neighbour and stops.
    pub fn leave(&mut self, _now: Instant) {
        if self.state == State::Left {
            return;
        }
        let src = self.me.addr;
        for (a, n) in std::mem::take(&mut self.entries) {
            self.transmits
                .push_back((n.substrate.clone(), Message::Goodbye { src }));
            if n.confirmed {
                self.events
                    .push_back(Event::NeighbourRemoved(a, RemoveReason::Goodbye));
            }
        }
        self.state = State::Left;
        self.timers = [None; 2];
    }

    /// Handles one message from substrate address `from`.
    pub fn handle_message(&mut self, now: Instant, from: S, msg: Message<S>) {
        if self.state == State::Left {
            self.stats.after_leave += 1;
            return;
        }
        match msg {
            Message::HelloNeighbor { src, cw, ccw } => {
                if src == self.me.addr {
                    self.stats.own_address += 1;
                    return;
                }
                let around = (cw.as_ref().map(|p| p.addr), ccw.as_ref().map(|p| p.addr));
                let known = match self.entries.get_mut(&src) {
                    Some(n) => {
                        n.last_heard = now;
                        n.substrate = from.clone();
                        n.around = around;
                        if !n.confirmed {
                            n.confirmed = true;
                            self.added(now, src);
                        }
                        true
                    }
                    None => false,
                };
                if !known {
                    if self.try_add(now, src, from.clone(), around, true) {
                        self.send_hello(src);
                    } else {
                        self.send_not_neighbour(from, src);
                    }
                }
                self.learn(now, [cw, ccw]);
            }
            Message::HelloNotNeighbor { src, cw, ccw } => {
                if src == self.me.addr {
                    self.stats.own_address += 1;
                    return;
                }
                self.learn(now, [cw, ccw]);
                self.remove(now, src, RemoveReason::Refused);
            }
            Message::Goodbye { src } => self.remove(now, src, RemoveReason::Goodbye),
            Message::NewNode { node, hops } => self.handle_new_node(now, node, hops),
        }
        self.update_leader();
    }

    fn remove(&mut self, now: Instant, addr: DtAddr, why: RemoveReason) {
        if let Some(n) = self.entries.remove(&addr) {
            if n.confirmed {
                self.changed(now);
                self.events.push_back(Event::NeighbourRemoved(addr, why));
            }
        }
    }

    fn handle_new_node(&mut self, now: Instant, node: Peer<S>, hops: u8) {
        if node.addr == self.me.addr {
            if node.substrate != self.me.substrate {
                self.stats.own_address += 1;
            }
            return;
        }
        if self.entries.contains_key(&node.addr) {
            self.send_hello(node.addr);
            return;
        }
        // Greedy routing: forward to the neighbour nearest the new point, if nearer than us.
        let mine = geometry::dist2(self.me.addr, node.addr);
        let nearest = self
            .neighbours()
            .map(|(a, n)| (geometry::dist2(a, node.addr), a, n))
            .filter(|(d, _, _)| *d < mine)
            .min_by_key(|(d, a, _)| (*d, *a))
            .map(|(_, _, n)| n.substrate.clone());
        if let Some(to) = nearest {
            if hops > 0 {
                self.transmits.push_back((
                    to,
                    Message::NewNode {
                        node,
                        hops: hops - 1,
                    },
                ));
                return;
            }
            self.stats.hops_exhausted += 1;
        }
        if self.try_add(now, node.addr, node.substrate.clone(), (None, None), false) {
            self.send_hello(node.addr);
        } else {
            self.send_not_neighbour(node.substrate, node.addr);
        }
    }

    /// Considers candidates learned from hellos.
    fn learn(&mut self, now: Instant, candidates: [Option<Peer<S>>; 2]) {
        for p in candidates.into_iter().flatten() {
            if p.addr == self.me.addr || self.entries.contains_key(&p.addr) {
                continue;
            }
            if self.try_add(now, p.addr, p.substrate, (None, None), false) {
                self.send_hello(p.addr);
            }
        }
    }

    /// Adds `addr` (a neighbour if `confirmed`, else a candidate to probe) if it passes the
    /// neighbour test against the confirmed neighbours. Returns whether it was added.
    fn try_add(
        &mut self,
        now: Instant,
        addr: DtAddr,
        substrate: S,
        around: (Option<DtAddr>, Option<DtAddr>),
        confirmed: bool,
    ) -> bool {
        let me = self.me.addr;
        if !geometry::is_delaunay_edge(me, addr, self.neighbour_addrs()) {
            return false;
        }
        if self.entries.len() >= self.config.max_neighbours {
            self.stats.table_full += 1;
            return false;
        }
        self.entries.insert(
            addr,
            Neighbour {
                substrate,
                last_heard: now,
                around,
                confirmed,
            },
        );
        if confirmed {
            self.added(now, addr);
        }
        true
    }

    /// `addr` became a confirmed neighbour: report it and drop every entry that no longer
    /// passes the neighbour test (only the new point can have made an edge non-Delaunay).
    fn added(&mut self, now: Instant, addr: DtAddr) {
        self.events.push_back(Event::NeighbourAdded(addr));
        self.changed(now);
        let me = self.me.addr;
        let pts: Vec<DtAddr> = self.neighbour_addrs().collect();
        let gone: Vec<DtAddr> = self
            .entries
            .keys()
            .copied()
            .filter(|&q| q != addr && !geometry::is_delaunay_edge(me, q, pts.iter().copied()))
            .collect();
        for q in gone {
            self.remove(now, q, RemoveReason::NotDelaunay);
        }
    }

    fn changed(&mut self, now: Instant) {
        self.last_change = now;
        // Speed the heartbeat up while the neighbourhood changes.
        let fast = now + self.config.fast_heartbeat;
        let hb = &mut self.timers[Timer::Heartbeat as usize];
        if hb.is_none_or(|t| t > fast) {
            *hb = Some(fast);
        }
    }

    fn update_leader(&mut self) {
        let me = self.me.addr;
        let leader = self.neighbour_addrs().all(|a| a < me);
        if leader != self.leader {
            self.leader = leader;
            self.events.push_back(Event::Leader(leader));
        }
    }

    /// The neighbours just clockwise and counter-clockwise of `of` around this node (`of`
    /// itself need not be a neighbour).
    pub fn around(&self, of: DtAddr) -> (Option<Peer<S>>, Option<Peer<S>>) {
        let me = self.me.addr;
        let mut ring: Vec<DtAddr> = self.neighbour_addrs().filter(|&a| a != of).collect();
        if ring.is_empty() {
            return (None, None);
        }
        ring.sort_by(|&u, &v| geometry::angular_cmp(me, u, v));
        // First neighbour counter-clockwise after `of`, and the last before it.
        let after = ring.partition_point(|&u| geometry::angular_cmp(me, u, of).is_lt());
        let ccw = ring[after % ring.len()];
        let cw = ring[(after + ring.len() - 1) % ring.len()];
        let peer = |a: DtAddr| {
            self.entries.get(&a).map(|n| Peer {
                addr: a,
                substrate: n.substrate.clone(),
            })
        };
        (peer(cw), peer(ccw))
    }

    fn send_hello(&mut self, to: DtAddr) {
        if let Some(n) = self.entries.get(&to) {
            let (cw, ccw) = self.around(to);
            let sub = n.substrate.clone();
            self.transmits.push_back((
                sub,
                Message::HelloNeighbor {
                    src: self.me.addr,
                    cw,
                    ccw,
                },
            ));
        }
    }

    fn send_not_neighbour(&mut self, to: S, about: DtAddr) {
        let (cw, ccw) = self.around(about);
        self.transmits.push_back((
            to,
            Message::HelloNotNeighbor {
                src: self.me.addr,
                cw,
                ccw,
            },
        ));
    }

    fn send_new_node_to_buddies(&mut self) {
        for b in &self.config.buddies {
            if *b != self.me.substrate {
                self.transmits.push_back((
                    b.clone(),
                    Message::NewNode {
                        node: self.me.clone(),
                        hops: self.config.new_node_hops,
                    },
                ));
            }
        }
    }

    fn expiry(&self, n: &Neighbour<S>) -> Instant {
        n.last_heard
            + if n.confirmed {
                self.config.neighbour_timeout
            } else {
                self.config.probe_timeout
            }
    }

    /// Handles every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == State::Left {
            return;
        }
        // Expiry first, so hellos are not sent to the dead. Its deadline is derived from the
        // table (the earliest expiry), so it is never stale.
        let dead: Vec<DtAddr> = self
            .entries
            .iter()
            .filter(|(_, n)| self.expiry(n) <= now)
            .map(|(a, _)| *a)
            .collect();
        for a in dead {
            self.remove(now, a, RemoveReason::Timeout);
        }
        let alone = self.neighbour_addrs().next().is_none();
        if self.timers[Timer::Heartbeat as usize].is_some_and(|t| t <= now) {
            if alone {
                self.send_new_node_to_buddies();
            }
            let all: Vec<DtAddr> = self.entries.keys().copied().collect();
            for a in all {
                self.send_hello(a);
            }
            let period = if alone || now < self.last_change + self.config.stable_after {
                self.config.fast_heartbeat
            } else {
                self.config.slow_heartbeat
            };
            self.timers[Timer::Heartbeat as usize] = Some(now + period);
        }
        if self.timers[Timer::Beacon as usize].is_some_and(|t| t <= now) {
            if self.leader && !alone {
                self.send_new_node_to_buddies();
            }
            self.timers[Timer::Beacon as usize] = Some(now + self.config.leader_beacon);
        }
        self.update_leader();
    }

    /// The next message to send, with its destination.
    pub fn poll_transmit(&mut self) -> Option<(S, Message<S>)> {
        self.transmits.pop_front()
    }

    /// The next neighbourhood change.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Node::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let expiry = self.entries.values().map(|n| self.expiry(n)).min();
        self.timers.iter().flatten().copied().chain(expiry).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::SimAddr;

    fn p(x: i32, y: i32) -> DtAddr {
        DtAddr::new(x, y).unwrap()
    }

    fn drain(n: &mut Node<SimAddr>) -> Vec<(SimAddr, Message<SimAddr>)> {
        std::iter::from_fn(|| n.poll_transmit()).collect()
    }

    fn hello(x: i32, y: i32) -> Message<SimAddr> {
        Message::HelloNeighbor {
            src: p(x, y),
            cw: None,
            ccw: None,
        }
    }

    #[test]
    fn alone_node_asks_buddies_then_hellos_neighbours() {
        let cfg = Config {
            buddies: vec![SimAddr(0), SimAddr(9)],
            ..Config::default()
        };
        let t0 = Instant::ZERO;
        let mut n = Node::new(cfg, p(0, 0), SimAddr(9), t0);
        assert_eq!(n.poll_timeout(), Some(t0));
        n.handle_timeout(t0);
        let out = drain(&mut n);
        assert_eq!(out.len(), 1, "NewNode to the other buddy only");
        assert!(matches!(
            out[0],
            (SimAddr(0), Message::NewNode { hops: 64, .. })
        ));
        // A hello from a stranger that passes the test: added, answered, event.
        n.handle_message(t0, SimAddr(1), hello(10, 0));
        assert_eq!(n.poll_event(), Some(Event::NeighbourAdded(p(10, 0))));
        assert_eq!(n.poll_event(), Some(Event::Leader(false)));
        assert!(matches!(
            drain(&mut n).as_slice(),
            [(SimAddr(1), Message::HelloNeighbor { .. })]
        ));
        // Handling the same timeout twice is harmless: the second sends nothing new.
        let t1 = n.poll_timeout().unwrap();
        n.handle_timeout(t1);
        let first = drain(&mut n).len();
        n.handle_timeout(t1);
        assert_eq!(drain(&mut n).len(), 0);
        assert_eq!(first, 1);
    }

    #[test]
    fn not_neighbour_is_refused_and_told_why() {
        let mut n = Node::new(Config::default(), p(0, 0), SimAddr(0), Instant::ZERO);
        n.handle_message(Instant::ZERO, SimAddr(1), hello(10, 0));
        drain(&mut n);
        // (20,0) lies beyond (10,0) on the same line: not a Delaunay neighbour of (0,0).
        n.handle_message(Instant::ZERO, SimAddr(2), hello(20, 0));
        let out = drain(&mut n);
        assert!(matches!(
            out.as_slice(),
            [(SimAddr(2), Message::HelloNotNeighbor { .. })]
        ));
        assert_eq!(n.neighbour_addrs().collect::<Vec<_>>(), vec![p(10, 0)]);
        // HelloNotNeighbor removes, with the reason.
        while n.poll_event().is_some() {}
        n.handle_message(
            Instant::ZERO,
            SimAddr(1),
            Message::HelloNotNeighbor {
                src: p(10, 0),
                cw: None,
                ccw: None,
            },
        );
        assert_eq!(
            n.poll_event(),
            Some(Event::NeighbourRemoved(p(10, 0), RemoveReason::Refused))
        );
    }

    #[test]
    fn timeout_capacity_duplicates_and_leave() {
        let cfg = Config {
            max_neighbours: 2,
            ..Config::default()
        };
        let t0 = Instant::ZERO;
        let mut n = Node::new(cfg, p(0, 0), SimAddr(0), t0);
        n.handle_message(t0, SimAddr(1), hello(10, 0));
        n.handle_message(t0, SimAddr(2), hello(0, 10));
        n.handle_message(t0, SimAddr(3), hello(-10, -10));
        assert_eq!(n.stats().table_full, 1);
        n.handle_message(t0, SimAddr(4), hello(0, 0));
        assert_eq!(n.stats().own_address, 1);
        // Nothing heard for the neighbour timeout: both removed.
        while n.poll_event().is_some() {}
        let t = t0 + Duration::from_secs(10);
        n.handle_timeout(t);
        let removed: Vec<Event> = std::iter::from_fn(|| n.poll_event()).collect();
        assert!(removed.contains(&Event::NeighbourRemoved(p(10, 0), RemoveReason::Timeout)));
        assert!(removed.contains(&Event::NeighbourRemoved(p(0, 10), RemoveReason::Timeout)));
        // Leave: a goodbye to each neighbour, then silence.
        n.handle_message(t, SimAddr(1), hello(10, 0));
        drain(&mut n);
        n.leave(t);
        assert!(matches!(
            drain(&mut n).as_slice(),
            [(SimAddr(1), Message::Goodbye { .. })]
        ));
        assert_eq!(n.poll_timeout(), None);
        n.handle_message(t, SimAddr(1), hello(10, 0));
        assert_eq!(n.stats().after_leave, 1);
    }

    #[test]
    fn new_node_is_routed_greedily_to_the_nearest() {
        let t0 = Instant::ZERO;
        let mut n = Node::new(Config::default(), p(0, 0), SimAddr(0), t0);
        n.handle_message(t0, SimAddr(1), hello(100, 0));
        n.handle_message(t0, SimAddr(2), hello(0, 100));
        drain(&mut n);
        let joining = Peer {
            addr: p(120, 10),
            substrate: SimAddr(7),
        };
        n.handle_message(
            t0,
            SimAddr(5),
            Message::NewNode {
                node: joining,
                hops: 3,
            },
        );
        assert_eq!(
            drain(&mut n),
            vec![(
                SimAddr(1),
                Message::NewNode {
                    node: joining,
                    hops: 2
                }
            )]
        );
    }
}
