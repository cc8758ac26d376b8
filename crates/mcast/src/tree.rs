//! Global objects "Source Tree" and "Prune Table" of seed 004 ("Multicast Global Memory
//! Objects": the source tree "maintains spanning tree for each multicast source in the network
//! — list of dependent downstream neighbours for each source"; the prune table "contains core
//! and leaf interface prune-state information for each (source, group) pair — interfaces can be
//! in 3 states: un-pruned / pruned / grafted"). draft-ietf-idmr-dvmrp-v3, its spanning-tree
//! ("dependent downstream routers", "designated forwarder") and pruning/grafting sections.
//!
//! # Source tree
//! Per reachable source network: the **upstream** interface (and neighbour, unless the network
//! is attached), and the **child** interfaces, those where this router is the **designated
//! forwarder**: no neighbour on that interface offers the source at a lower metric (equal
//! metric: lower address wins), which is also how every downstream router picks its upstream,
//! so exactly one router forwards onto each link. A child interface lists its **dependent
//! downstream neighbours**, those that reported the source back with poison reverse (the
//! routing table's dependents); a child without dependents is a **leaf**. The object is
//! recomputed by [`SourceTree::rebuild`] from the routing table and the neighbours' offers
//! (written by route exchange through [`SourceTree::offer`]); readers are told which sources
//! changed ([`TreeChange`]).
//!
//! # Prune table
//! Per (source network, group): the upstream state (forwarding, pruned until the lifetime
//! ends, grafting until acknowledged) and the prunes received from dependent neighbours, each
//! with its own expiry. Written by the pruning and grafting component ([`crate::prune`]); read
//! by multicast forwarding.
//!
//! # Bounds
//! At most [`MAX_OFFERS`] neighbour offers and [`MAX_PRUNE_ENTRIES`] (source, group) entries;
//! beyond, new ones are refused.

use std::collections::{BTreeMap, BTreeSet};

use viastack_kernel::{Duration, Instant};

use crate::addr::{Addr, Prefix};
use crate::memory::{Changes, Notifier, Reader, RoutingTable, INFINITY};

/// Most (source, interface, neighbour) offers remembered.
pub const MAX_OFFERS: usize = 262_144;

/// Most (source, group) entries in a prune table.
pub const MAX_PRUNE_ENTRIES: usize = 65_536;

/// One source network's spanning tree at this router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeEntry {
    /// The source network.
    pub source: Prefix,
    /// The interface towards the source.
    pub upstream_iface: u16,
    /// The upstream neighbour (`None`: the source network is attached here).
    pub upstream: Option<Addr>,
    /// Child interfaces (this router is their designated forwarder), each with its dependent
    /// downstream neighbours (empty: a leaf).
    pub children: BTreeMap<u16, BTreeSet<Addr>>,
}

/// A change of the source tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeChange {
    /// The source's entry is new or changed (upstream, children or dependents).
    Changed {
        /// The source network.
        source: Prefix,
        /// Whether the upstream changed (prune state towards the old one is void).
        upstream_changed: bool,
    },
    /// The source is no longer reachable.
    Removed {
        /// The source network.
        source: Prefix,
    },
}

/// Global object "Source Tree".
///
/// Invariants: a child interface is never the upstream interface; every entry is keyed by its
/// source.
#[derive(Debug, Default)]
pub struct SourceTree {
    offers: BTreeMap<(Prefix, u16, Addr), u8>,
    entries: BTreeMap<Prefix, TreeEntry>,
    notifier: Notifier<TreeChange>,
}

impl SourceTree {
    /// Write (route exchange): neighbour `from` on `iface` reported `source` at `metric`
    /// (as on the wire). A reachable, not poisoned metric is an offer that competes for
    /// designated forwarder on that interface; anything else withdraws it.
    pub fn offer(&mut self, source: Prefix, iface: u16, from: Addr, metric: u8) {
        let key = (source, iface, from);
        if metric < INFINITY {
            if self.offers.len() < MAX_OFFERS || self.offers.contains_key(&key) {
                self.offers.insert(key, metric);
            }
        } else {
            self.offers.remove(&key);
        }
    }

