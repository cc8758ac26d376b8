//! Seed 004's operational scenario ("Multicast Service – Operational Overview") on its 15-node
//! test network (`stacks/mcast-net15.toml`: source A on a LAN with R1 and R10, receivers H1–H4
//! four hops away), with every protocol timer scaled by 0.1 and lossless links:
//!
//! 1. routing runs: neighbour, routing tables and source tree converge;
//! 2. H1 and H2 join G1 (group tables at R4 and R5);
//! 3. A multicasts to G1 at 10 packets/s (the seed's sender rate): H1 and H2 get every packet
//!    once, H3 and H4 none; the branches without members prune themselves (prune tables);
//! 4. H1 leaves G1: last-member queries, R4's group table empties, R4 prunes, H1 gets nothing
//!    more while H2 still gets everything;
//! 5. H2 leaves G1: the prunes propagate up to R1 (R2 prunes, R1 holds prunes from R2 and R3);
//! 6. H1 joins again: grafts (acknowledged) from R4 to R2 to R1 restore delivery to H1.
//!
//! At each step the test checks the tables of seed 004's global memory and the deliveries, and
//! reports the join and leave latencies it saw.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use common::McNode;
use viastack_kernel::{Duration, Instant, NodeId};
use viastack_mcast::tree::Upstream;
use viastack_mcast::{node_addr, Addr, Prefix};
use viastack_sim::{LinkConfig, Sim, SimConfig, TopoLink, Topology};

const SCALE: f64 = 0.1;
const G1: Addr = Addr(0xef01_0101); // 239.1.1.1

const A: u32 = 0;
const H1: u32 = 11;
const H2: u32 = 12;
const H3: u32 = 13;
const H4: u32 = 14;

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn link(latency_ms: u64) -> LinkConfig {
    LinkConfig {
        latency: Duration::from_millis(latency_ms),
        bandwidth_bps: Some(100_000_000),
        ..LinkConfig::default()
    }
}

/// The 19 links of `stacks/mcast-net15.toml`, in file order (link k is network 10.0.k.0/24).
pub fn net15() -> Topology {
    let mut t = Topology::default();
    t.links
        .push(TopoLink::new([NodeId(0), NodeId(1), NodeId(10)], link(1)));
    for (a, b, lat) in [
        (1, 2, 2),
        (1, 3, 2),
        (2, 3, 1),
        (2, 4, 1),
        (2, 5, 1),
        (3, 6, 1),
        (3, 7, 1),
        (1, 10, 5),
        (10, 8, 5),
        (10, 9, 5),
        (8, 4, 1),
        (8, 6, 1),
        (9, 5, 1),
        (9, 7, 1),
        (4, 11, 1),
        (5, 12, 1),
        (6, 13, 1),
        (7, 14, 1),
    ] {
        t.connect(NodeId(a), NodeId(b), link(lat));
    }
    t
}

fn is_router(id: u32) -> bool {
    (1..=10).contains(&id)
}

struct Run {
    sim: Sim<McNode>,
    /// Send time of each sequence number.
    sent: Vec<Instant>,
}

impl Run {
    fn new(seed: u64) -> Self {
        let topo = net15();
        let f = topo.clone();
        let sim = Sim::new(
            SimConfig {
                topology: Some(topo),
                ..SimConfig::new(seed, 15)
            },
            move |id, now| McNode::new(id, now, &f, is_router(id.0), SCALE),
        )
        .unwrap();
        Run {
            sim,
            sent: Vec::new(),
        }
    }

    /// Runs to `until`, A sending one packet every 100 ms from `from` on.
    fn run(&mut self, from: Option<Instant>, until: Instant) {
        let mut t = self.sim.now();
        while t < until {
            t = (t + Duration::from_millis(100)).min(until);
            self.sim.run_until(t).unwrap();
            if from.is_some_and(|f| t >= f) && t < until {
                let seq = self
                    .sim
                    .node_mut(NodeId(A))
                    .unwrap()
                    .host()
                    .send(G1, b"tick");
                assert_eq!(seq, Some(u32::try_from(self.sent.len()).unwrap()));
                self.sent.push(t);
            }
        }
    }

    fn router(&self, id: u32) -> &viastack_mcast::node::RouterNode {
        self.sim.node(NodeId(id)).unwrap().router()
    }

    fn host(&mut self, id: u32) -> &mut viastack_mcast::node::HostNode {
        self.sim.node_mut(NodeId(id)).unwrap().host()
    }

    /// The sequence numbers host `id` received, and whether any came twice.
    fn received(&self, id: u32) -> (BTreeSet<u32>, bool) {
        let d = self.sim.node(NodeId(id)).unwrap().deliveries();
        let set: BTreeSet<u32> = d.iter().map(|x| x.header.seq).collect();
        (set.clone(), set.len() != d.len())
    }

    /// Sequence numbers sent in `[from, to)`.
    fn sent_between(&self, from: Instant, to: Instant) -> BTreeSet<u32> {
        self.sent
            .iter()
            .enumerate()
            .filter(|(_, &t)| t >= from && t < to)
            .map(|(s, _)| u32::try_from(s).unwrap())
            .collect()
    }

