//! Global memory: the per-node objects that seed 004's composite protocols share ("Inter-stack
//! Communication – Global Memory", "Multicast Global Memory Objects"). Components of different
//! channels (routing, group management, data) share state **only** through these objects'
//! typed read/write functions; each object keeps its own invariants (checked by
//! `check_invariants`, which tests call after every write) and tells its readers what changed.
//!
//! This module has the neighbour table and the routing table; the source tree and prune table
//! are in [`crate::tree`], the group table in [`crate::groups`]; [`GlobalMemory`] holds all
//! five of a node.
//!
//! # Change notification
//! A reader calls `subscribe` once and later `changes(reader)` to take the changes written
//! since its last call, in order. A reader that falls more than [`MAX_PENDING`] changes behind
//! gets a single `Resync` instead (it must re-read the whole object): memory stays bounded.
//!
//! # Bounds
//! At most [`MAX_NEIGHBORS`] neighbours and [`MAX_ROUTES`] routes: what a forged probe or report
//! could add beyond them is refused, so memory stays bounded whatever arrives.
//!
//! # Synchronization
//! The seed protected its shared-memory objects with semaphores. Here a node's stacks run on
//! one scheduler (DESIGN.md §5, single-threaded per scheduler), so an object is owned by its
//! node and borrowed by one component at a time: the borrow checker is the lock.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use viastack_kernel::{Duration, Instant};

use crate::addr::{Addr, Prefix};

/// Changes a reader may fall behind before it is told to resync.
pub const MAX_PENDING: usize = 4096;

/// Most neighbours a neighbour table holds (probes from more new routers are refused), so that
/// forged probes cannot grow it without bound (DESIGN.md §6.6).
pub const MAX_NEIGHBORS: usize = 1024;

/// Most routes a routing table holds (reports of more new networks are refused).
pub const MAX_ROUTES: usize = 65_536;

/// DVMRP's infinity: a metric of 32 means unreachable (draft-ietf-idmr-dvmrp-v3, route metrics).
pub const INFINITY: u8 = 32;

/// A reader's handle, from `subscribe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reader(usize);

/// One reader's pending changes.
#[derive(Debug)]
struct Queue<C> {
    pending: VecDeque<C>,
    overflowed: bool,
}

/// The change queues of one object.
#[derive(Debug)]
pub struct Notifier<C> {
    readers: Vec<Queue<C>>,
}

impl<C> Default for Notifier<C> {
    fn default() -> Self {
        Notifier {
            readers: Vec::new(),
        }
    }
}

/// What a reader gets from `changes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changes<C> {
    /// These changes, oldest first (possibly none).
    List(Vec<C>),
    /// Too many changes were missed: re-read the whole object.
    Resync,
}

impl<C: Clone> Notifier<C> {
    pub(crate) fn subscribe(&mut self) -> Reader {
        self.readers.push(Queue {
            pending: VecDeque::new(),
            overflowed: false,
        });
        Reader(self.readers.len() - 1)
    }

    pub(crate) fn notify(&mut self, c: &C) {
        for q in &mut self.readers {
            if q.overflowed {
                continue;
            }
            if q.pending.len() >= MAX_PENDING {
                q.pending.clear();
                q.overflowed = true;
            } else {
                q.pending.push_back(c.clone());
            }
        }
    }

    pub(crate) fn take(&mut self, r: Reader) -> Changes<C> {
        let Some(q) = self.readers.get_mut(r.0) else {
            return Changes::Resync;
        };
        if std::mem::take(&mut q.overflowed) {
            return Changes::Resync;
        }
        Changes::List(q.pending.drain(..).collect())
    }
}

/// One neighbouring router heard on one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbor {
    /// The interface it was heard on.
    pub iface: u16,
    /// Its address.
    pub addr: Addr,
    /// The generation id of its last probe: a new value means it restarted.
    pub gen_id: u32,
    /// Whether its last probe listed us: two-way adjacency (route reports are exchanged only
    /// with two-way neighbours).
    pub two_way: bool,
    /// When its last probe arrived.
    pub last_heard: Instant,
}

/// A change of the neighbour table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NeighborChange {
    /// A neighbour became two-way adjacent.
    Up {
        /// Interface.
        iface: u16,
        /// Address.
        addr: Addr,
    },
    /// A two-way neighbour is gone (timed out, restarted or no longer lists us).
    Down {
        /// Interface.
        iface: u16,
        /// Address.
        addr: Addr,
    },
}

