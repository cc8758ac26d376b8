//! Pruning and grafting, sans-IO: seed 004's "Pruning" and "Grafting" components of the
//! Multicast Routing composite protocol (draft-ietf-idmr-dvmrp-v3, its pruning and grafting
//! sections). Reads the source tree and the group table, writes the prune table
//! ([`crate::tree::PruneTable`]); multicast forwarding ([`crate::forward`]) reads the result.
//!
//! # Pruning
//! A router whose (S, G) data has nowhere to go — no child interface with members of G, no
//! dependent downstream neighbour that has not pruned (S, G) — sends a **prune** to its
//! upstream neighbour with a lifetime (the draft's 2 hours, or the shortest remaining lifetime
//! of the downstream prunes it stands for). The upstream records it for that neighbour until the
//! lifetime ends; when every dependent of every child interface has pruned and no child has
//! members, it prunes in turn, and so on up the tree. A prune that is lost shows itself by data
//! that keeps arriving: data arriving after the **retransmission time** (3 s) sends the prune
//! again, with the time doubled each time (exponential back-off).
//!
//! # Grafting
//! A pruned router that needs the data again — a member joined on a child interface (group
//! table), a graft arrived from a dependent, a new dependent appeared — sends a **graft**
//! upstream and re-sends it every 5 s, doubled each time, until the upstream's **graft ack**
//! arrives. A router answers every graft with a graft ack, removes the sender's prune, and grafts
//! upstream if it had pruned itself. A change of upstream (route change) voids the source's
//! prune state; a prune from a neighbour that stops depending on us is void too (when it
//! depends on us again it starts unpruned).
//!
//! # Calls
//! `handle_datagram` for prune, graft and graft-ack messages (probes and reports are route
//! exchange's: ignored here), `data_unwanted` from forwarding, `sync` after anything else wrote
//! the source tree or group table, `handle_timeout` at `poll_timeout`; then `poll_transmit`.

use std::collections::VecDeque;

use viastack_kernel::{Duration, Instant};

use crate::addr::{Addr, Prefix};
use crate::dvmrp::Outgoing;
use crate::groups::GroupChange;
use crate::memory::{Changes, GlobalMemory, Reader};
use crate::tree::{TreeChange, Upstream};
use crate::wire::Repr;

/// The component's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timers {
    /// Lifetime of a prune sent without downstream prunes (draft: 2 hours).
    pub prune_lifetime: Duration,
    /// First prune retransmission time (draft: 3 s, exponential back-off).
    pub prune_retransmit: Duration,
    /// First graft retransmission time (draft: 5 s, exponential back-off).
    pub graft_retransmit: Duration,
}

impl Timers {
    /// The draft's defaults.
    pub fn rfc() -> Self {
        Timers {
            prune_lifetime: Duration::from_secs(7200),
            prune_retransmit: Duration::from_secs(3),
            graft_retransmit: Duration::from_secs(5),
        }
    }

    /// Every timer times `factor` (at least 1 µs); a factor that is not positive and finite
    /// changes nothing.
    pub fn scaled(self, factor: f64) -> Self {
        if !(factor.is_finite() && factor > 0.0) {
            return self;
        }
        let s = |d: Duration| d.mul_f64(factor).max(Duration::from_micros(1));
        Timers {
            prune_lifetime: s(self.prune_lifetime),
            prune_retransmit: s(self.prune_retransmit),
            graft_retransmit: s(self.graft_retransmit),
        }
    }
}

impl Default for Timers {
    fn default() -> Self {
        Timers::rfc()
    }
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Prunes sent (first transmissions).
    pub prunes_sent: u64,
    /// Prunes sent again because data kept arriving.
    pub prune_retransmits: u64,
    /// Prunes received from dependents and recorded.
    pub prunes_received: u64,
    /// Grafts sent (first transmissions).
    pub grafts_sent: u64,
    /// Grafts sent again for want of an ack.
    pub graft_retransmits: u64,
    /// Grafts received.
    pub grafts_received: u64,
    /// Graft acks received from the upstream while grafting.
    pub graft_acks_received: u64,
    /// Prunes from routers that are not dependents on a child interface, and stray acks.
    pub ignored: u64,
    /// Prunes and grafts older than the last taken from their sender (overtaken).
    pub stale: u64,
    /// Datagrams that did not decode.
    pub malformed: u64,
}

