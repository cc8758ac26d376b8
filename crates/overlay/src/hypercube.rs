//! The hypercube overlay protocol, sans-IO (seed 000 §3.1.1.2, HyperCast's hypercube topology,
//! reimplemented from its published description in viastack's style).
//!
//! Nodes hold labels ([`HcLabel`]); two nodes are neighbours iff their labels differ in exactly
//! one bit. The cube is kept *compact*: with N nodes the labels are exactly the Gray codes
//! G(0) … G(N−1), so consecutive labels are neighbours and every label below the top is held.
//! The node holding the top label G(N−1) is the **HRoot**.
//!
//! # Messages ([`Message`])
//! - `Beacon { root, seq, root_substrate, cube }`: the HRoot's periodic beacon, sent to its neighbours
//!   and the buddies and relayed through the cube (each node relays a beacon once: a higher index
//!   or a newer sequence number), so every node knows the HRoot and hence N.
//! - `Ping { src }`: neighbour heartbeat.
//! - `Lookup { target, origin, .. }`: finds the holder of a missing neighbour label by greedy
//!   routing on Gray indices (forward to the neighbour whose index is nearest the target's;
//!   consecutive labels are neighbours, so each hop gets nearer). The holder answers with a
//!   `Ping`.
//! - `Join { joiner }`: a node without a label asks the buddies; labelled nodes forward it to the
//!   HRoot, which answers `Assign { G(N), cube }`: the newcomer is the new HRoot.
//! - `Leave { src }`: a node leaves; `Hole { label }`: a node below the top is missing (left or
//!   timed out), reported to the HRoot, which **moves** into the hole (leaving the top), so the
//!   cube stays compact; the node below the old top becomes HRoot.
//! - `Duplicate { label, holder }`: two nodes hold one label (a hole filled twice, two nodes
//!   that claimed the root at once): the one with the greater substrate address gives its label
//!   up and joins again. The holders find out when one hears the other, or when a neighbour of
//!   the label hears pings from both.
//!
//! - `Rejoin { cube, via }`: cube `cube` lost a merge (below): its nodes relay this to their
//!   neighbours, give their labels up and join again through `via`, the winner's HRoot.
//!
//! # Partitions
//! Every cube has an identifier (`cube`, a u32 drawn by the node that founds it, carried in
//! `Beacon` and `Assign`). Each new HRoot renames its cube [`Config::fragment_after`] after
//! taking the root if it still holds it (its members adopt the new name from their own
//! HRoot's beacon), so the side of a partition that lost its HRoot — whose new HRoot took the
//! root by claiming a silent one, by succession or by a join — always ends up under a name of
//! its own. A node whose HRoot went silent adopts the cube of the first beacon it hears. When
//! a node hears the beacon of *another* cube (the HRoots beacon to the buddies, which is how
//! cubes meet; a rendezvous server makes every leader a buddy of the others,
//! [`crate::rendezvous`]), the cube whose HRoot has the higher Gray index wins (ties: the
//! lower identifier): a node of the losing cube dissolves it (`Rejoin`) and joins the
//! winner; a node of the winning cube answers with its own HRoot's beacon (at most once per
//! beacon period), so that the other side dissolves. Joins are forwarded at most once per
//! joiner and ping period: stale views of several cubes could otherwise forward a join in a
//! cycle.
//!
//! # Call order
//! As [`crate::dt`]: `handle_message`/`handle_timeout` with the current time, then drain
//! `poll_transmit` and `poll_event`, then ask `poll_timeout`.
//!
//! # Bootstrapping
//! The first buddy of [`Config::buddies`], if still without a label after
//! [`Config::bootstrap_after`], takes G(0): the cube's first node. Other nodes never label
//! themselves.

use std::collections::{BTreeMap, VecDeque};

use viastack_kernel::{Duration, Instant};

use crate::addr::HcLabel;

/// A hypercube protocol message (wire form: [`crate::wire::hc`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<S> {
    /// The HRoot's beacon.
    Beacon {
        /// The HRoot's label.
        root: HcLabel,
        /// Its sequence number.
        seq: u32,
        /// The HRoot's substrate address.
        root_substrate: S,
        /// The cube's identifier (see *Partitions* in the module documentation).
        cube: u32,
    },
    /// Neighbour heartbeat.
    Ping {
        /// The sender's label.
        src: HcLabel,
    },
    /// Find the holder of `target`.
    Lookup {
        /// The label sought.
        target: HcLabel,
        /// Who asks.
        origin: HcLabel,
        /// Where to answer.
        origin_substrate: S,
        /// Hops left.
        hops: u8,
    },
    /// A node asks for a label.
    Join {
        /// Where to send the label.
        joiner: S,
    },
    /// The HRoot gives a label.
    Assign {
        /// The label.
        label: HcLabel,
        /// The cube the label belongs to.
        cube: u32,
    },
    /// The sender leaves.
    Leave {
        /// Its label.
        src: HcLabel,
    },
    /// `label` (below the top) is missing.
    Hole {
        /// The missing label.
        label: HcLabel,
    },
    /// Two nodes hold `label`; the receiver must give it up if its substrate address is
    /// greater than `holder`'s (and otherwise tell `holder` to).
    Duplicate {
        /// The contested label.
        label: HcLabel,
        /// The other node holding it.
        holder: S,
    },
    /// Cube `cube` lost a merge: its nodes give their labels up and join again through `via`
    /// (the winning cube's HRoot), relaying this to their neighbours first.
    Rejoin {
        /// The losing cube.
        cube: u32,
        /// Where to join.
        via: S,
    },
}