/// What [`NeighborTable::heard`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// First probe from this neighbour.
    New,
    /// A different generation id: the neighbour restarted (its old state is gone).
    Restarted,
    /// Same generation, same adjacency.
    Refreshed,
    /// It now lists us: two-way from here on.
    BecameTwoWay,
    /// It no longer lists us.
    LostTwoWay,
}

/// Global object "Neighbor Table": the neighbours discovered on each interface (seed 004:
/// "stores 1-1 mapping between an interface and neighbor discovered on that interface"; with
/// LAN segments, several per interface).
///
/// Invariants: at most one entry per (interface, address); never this node's own address.
#[derive(Debug)]
pub struct NeighborTable {
    own: Addr,
    entries: BTreeMap<(u16, Addr), Neighbor>,
    notifier: Notifier<NeighborChange>,
}

impl NeighborTable {
    /// An empty table for the node with address `own`.
    pub fn new(own: Addr) -> Self {
        NeighborTable {
            own,
            entries: BTreeMap::new(),
            notifier: Notifier::default(),
        }
    }

    /// Write: a probe from `addr` on `iface` with `gen_id`, listing us if `lists_us`. Probes
    /// claiming our own address, and probes of a new neighbour when the table already holds
    /// [`MAX_NEIGHBORS`], are ignored (`None`).
    pub fn heard(
        &mut self,
        iface: u16,
        addr: Addr,
        gen_id: u32,
        lists_us: bool,
        now: Instant,
    ) -> Option<Heard> {
        if addr == self.own {
            return None;
        }
        let full = self.entries.len() >= MAX_NEIGHBORS;
        let (heard, was_two_way) = match self.entries.get_mut(&(iface, addr)) {
            None if full => return None,
            None => {
                self.entries.insert(
                    (iface, addr),
                    Neighbor {
                        iface,
                        addr,
                        gen_id,
                        two_way: lists_us,
                        last_heard: now,
                    },
                );
                (Heard::New, false)
            }
            Some(n) => {
                let was = n.two_way;
                let restarted = n.gen_id != gen_id;
                n.gen_id = gen_id;
                n.two_way = lists_us;
                n.last_heard = now;
                let h = if restarted {
                    Heard::Restarted
                } else if lists_us && !was {
                    Heard::BecameTwoWay
                } else if !lists_us && was {
                    Heard::LostTwoWay
                } else {
                    Heard::Refreshed
                };
                (h, was)
            }
        };
        if was_two_way && (heard == Heard::Restarted || !lists_us) {
            self.notifier.notify(&NeighborChange::Down { iface, addr });
        }
        if lists_us && (!was_two_way || heard == Heard::Restarted) {
            self.notifier.notify(&NeighborChange::Up { iface, addr });
        }
        Some(heard)
    }

    /// Write: remove neighbours not heard for `timeout`; returns them.
    pub fn expire(&mut self, now: Instant, timeout: Duration) -> Vec<Neighbor> {
        let dead: Vec<(u16, Addr)> = self
            .entries
            .values()
            .filter(|n| now.saturating_duration_since(n.last_heard) >= timeout)
            .map(|n| (n.iface, n.addr))
            .collect();
        let mut gone = Vec::with_capacity(dead.len());
        for key in dead {
            if let Some(n) = self.entries.remove(&key) {
                if n.two_way {
                    self.notifier.notify(&NeighborChange::Down {
                        iface: n.iface,
                        addr: n.addr,
                    });
                }
                gone.push(n);
            }
        }
        gone
    }

    /// Read: the neighbour `addr` on `iface`.
    pub fn get(&self, iface: u16, addr: Addr) -> Option<&Neighbor> {
        self.entries.get(&(iface, addr))
    }

    /// Read: whether `addr` is a two-way neighbour on `iface`.
    pub fn is_adjacent(&self, iface: u16, addr: Addr) -> bool {
        self.get(iface, addr).is_some_and(|n| n.two_way)
    }

    /// Read: the neighbours heard on `iface` (one-way ones included), by address.
    pub fn on_interface(&self, iface: u16) -> impl Iterator<Item = &Neighbor> {
        self.entries
            .range((iface, Addr(0))..=(iface, Addr(u32::MAX)))
            .map(|(_, n)| n)
    }

