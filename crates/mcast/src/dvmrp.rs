//! DVMRP routing, sans-IO: neighbour discovery and route exchange (seed 004's "Neighbor
//! Discovery" and "Route Exchange" components of the Multicast Routing composite protocol;
//! draft-ietf-idmr-dvmrp-v3). After every input it rebuilds the **source tree** (spanning tree:
//! designated forwarders and dependent downstream neighbours, [`crate::tree`]) from what route
//! exchange learned; pruning and grafting are the [`crate::prune`] component's.
//!
//! The core reads and writes the node's [`GlobalMemory`] (neighbour table, routing table)
//! through their functional interfaces, which is how the group-management and data components
//! will see its results. It never reads a clock: time is an argument of every call, and the
//! node's generation id is given in its [`Config`].
//!
//! # Neighbour discovery (the draft's "Neighbor Discovery" section)
//! Every `probe_interval` a probe goes out on each interface listing the neighbours heard
//! there. A neighbour whose probe lists us is **two-way adjacent**; route reports are accepted
//! only from adjacent neighbours. A neighbour not heard for `neighbor_timeout` is dropped; a new
//! generation id means it restarted. Either way the routes through it become unreachable at
//! once. A new neighbour gets a probe at once (so adjacency forms in one round trip), a newly
//! adjacent one a full report at once.
//!
//! # Route exchange (the draft's "Source Location" route-exchange sections)
//! Distance vector per source network with metrics `1..=31`, infinity 32. A report's metric
//! plus the receiving interface's metric is the candidate; the current upstream's word is
//! always taken (better or worse), another neighbour's only when strictly better, or equal
//! from a lower address. **Split horizon with poison reverse**: on the interface towards a
//! route's upstream the route is reported with metric + 32, which tells the upstream that we
//! depend on it (recorded in the route's dependents). A learned route not refreshed for
//! `route_expiration` becomes unreachable, is reported as such for `route_hold_down`, then is
//! deleted. Full reports go out every `report_interval`; changes go out as **flash updates**
//! (only the changed routes), at most one per `min_flash_interval`.
//!
//! # Timers
//! [`Timers::rfc`] holds the draft's defaults; [`Timers::scaled`] multiplies them all by one
//! factor (the `time_scale` profile parameter) for fast simulation.

use std::collections::{BTreeSet, VecDeque};

use viastack_kernel::{Duration, Instant};

use crate::addr::{Addr, Prefix};
use crate::memory::{GlobalMemory, Heard, Origin, INFINITY};
use crate::wire::{Repr, RouteEntry};

/// Route entries per report datagram (1,204 bytes with the header).
pub const MAX_ENTRIES: usize = 200;

/// The protocol's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timers {
    /// Between probes on an interface (the draft's Probe interval: 10 s).
    pub probe_interval: Duration,
    /// A neighbour not heard for this long is gone (draft: NeighborTimeout, 35 s).
    pub neighbor_timeout: Duration,
    /// Between full route reports (the draft's Route Report interval: 60 s).
    pub report_interval: Duration,
    /// Between two flash updates (the draft's Minimum Flash Update interval: 5 s).
    pub min_flash_interval: Duration,
    /// A learned route not refreshed for this long becomes unreachable (draft: Route
    /// Expiration Time, 140 s).
    pub route_expiration: Duration,
    /// How long an unreachable route is still reported before deletion (draft: Route
    /// Hold-down, 2 × report interval = 120 s).
    pub route_hold_down: Duration,
}

impl Timers {
    /// The defaults of draft-ietf-idmr-dvmrp-v3 (its timer summary table).
    pub fn rfc() -> Self {
        Timers {
            probe_interval: Duration::from_secs(10),
            neighbor_timeout: Duration::from_secs(35),
            report_interval: Duration::from_secs(60),
            min_flash_interval: Duration::from_secs(5),
            route_expiration: Duration::from_secs(140),
            route_hold_down: Duration::from_secs(120),
        }
    }