    /// Write: forget every offer of a lost neighbour.
    pub fn forget_neighbor(&mut self, iface: u16, addr: Addr) {
        self.offers.retain(|&(_, i, a), _| (i, a) != (iface, addr));
    }

    /// Write: forget the offers for sources no longer in the routing table.
    fn prune_offers(&mut self, routes: &RoutingTable) {
        self.offers.retain(|&(p, _, _), _| routes.get(p).is_some());
    }

    /// Write: recompute every entry for router `own` with interfaces `0..ifaces`.
    pub fn rebuild(&mut self, own: Addr, ifaces: u16, routes: &RoutingTable) {
        self.prune_offers(routes);
        let mut next = BTreeMap::new();
        for r in routes.iter().filter(|r| r.reachable()) {
            let up = r.iface();
            let mut children = BTreeMap::new();
            for i in (0..ifaces).filter(|&i| i != up) {
                let beaten = self
                    .offers
                    .range((r.prefix, i, Addr(0))..=(r.prefix, i, Addr(u32::MAX)))
                    .any(|(&(_, _, a), &m)| (m, a) < (r.metric, own));
                if !beaten {
                    let deps = r
                        .dependents
                        .iter()
                        .filter(|&&(di, _)| di == i)
                        .map(|&(_, a)| a)
                        .collect();
                    children.insert(i, deps);
                }
            }
            next.insert(
                r.prefix,
                TreeEntry {
                    source: r.prefix,
                    upstream_iface: up,
                    upstream: r.upstream().map(|(_, a)| a),
                    children,
                },
            );
        }
        for (p, e) in &next {
            match self.entries.get(p) {
                Some(old) if old == e => {}
                old => {
                    let upstream_changed = old.is_none_or(|o| {
                        (o.upstream_iface, o.upstream) != (e.upstream_iface, e.upstream)
                    });
                    self.notifier.notify(&TreeChange::Changed {
                        source: *p,
                        upstream_changed,
                    });
                }
            }
        }
        for p in self.entries.keys().filter(|p| !next.contains_key(p)) {
            self.notifier.notify(&TreeChange::Removed { source: *p });
        }
        self.entries = next;
    }

    /// Read: the tree of `source`.
    pub fn get(&self, source: Prefix) -> Option<&TreeEntry> {
        self.entries.get(&source)
    }

    /// Read: the tree of the longest source network containing `a`.
    pub fn lookup(&self, a: Addr) -> Option<&TreeEntry> {
        self.entries
            .values()
            .filter(|e| e.source.contains(a))
            .max_by_key(|e| e.source.len())
    }

    /// Read: every entry, by source.
    pub fn iter(&self) -> impl Iterator<Item = &TreeEntry> {
        self.entries.values()
    }

    /// Subscribe to changes.
    pub fn subscribe(&mut self) -> Reader {
        self.notifier.subscribe()
    }

    /// The changes since the reader's last call.
    pub fn changes(&mut self, r: Reader) -> Changes<TreeChange> {
        self.notifier.take(r)
    }

    /// Check the invariants.
    ///
    /// # Errors
    /// The first broken one.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (p, e) in &self.entries {
            if *p != e.source {
                return Err(format!("tree keyed {p} is for {}", e.source));
            }
            if e.children.contains_key(&e.upstream_iface) {
                return Err(format!(
                    "{p}: upstream interface {} is a child",
                    e.upstream_iface
                ));
            }
        }
        Ok(())
    }
}

/// The upstream state of one (source, group) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// Un-pruned: data flows from upstream.
    Forwarding,
    /// A prune was sent upstream; it holds until `until`. Data still arriving at or after
    /// `retransmit_at` makes the prune go again, with the back-off doubled.
    Pruned {
        /// End of the prune lifetime sent.
        until: Instant,
        /// Earliest retransmission.
        retransmit_at: Instant,
        /// The current back-off.
        backoff: Duration,
    },
    /// A graft was sent upstream and is not acknowledged yet; it goes again at
    /// `retransmit_at`, with the back-off doubled.
    Grafting {
        /// Next retransmission.
        retransmit_at: Instant,
        /// The current back-off.
        backoff: Duration,
        /// The sequence number of the last graft sent (its ack echoes it).
        seq: u16,
    },
}