    /// Read (the seed's `getNeighborForInterface`): the lowest-addressed two-way neighbour on
    /// `iface`.
    pub fn neighbor_for_interface(&self, iface: u16) -> Option<Addr> {
        self.on_interface(iface).find(|n| n.two_way).map(|n| n.addr)
    }

    /// Read: every entry, by interface then address.
    pub fn iter(&self) -> impl Iterator<Item = &Neighbor> {
        self.entries.values()
    }

    /// Read: the earliest `last_heard`, to schedule the next expiry check.
    pub fn oldest(&self) -> Option<Instant> {
        self.entries.values().map(|n| n.last_heard).min()
    }

    /// Subscribe to changes.
    pub fn subscribe(&mut self) -> Reader {
        self.notifier.subscribe()
    }

    /// The changes since the reader's last call.
    pub fn changes(&mut self, r: Reader) -> Changes<NeighborChange> {
        self.notifier.take(r)
    }

    /// Check the invariants; `Err` names the first broken one.
    ///
    /// # Errors
    /// A description of the broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (&(iface, addr), n) in &self.entries {
            if (n.iface, n.addr) != (iface, addr) {
                return Err(format!(
                    "entry keyed {iface}/{addr} holds {}/{}",
                    n.iface, n.addr
                ));
            }
            if addr == self.own {
                return Err(format!("own address {addr} in the neighbour table"));
            }
        }
        Ok(())
    }
}

/// Where a route comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The network of one of this node's interfaces.
    Connected {
        /// The interface.
        iface: u16,
    },
    /// Learned from a neighbour's report.
    Learned {
        /// The interface the upstream neighbour is on.
        iface: u16,
        /// The upstream neighbour (next hop towards the source network).
        via: Addr,
    },
}

/// One route: how far a source network is and through whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The source network.
    pub prefix: Prefix,
    /// Hops (interface metrics) to it, `1..=INFINITY`; `INFINITY` while held down.
    pub metric: u8,
    /// Connected or learned (with the upstream neighbour).
    pub origin: Origin,
    /// When the upstream last reported it reachable (learned routes).
    pub refreshed: Instant,
    /// Since when it is unreachable (held down before deletion), if it is.
    pub unreachable_since: Option<Instant>,
    /// Downstream neighbours that depend on us for this source (they poison-reversed it to
    /// us): the seed's source tree, kept here until the source tree object exists.
    pub dependents: BTreeSet<(u16, Addr)>,
}

impl Route {
    /// Whether the route is usable (metric below infinity).
    pub fn reachable(&self) -> bool {
        self.metric < INFINITY
    }

    /// The upstream neighbour, for learned routes.
    pub fn upstream(&self) -> Option<(u16, Addr)> {
        match self.origin {
            Origin::Learned { iface, via } => Some((iface, via)),
            Origin::Connected { .. } => None,
        }
    }

    /// The interface towards the source network (its own interface when connected).
    pub fn iface(&self) -> u16 {
        match self.origin {
            Origin::Learned { iface, .. } | Origin::Connected { iface } => iface,
        }
    }
}

/// A change of the routing table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteChange {
    /// A route was added, or its metric or upstream changed.
    Changed {
        /// The source network.
        prefix: Prefix,
        /// The new metric.
        metric: u8,
        /// The new origin.
        origin: Origin,
    },
    /// A route was deleted (after its hold-down).
    Removed {
        /// The source network.
        prefix: Prefix,
    },
}

/// Global object "Routing Table": metric and upstream per source network (seed 004:
/// "Repository for unicast routes — metric and next-hop information for each route prefix").
///
/// Invariants: metrics in `1..=INFINITY`; connected routes are reachable; a route is held down
/// (`unreachable_since` set) exactly when its metric is `INFINITY`.
#[derive(Debug, Default)]
pub struct RoutingTable {
    routes: BTreeMap<Prefix, Route>,
    notifier: Notifier<RouteChange>,
}

impl RoutingTable {
    /// An empty table.
    pub fn new() -> Self {
        RoutingTable::default()
    }