/// The pruning and grafting component of one router.
#[derive(Debug)]
pub struct Pruner {
    timers: Timers,
    tree_reader: Reader,
    group_reader: Reader,
    out: VecDeque<Outgoing>,
    stats: Stats,
    next_seq: u16,
}

/// The child interfaces that want (S, G) data at `now`: children of `source`'s tree with
/// members of `group`, or with a dependent that has not pruned (S, G). Multicast forwarding
/// replicates onto these; an empty list means "prune".
pub fn downstream(mem: &GlobalMemory, source: Prefix, group: Addr, now: Instant) -> Vec<u16> {
    let Some(tree) = mem.tree.get(source) else {
        return Vec::new();
    };
    tree.children
        .iter()
        .filter(|(&iface, deps)| {
            mem.groups.has_members(iface, group)
                || deps
                    .iter()
                    .any(|&d| !mem.prunes.is_pruned_by(source, group, iface, d, now))
        })
        .map(|(&i, _)| i)
        .collect()
}

impl Pruner {
    /// A pruner reading `mem`'s source tree and group table.
    pub fn new(timers: Timers, mem: &mut GlobalMemory) -> Self {
        Pruner {
            timers,
            tree_reader: mem.tree.subscribe(),
            group_reader: mem.groups.subscribe(),
            out: VecDeque::new(),
            stats: Stats::default(),
            next_seq: 0,
        }
    }

    fn seq(&mut self) -> u16 {
        self.next_seq = self.next_seq.wrapping_add(1);
        self.next_seq
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// When `handle_timeout` is next due.
    pub fn poll_timeout(&self, mem: &GlobalMemory) -> Option<Instant> {
        mem.prunes.next_deadline()
    }

    fn send(&mut self, iface: u16, to: Addr, m: &Repr) {
        if let Ok(bytes) = m.to_vec() {
            self.out.push_back(Outgoing {
                iface,
                to: Some(to),
                bytes,
            });
        }
    }

    /// A DVMRP datagram from `from` on `iface`: prunes, grafts and graft acks are handled,
    /// other types left to route exchange.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        iface: u16,
        from: Addr,
        bytes: &[u8],
        mem: &mut GlobalMemory,
    ) {
        self.sync(now, mem);
        match Repr::parse_bytes(bytes) {
            Err(_) => self.stats.malformed += 1,
            Ok(Repr::Prune {
                source,
                group,
                lifetime_ms,
                seq,
            }) => {
                if self.fresh(iface, from, source, group, seq, mem) {
                    self.on_prune(now, iface, from, source, group, lifetime_ms, mem);
                }
            }
            Ok(Repr::Graft { source, group, seq }) => {
                // Always acknowledged (a retransmission means the ack was lost); acted on
                // only when newer than the last prune or graft from that neighbour.
                self.stats.grafts_received += 1;
                self.send(iface, from, &Repr::GraftAck { source, group, seq });
                if self.fresh(iface, from, source, group, seq, mem) {
                    mem.prunes.grafted_by(source, group, iface, from);
                    self.graft_if_needed(now, source, group, mem);
                }
            }
            Ok(Repr::GraftAck { source, group, seq }) => {
                let up = mem.tree.get(source).and_then(|t| t.upstream);
                if up == Some(from)
                    && matches!(mem.prunes.upstream(source, group), Upstream::Grafting { seq: s, .. } if s == seq)
                {
                    self.stats.graft_acks_received += 1;
                    mem.prunes.set_upstream(source, group, Upstream::Forwarding);
                } else {
                    self.stats.ignored += 1;
                }
            }
            Ok(Repr::Probe { .. } | Repr::Report { .. }) => {}
        }
    }