/// Prune state of one (source network, group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneEntry {
    /// Towards the upstream.
    pub upstream: Upstream,
    /// Prunes received from dependent neighbours `(interface, neighbour)`, each until its
    /// expiry.
    pub downstream: BTreeMap<(u16, Addr), Instant>,
}

impl Default for PruneEntry {
    fn default() -> Self {
        PruneEntry {
            upstream: Upstream::Forwarding,
            downstream: BTreeMap::new(),
        }
    }
}

/// Global object "Prune Table".
///
/// Invariants: no entry is empty (forwarding with no downstream prune: removed).
#[derive(Debug, Default)]
pub struct PruneTable {
    entries: BTreeMap<(Prefix, Addr), PruneEntry>,
    /// Per (source, group, interface, neighbour): the neighbour's generation id and the
    /// sequence number of the last prune or graft taken from it.
    seen: BTreeMap<(Prefix, Addr, u16, Addr), (u32, u16)>,
}

/// Whether serial number `a` is newer than `b` (RFC 1982 arithmetic on 16 bits).
pub fn seq_newer(a: u16, b: u16) -> bool {
    a != b && (a.wrapping_sub(b) as i16) > 0
}

impl PruneTable {
    /// Read: the state of (source, group).
    pub fn get(&self, source: Prefix, group: Addr) -> Option<&PruneEntry> {
        self.entries.get(&(source, group))
    }

    /// Read: the upstream state of (source, group).
    pub fn upstream(&self, source: Prefix, group: Addr) -> Upstream {
        self.get(source, group)
            .map_or(Upstream::Forwarding, |e| e.upstream)
    }

    /// Read: whether `(iface, neighbour)` has pruned (source, group) and the prune is still
    /// in force at `now`.
    pub fn is_pruned_by(
        &self,
        source: Prefix,
        group: Addr,
        iface: u16,
        neighbor: Addr,
        now: Instant,
    ) -> bool {
        self.get(source, group)
            .and_then(|e| e.downstream.get(&(iface, neighbor)))
            .is_some_and(|&t| t > now)
    }

    /// Write: set the upstream state. Refused (`false`) for a new entry when the table is
    /// full.
    pub fn set_upstream(&mut self, source: Prefix, group: Addr, state: Upstream) -> bool {
        if let Some(e) = self.entry(source, group, state != Upstream::Forwarding) {
            e.upstream = state;
        }
        self.tidy(source, group);
        self.entries.contains_key(&(source, group)) || state == Upstream::Forwarding
    }

    /// Write: a dependent neighbour pruned (source, group) until `until`.
    pub fn pruned_by(
        &mut self,
        source: Prefix,
        group: Addr,
        iface: u16,
        neighbor: Addr,
        until: Instant,
    ) -> bool {
        match self.entry(source, group, true) {
            Some(e) => {
                e.downstream.insert((iface, neighbor), until);
                true
            }
            None => false,
        }
    }

    /// Write: a neighbour grafted (source, group) (its prune is void).
    pub fn grafted_by(&mut self, source: Prefix, group: Addr, iface: u16, neighbor: Addr) {
        if let Some(e) = self.entries.get_mut(&(source, group)) {
            e.downstream.remove(&(iface, neighbor));
        }
        self.tidy(source, group);
    }