    /// Write: install or replace the route for `prefix`. `metric` is clamped to
    /// `1..=INFINITY`; connected routes get metric at least 1 and are always reachable.
    /// Readers are notified when the metric or origin changed. Returns whether it did. A new
    /// prefix when the table holds [`MAX_ROUTES`] is refused (`false`).
    pub fn set(&mut self, prefix: Prefix, metric: u8, origin: Origin, now: Instant) -> bool {
        let metric = match origin {
            Origin::Connected { .. } => metric.clamp(1, INFINITY - 1),
            Origin::Learned { .. } => metric.clamp(1, INFINITY),
        };
        let unreachable = metric >= INFINITY;
        let full = self.routes.len() >= MAX_ROUTES;
        let changed = match self.routes.get_mut(&prefix) {
            Some(r) => {
                let changed = r.metric != metric || r.origin != origin;
                if r.upstream() != upstream_of(origin) {
                    r.dependents.clear();
                }
                r.metric = metric;
                r.origin = origin;
                if !unreachable {
                    r.refreshed = now;
                    r.unreachable_since = None;
                } else if r.unreachable_since.is_none() {
                    r.unreachable_since = Some(now);
                }
                changed
            }
            None if full => return false,
            None => {
                self.routes.insert(
                    prefix,
                    Route {
                        prefix,
                        metric,
                        origin,
                        refreshed: now,
                        unreachable_since: unreachable.then_some(now),
                        dependents: BTreeSet::new(),
                    },
                );
                true
            }
        };
        if changed {
            self.notifier.notify(&RouteChange::Changed {
                prefix,
                metric,
                origin,
            });
        }
        changed
    }

    /// Write: the route keeps its metric and upstream, reported again at `now`.
    pub fn refresh(&mut self, prefix: Prefix, now: Instant) {
        if let Some(r) = self.routes.get_mut(&prefix) {
            if r.reachable() {
                r.refreshed = now;
            }
        }
    }

    /// Write: make the route unreachable (expired, or its upstream is gone); returns whether
    /// it was reachable.
    pub fn invalidate(&mut self, prefix: Prefix, now: Instant) -> bool {
        let Some(r) = self.routes.get(&prefix) else {
            return false;
        };
        if !r.reachable() || matches!(r.origin, Origin::Connected { .. }) {
            return false;
        }
        let origin = r.origin;
        self.set(prefix, INFINITY, origin, now)
    }

    /// Write: record whether the neighbour `(iface, addr)` depends on us for `prefix`.
    pub fn set_dependent(&mut self, prefix: Prefix, iface: u16, addr: Addr, depends: bool) {
        if let Some(r) = self.routes.get_mut(&prefix) {
            if depends {
                r.dependents.insert((iface, addr));
            } else {
                r.dependents.remove(&(iface, addr));
            }
        }
    }

    /// Write: forget a neighbour as a dependent everywhere.
    pub fn drop_dependent(&mut self, iface: u16, addr: Addr) {
        for r in self.routes.values_mut() {
            r.dependents.remove(&(iface, addr));
        }
    }

    /// Write: delete routes unreachable for at least `hold_down`; returns their prefixes.
    pub fn collect_garbage(&mut self, now: Instant, hold_down: Duration) -> Vec<Prefix> {
        let dead: Vec<Prefix> = self
            .routes
            .values()
            .filter(|r| {
                r.unreachable_since
                    .is_some_and(|t| now.saturating_duration_since(t) >= hold_down)
            })
            .map(|r| r.prefix)
            .collect();
        for p in &dead {
            self.routes.remove(p);
            self.notifier.notify(&RouteChange::Removed { prefix: *p });
        }
        dead
    }

    /// Read: the route for `prefix`.
    pub fn get(&self, prefix: Prefix) -> Option<&Route> {
        self.routes.get(&prefix)
    }

    /// Read: the longest-prefix route containing `a` that is reachable (the reverse-path
    /// check of multicast forwarding will use this).
    pub fn lookup(&self, a: Addr) -> Option<&Route> {
        self.routes
            .values()
            .filter(|r| r.reachable() && r.prefix.contains(a))
            .max_by_key(|r| r.prefix.len())
    }

    /// Read: every route, by prefix.
    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.routes.values()
    }

    /// Read: number of routes (unreachable ones included).
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// Read: whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Subscribe to changes.
    pub fn subscribe(&mut self) -> Reader {
        self.notifier.subscribe()
    }

    /// The changes since the reader's last call.
    pub fn changes(&mut self, r: Reader) -> Changes<RouteChange> {
        self.notifier.take(r)
    }

    /// Check the invariants; `Err` names the first broken one.
    ///
    /// # Errors
    /// A description of the broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (p, r) in &self.routes {
            if *p != r.prefix {
                return Err(format!("route keyed {p} is for {}", r.prefix));
            }
            if !(1..=INFINITY).contains(&r.metric) {
                return Err(format!("{p}: metric {} out of 1..=32", r.metric));
            }
            if matches!(r.origin, Origin::Connected { .. }) && !r.reachable() {
                return Err(format!("{p}: connected but unreachable"));
            }
            if r.reachable() == r.unreachable_since.is_some() {
                return Err(format!(
                    "{p}: metric {} but unreachable_since {:?}",
                    r.metric, r.unreachable_since
                ));
            }
        }
        Ok(())
    }
}