    /// Whether a prune or graft from `from` is newer than the last one taken (see the wire's
    /// sequence numbers); stale ones are counted.
    fn fresh(
        &mut self,
        iface: u16,
        from: Addr,
        source: Prefix,
        group: Addr,
        seq: u16,
        mem: &mut GlobalMemory,
    ) -> bool {
        let gen_id = mem.neighbors.get(iface, from).map_or(0, |n| n.gen_id);
        let fresh = mem.prunes.fresh(source, group, iface, from, gen_id, seq);
        if !fresh {
            self.stats.stale += 1;
        }
        fresh
    }

    #[allow(clippy::too_many_arguments)]
    fn on_prune(
        &mut self,
        now: Instant,
        iface: u16,
        from: Addr,
        source: Prefix,
        group: Addr,
        lifetime_ms: u32,
        mem: &mut GlobalMemory,
    ) {
        let dependent = mem
            .tree
            .get(source)
            .and_then(|t| t.children.get(&iface))
            .is_some_and(|deps| deps.contains(&from));
        if !dependent {
            self.stats.ignored += 1;
            return;
        }
        self.stats.prunes_received += 1;
        let until = now.saturating_add(Duration::from_millis(u64::from(lifetime_ms)));
        mem.prunes.pruned_by(source, group, iface, from, until);
        if downstream(mem, source, group, now).is_empty()
            && mem.prunes.upstream(source, group) == Upstream::Forwarding
        {
            self.prune_upstream(now, source, group, mem);
        }
    }

    /// Graft (S, G) upstream if we pruned it and someone downstream wants it now.
    fn graft_if_needed(
        &mut self,
        now: Instant,
        source: Prefix,
        group: Addr,
        mem: &mut GlobalMemory,
    ) {
        if !matches!(mem.prunes.upstream(source, group), Upstream::Pruned { .. })
            || downstream(mem, source, group, now).is_empty()
        {
            return;
        }
        let Some((iface, up)) = mem
            .tree
            .get(source)
            .and_then(|t| Some((t.upstream_iface, t.upstream?)))
        else {
            mem.prunes.set_upstream(source, group, Upstream::Forwarding);
            return;
        };
        self.stats.grafts_sent += 1;
        let seq = self.seq();
        self.send(iface, up, &Repr::Graft { source, group, seq });
        let backoff = self.timers.graft_retransmit;
        mem.prunes.set_upstream(
            source,
            group,
            Upstream::Grafting {
                retransmit_at: now.saturating_add(backoff),
                backoff,
                seq,
            },
        );
    }

    /// Send a prune for (S, G) upstream (first transmission).
    fn prune_upstream(
        &mut self,
        now: Instant,
        source: Prefix,
        group: Addr,
        mem: &mut GlobalMemory,
    ) {
        let Some((iface, up)) = mem
            .tree
            .get(source)
            .and_then(|t| Some((t.upstream_iface, t.upstream?)))
        else {
            return;
        };
        // The shortest remaining downstream prune, else the default lifetime.
        let lifetime = mem
            .prunes
            .get(source, group)
            .and_then(|e| e.downstream.values().min().copied())
            .map_or(self.timers.prune_lifetime, |t| {
                t.saturating_duration_since(now)
            })
            .min(self.timers.prune_lifetime);
        let ms = u32::try_from(lifetime.as_millis())
            .unwrap_or(u32::MAX)
            .max(1);
        let backoff = self.timers.prune_retransmit;
        let state = Upstream::Pruned {
            until: now.saturating_add(lifetime),
            retransmit_at: now.saturating_add(backoff),
            backoff,
        };
        if mem.prunes.set_upstream(source, group, state) {
            self.stats.prunes_sent += 1;
            let seq = self.seq();
            self.send(
                iface,
                up,
                &Repr::Prune {
                    source,
                    group,
                    lifetime_ms: ms,
                    seq,
                },
            );
        }
    }