    /// Every timer multiplied by `factor` (e.g. 0.01 for simulation), at least 1 µs each. A
    /// factor that is not a positive finite number leaves the timers unchanged.
    pub fn scaled(self, factor: f64) -> Self {
        if !(factor.is_finite() && factor > 0.0) {
            return self;
        }
        let s = |d: Duration| d.mul_f64(factor).max(Duration::from_micros(1));
        Timers {
            probe_interval: s(self.probe_interval),
            neighbor_timeout: s(self.neighbor_timeout),
            report_interval: s(self.report_interval),
            min_flash_interval: s(self.min_flash_interval),
            route_expiration: s(self.route_expiration),
            route_hold_down: s(self.route_hold_down),
        }
    }
}

impl Default for Timers {
    fn default() -> Self {
        Timers::rfc()
    }
}

/// One interface of the router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interface {
    /// The network attached to it (a connected route).
    pub prefix: Prefix,
    /// Its metric, `1..=31` (usually 1: hop count).
    pub metric: u8,
}

/// A router's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The router's address (how neighbours know it).
    pub addr: Addr,
    /// Its generation id: different at every start (the caller derives it from its boot
    /// time or a random source).
    pub gen_id: u32,
    /// Its interfaces, by number.
    pub interfaces: Vec<Interface>,
    /// The timers.
    pub timers: Timers,
}

/// A datagram to send on `iface`: link-local broadcast (to all DVMRP routers), or to one
/// neighbour (prunes, grafts and graft acks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// The interface.
    pub iface: u16,
    /// The neighbour it is for (`None`: every router on the link).
    pub to: Option<Addr>,
    /// The encoded message.
    pub bytes: Vec<u8>,
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Probes sent.
    pub probes_sent: u64,
    /// Report datagrams sent (periodic, flash and to new neighbours).
    pub reports_sent: u64,
    /// Flash updates sent.
    pub flash_updates: u64,
    /// Probes received.
    pub probes_received: u64,
    /// Reports received from adjacent neighbours.
    pub reports_received: u64,
    /// Datagrams that did not decode.
    pub malformed: u64,
    /// Reports from routers that are not two-way neighbours (ignored).
    pub not_adjacent: u64,
    /// Datagrams on an interface number the router does not have.
    pub bad_interface: u64,
    /// Neighbours lost (timeout, restart or one-way again).
    pub neighbors_lost: u64,
    /// Routes that expired.
    pub routes_expired: u64,
}

/// The DVMRP routing component of one router.
#[derive(Debug)]
pub struct Dvmrp {
    cfg: Config,
    next_probe: Instant,
    next_report: Instant,
    flash_at: Option<Instant>,
    last_flash: Option<Instant>,
    dirty: BTreeSet<Prefix>,
    out: VecDeque<Outgoing>,
    deadline: Option<Instant>,
    stats: Stats,
}

impl Dvmrp {
    /// Start a router at `now`: install its connected routes in `mem` and send its first
    /// probes.
    pub fn new(cfg: Config, now: Instant, mem: &mut GlobalMemory) -> Self {
        for (i, iface) in cfg.interfaces.iter().enumerate() {
            let i = u16::try_from(i).unwrap_or(u16::MAX);
            mem.routes.set(
                iface.prefix,
                iface.metric,
                Origin::Connected { iface: i },
                now,
            );
        }
        let next_report = now.saturating_add(cfg.timers.report_interval);
        let mut d = Dvmrp {
            cfg,
            next_probe: now,
            next_report,
            flash_at: None,
            last_flash: None,
            dirty: BTreeSet::new(),
            out: VecDeque::new(),
            deadline: None,
            stats: Stats::default(),
        };
        d.handle_timeout(now, mem);
        d
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// When `handle_timeout` is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    fn iface_count(&self) -> u16 {
        u16::try_from(self.cfg.interfaces.len()).unwrap_or(u16::MAX)
    }