fn upstream_of(o: Origin) -> Option<(u16, Addr)> {
    match o {
        Origin::Learned { iface, via } => Some((iface, via)),
        Origin::Connected { .. } => None,
    }
}

/// All global memory objects of one node (seed 004's five: neighbour table, routing table,
/// source tree, prune table, group table).
#[derive(Debug)]
pub struct GlobalMemory {
    own: Addr,
    /// The neighbour table.
    pub neighbors: NeighborTable,
    /// The routing table.
    pub routes: RoutingTable,
    /// The source tree (spanning tree per source network).
    pub tree: crate::tree::SourceTree,
    /// The prune table (prune state per (source network, group)).
    pub prunes: crate::tree::PruneTable,
    /// The group table (members per leaf interface).
    pub groups: crate::groups::GroupTable,
}

impl GlobalMemory {
    /// Empty objects for the node with address `own`.
    pub fn new(own: Addr) -> Self {
        GlobalMemory {
            own,
            neighbors: NeighborTable::new(own),
            routes: RoutingTable::new(),
            tree: crate::tree::SourceTree::default(),
            prunes: crate::tree::PruneTable::default(),
            groups: crate::groups::GroupTable::default(),
        }
    }

    /// The node's address.
    pub fn own(&self) -> Addr {
        self.own
    }

    /// Write: recompute the source tree from the routing table (upstreams, dependents) and the
    /// neighbours' offers, for a router with `ifaces` interfaces. Readers of the tree are told
    /// which sources changed.
    pub fn rebuild_tree(&mut self, ifaces: u16) {
        self.tree.rebuild(self.own, ifaces, &self.routes);
    }

    /// Check every object's invariants.
    ///
    /// # Errors
    /// The first broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.neighbors.check_invariants()?;
        self.routes.check_invariants()?;
        self.tree.check_invariants()?;
        self.prunes.check_invariants()?;
        self.groups.check_invariants()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn neighbor_table_tracks_adjacency_and_notifies() {
        let mut n = NeighborTable::new(Addr(1));
        let r = n.subscribe();
        assert_eq!(
            n.heard(0, Addr(1), 7, true, t(0)),
            None,
            "own address ignored"
        );
        assert_eq!(n.heard(0, Addr(2), 7, false, t(0)), Some(Heard::New));
        assert!(!n.is_adjacent(0, Addr(2)));
        assert_eq!(n.changes(r), Changes::List(vec![]));
        assert_eq!(
            n.heard(0, Addr(2), 7, true, t(1)),
            Some(Heard::BecameTwoWay)
        );
        assert!(n.is_adjacent(0, Addr(2)));
        assert_eq!(n.neighbor_for_interface(0), Some(Addr(2)));
        assert_eq!(n.heard(0, Addr(2), 7, true, t(2)), Some(Heard::Refreshed));
        assert_eq!(n.heard(0, Addr(2), 8, true, t(3)), Some(Heard::Restarted));
        let up = NeighborChange::Up {
            iface: 0,
            addr: Addr(2),
        };
        let down = NeighborChange::Down {
            iface: 0,
            addr: Addr(2),
        };
        assert_eq!(
            n.changes(r),
            Changes::List(vec![up.clone(), down.clone(), up])
        );
        assert_eq!(n.heard(1, Addr(3), 1, true, t(3)), Some(Heard::New));
        assert_eq!(n.on_interface(1).count(), 1);
        assert_eq!(n.oldest(), Some(t(3)));
        let gone = n.expire(t(40), Duration::from_millis(35));
        assert_eq!(gone.len(), 2);
        assert!(n.iter().next().is_none());
        assert!(n.check_invariants().is_ok());
        let Changes::List(c) = n.changes(r) else {
            panic!("no resync expected")
        };
        assert_eq!(
            c,
            vec![
                NeighborChange::Up {
                    iface: 1,
                    addr: Addr(3)
                },
                down,
                NeighborChange::Down {
                    iface: 1,
                    addr: Addr(3)
                },
            ]
        );
    }