    /// Write: whether a prune or graft with `seq` from `neighbor` (generation `gen_id`) on
    /// `iface` is newer than the last one taken for (source, group); if so it is recorded. A
    /// new generation (the neighbour restarted) is always fresh. When the record is full
    /// (more than four entries per prune-table entry bound), messages are taken unrecorded.
    pub fn fresh(
        &mut self,
        source: Prefix,
        group: Addr,
        iface: u16,
        neighbor: Addr,
        gen_id: u32,
        seq: u16,
    ) -> bool {
        let key = (source, group, iface, neighbor);
        match self.seen.get(&key) {
            Some(&(g, last)) if g == gen_id && !seq_newer(seq, last) => false,
            Some(_) => {
                self.seen.insert(key, (gen_id, seq));
                true
            }
            None => {
                if self.seen.len() < 4 * MAX_PRUNE_ENTRIES {
                    self.seen.insert(key, (gen_id, seq));
                }
                true
            }
        }
    }

    /// Write: forget the downstream prunes of `source` from neighbours for which `keep` is
    /// false (they no longer depend on us: their prune is void, and a later return as a
    /// dependent starts unpruned).
    pub fn keep_downstream(&mut self, source: Prefix, keep: impl Fn(u16, Addr) -> bool) {
        for (_, e) in self
            .entries
            .range_mut((source, Addr(0))..=(source, Addr(u32::MAX)))
        {
            e.downstream.retain(|&(i, a), _| keep(i, a));
        }
        self.seen
            .retain(|&(s, _, i, a), _| s != source || keep(i, a));
        self.entries
            .retain(|_, e| e.upstream != Upstream::Forwarding || !e.downstream.is_empty());
    }

    /// Write: forget every prune state of `source` (its upstream changed or it is gone).
    pub fn forget_source(&mut self, source: Prefix) {
        self.entries.retain(|&(s, _), _| s != source);
        self.seen.retain(|&(s, ..), _| s != source);
    }

    /// Write: remove downstream prunes expired at `now`, and upstream prunes whose lifetime
    /// ended (data flows again). Returns the (source, group) pairs that changed.
    pub fn expire(&mut self, now: Instant) -> Vec<(Prefix, Addr)> {
        let mut changed = Vec::new();
        for (&k, e) in &mut self.entries {
            let before = e.downstream.len();
            e.downstream.retain(|_, &mut t| t > now);
            let mut c = e.downstream.len() != before;
            if matches!(e.upstream, Upstream::Pruned { until, .. } if until <= now) {
                e.upstream = Upstream::Forwarding;
                c = true;
            }
            if c {
                changed.push(k);
            }
        }
        self.entries
            .retain(|_, e| e.upstream != Upstream::Forwarding || !e.downstream.is_empty());
        changed
    }