    /// A datagram from `from` arrived on `iface`.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        iface: u16,
        from: Addr,
        bytes: &[u8],
        mem: &mut GlobalMemory,
    ) {
        if iface >= self.iface_count() {
            self.stats.bad_interface += 1;
        } else {
            match Repr::parse_bytes(bytes) {
                Err(_) => self.stats.malformed += 1,
                Ok(Repr::Probe { gen_id, neighbors }) => {
                    self.stats.probes_received += 1;
                    self.on_probe(now, iface, from, gen_id, &neighbors, mem);
                }
                Ok(Repr::Report { entries }) => {
                    if mem.neighbors.is_adjacent(iface, from) {
                        self.stats.reports_received += 1;
                        for e in entries {
                            self.on_entry(now, iface, from, e, mem);
                        }
                    } else {
                        self.stats.not_adjacent += 1;
                    }
                }
                // Pruning and grafting are the `prune` component's.
                Ok(Repr::Prune { .. } | Repr::Graft { .. } | Repr::GraftAck { .. }) => {}
            }
        }
        mem.rebuild_tree(self.iface_count());
        self.update_deadline(mem);
    }

    fn on_probe(
        &mut self,
        now: Instant,
        iface: u16,
        from: Addr,
        gen_id: u32,
        neighbors: &[Addr],
        mem: &mut GlobalMemory,
    ) {
        let lists_us = neighbors.contains(&self.cfg.addr);
        let Some(heard) = mem.neighbors.heard(iface, from, gen_id, lists_us, now) else {
            return;
        };
        match heard {
            Heard::Refreshed => {}
            Heard::New => {
                self.send_probe(iface, mem);
                if lists_us {
                    self.send_full_report(iface, mem);
                }
            }
            Heard::Restarted => {
                self.neighbor_lost(now, iface, from, mem);
                self.send_probe(iface, mem);
                if lists_us {
                    self.send_full_report(iface, mem);
                }
            }
            Heard::BecameTwoWay => self.send_full_report(iface, mem),
            Heard::LostTwoWay => self.neighbor_lost(now, iface, from, mem),
        }
    }

    fn on_entry(
        &mut self,
        now: Instant,
        iface: u16,
        from: Addr,
        e: RouteEntry,
        mem: &mut GlobalMemory,
    ) {
        let if_metric = self
            .cfg
            .interfaces
            .get(usize::from(iface))
            .map_or(1, |i| i.metric);
        let poisoned = e.metric > INFINITY;
        let candidate = if e.metric >= INFINITY {
            INFINITY
        } else {
            e.metric.saturating_add(if_metric).min(INFINITY)
        };
        let current = mem
            .routes
            .get(e.prefix)
            .map(|r| (r.origin, r.metric, r.reachable(), r.iface()));
        // A poisoned reverse from a neighbour that is not on our upstream interface: it
        // depends on us for this source.
        if let Some((_, _, reachable, our_iface)) = current {
            mem.routes.set_dependent(
                e.prefix,
                iface,
                from,
                poisoned && reachable && our_iface != iface,
            );
        }
        mem.tree.offer(e.prefix, iface, from, e.metric);
        let learned = Origin::Learned { iface, via: from };
        match current {
            None => {
                if candidate < INFINITY && mem.routes.set(e.prefix, candidate, learned, now) {
                    self.mark_dirty(now, e.prefix);
                }
            }
            Some((Origin::Connected { .. }, ..)) => {}
            Some((origin, _, reachable, _)) if origin == learned => {
                if candidate < INFINITY {
                    if mem.routes.set(e.prefix, candidate, learned, now) {
                        self.mark_dirty(now, e.prefix);
                    }
                } else if reachable && mem.routes.invalidate(e.prefix, now) {
                    self.mark_dirty(now, e.prefix);
                }
            }
            Some((Origin::Learned { via, .. }, metric, ..)) => {
                let better = candidate < metric
                    || (candidate == metric && candidate < INFINITY && from < via);
                if better && mem.routes.set(e.prefix, candidate, learned, now) {
                    self.mark_dirty(now, e.prefix);
                }
            }
        }
    }

    /// Routes through a lost neighbour become unreachable at once.
    fn neighbor_lost(&mut self, now: Instant, iface: u16, addr: Addr, mem: &mut GlobalMemory) {
        self.stats.neighbors_lost += 1;
        let via: Vec<Prefix> = mem
            .routes
            .iter()
            .filter(|r| r.reachable() && r.upstream() == Some((iface, addr)))
            .map(|r| r.prefix)
            .collect();
        for p in via {
            if mem.routes.invalidate(p, now) {
                self.mark_dirty(now, p);
            }
        }
        mem.routes.drop_dependent(iface, addr);
        mem.tree.forget_neighbor(iface, addr);
    }

    fn mark_dirty(&mut self, now: Instant, p: Prefix) {
        self.dirty.insert(p);
        if self.flash_at.is_none() {
            let earliest = self.last_flash.map_or(now, |t| {
                t.saturating_add(self.cfg.timers.min_flash_interval)
            });
            self.flash_at = Some(earliest.max(now));
        }
    }

    /// Timers: neighbour and route expiry, garbage collection, probes, reports, flash updates.
    pub fn handle_timeout(&mut self, now: Instant, mem: &mut GlobalMemory) {
        let t = self.cfg.timers;
        for n in mem.neighbors.expire(now, t.neighbor_timeout) {
            self.neighbor_lost(now, n.iface, n.addr, mem);
        }
        let expired: Vec<Prefix> = mem
            .routes
            .iter()
            .filter(|r| {
                r.reachable()
                    && r.upstream().is_some()
                    && now.saturating_duration_since(r.refreshed) >= t.route_expiration
            })
            .map(|r| r.prefix)
            .collect();
        for p in expired {
            if mem.routes.invalidate(p, now) {
                self.stats.routes_expired += 1;
                self.mark_dirty(now, p);
            }
        }
        for p in mem.routes.collect_garbage(now, t.route_hold_down) {
            self.dirty.remove(&p);
        }
        if now >= self.next_probe {
            for i in 0..self.iface_count() {
                self.send_probe(i, mem);
            }
            self.next_probe = later(self.next_probe, t.probe_interval, now);
        }
        if now >= self.next_report {
            for i in 0..self.iface_count() {
                self.send_full_report(i, mem);
            }
            self.next_report = later(self.next_report, t.report_interval, now);
            self.dirty.clear();
            self.flash_at = None;
        }
        if self.flash_at.is_some_and(|f| f <= now) {
            let dirty = std::mem::take(&mut self.dirty);
            if !dirty.is_empty() {
                self.stats.flash_updates += 1;
                for i in 0..self.iface_count() {
                    self.send_report(i, dirty.iter().copied(), mem);
                }
                self.last_flash = Some(now);
            }
            self.flash_at = None;
        }
        mem.rebuild_tree(self.iface_count());
        self.update_deadline(mem);
    }

    fn update_deadline(&mut self, mem: &GlobalMemory) {
        let t = self.cfg.timers;
        let mut d = self.next_probe.min(self.next_report);
        if let Some(f) = self.flash_at {
            d = d.min(f);
        }
        if let Some(o) = mem.neighbors.oldest() {
            d = d.min(o.saturating_add(t.neighbor_timeout));
        }
        for r in mem.routes.iter() {
            if let Some(u) = r.unreachable_since {
                d = d.min(u.saturating_add(t.route_hold_down));
            } else if r.upstream().is_some() {
                d = d.min(r.refreshed.saturating_add(t.route_expiration));
            }
        }
        self.deadline = Some(d);
    }

    fn send_probe(&mut self, iface: u16, mem: &GlobalMemory) {
        let neighbors = mem.neighbors.on_interface(iface).map(|n| n.addr).collect();
        let probe = Repr::Probe {
            gen_id: self.cfg.gen_id,
            neighbors,
        };
        if let Ok(bytes) = probe.to_vec() {
            self.stats.probes_sent += 1;
            self.out.push_back(Outgoing {
                iface,
                to: None,
                bytes,
            });
        }
    }

    fn send_full_report(&mut self, iface: u16, mem: &GlobalMemory) {
        let all: Vec<Prefix> = mem.routes.iter().map(|r| r.prefix).collect();
        self.send_report(iface, all.into_iter(), mem);
    }

    /// Report `prefixes` on `iface`, if it has an adjacent neighbour, with poison reverse.
    fn send_report(
        &mut self,
        iface: u16,
        prefixes: impl Iterator<Item = Prefix>,
        mem: &GlobalMemory,
    ) {
        if mem.neighbors.neighbor_for_interface(iface).is_none() {
            return;
        }
        let mut entries = Vec::new();
        for p in prefixes {
            let Some(r) = mem.routes.get(p) else { continue };
            let metric = match r.upstream() {
                Some((up, _)) if up == iface && r.reachable() => r.metric + INFINITY,
                _ => r.metric,
            };
            entries.push(RouteEntry { prefix: p, metric });
        }
        for chunk in entries.chunks(MAX_ENTRIES) {
            let report = Repr::Report {
                entries: chunk.to_vec(),
            };
            if let Ok(bytes) = report.to_vec() {
                self.stats.reports_sent += 1;
                self.out.push_back(Outgoing {
                    iface,
                    to: None,
                    bytes,
                });
            }
        }
    }
}