    #[test]
    fn tables_are_bounded() {
        let mut n = NeighborTable::new(Addr(0));
        for i in 0..MAX_NEIGHBORS as u32 {
            assert_eq!(n.heard(0, Addr(i + 1), 1, false, t(0)), Some(Heard::New));
        }
        assert_eq!(n.heard(0, Addr(u32::MAX), 1, false, t(0)), None);
        assert_eq!(
            n.heard(0, Addr(1), 1, true, t(1)),
            Some(Heard::BecameTwoWay)
        );
        let mut rt = RoutingTable::new();
        let via = Origin::Learned {
            iface: 0,
            via: Addr(1),
        };
        for i in 0..MAX_ROUTES as u32 {
            assert!(rt.set(
                Prefix::new(i << 8, 24).unwrap_or(Prefix::of_link(0)),
                2,
                via,
                t(0)
            ));
        }
        let extra = Prefix::new(u32::MAX << 8, 24).unwrap_or(Prefix::of_link(0));
        assert!(!rt.set(extra, 2, via, t(0)));
        assert_eq!(rt.len(), MAX_ROUTES);
    }

    #[test]
    fn slow_readers_are_told_to_resync() {
        let mut n = NeighborTable::new(Addr(1));
        let slow = n.subscribe();
        // Each probe flips the neighbour's adjacency: one change each.
        for i in 0..=MAX_PENDING {
            n.heard(0, Addr(10), 1, i % 2 == 0, t(0));
        }
        assert!(matches!(n.changes(slow), Changes::Resync));
        assert_eq!(n.changes(slow), Changes::List(vec![]));
        assert_eq!(n.changes(Reader(99)), Changes::Resync);
    }

    #[test]
    fn routing_table_keeps_its_invariants() {
        let mut rt = RoutingTable::new();
        let r = rt.subscribe();
        let p = Prefix::of_link(1);
        let q = Prefix::of_link(2);
        let via = Origin::Learned {
            iface: 1,
            via: Addr(9),
        };
        assert!(rt.set(p, 0, Origin::Connected { iface: 0 }, t(0)));
        assert_eq!(rt.get(p).map(|r| r.metric), Some(1), "clamped to 1");
        assert!(rt.set(q, 3, via, t(0)));
        assert!(
            !rt.set(q, 3, via, t(5)),
            "same metric and origin: no change"
        );
        assert_eq!(rt.get(q).map(|r| r.refreshed), Some(t(5)));
        rt.set_dependent(q, 0, Addr(4), true);
        assert_eq!(rt.get(q).map(|r| r.dependents.len()), Some(1));
        assert!(rt.invalidate(q, t(10)));
        assert!(!rt.invalidate(q, t(11)), "already unreachable");
        assert!(!rt.invalidate(p, t(11)), "connected routes do not expire");
        assert_eq!(rt.get(q).and_then(|r| r.unreachable_since), Some(t(10)));
        assert!(rt.check_invariants().is_ok());
        assert_eq!(
            rt.lookup(Addr(0x0a00_0205)),
            None,
            "unreachable routes are not used"
        );
        assert_eq!(rt.lookup(Addr(0x0a00_0105)).map(|r| r.prefix), Some(p));
        assert_eq!(rt.collect_garbage(t(20), Duration::from_millis(20)), vec![]);
        assert_eq!(
            rt.collect_garbage(t(30), Duration::from_millis(20)),
            vec![q]
        );
        let Changes::List(c) = rt.changes(r) else {
            panic!("no resync expected")
        };
        assert_eq!(
            c,
            vec![
                RouteChange::Changed {
                    prefix: p,
                    metric: 1,
                    origin: Origin::Connected { iface: 0 }
                },
                RouteChange::Changed {
                    prefix: q,
                    metric: 3,
                    origin: via
                },
                RouteChange::Changed {
                    prefix: q,
                    metric: INFINITY,
                    origin: via
                },
                RouteChange::Removed { prefix: q },
            ]
        );
        // A new upstream forgets the old dependents.
        rt.set(q, 2, via, t(31));
        rt.set_dependent(q, 0, Addr(4), true);
        rt.set(
            q,
            2,
            Origin::Learned {
                iface: 2,
                via: Addr(8),
            },
            t(32),
        );
        assert!(rt.get(q).is_some_and(|r| r.dependents.is_empty()));
    }
}