    /// Forwarding got (S, G) data from the upstream with no child interface wanting it: prune
    /// (or prune again, after the retransmission time, with back-off).
    pub fn data_unwanted(
        &mut self,
        now: Instant,
        source: Prefix,
        group: Addr,
        mem: &mut GlobalMemory,
    ) {
        self.sync(now, mem);
        match mem.prunes.upstream(source, group) {
            Upstream::Forwarding => self.prune_upstream(now, source, group, mem),
            Upstream::Pruned {
                until,
                retransmit_at,
                backoff,
            } if retransmit_at <= now => {
                let Some((iface, up)) = mem
                    .tree
                    .get(source)
                    .and_then(|t| Some((t.upstream_iface, t.upstream?)))
                else {
                    return;
                };
                let ms = u32::try_from(until.saturating_duration_since(now).as_millis())
                    .unwrap_or(u32::MAX)
                    .max(1);
                self.stats.prune_retransmits += 1;
                let seq = self.seq();
                self.send(
                    iface,
                    up,
                    &Repr::Prune {
                        source,
                        group,
                        lifetime_ms: ms,
                        seq,
                    },
                );
                let backoff = backoff.saturating_mul(2);
                mem.prunes.set_upstream(
                    source,
                    group,
                    Upstream::Pruned {
                        until,
                        retransmit_at: now.saturating_add(backoff),
                        backoff,
                    },
                );
            }
            Upstream::Pruned { .. } | Upstream::Grafting { .. } => {}
        }
    }

    /// Read what others wrote: a new member on a child interface grafts the pruned (S, G)
    /// pairs of its group; a changed upstream voids the source's prune state; a changed tree
    /// (a new dependent) may graft.
    pub fn sync(&mut self, now: Instant, mem: &mut GlobalMemory) {
        let groups = match mem.groups.changes(self.group_reader) {
            Changes::List(l) => l
                .into_iter()
                .filter_map(|c| match c {
                    GroupChange::Joined { group, .. } => Some(group),
                    GroupChange::Left { .. } => None,
                })
                .collect(),
            Changes::Resync => mem.groups.iter().map(|m| m.group).collect::<Vec<_>>(),
        };
        let mut sources = Vec::new();
        match mem.tree.changes(self.tree_reader) {
            Changes::List(l) => {
                for c in l {
                    match c {
                        TreeChange::Changed {
                            source,
                            upstream_changed: true,
                        }
                        | TreeChange::Removed { source } => mem.prunes.forget_source(source),
                        TreeChange::Changed { source, .. } => sources.push(source),
                    }
                }
            }
            Changes::Resync => sources.extend(mem.tree.iter().map(|t| t.source)),
        }
        // Prunes from neighbours that no longer depend on us are void.
        for &s in &sources {
            let Some(tree) = mem.tree.get(s) else {
                continue;
            };
            let children = tree.children.clone();
            mem.prunes.keep_downstream(s, |i, a| {
                children.get(&i).is_some_and(|deps| deps.contains(&a))
            });
        }
        let candidates: Vec<(Prefix, Addr)> = mem
            .prunes
            .iter()
            .filter(|(&(s, g), _)| groups.contains(&g) || sources.contains(&s))
            .map(|(&k, _)| k)
            .collect();
        for (s, g) in candidates {
            self.graft_if_needed(now, s, g, mem);
        }
    }