/// A change, for the application and the forwarding engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The node took a label (joined, or moved into a hole).
    Labelled(HcLabel),
    /// The node gave its label up (duplicate) and joins again.
    Unlabelled,
    /// A neighbour appeared.
    NeighbourAdded(HcLabel),
    /// A neighbour disappeared.
    NeighbourRemoved(HcLabel),
    /// The node became HRoot (`true`) or stopped being one.
    Root(bool),
}

/// Protocol parameters. Seed 000 gives no numbers for the hypercube protocol, so the defaults
/// are chosen here (heartbeats of half a second, timeouts of several heartbeats); they are what
/// the convergence tests run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config<S> {
    /// Rendezvous: where to send `Join`; the first one bootstraps the cube.
    pub buddies: Vec<S>,
    /// Ping (and join retry, and neighbour lookup) period: 500 ms.
    pub ping: Duration,
    /// HRoot beacon period: 1 s.
    pub beacon: Duration,
    /// A neighbour not heard from this long is missing: 3 s.
    pub neighbour_timeout: Duration,
    /// Root knowledge without a beacon this long is stale: 4 s.
    pub root_timeout: Duration,
    /// The first buddy labels itself G(0) after this long without a label: 2 s.
    pub bootstrap_after: Duration,
    /// Hops a lookup may travel: 64.
    pub lookup_hops: u8,
    /// An HRoot that took the root because the old one went silent, and still is after this
    /// long, founds a cube of its own under a new identifier (a partition cut it off; see
    /// *Partitions*): 12 s (three root timeouts — longer than the transient double roots of a
    /// hole being filled, which settle within one).
    pub fragment_after: Duration,
    /// Mixed into the cube identifiers this node draws (its substrate address, say), so that
    /// two nodes founding cubes at the same instant draw different ones: 0.
    pub salt: u64,
}

impl<S> Default for Config<S> {
    fn default() -> Self {
        Config {
            buddies: Vec::new(),
            ping: Duration::from_millis(500),
            beacon: Duration::from_secs(1),
            neighbour_timeout: Duration::from_secs(3),
            root_timeout: Duration::from_secs(4),
            bootstrap_after: Duration::from_secs(2),
            fragment_after: Duration::from_secs(12),
            salt: 0,
            lookup_hops: 64,
        }
    }
}

/// Counters of what was dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups that found no nearer neighbour or ran out of hops.
    pub lookups_dropped: u64,
    /// Messages that need a label, received without one (or the reverse).
    pub wrong_state: u64,
    /// Pings from labels that are not neighbours.
    pub not_neighbour: u64,
    /// Duplicate labels detected.
    pub duplicates: u64,
    /// Beacons of another cube heard (partition merges).
    pub foreign_beacons: u64,
    /// Times this node gave its label up because its cube lost a merge.
    pub rejoins: u64,
}

/// The node's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// Ping neighbours, look up missing ones, retry joining.
    Ping = 0,
    /// Beacon, when HRoot.
    Beacon = 1,
}

#[derive(Debug, Clone)]
struct RootInfo<S> {
    label: HcLabel,
    substrate: S,
    seq: u32,
    heard: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Joining { since: Instant },
    Labelled(HcLabel),
    Left,
}

/// A neighbour entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour<S> {
    /// Where it is.
    pub substrate: S,
    /// When it was last heard from.
    pub last_heard: Instant,
}

/// One hypercube node.
#[derive(Debug, Clone)]
pub struct Node<S> {
    config: Config<S>,
    me: S,
    state: State,
    neighbours: BTreeMap<HcLabel, Neighbour<S>>,
    /// Neighbour labels missing, with when to start reporting them: at once for a neighbour
    /// that left or timed out, after a neighbour timeout for one never found by lookups.
    /// Reported to the HRoot every ping while below the top, until held again (bounded: at
    /// most one per bit).
    holes: BTreeMap<HcLabel, Instant>,
    root: Option<RootInfo<S>>,
    seq: u32,
    is_root: bool,
    timers: [Option<Instant>; 2],
    transmits: VecDeque<(S, Message<S>)>,
    events: VecDeque<Event>,
    stats: Stats,
    /// The identifier of the cube this node belongs to (drawn by the node that founds it).
    cube: u32,
    /// After a lost merge: the winning HRoot, asked first while joining.
    join_via: Option<S>,
    /// When this node took the root because the old one went silent (while it stays HRoot).
    claimed_at: Option<Instant>,
    /// Joiners whose join this node forwarded lately, and when (at most [`MAX_BUDDIES`]).
    joins_forwarded: VecDeque<(S, Instant)>,
    /// When this node last answered a foreign beacon (at most once per beacon period).
    foreign_answered: Option<Instant>,
}