    /// The first delivery to `id` at or after `t`.
    fn first_delivery_after(&self, id: u32, t: Instant) -> Option<Instant> {
        self.sim
            .node(NodeId(id))
            .unwrap()
            .deliveries()
            .iter()
            .map(|d| d.at)
            .find(|&a| a >= t)
    }

    fn upstream(&self, router: u32) -> Upstream {
        self.router(router).mem.prunes.upstream(lan_a(), G1)
    }

    /// Neighbours from which `router` holds a prune of (lanA, G1) at `now`.
    fn pruned_by(&self, router: u32) -> BTreeSet<u32> {
        let now = self.sim.now();
        self.router(router)
            .mem
            .prunes
            .get(lan_a(), G1)
            .map(|e| {
                e.downstream
                    .iter()
                    .filter(|(_, &t)| t > now)
                    .map(|(&(_, a), _)| a.0 & 0xffff)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn members(&self, router: u32) -> Vec<(u16, Addr)> {
        self.router(router)
            .mem
            .groups
            .iter()
            .map(|m| (m.iface, m.group))
            .collect()
    }

    fn check_invariants(&self) {
        for r in 1..=10 {
            self.router(r)
                .mem
                .check_invariants()
                .unwrap_or_else(|e| panic!("R{r}: {e}"));
        }
    }
}

/// A's network: lanA, link 0.
fn lan_a() -> Prefix {
    Prefix::of_link(0)
}

/// Interface of router `r` on link `l`.
fn iface(r: u32, l: usize) -> u16 {
    net15().interface_of(NodeId(r), l).unwrap()
}

fn addrs(ids: &[u32]) -> BTreeSet<Addr> {
    ids.iter()
        .map(|&i| node_addr(u16::try_from(i).unwrap()))
        .collect()
}

#[test]
fn the_seeds_operational_scenario_on_net15() {
    let mut run = Run::new(4);

    // 1. Routing converges (probes every 1 s, reports every 6 s).
    run.run(None, ms(10_000));
    run.check_invariants();
    // Source tree of lanA: R1 and R10 are attached to it; R1's dependents are R2 and R3,
    // R10's are R8 and R9; R2's are R4 and R5 (R4 and R5 prefer R2 to R8 and R9: equal
    // metric, lower address), R3's are R6 and R7.
    let expect_deps = [
        (1, vec![(1, 2), (2, 3)]),
        (10, vec![(9, 8), (10, 9)]),
        (2, vec![(4, 4), (5, 5)]),
        (3, vec![(6, 6), (7, 7)]),
    ];
    for (r, deps) in expect_deps {
        let tree = run.router(r).mem.tree.get(lan_a()).cloned().unwrap();
        for (l, d) in deps {
            assert_eq!(
                tree.children.get(&iface(r, l)),
                Some(&addrs(&[d])),
                "R{r}: child link {l} should have dependent R{d}: {tree:?}"
            );
        }
    }
    let r1 = run.router(1).mem.tree.get(lan_a()).cloned().unwrap();
    assert_eq!((r1.upstream_iface, r1.upstream), (iface(1, 0), None));
    let r4 = run.router(4).mem.tree.get(lan_a()).cloned().unwrap();
    assert_eq!(
        (r4.upstream_iface, r4.upstream),
        (iface(4, 4), Some(node_addr(2)))
    );
    // R4 is the designated forwarder on H1's LAN, a leaf (no dependents); R8, not R4, is the
    // designated forwarder on the R8–R4 link (metric 2 beats R4's 3).
    assert_eq!(r4.children.get(&iface(4, 15)), Some(&BTreeSet::new()));
    assert!(!r4.children.contains_key(&iface(4, 11)));
    let r3 = run.router(3).mem.tree.get(lan_a()).cloned().unwrap();
    assert!(
        !r3.children.contains_key(&iface(3, 3)),
        "R2 (lower address, same metric) forwards on R2–R3, not R3"
    );

    // 2. H1 and H2 join G1.
    let now = run.sim.now();
    assert!(run.host(H1).join(now, G1));
    assert!(run.host(H2).join(now, G1));
    run.run(None, ms(12_000));
    assert_eq!(run.members(4), vec![(iface(4, 15), G1)]);
    assert_eq!(run.members(5), vec![(iface(5, 16), G1)]);
    for r in [1, 2, 3, 6, 7, 8, 9, 10] {
        assert!(run.members(r).is_empty(), "R{r} has members");
    }

    // 3. A multicasts to G1.
    run.run(Some(ms(12_000)), ms(20_000));
    let all = run.sent_between(ms(0), ms(20_000));
    for h in [H1, H2] {
        let (got, dup) = run.received(h);
        assert!(!dup, "H{h}: duplicates");
        // Everything but what is still in flight (a few ms).
        let want = run.sent_between(ms(0), ms(19_950));
        assert!(
            got.is_superset(&want),
            "H{h} missed {:?}",
            want.difference(&got)
        );
        assert!(got.is_subset(&all));
    }
    for h in [H3, H4] {
        assert!(run.received(h).0.is_empty(), "H{h} is not a member");
    }
    // Prunes: R6, R7 (no members) prune to R3, which prunes to R1; R8 and R9 (no dependents,
    // no members) prune to R10, which is attached to the source and has nobody to prune to.
    for r in [3, 6, 7, 8, 9] {
        assert!(
            matches!(run.upstream(r), Upstream::Pruned { .. }),
            "R{r}: {:?}",
            run.upstream(r)
        );
    }
    for r in [1, 2, 4, 5, 10] {
        assert_eq!(run.upstream(r), Upstream::Forwarding, "R{r}");
    }
    assert_eq!(run.pruned_by(3), [6, 7].into());
    assert_eq!(run.pruned_by(1), [3].into());
    assert_eq!(run.pruned_by(10), [8, 9].into());
    assert!(run.pruned_by(2).is_empty());
    run.check_invariants();

    // 4. H1 leaves G1. Leave latency: until R4's group table no longer lists G1 on H1's
    // LAN (two last-member queries 100 ms apart, unanswered).
    let left_at = run.sim.now();
    run.host(H1).leave(left_at, G1);
    let mut t = left_at;
    while !run.members(4).is_empty() && t < left_at + Duration::from_secs(1) {
        t += Duration::from_millis(5);
        run.sim.run_until(t).unwrap();
    }
    let leave_latency = t.saturating_duration_since(left_at);
    assert!(
        leave_latency <= Duration::from_millis(250),
        "{leave_latency:?}"
    );
    run.run(Some(ms(20_100)), ms(21_000));
    let r4_copies = run.router(4).forward.stats().copies;
    run.run(Some(ms(21_000)), ms(30_000));
    assert!(run.members(4).is_empty(), "R4 forgot H1's membership");
    assert!(matches!(run.upstream(4), Upstream::Pruned { .. }));
    assert_eq!(run.pruned_by(2), [4].into());
    // R4 forwards nothing onto H1's LAN after the leave completed.
    assert_eq!(run.router(4).forward.stats().copies, r4_copies);
    assert!(r4_copies > 0);
    let (h2, dup) = run.received(H2);
    assert!(!dup);
    assert!(h2.is_superset(&run.sent_between(ms(12_000), ms(29_950))));

    // 5. H2 leaves G1: R5 prunes, R2 prunes, R1 holds prunes from R2 and R3.
    let left2 = run.sim.now();
    run.host(H2).leave(left2, G1);
    run.run(Some(left2), ms(40_000));
    assert!(run.members(5).is_empty());
    for r in [2, 4, 5] {
        assert!(matches!(run.upstream(r), Upstream::Pruned { .. }), "R{r}");
    }
    assert_eq!(run.pruned_by(2), [4, 5].into());
    assert_eq!(run.pruned_by(1), [2, 3].into());
    let quiet = run.sent_between(ms(30_500), ms(40_000));
    for h in [H1, H2, H3, H4] {
        assert!(run.received(h).0.is_disjoint(&quiet), "H{h} got data");
    }
    // Nothing crosses R1's child links any more: R2 sees no data from 31 s on.
    let r2_rx = run.router(2).forward.stats().received;
    run.run(Some(ms(40_000)), ms(41_000));
    assert_eq!(
        run.router(2).forward.stats().received,
        r2_rx,
        "R1 still forwards to R2"
    );
    run.check_invariants();

    // 6. H1 joins again: R4 grafts to R2, R2 to R1; acks come back; data flows to H1 only.
    let join_at = run.sim.now();
    run.host(H1).join(join_at, G1);
    run.run(Some(join_at), ms(50_000));
    for r in [1, 2, 4] {
        assert_eq!(run.upstream(r), Upstream::Forwarding, "R{r} grafted back");
    }
    assert_eq!(run.pruned_by(1), [3].into());
    assert_eq!(run.pruned_by(2), [5].into());
    assert!(run.router(4).pruner.stats().grafts_sent >= 1);
    assert!(run.router(2).pruner.stats().grafts_sent >= 1);
    assert!(run.router(2).pruner.stats().graft_acks_received >= 1);
    let first = run.first_delivery_after(H1, join_at).unwrap();
    let join_latency = first.saturating_duration_since(join_at);
    // The graft goes up two hops and the next packet (≤ 100 ms later) comes down.
    assert!(
        join_latency <= Duration::from_millis(300),
        "{join_latency:?}"
    );
    let (h1, dup) = run.received(H1);
    assert!(!dup);
    assert!(h1.is_superset(&run.sent_between(join_at + Duration::from_millis(300), ms(49_950))));
    assert!(run
        .received(H2)
        .0
        .is_disjoint(&run.sent_between(ms(30_500), ms(50_000))));
    assert!(run.received(H3).0.is_empty() && run.received(H4).0.is_empty());
    run.check_invariants();
    eprintln!(
        "net15 operational scenario: leave latency {leave_latency:?}, join latency {join_latency:?}, {} packets sent",
        run.sent.len()
    );
}