/// The first `base + k·step` after `now` (k ≥ 1).
fn later(base: Instant, step: Duration, now: Instant) -> Instant {
    let mut t = base.saturating_add(step);
    if t <= now {
        t = now.saturating_add(step);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Changes;

    const A: Addr = Addr(0x0aff_0001);
    const B: Addr = Addr(0x0aff_0002);

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// A router `addr` with interfaces on links 0 and 1 (timers / 100).
    fn router(addr: Addr, gen_id: u32, now: Instant) -> (Dvmrp, GlobalMemory) {
        let mut mem = GlobalMemory::new(addr);
        let cfg = Config {
            addr,
            gen_id,
            interfaces: vec![
                Interface {
                    prefix: Prefix::of_link(0),
                    metric: 1,
                },
                Interface {
                    prefix: Prefix::of_link(1),
                    metric: 1,
                },
            ],
            timers: Timers::rfc().scaled(0.01),
        };
        (Dvmrp::new(cfg, now, &mut mem), mem)
    }

    fn sent(d: &mut Dvmrp) -> Vec<(u16, Repr)> {
        std::iter::from_fn(|| d.poll_transmit())
            .map(|o| {
                (
                    o.iface,
                    Repr::parse_bytes(&o.bytes).unwrap_or_else(|e| panic!("{e}")),
                )
            })
            .collect()
    }

    fn probe(gen_id: u32, neighbors: &[Addr]) -> Vec<u8> {
        Repr::Probe {
            gen_id,
            neighbors: neighbors.to_vec(),
        }
        .to_vec()
        .unwrap_or_default()
    }

    fn report(entries: &[(Prefix, u8)]) -> Vec<u8> {
        Repr::Report {
            entries: entries
                .iter()
                .map(|&(prefix, metric)| RouteEntry { prefix, metric })
                .collect(),
        }
        .to_vec()
        .unwrap_or_default()
    }

    #[test]
    fn rfc_timers_and_their_scale() {
        let t = Timers::rfc();
        assert_eq!(t.probe_interval, Duration::from_secs(10));
        assert_eq!(t.neighbor_timeout, Duration::from_secs(35));
        assert_eq!(t.report_interval, Duration::from_secs(60));
        assert_eq!(t.min_flash_interval, Duration::from_secs(5));
        assert_eq!(t.route_expiration, Duration::from_secs(140));
        assert_eq!(t.route_hold_down, Duration::from_secs(120));
        let s = t.scaled(0.01);
        assert_eq!(s.probe_interval, Duration::from_millis(100));
        assert_eq!(s.route_expiration, Duration::from_millis(1400));
        assert_eq!(t.scaled(0.0), t, "a non-positive factor changes nothing");
        assert_eq!(t.scaled(f64::NAN), t);
    }

    #[test]
    fn adjacency_forms_in_one_round_trip_and_gates_reports() {
        let (mut a, mut mem) = router(A, 7, ms(0));
        // Probes on both interfaces at start, nobody heard.
        let first = sent(&mut a);
        assert_eq!(first.len(), 2);
        assert!(first.iter().all(
            |(_, r)| matches!(r, Repr::Probe { gen_id: 7, neighbors } if neighbors.is_empty())
        ));
        // A report from a router that is not a neighbour is ignored.
        a.handle_datagram(ms(1), 0, B, &report(&[(Prefix::of_link(9), 1)]), &mut mem);
        assert_eq!(a.stats().not_adjacent, 1);
        assert!(mem.routes.get(Prefix::of_link(9)).is_none());
        // B's probe, not listing A: A answers at once with a probe listing B.
        a.handle_datagram(ms(2), 0, B, &probe(5, &[]), &mut mem);
        let out = sent(&mut a);
        assert_eq!(
            out,
            vec![(
                0,
                Repr::Probe {
                    gen_id: 7,
                    neighbors: vec![B]
                }
            )]
        );
        assert!(!mem.neighbors.is_adjacent(0, B));
        // B lists A: two-way, and A sends its full table on that interface.
        a.handle_datagram(ms(3), 0, B, &probe(5, &[A]), &mut mem);
        assert!(mem.neighbors.is_adjacent(0, B));
        let out = sent(&mut a);
        assert!(matches!(&out[..], [(0, Repr::Report { entries })] if entries.len() == 2));
        // Now B's report counts: link 9 at B's metric 1 + 1.
        a.handle_datagram(ms(4), 0, B, &report(&[(Prefix::of_link(9), 1)]), &mut mem);
        let r = mem.routes.get(Prefix::of_link(9)).cloned();
        assert_eq!(
            r.map(|r| (r.metric, r.origin)),
            Some((2, Origin::Learned { iface: 0, via: B }))
        );
        // Garbage is counted, not fatal.
        a.handle_datagram(ms(5), 0, B, &[1, 2, 3], &mut mem);
        a.handle_datagram(ms(5), 9, B, &probe(5, &[A]), &mut mem);
        assert_eq!((a.stats().malformed, a.stats().bad_interface), (1, 1));
        assert!(mem.check_invariants().is_ok());
    }

    /// A with B adjacent on interface 0 and a route to link 9 through B.
    fn with_route() -> (Dvmrp, GlobalMemory) {
        let (mut a, mut mem) = router(A, 7, ms(0));
        a.handle_datagram(ms(1), 0, B, &probe(5, &[A]), &mut mem);
        a.handle_datagram(ms(2), 0, B, &report(&[(Prefix::of_link(9), 3)]), &mut mem);
        sent(&mut a);
        (a, mem)
    }

    #[test]
    fn split_horizon_with_poison_reverse() {
        let (mut a, mut mem) = with_route();
        // B also appears on interface 1, so A reports there too.
        a.handle_datagram(ms(3), 1, B, &probe(5, &[A]), &mut mem);
        let out = sent(&mut a);
        let metric_on = |out: &[(u16, Repr)], iface: u16| {
            out.iter().find_map(|(i, r)| match r {
                Repr::Report { entries } if *i == iface => entries
                    .iter()
                    .find(|e| e.prefix == Prefix::of_link(9))
                    .map(|e| e.metric),
                _ => None,
            })
        };
        assert_eq!(
            metric_on(&out, 1),
            Some(4),
            "plain metric away from the upstream"
        );
        // The periodic report (B keeps probing, so it is still a neighbour on both
        // interfaces): poisoned (4 + 32) towards the upstream's interface.
        a.handle_datagram(ms(590), 0, B, &probe(5, &[A]), &mut mem);
        a.handle_datagram(ms(590), 1, B, &probe(5, &[A]), &mut mem);
        a.handle_datagram(ms(590), 0, B, &report(&[(Prefix::of_link(9), 3)]), &mut mem);
        sent(&mut a);
        a.handle_timeout(ms(600), &mut mem);
        let out = sent(&mut a);
        assert_eq!(metric_on(&out, 0), Some(36));
        assert_eq!(metric_on(&out, 1), Some(4));
        // A poisoned report from the neighbour on interface 1 makes it a dependent.
        a.handle_datagram(
            ms(601),
            1,
            B,
            &report(&[(Prefix::of_link(9), 36)]),
            &mut mem,
        );
        let deps = mem
            .routes
            .get(Prefix::of_link(9))
            .map(|r| r.dependents.clone());
        assert_eq!(
            deps.map(|d| d.into_iter().collect::<Vec<_>>()),
            Some(vec![(1, B)])
        );
    }

    #[test]
    fn a_restarted_or_silent_neighbour_takes_its_routes_with_it() {
        let (mut a, mut mem) = with_route();
        let reader = mem.routes.subscribe();
        // New generation id: routes through B are unreachable at once, and a flash update
        // follows.
        a.handle_datagram(ms(10), 0, B, &probe(6, &[A]), &mut mem);
        let r = mem.routes.get(Prefix::of_link(9)).cloned();
        assert_eq!(r.as_ref().map(|r| r.metric), Some(INFINITY));
        assert_eq!(a.stats().neighbors_lost, 1);
        let Changes::List(c) = mem.routes.changes(reader) else {
            panic!("no resync expected")
        };
        assert_eq!(c.len(), 1);
        // B reports it again: reachable again.
        a.handle_datagram(ms(11), 0, B, &report(&[(Prefix::of_link(9), 3)]), &mut mem);
        assert_eq!(
            mem.routes.get(Prefix::of_link(9)).map(|r| r.metric),
            Some(4)
        );
        // B falls silent: after the neighbour timeout (350 ms) the route is unreachable; after
        // the hold-down (1.2 s) it is gone.
        let mut now = ms(11);
        while now < ms(400) {
            now = a.poll_timeout().unwrap_or(ms(400)).min(ms(400));
            a.handle_timeout(now, &mut mem);
        }
        assert!(!mem.neighbors.is_adjacent(0, B));
        assert_eq!(
            mem.routes.get(Prefix::of_link(9)).map(|r| r.metric),
            Some(INFINITY)
        );
        while now < ms(1700) {
            now = a.poll_timeout().unwrap_or(ms(1700)).min(ms(1700));
            a.handle_timeout(now, &mut mem);
        }
        assert!(mem.routes.get(Prefix::of_link(9)).is_none());
        // Connected routes stay.
        assert_eq!(mem.routes.len(), 2);
        assert!(mem.check_invariants().is_ok());
    }

    #[test]
    fn better_routes_win_and_the_upstream_is_always_believed() {
        let (mut a, mut mem) = with_route();
        let c = Addr(0x0aff_0003);
        a.handle_datagram(ms(3), 1, c, &probe(9, &[A]), &mut mem);
        // C offers 5 (worse than 4): ignored.
        a.handle_datagram(ms(4), 1, c, &report(&[(Prefix::of_link(9), 4)]), &mut mem);
        assert_eq!(
            mem.routes
                .get(Prefix::of_link(9))
                .map(|r| (r.metric, r.upstream())),
            Some((4, Some((0, B))))
        );
        // C offers 3 (better): taken.
        a.handle_datagram(ms(5), 1, c, &report(&[(Prefix::of_link(9), 2)]), &mut mem);
        assert_eq!(
            mem.routes
                .get(Prefix::of_link(9))
                .map(|r| (r.metric, r.upstream())),
            Some((3, Some((1, c))))
        );
        // The upstream C says it got worse: believed.
        a.handle_datagram(ms(6), 1, c, &report(&[(Prefix::of_link(9), 10)]), &mut mem);
        assert_eq!(
            mem.routes.get(Prefix::of_link(9)).map(|r| r.metric),
            Some(11)
        );
        // Unreachable from the upstream: held down.
        a.handle_datagram(ms(7), 1, c, &report(&[(Prefix::of_link(9), 32)]), &mut mem);
        assert_eq!(
            mem.routes.get(Prefix::of_link(9)).map(|r| r.metric),
            Some(INFINITY)
        );
        // Another neighbour's reachable offer is taken during the hold-down.
        a.handle_datagram(ms(8), 0, B, &report(&[(Prefix::of_link(9), 3)]), &mut mem);
        assert_eq!(
            mem.routes
                .get(Prefix::of_link(9))
                .map(|r| (r.metric, r.upstream())),
            Some((4, Some((0, B))))
        );
        // A neighbour's claim to one of A's own networks changes nothing.
        a.handle_datagram(ms(9), 0, B, &report(&[(Prefix::of_link(1), 1)]), &mut mem);
        assert_eq!(
            mem.routes.get(Prefix::of_link(1)).map(|r| r.origin),
            Some(Origin::Connected { iface: 1 })
        );
    }
}