/// At most this many buddies (configured and learned).
pub const MAX_BUDDIES: usize = 32;

/// A cube identifier, drawn from the time, the founder's label and its salt (SplitMix64): two
/// fragments that become cubes of their own do so at different labels, so they draw different
/// identifiers.
fn cube_id(now: Instant, label: HcLabel, salt: u64) -> u32 {
    let mut z = now
        .as_nanos()
        .wrapping_add(u64::from(label.value()).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        ^ salt.wrapping_mul(0xd6e8_feb8_6659_fd93);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

fn index(l: HcLabel) -> u32 {
    l.gray_index()
}

fn one_bit_apart(a: HcLabel, b: HcLabel) -> bool {
    (a.value() ^ b.value()).count_ones() == 1
}

fn hamming(a: HcLabel, b: HcLabel) -> u32 {
    (a.value() ^ b.value()).count_ones()
}

impl<S: Clone + Ord> Node<S> {
    /// A node reachable at `substrate`, starting (without a label) at `now`.
    pub fn new(config: Config<S>, substrate: S, now: Instant) -> Self {
        Node {
            config,
            me: substrate,
            state: State::Joining { since: now },
            neighbours: BTreeMap::new(),
            holes: BTreeMap::new(),
            root: None,
            seq: 0,
            is_root: false,
            timers: [Some(now), None],
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            cube: 0,
            join_via: None,
            claimed_at: None,
            joins_forwarded: VecDeque::new(),
            foreign_answered: None,
        }
    }

    /// The node's label, once it has one.
    pub fn label(&self) -> Option<HcLabel> {
        match self.state {
            State::Labelled(l) => Some(l),
            _ => None,
        }
    }

    /// Whether this node is the HRoot.
    pub fn is_root(&self) -> bool {
        self.is_root
    }

    /// The HRoot's label as this node knows it.
    pub fn root_label(&self) -> Option<HcLabel> {
        self.root.as_ref().map(|r| r.label)
    }

    /// The neighbours' labels, ordered.
    pub fn neighbour_labels(&self) -> impl Iterator<Item = HcLabel> + '_ {
        self.neighbours.keys().copied()
    }

    /// The neighbours with their entries.
    pub fn neighbours(&self) -> impl Iterator<Item = (HcLabel, &Neighbour<S>)> {
        self.neighbours.iter().map(|(l, n)| (*l, n))
    }

    /// What was dropped so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Adds a rendezvous point learned at run time (from a rendezvous server,
    /// [`crate::rendezvous`]): joins are sent to it, and the HRoot's beacon goes to it (how
    /// cubes find each other). At most [`MAX_BUDDIES`] are kept, the oldest dropped first.
    pub fn add_buddy(&mut self, buddy: S) {
        if buddy == self.me || self.config.buddies.contains(&buddy) {
            return;
        }
        self.config.buddies.push(buddy);
        while self.config.buddies.len() > MAX_BUDDIES {
            self.config.buddies.remove(0);
        }
    }

    /// Founds the cube (takes G(0) and the root) if the node has no label yet: for a node
    /// that a rendezvous server told it is the first.
    pub fn bootstrap(&mut self, now: Instant) {
        if matches!(self.state, State::Joining { .. }) {
            self.cube = cube_id(now, HcLabel::gray(0), self.config.salt);
            self.take_label(now, HcLabel::gray(0));
            self.become_root(now, HcLabel::gray(0));
        }
    }

    /// Leaves the cube: tells the neighbours, which report the hole to the HRoot.
    pub fn leave(&mut self, _now: Instant) {
        if let State::Labelled(l) = self.state {
            for n in self.neighbours.values() {
                self.transmits
                    .push_back((n.substrate.clone(), Message::Leave { src: l }));
            }
        }
        self.neighbours.clear();
        self.state = State::Left;
        self.timers = [None; 2];
        self.set_root_flag(false);
    }

    fn set_root_flag(&mut self, r: bool) {
        if r != self.is_root {
            self.is_root = r;
            self.events.push_back(Event::Root(r));
        }
    }

    fn become_root(&mut self, now: Instant, label: HcLabel) {
        let seq = self.root.as_ref().map_or(0, |r| r.seq).wrapping_add(1);
        self.root = Some(RootInfo {
            label,
            substrate: self.me.clone(),
            seq,
            heard: now,
        });
        self.seq = seq;
        self.set_root_flag(true);
        self.claimed_at = Some(now);
        self.timers[Timer::Beacon as usize] = Some(now);
    }

    fn take_label(&mut self, now: Instant, label: HcLabel) {
        for l in std::mem::take(&mut self.neighbours).into_keys() {
            self.events.push_back(Event::NeighbourRemoved(l));
        }
        self.holes.clear();
        self.join_via = None;
        self.state = State::Labelled(label);
        self.events.push_back(Event::Labelled(label));
        self.timers[Timer::Ping as usize] = Some(now);
    }

    fn drop_label(&mut self, now: Instant) {
        for l in std::mem::take(&mut self.neighbours).into_keys() {
            self.events.push_back(Event::NeighbourRemoved(l));
        }
        self.holes.clear();
        self.state = State::Joining { since: now };
        self.root = None;
        self.set_root_flag(false);
        self.events.push_back(Event::Unlabelled);
        self.timers = [Some(now), None];
    }

    fn upsert(&mut self, now: Instant, label: HcLabel, substrate: S) {
        match self.neighbours.get_mut(&label) {
            Some(n) => {
                n.last_heard = now;
                n.substrate = substrate;
            }
            None => {
                self.neighbours.insert(
                    label,
                    Neighbour {
                        substrate,
                        last_heard: now,
                    },
                );
                self.events.push_back(Event::NeighbourAdded(label));
            }
        }
    }

    /// Index of the top label as known here (the HRoot's, or the highest seen).
    fn top_index(&self) -> u32 {
        let mine = self.label().map_or(0, index);
        let root = self.root.as_ref().map_or(0, |r| index(r.label));
        let nb = self.neighbours.keys().map(|l| index(*l)).max().unwrap_or(0);
        mine.max(root).max(nb)
    }

    /// Handles one message from substrate address `from`.
    pub fn handle_message(&mut self, now: Instant, from: S, msg: Message<S>) {
        let my = match self.state {
            State::Labelled(l) => Some(l),
            State::Left => return,
            State::Joining { .. } => None,
        };
        match (my, msg) {
            (None, Message::Assign { label, cube }) => {
                self.cube = cube;
                self.take_label(now, label);
                if index(label) > 0 {
                    // The assigner holds the label just below: a neighbour.
                    self.upsert(now, HcLabel::gray(index(label) - 1), from);
                }
                self.become_root(now, label);
            }
            (None, _) => self.stats.wrong_state += 1,
            (Some(_), Message::Assign { .. }) => self.stats.wrong_state += 1,
            (Some(me), Message::Ping { src }) => {
                if src == me {
                    self.duplicate(now, me, from);
                } else if one_bit_apart(src, me) {
                    // Two live nodes pinging with one label: tell the greater to give it up.
                    let fresh = now < self.heard(src) + self.config.ping * 2;
                    match self.neighbours.get(&src).map(|n| n.substrate.clone()) {
                        Some(other) if other != from && fresh => {
                            self.stats.duplicates += 1;
                            let (winner, loser) = if other < from {
                                (other, from)
                            } else {
                                (from, other)
                            };
                            self.transmits.push_back((
                                loser,
                                Message::Duplicate {
                                    label: src,
                                    holder: winner.clone(),
                                },
                            ));
                            self.upsert(now, src, winner);
                        }
                        _ => self.upsert(now, src, from),
                    }
                } else {
                    self.stats.not_neighbour += 1;
                }
            }
            (
                Some(me),
                Message::Beacon {
                    root,
                    seq,
                    root_substrate,
                    cube,
                },
            ) => {
                if cube == self.cube {
                    self.handle_beacon(now, me, from, root, seq, root_substrate);
                } else {
                    self.foreign_beacon(now, me, from, (root, seq), root_substrate, cube);
                }
            }
            (Some(me), Message::Rejoin { cube, via }) => {
                if cube == self.cube && via != self.me {
                    self.rejoin(now, me, via, Some(&from));
                }
            }
            (
                Some(me),
                Message::Lookup {
                    target,
                    origin,
                    origin_substrate,
                    hops,
                },
            ) => {
                if target == me {
                    if origin == me {
                        self.duplicate(now, me, origin_substrate);
                    } else if one_bit_apart(origin, me) {
                        self.upsert(now, origin, origin_substrate.clone());
                        self.transmits
                            .push_back((origin_substrate, Message::Ping { src: me }));
                    }
                } else {
                    self.route_lookup(me, target, origin, origin_substrate, hops);
                }
            }
            (Some(me), Message::Join { joiner }) => self.handle_join(now, me, joiner, &from),
            (Some(me), Message::Leave { src }) => {
                if self
                    .neighbours
                    .get(&src)
                    .is_some_and(|n| n.substrate == from)
                {
                    self.neighbours.remove(&src);
                    self.events.push_back(Event::NeighbourRemoved(src));
                    self.missing(now, me, src);
                }
            }
            (Some(me), Message::Hole { label }) => self.handle_hole(now, me, label, Some(&from)),
            (Some(me), Message::Duplicate { label, holder }) => {
                if label == me {
                    self.duplicate(now, me, holder);
                }
            }
        }
    }

    fn heard(&self, l: HcLabel) -> Instant {
        self.neighbours
            .get(&l)
            .map_or(Instant::ZERO, |n| n.last_heard)
    }

    fn handle_beacon(
        &mut self,
        now: Instant,
        me: HcLabel,
        from: S,
        root: HcLabel,
        seq: u32,
        root_substrate: S,
    ) {
        if root == me {
            if root_substrate != self.me {
                self.duplicate(now, me, root_substrate);
            }
            return;
        }
        if index(root) < index(me) {
            return; // a stale root below us: ours or a higher one's beacons will correct it
        }
        let accept = match &self.root {
            None => true,
            Some(r) => {
                index(root) > index(r.label)
                    || (r.label == root && r.substrate == root_substrate && seq > r.seq)
                    || now >= r.heard + self.config.root_timeout
            }
        };
        if !accept {
            return;
        }
        self.root = Some(RootInfo {
            label: root,
            substrate: root_substrate.clone(),
            seq,
            heard: now,
        });
        self.set_root_flag(false);
        self.timers[Timer::Beacon as usize] = None;
        for n in self.neighbours.values() {
            if n.substrate != from {
                self.transmits.push_back((
                    n.substrate.clone(),
                    Message::Beacon {
                        root,
                        seq,
                        root_substrate: root_substrate.clone(),
                        cube: self.cube,
                    },
                ));
            }
        }
    }

    /// A beacon of another cube (a partition healed, or two fragments of one cube found each
    /// other through a buddy): the cube whose HRoot has the higher Gray index wins (ties: the
    /// lower identifier). If this node's cube loses, it dissolves ([`Message::Rejoin`]);
    /// otherwise the other side is told of this cube's HRoot, so that it dissolves.
    fn foreign_beacon(
        &mut self,
        now: Instant,
        me: HcLabel,
        from: S,
        (root, seq): (HcLabel, u32),
        root_substrate: S,
        cube: u32,
    ) {
        if root_substrate == self.me {
            return; // an old view of this node's own cube, relayed back
        }
        self.stats.foreign_beacons += 1;
        let same_root = self
            .root
            .as_ref()
            .is_some_and(|r| r.substrate == root_substrate);
        let live = self
            .root
            .as_ref()
            .is_some_and(|r| r.substrate == self.me || now < r.heard + self.config.root_timeout);
        if same_root || !live {
            // This node's own HRoot under a new identifier (it founded a cube of its own
            // after a partition), or this node's HRoot is gone (crashed, or cut off): the
            // new cube around it — a fragment's new HRoot — is its own.
            self.cube = cube;
            self.handle_beacon(now, me, from, root, seq, root_substrate);
            return;
        }
        let (mine, my_sub, my_seq) = match &self.root {
            Some(r) => (r.label, r.substrate.clone(), r.seq),
            None => (me, self.me.clone(), self.seq),
        };
        let theirs_win =
            (index(root), std::cmp::Reverse(cube)) > (index(mine), std::cmp::Reverse(self.cube));
        if theirs_win {
            self.rejoin(now, me, root_substrate, None);
        } else if self
            .foreign_answered
            .is_none_or(|t| now >= t + self.config.beacon)
        {
            // Answered at most once per beacon period: two nodes with views of several cubes
            // must not bounce beacons at network speed.
            self.foreign_answered = Some(now);
            self.transmits.push_back((
                from,
                Message::Beacon {
                    root: mine,
                    seq: my_seq,
                    root_substrate: my_sub,
                    cube: self.cube,
                },
            ));
        }
    }

    /// This node's cube lost a merge: tell the neighbours (but `from`), give the label up and
    /// join through `via`.
    fn rejoin(&mut self, now: Instant, _me: HcLabel, via: S, from: Option<&S>) {
        self.stats.rejoins += 1;
        let cube = self.cube;
        for n in self.neighbours.values() {
            if Some(&n.substrate) != from {
                self.transmits.push_back((
                    n.substrate.clone(),
                    Message::Rejoin {
                        cube,
                        via: via.clone(),
                    },
                ));
            }
        }
        self.drop_label(now);
        self.join_via = Some(via);
    }

    /// Forwards a lookup to the neighbour whose Gray index is nearest the target's, if nearer
    /// than ours (consecutive labels are neighbours, so in a consistent cube each hop gets
    /// nearer). The origin without such a neighbour (a node that just moved into a hole, or an
    /// HRoot cut off by a hole) asks the HRoot, or else a buddy, to route it.
    fn route_lookup(&mut self, me: HcLabel, target: HcLabel, origin: HcLabel, sub: S, hops: u8) {
        let dist = |l: HcLabel| index(l).abs_diff(index(target));
        let mine = dist(me);
        let mut next = self
            .neighbours
            .iter()
            .filter(|(l, _)| dist(**l) < mine)
            .min_by_key(|(l, _)| (dist(**l), hamming(**l, target), **l))
            .map(|(_, n)| n.substrate.clone());
        if next.is_none() && origin == me {
            let root = self.root.as_ref().map(|r| r.substrate.clone());
            let buddy = self.config.buddies.iter().find(|b| **b != self.me).cloned();
            next = root.filter(|r| *r != self.me).or(buddy);
        }
        match next {
            Some(to) if hops > 0 => self.transmits.push_back((
                to,
                Message::Lookup {
                    target,
                    origin,
                    origin_substrate: sub,
                    hops: hops - 1,
                },
            )),
            _ => self.stats.lookups_dropped += 1,
        }
    }

    fn handle_join(&mut self, now: Instant, me: HcLabel, joiner: S, from: &S) {
        if joiner == self.me || self.neighbours.values().any(|n| n.substrate == joiner) {
            return; // already in the cube (a late retry)
        }
        if self.is_root {
            let label = HcLabel::gray(index(me).wrapping_add(1));
            let cube = self.cube;
            self.transmits
                .push_back((joiner.clone(), Message::Assign { label, cube }));
            self.upsert(now, label, joiner.clone());
            self.root = Some(RootInfo {
                label,
                substrate: joiner,
                seq: self.seq,
                heard: now,
            });
            self.set_root_flag(false);
            self.timers[Timer::Beacon as usize] = None;
            return;
        }
        match &self.root {
            // The joiner is the HRoot we know of: its Assign was lost; repeat it.
            Some(r) if r.substrate == joiner => {
                let label = r.label;
                let cube = self.cube;
                self.transmits
                    .push_back((joiner, Message::Assign { label, cube }));
            }
            // Forwarded towards a higher Gray index, and never back to the node it came from:
            // two nodes that each take the other for the HRoot (stale views) would otherwise
            // bounce a join forever, which duplicating links turn into a storm.
            Some(r)
                if r.substrate != self.me && r.substrate != *from && index(r.label) > index(me) =>
            {
                // Each joiner's join is forwarded at most once per ping period: views of
                // several cubes (before a merge) can form a forwarding cycle of higher indices.
                if self
                    .joins_forwarded
                    .iter()
                    .any(|(j, t)| *j == joiner && now < *t + self.config.ping)
                {
                    self.stats.wrong_state += 1;
                    return;
                }
                self.joins_forwarded.retain(|(j, _)| *j != joiner);
                self.joins_forwarded.push_back((joiner.clone(), now));
                while self.joins_forwarded.len() > MAX_BUDDIES {
                    self.joins_forwarded.pop_front();
                }
                let to = r.substrate.clone();
                self.transmits.push_back((to, Message::Join { joiner }));
            }
            _ => self.stats.wrong_state += 1,
        }
    }

    /// Neighbour `gone` left or timed out.
    fn missing(&mut self, now: Instant, me: HcLabel, gone: HcLabel) {
        if self.root.as_ref().is_some_and(|r| r.label == gone) {
            // The top left: the label below it becomes the top.
            self.root = None;
            if index(me).wrapping_add(1) == index(gone) {
                self.become_root(now, me);
            }
            return;
        }
        self.holes.insert(gone, now);
        self.report_holes(now, me);
    }

    /// Reports the holes still open to the HRoot (or fills one, at the HRoot).
    fn report_holes(&mut self, now: Instant, me: HcLabel) {
        let Some((root_label, root_sub)) =
            self.root.as_ref().map(|r| (r.label, r.substrate.clone()))
        else {
            return;
        };
        let top = index(root_label);
        let open: Vec<(HcLabel, Instant)> = self.holes.iter().map(|(h, t)| (*h, *t)).collect();
        for (h, at) in open {
            if self.neighbours.contains_key(&h) {
                self.holes.remove(&h);
            } else if index(h) >= top || now < at {
                // Above the top as known here (kept, in case this view is stale), or not yet
                // given up on.
            } else if self.is_root {
                self.holes.remove(&h);
                self.handle_hole(now, me, h, None);
                return; // moved: the rest is reported from the new position's view
            } else {
                self.transmits
                    .push_back((root_sub.clone(), Message::Hole { label: h }));
            }
        }
    }

    fn handle_hole(&mut self, now: Instant, me: HcLabel, label: HcLabel, from: Option<&S>) {
        if label == me || index(label) >= index(me) {
            return;
        }
        if !self.is_root {
            if let Some(r) = &self.root {
                // Towards a higher index only, as joins: no forwarding cycle.
                if r.substrate != self.me
                    && Some(&r.substrate) != from
                    && index(r.label) > index(me)
                {
                    let to = r.substrate.clone();
                    self.transmits.push_back((to, Message::Hole { label }));
                }
            }
            return;
        }
        // Move into the hole: leave the top, the label below becomes HRoot.
        let below = HcLabel::gray(index(me) - 1);
        let below_sub = self.neighbours.get(&below).map(|n| n.substrate.clone());
        for n in self.neighbours.values() {
            self.transmits
                .push_back((n.substrate.clone(), Message::Leave { src: me }));
        }
        self.set_root_flag(false);
        self.timers[Timer::Beacon as usize] = None;
        self.root = below_sub.map(|s| RootInfo {
            label: below,
            substrate: s,
            seq: 0,
            heard: now,
        });
        self.take_label(now, label);
    }

    fn duplicate(&mut self, now: Instant, label: HcLabel, other: S) {
        if other == self.me {
            return;
        }
        self.stats.duplicates += 1;
        if self.me < other {
            let holder = self.me.clone();
            self.transmits
                .push_back((other, Message::Duplicate { label, holder }));
        } else {
            self.drop_label(now);
        }
    }

    /// Handles every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            State::Left => {}
            State::Joining { since } => {
                if self.timers[Timer::Ping as usize].is_some_and(|t| t <= now) {
                    let first = self.config.buddies.first() == Some(&self.me);
                    if first && now >= since + self.config.bootstrap_after {
                        self.cube = cube_id(now, HcLabel::gray(0), self.config.salt);
                        self.take_label(now, HcLabel::gray(0));
                        self.become_root(now, HcLabel::gray(0));
                    } else {
                        if let Some(v) = self.join_via.clone() {
                            self.transmits.push_back((
                                v,
                                Message::Join {
                                    joiner: self.me.clone(),
                                },
                            ));
                        }
                        for b in &self.config.buddies {
                            if *b != self.me && Some(b) != self.join_via.as_ref() {
                                self.transmits.push_back((
                                    b.clone(),
                                    Message::Join {
                                        joiner: self.me.clone(),
                                    },
                                ));
                            }
                        }
                        self.timers[Timer::Ping as usize] = Some(now + self.config.ping);
                    }
                }
            }
            State::Labelled(me) => self.labelled_timeout(now, me),
        }
    }

    fn labelled_timeout(&mut self, now: Instant, me: HcLabel) {
        let timeout = self.config.neighbour_timeout;
        let dead: Vec<HcLabel> = self
            .neighbours
            .iter()
            .filter(|(_, n)| n.last_heard + timeout <= now)
            .map(|(l, _)| *l)
            .collect();
        for l in dead {
            self.neighbours.remove(&l);
            self.events.push_back(Event::NeighbourRemoved(l));
            self.missing(now, me, l);
        }
        let Some(me) = self.label() else { return };
        if self.timers[Timer::Ping as usize].is_some_and(|t| t <= now) {
            // Claim the root if no live root is known and no neighbour is above us.
            let stale = self.root.as_ref().is_none_or(|r| {
                r.substrate != self.me && now >= r.heard + self.config.root_timeout
            });
            if stale && !self.is_root && self.neighbours.keys().all(|l| index(*l) < index(me)) {
                // The HRoot went silent (crashed, moved into a hole, or cut off by a
                // partition): take the root. If this lasts `fragment_after`, this fragment
                // founds a cube of its own (below).
                self.become_root(now, me);
            }
            if let Some(at) = self.claimed_at {
                if !self.is_root {
                    self.claimed_at = None;
                } else if now >= at + self.config.fragment_after {
                    self.claimed_at = None;
                    self.cube = cube_id(now, me, self.config.salt);
                }
            }
            for n in self.neighbours.values() {
                self.transmits
                    .push_back((n.substrate.clone(), Message::Ping { src: me }));
            }
            let top = self.top_index();
            for b in 0..32 {
                let want = me.flip(b);
                if index(want) <= top && !self.neighbours.contains_key(&want) {
                    self.holes
                        .entry(want)
                        .or_insert(now + self.config.neighbour_timeout);
                    self.route_lookup(me, want, me, self.me.clone(), self.config.lookup_hops);
                }
            }
            self.report_holes(now, me);
            self.timers[Timer::Ping as usize] = Some(now + self.config.ping);
        }
        if self.timers[Timer::Beacon as usize].is_some_and(|t| t <= now) {
            if self.is_root {
                self.seq = self.seq.wrapping_add(1);
                if let Some(r) = self.root.as_mut() {
                    r.seq = self.seq;
                    r.heard = now;
                }
                let msg = Message::Beacon {
                    root: me,
                    seq: self.seq,
                    root_substrate: self.me.clone(),
                    cube: self.cube,
                };
                let mut to: Vec<S> = self
                    .neighbours
                    .values()
                    .map(|n| n.substrate.clone())
                    .collect();
                to.extend(
                    self.config
                        .buddies
                        .iter()
                        .filter(|b| **b != self.me)
                        .cloned(),
                );
                to.sort();
                to.dedup();
                for t in to {
                    self.transmits.push_back((t, msg.clone()));
                }
                self.timers[Timer::Beacon as usize] = Some(now + self.config.beacon);
            } else {
                self.timers[Timer::Beacon as usize] = None;
            }
        }
    }

    /// The next message to send, with its destination.
    pub fn poll_transmit(&mut self) -> Option<(S, Message<S>)> {
        self.transmits.pop_front()
    }

    /// The next change.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Node::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let expiry = self
            .neighbours
            .values()
            .map(|n| n.last_heard + self.config.neighbour_timeout)
            .min();
        self.timers.iter().flatten().copied().chain(expiry).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::SimAddr;

    fn drain(n: &mut Node<SimAddr>) -> Vec<(SimAddr, Message<SimAddr>)> {
        std::iter::from_fn(|| n.poll_transmit()).collect()
    }

    fn cfg() -> Config<SimAddr> {
        Config {
            buddies: vec![SimAddr(0), SimAddr(1)],
            ..Config::default()
        }
    }

    #[test]
    fn first_buddy_bootstraps_and_the_root_assigns_the_next_gray_code() {
        let t0 = Instant::ZERO;
        let mut a = Node::new(cfg(), SimAddr(0), t0);
        a.handle_timeout(t0);
        assert_eq!(
            a.label(),
            None,
            "waits bootstrap_after before labelling itself"
        );
        let t = t0 + Duration::from_secs(2);
        a.handle_timeout(t);
        assert_eq!(a.label(), Some(HcLabel::gray(0)));
        assert!(a.is_root());
        drain(&mut a);
        // A join: G(1) is assigned, the joiner becomes HRoot as far as `a` knows.
        a.handle_message(t, SimAddr(5), Message::Join { joiner: SimAddr(5) });
        assert_eq!(
            drain(&mut a),
            vec![(
                SimAddr(5),
                Message::Assign {
                    label: HcLabel::gray(1),
                    cube: a.cube
                }
            )]
        );
        assert!(!a.is_root());
        assert_eq!(a.root_label(), Some(HcLabel::gray(1)));
        let mut b = Node::new(cfg(), SimAddr(5), t);
        b.handle_message(
            t,
            SimAddr(0),
            Message::Assign {
                label: HcLabel::gray(1),
                cube: 0,
            },
        );
        assert_eq!(b.label(), Some(HcLabel::gray(1)));
        assert!(b.is_root());
        assert_eq!(
            b.neighbour_labels().collect::<Vec<_>>(),
            vec![HcLabel::gray(0)]
        );
        // A second join reaching `a` is forwarded to the HRoot it knows.
        a.handle_message(t, SimAddr(1), Message::Join { joiner: SimAddr(6) });
        assert_eq!(
            drain(&mut a),
            vec![(SimAddr(5), Message::Join { joiner: SimAddr(6) })]
        );
    }

    #[test]
    fn duplicate_label_the_greater_substrate_gives_up() {
        let t0 = Instant::ZERO;
        let l = HcLabel::gray(3);
        let mut lo = Node::new(cfg(), SimAddr(2), t0);
        let mut hi = Node::new(cfg(), SimAddr(7), t0);
        lo.handle_message(t0, SimAddr(9), Message::Assign { label: l, cube: 0 });
        hi.handle_message(t0, SimAddr(9), Message::Assign { label: l, cube: 0 });
        drain(&mut lo);
        // lo hears hi's ping with its own label: tells hi to give it up.
        lo.handle_message(t0, SimAddr(7), Message::Ping { src: l });
        assert_eq!(
            drain(&mut lo),
            vec![(
                SimAddr(7),
                Message::Duplicate {
                    label: l,
                    holder: SimAddr(2)
                }
            )]
        );
        assert_eq!(lo.label(), Some(l));
        hi.handle_message(
            t0,
            SimAddr(2),
            Message::Duplicate {
                label: l,
                holder: SimAddr(2),
            },
        );
        assert_eq!(hi.label(), None);
        assert_eq!(lo.stats().duplicates, 1);
        // A third node hearing both holders ping tells the greater one.
        let mut n = Node::new(cfg(), SimAddr(4), t0);
        n.handle_message(
            t0,
            SimAddr(9),
            Message::Assign {
                label: l.flip(0),
                cube: 0,
            },
        );
        drain(&mut n);
        n.handle_message(t0, SimAddr(7), Message::Ping { src: l });
        n.handle_message(t0, SimAddr(2), Message::Ping { src: l });
        assert!(drain(&mut n).contains(&(
            SimAddr(7),
            Message::Duplicate {
                label: l,
                holder: SimAddr(2)
            }
        )));
    }
}