    /// Read: the earliest instant something in the table changes by itself (a prune expiry,
    /// a graft retransmission).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries
            .values()
            .flat_map(|e| {
                let up = match e.upstream {
                    Upstream::Forwarding => None,
                    Upstream::Pruned { until, .. } => Some(until),
                    Upstream::Grafting { retransmit_at, .. } => Some(retransmit_at),
                };
                e.downstream.values().copied().chain(up)
            })
            .min()
    }

    /// Read: every entry, by (source, group).
    pub fn iter(&self) -> impl Iterator<Item = (&(Prefix, Addr), &PruneEntry)> {
        self.entries.iter()
    }

    /// Read: number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Read: whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn entry(&mut self, source: Prefix, group: Addr, create: bool) -> Option<&mut PruneEntry> {
        let full = self.entries.len() >= MAX_PRUNE_ENTRIES;
        if create && !full {
            Some(self.entries.entry((source, group)).or_default())
        } else {
            self.entries.get_mut(&(source, group))
        }
    }

    fn tidy(&mut self, source: Prefix, group: Addr) {
        if self
            .entries
            .get(&(source, group))
            .is_some_and(|e| e.upstream == Upstream::Forwarding && e.downstream.is_empty())
        {
            self.entries.remove(&(source, group));
        }
    }

    /// Check the invariants.
    ///
    /// # Errors
    /// The first broken one.
    pub fn check_invariants(&self) -> Result<(), String> {
        for ((s, g), e) in &self.entries {
            if e.upstream == Upstream::Forwarding && e.downstream.is_empty() {
                return Err(format!("({s}, {g}): empty prune entry kept"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Origin;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn designated_forwarder_and_dependents() {
        let own = Addr(5);
        let mut rt = RoutingTable::new();
        let src = Prefix::of_link(9);
        // Upstream on interface 0; interfaces 1 and 2 are candidates.
        rt.set(
            src,
            3,
            Origin::Learned {
                iface: 0,
                via: Addr(1),
            },
            t(0),
        );
        rt.set_dependent(src, 1, Addr(7), true);
        let mut tree = SourceTree::default();
        let r = tree.subscribe();
        // Neighbour 4 on interface 2 offers 3 (equal metric, lower address): it forwards there.
        tree.offer(src, 2, Addr(4), 3);
        // Neighbour 6 on interface 1 offers 3 too, but 6 > 5: we forward there.
        tree.offer(src, 1, Addr(6), 3);
        tree.rebuild(own, 3, &rt);
        let e = tree.get(src).cloned().unwrap_or_else(|| panic!("no entry"));
        assert_eq!(e.upstream, Some(Addr(1)));
        assert_eq!(e.children, BTreeMap::from([(1, BTreeSet::from([Addr(7)]))]));
        assert!(tree.check_invariants().is_ok());
        // Neighbour 4 withdraws (poison reverse: it now depends on someone here): we forward
        // on interface 2 as well, a leaf.
        tree.offer(src, 2, Addr(4), 35);
        tree.rebuild(own, 3, &rt);
        assert_eq!(
            tree.get(src).map(|e| e.children.len()),
            Some(2),
            "leaf child added"
        );
        assert_eq!(tree.lookup(Addr(0x0a00_0905)).map(|e| e.source), Some(src));
        let Changes::List(c) = tree.changes(r) else {
            panic!("no resync expected")
        };
        assert_eq!(
            c,
            vec![
                TreeChange::Changed {
                    source: src,
                    upstream_changed: true
                },
                TreeChange::Changed {
                    source: src,
                    upstream_changed: false
                }
            ]
        );
        rt.invalidate(src, t(1));
        tree.rebuild(own, 3, &rt);
        assert!(tree.get(src).is_none());
    }

    #[test]
    fn prune_table_states_and_expiry() {
        let mut pt = PruneTable::default();
        let (s, g) = (Prefix::of_link(1), Addr(0xe000_0101));
        assert_eq!(pt.upstream(s, g), Upstream::Forwarding);
        assert!(pt.pruned_by(s, g, 2, Addr(9), t(100)));
        assert!(pt.is_pruned_by(s, g, 2, Addr(9), t(50)));
        assert!(
            !pt.is_pruned_by(s, g, 2, Addr(9), t(100)),
            "expired at its end"
        );
        let pruned = Upstream::Pruned {
            until: t(80),
            retransmit_at: t(30),
            backoff: Duration::from_millis(30),
        };
        assert!(pt.set_upstream(s, g, pruned));
        assert_eq!(pt.next_deadline(), Some(t(80)));
        assert_eq!(pt.expire(t(80)), vec![(s, g)]);
        assert_eq!(pt.upstream(s, g), Upstream::Forwarding);
        pt.grafted_by(s, g, 2, Addr(9));
        assert!(pt.is_empty(), "an empty entry is removed");
        assert!(pt.check_invariants().is_ok());
        pt.pruned_by(s, g, 2, Addr(9), t(100));
        pt.forget_source(s);
        assert!(pt.is_empty());
        // Sequence numbers: newer only, per generation, with wrap-around.
        assert!(pt.fresh(s, g, 2, Addr(9), 1, 0xfffe));
        assert!(!pt.fresh(s, g, 2, Addr(9), 1, 0xfffe), "the same again");
        assert!(pt.fresh(s, g, 2, Addr(9), 1, 3), "wrapped");
        assert!(!pt.fresh(s, g, 2, Addr(9), 1, 0xffff), "older than 3");
        assert!(pt.fresh(s, g, 2, Addr(9), 2, 0), "restarted neighbour");
        assert!(seq_newer(1, 0) && !seq_newer(0, 1) && seq_newer(0, 0xffff));
    }
}