    /// Timers: prune expiries, graft retransmissions.
    pub fn handle_timeout(&mut self, now: Instant, mem: &mut GlobalMemory) {
        self.sync(now, mem);
        mem.prunes.expire(now);
        let due: Vec<(Prefix, Addr, Duration)> = mem
            .prunes
            .iter()
            .filter_map(|(&(s, g), e)| match e.upstream {
                Upstream::Grafting {
                    retransmit_at,
                    backoff,
                    ..
                } if retransmit_at <= now => Some((s, g, backoff)),
                _ => None,
            })
            .collect();
        for (source, group, backoff) in due {
            let Some((iface, up)) = mem
                .tree
                .get(source)
                .and_then(|t| Some((t.upstream_iface, t.upstream?)))
            else {
                mem.prunes.set_upstream(source, group, Upstream::Forwarding);
                continue;
            };
            self.stats.graft_retransmits += 1;
            let seq = self.seq();
            self.send(iface, up, &Repr::Graft { source, group, seq });
            let backoff = backoff.saturating_mul(2);
            mem.prunes.set_upstream(
                source,
                group,
                Upstream::Grafting {
                    retransmit_at: now.saturating_add(backoff),
                    backoff,
                    seq,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Origin;

    const B: Addr = Addr(0x0aff_0002);
    const C: Addr = Addr(0x0aff_0003);
    const G: Addr = Addr(0xef00_0001);

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// A router (address 1) with source link 9 upstream via B on interface 0 and dependent C
    /// on interface 1; timers / 100 (prune retransmission 30 ms, graft 50 ms, lifetime 72 s).
    fn setup() -> (Pruner, GlobalMemory, Prefix) {
        let mut mem = GlobalMemory::new(Addr(0x0aff_0001));
        let src = Prefix::of_link(9);
        mem.routes
            .set(src, 3, Origin::Learned { iface: 0, via: B }, ms(0));
        mem.routes.set_dependent(src, 1, C, true);
        mem.rebuild_tree(2);
        let p = Pruner::new(Timers::rfc().scaled(0.01), &mut mem);
        (p, mem, src)
    }

    fn sent(p: &mut Pruner) -> Vec<(u16, Option<Addr>, Repr)> {
        std::iter::from_fn(|| p.poll_transmit())
            .map(|o| {
                (
                    o.iface,
                    o.to,
                    Repr::parse_bytes(&o.bytes).unwrap_or_else(|e| panic!("{e}")),
                )
            })
            .collect()
    }

    #[test]
    fn prunes_propagate_and_back_off() {
        let (mut p, mut mem, src) = setup();
        assert_eq!(downstream(&mem, src, G, ms(0)), vec![1], "C depends on us");
        // A prune from a router that is not a dependent is ignored.
        let prune = |l, seq| {
            Repr::Prune {
                source: src,
                group: G,
                lifetime_ms: l,
                seq,
            }
            .to_vec()
            .unwrap_or_default()
        };
        p.handle_datagram(ms(1), 1, Addr(0x0aff_0009), &prune(1000, 1), &mut mem);
        assert_eq!(p.stats().ignored, 1);
        // C prunes for 1 s: nobody downstream is left, so the prune goes up at once, for C's
        // remaining lifetime.
        p.handle_datagram(ms(2), 1, C, &prune(1000, 5), &mut mem);
        assert!(downstream(&mem, src, G, ms(2)).is_empty());
        assert_eq!(
            sent(&mut p),
            vec![(
                0,
                Some(B),
                Repr::Prune {
                    source: src,
                    group: G,
                    lifetime_ms: 1000,
                    seq: 1
                }
            )]
        );
        // An older prune from C (overtaken) is ignored.
        p.handle_datagram(ms(3), 1, C, &prune(5000, 4), &mut mem);
        assert_eq!(p.stats().stale, 1);
        // Data keeps coming: no retransmission before 30 ms, then at 30 ms and 60 ms more.
        p.data_unwanted(ms(20), src, G, &mut mem);
        assert!(sent(&mut p).is_empty());
        p.data_unwanted(ms(32), src, G, &mut mem);
        assert_eq!(sent(&mut p).len(), 1);
        p.data_unwanted(ms(80), src, G, &mut mem);
        assert!(sent(&mut p).is_empty(), "back-off doubled to 60 ms");
        p.data_unwanted(ms(92), src, G, &mut mem);
        assert_eq!(sent(&mut p).len(), 1);
        assert_eq!(p.stats().prune_retransmits, 2);
        // The lifetimes end: C's prune and ours (1 s): data flows again.
        p.handle_timeout(ms(1002), &mut mem);
        assert_eq!(mem.prunes.upstream(src, G), Upstream::Forwarding);
        assert_eq!(downstream(&mem, src, G, ms(1002)), vec![1]);
        assert!(mem.prunes.is_empty());
        assert!(mem.check_invariants().is_ok());
    }

    #[test]
    fn grafts_are_acknowledged_and_retransmitted() {
        let (mut p, mut mem, src) = setup();
        let prune = |seq| {
            Repr::Prune {
                source: src,
                group: G,
                lifetime_ms: 60_000,
                seq,
            }
            .to_vec()
            .unwrap_or_default()
        };
        p.handle_datagram(ms(1), 1, C, &prune(1), &mut mem);
        sent(&mut p);
        // C grafts: we ack it and graft upstream.
        let graft = Repr::Graft {
            source: src,
            group: G,
            seq: 2,
        }
        .to_vec()
        .unwrap_or_default();
        p.handle_datagram(ms(10), 1, C, &graft, &mut mem);
        assert_eq!(
            sent(&mut p),
            vec![
                (
                    1,
                    Some(C),
                    Repr::GraftAck {
                        source: src,
                        group: G,
                        seq: 2
                    }
                ),
                (
                    0,
                    Some(B),
                    Repr::Graft {
                        source: src,
                        group: G,
                        seq: 2
                    }
                ),
            ]
        );
        // C's prune, overtaken by its graft, arrives late: ignored, the branch stays grafted.
        p.handle_datagram(ms(11), 1, C, &prune(1), &mut mem);
        assert_eq!(downstream(&mem, src, G, ms(11)), vec![1]);
        // No ack: again after 50 ms, then after 100 ms more.
        assert_eq!(p.poll_timeout(&mem), Some(ms(60)));
        p.handle_timeout(ms(60), &mut mem);
        assert_eq!(sent(&mut p).len(), 1);
        assert_eq!(p.poll_timeout(&mem), Some(ms(160)));
        p.handle_timeout(ms(100), &mut mem);
        assert!(sent(&mut p).is_empty());
        p.handle_timeout(ms(160), &mut mem);
        assert_eq!(p.stats().graft_retransmits, 2);
        sent(&mut p);
        // An ack from someone else, or of an earlier graft, is ignored; B's of the last graft
        // (sequence 4) ends the grafting.
        let ack = |seq| {
            Repr::GraftAck {
                source: src,
                group: G,
                seq,
            }
            .to_vec()
            .unwrap_or_default()
        };
        p.handle_datagram(ms(170), 1, C, &ack(4), &mut mem);
        p.handle_datagram(ms(170), 0, B, &ack(3), &mut mem);
        assert!(matches!(
            mem.prunes.upstream(src, G),
            Upstream::Grafting { .. }
        ));
        p.handle_datagram(ms(171), 0, B, &ack(4), &mut mem);
        assert_eq!(mem.prunes.upstream(src, G), Upstream::Forwarding);
        assert_eq!(p.poll_timeout(&mem), None);
        // A member joining on a pruned branch grafts too.
        p.handle_datagram(ms(200), 1, C, &prune(3), &mut mem);
        assert!(matches!(
            sent(&mut p)[..],
            [(0, Some(B), Repr::Prune { seq: 5, .. })]
        ));
        mem.groups.report(1, G, Addr(0x0a00_0105), ms(5000));
        p.sync(ms(201), &mut mem);
        assert_eq!(
            sent(&mut p),
            vec![(
                0,
                Some(B),
                Repr::Graft {
                    source: src,
                    group: G,
                    seq: 6
                }
            )]
        );
        // A new upstream voids the prune state.
        mem.routes
            .set(src, 3, Origin::Learned { iface: 1, via: C }, ms(300));
        mem.rebuild_tree(2);
        p.sync(ms(300), &mut mem);
        assert!(mem.prunes.is_empty());
    }
}
