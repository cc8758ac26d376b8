//! The forwarding engine on converged overlays, over many seeds: DT and hypercube networks are
//! built in the deterministic test network (nodes joining at random times through a buddy
//! list, with loss, duplication and reordering while they join) and run until quiet; then, on
//! the converged neighbourhoods, from every node (or a sample):
//!
//! - every embedded tree spans the overlay with no cycle (parent chains reach the root within
//!   N hops, and `children` agrees with `parent`);
//! - a multicast reaches every other node exactly once (never the source), and no copy fails
//!   the previous-hop check;
//! - a flood reaches every other node exactly once even when every copy is sent twice (the
//!   duplicates are suppressed and counted);
//! - a unicast reaches its destination, and only it.
//!
//! A failing case names its seed.

#![allow(clippy::unwrap_used)]

mod util;

use std::collections::{BTreeMap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use util::{Engine, Faults, Net};
use viastack_kernel::{Duration, Instant};
use viastack_overlay::forward::{Config, DtTopology, Forwarder, HcTopology, LogicalAddr, Topology};
use viastack_overlay::wire::app::DeliveryMode;
use viastack_overlay::{dt, hypercube, DtAddr, SimAddr};

struct DtNode(dt::Node<SimAddr>);
struct HcNode(hypercube::Node<SimAddr>);

macro_rules! engine {
    ($t:ident, $m:ty) => {
        impl Engine for $t {
            type Msg = $m;
            fn handle_message(&mut self, now: Instant, from: SimAddr, msg: Self::Msg) {
                self.0.handle_message(now, from, msg)
            }
            fn handle_timeout(&mut self, now: Instant) {
                self.0.handle_timeout(now)
            }
            fn poll_transmit(&mut self) -> Option<(SimAddr, Self::Msg)> {
                self.0.poll_transmit()
            }
            fn poll_timeout(&self) -> Option<Instant> {
                self.0.poll_timeout()
            }
            fn drain_events(&mut self) -> usize {
                let mut n = 0;
                while self.0.poll_event().is_some() {
                    n += 1;
                }
                n
            }
        }
    };
}
engine!(DtNode, dt::Message<SimAddr>);
engine!(HcNode, hypercube::Message<SimAddr>);

const STEP_CAP: u64 = 5_000_000;

fn faults() -> Faults {
    Faults {
        loss: 0.05,
        duplicate: 0.05,
        reorder: 0.1,
    }
}

fn converge<E: Engine>(net: &mut Net<E>, seed: u64) -> Result<(), String>
where
    E::Msg: Clone,
{
    net.faults = faults();
    net.run_until(Instant::from_millis(10_000), STEP_CAP)
        .map_err(|e| format!("seed {seed}: {e}"))?;
    net.faults = Faults::default();
    net.run_until_quiet(
        Instant::from_millis(10_000),
        Duration::from_secs(15),
        Instant::from_millis(300_000),
        STEP_CAP,
    )
    .map(|_| ())
    .map_err(|e| format!("seed {seed}: {e}"))
}

fn dt_net(seed: u64, n: usize) -> Net<DtNode> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd7);
    let mut set = std::collections::BTreeSet::new();
    while set.len() < n {
        set.insert(DtAddr::new(rng.gen_range(0..10_000), rng.gen_range(0..10_000)).unwrap());
    }
    let mut points: Vec<DtAddr> = set.into_iter().collect();
    for i in (1..points.len()).rev() {
        points.swap(i, rng.gen_range(0..=i));
    }
    let mut net = Net::new(seed, n);
    let config = dt::Config {
        buddies: vec![SimAddr(0), SimAddr(1)],
        ..dt::Config::default()
    };
    for (i, &p) in points.iter().enumerate() {
        let at = Instant::from_nanos(net.rng.gen_range(0..=3_000_000_000));
        net.start_at(
            i,
            at,
            DtNode(dt::Node::new(config.clone(), p, SimAddr(i as u32), at)),
        );
    }
    net
}

fn hc_net(seed: u64, n: usize) -> Net<HcNode> {
    let mut net = Net::new(seed, n);
    let config = hypercube::Config {
        buddies: vec![SimAddr(0), SimAddr(1)],
        ..hypercube::Config::default()
    };
    for i in 0..n {
        let at = Instant::from_nanos(net.rng.gen_range(0..=3_000_000_000));
        net.start_at(
            i,
            at,
            HcNode(hypercube::Node::new(config.clone(), SimAddr(i as u32), at)),
        );
    }
    net
}

/// Every tree rooted at each node spans the overlay with no cycle; children agree with
/// parents.
fn check_trees<T: Topology>(topos: &BTreeMap<T::Addr, T>) -> Result<(), String> {
    let n = topos.len();
    for &root in topos.keys() {
        for (&a, t) in topos {
            let mut cur = a;
            let mut hops = 0;
            while cur != root {
                let p = topos[&cur]
                    .parent(root)
                    .ok_or(format!("{cur:?} has no parent towards {root:?}"))?;
                if !topos.contains_key(&p) {
                    return Err(format!("{cur:?}'s parent {p:?} is not a node"));
                }
                cur = p;
                hops += 1;
                if hops > n {
                    return Err(format!("cycle in the tree rooted at {root:?} from {a:?}"));
                }
            }
            for c in t.children(root) {
                if topos[&c].parent(root) != Some(a) {
                    return Err(format!("{c:?} is a child of {a:?} whose parent is not it"));
                }
            }
            let kids = topos
                .iter()
                .filter(|(_, u)| u.parent(root) == Some(a))
                .count();
            if kids != t.children(root).len() {
                return Err(format!(
                    "{a:?}: children and parents disagree (root {root:?})"
                ));
            }
        }
    }
    Ok(())
}

/// Sends one message from `origin` and carries every copy to its next hop (each copy `copies`
/// times), until none is left. Returns the deliveries per node.
fn propagate<T: Topology>(
    topos: &BTreeMap<T::Addr, T>,
    fwd: &mut BTreeMap<T::Addr, Forwarder<T::Addr>>,
    origin: T::Addr,
    mode: DeliveryMode,
    dest: Option<T::Addr>,
    copies: usize,
) -> Result<BTreeMap<T::Addr, usize>, String> {
    let mut queue: VecDeque<(T::Addr, Vec<u8>)> = VecDeque::new();
    let f = fwd.get_mut(&origin).unwrap();
    f.send(&topos[&origin], mode, dest, b"payload")
        .map_err(|e| e.to_string())?;
    while let Some(t) = f.poll_transmit() {
        queue.push_back(t);
    }
    let mut got = BTreeMap::new();
    while f.poll_delivery().is_some() {
        *got.entry(origin).or_insert(0) += 1;
    }
    let mut steps = 0;
    while let Some((to, bytes)) = queue.pop_front() {
        steps += 1;
        if steps > 100_000 {
            return Err("copies do not die out".into());
        }
        let f = fwd
            .get_mut(&to)
            .ok_or(format!("a copy sent to {to:?}, not a node"))?;
        for _ in 0..copies {
            f.handle_message(&topos[&to], &bytes);
        }
        while let Some(d) = f.poll_delivery() {
            assert_eq!(d.payload, b"payload");
            *got.entry(to).or_insert(0) += 1;
        }
        while let Some(t) = f.poll_transmit() {
            queue.push_back(t);
        }
    }
    Ok(got)
}

fn check_forwarding<T: Topology>(topos: &BTreeMap<T::Addr, T>, seed: u64) -> Result<(), String> {
    let tag = |e: String| format!("seed {seed}: {e}");
    check_trees(topos).map_err(tag)?;
    let mut fwd: BTreeMap<T::Addr, Forwarder<T::Addr>> = topos
        .keys()
        .enumerate()
        .map(|(i, &a)| (a, Forwarder::new(Config::default(), (i as u64) << 32)))
        .collect();
    let addrs: Vec<T::Addr> = topos.keys().copied().collect();
    for (k, &origin) in addrs.iter().enumerate() {
        for (mode, copies) in [(DeliveryMode::Multicast, 1), (DeliveryMode::Flood, 2)] {
            let got = propagate(topos, &mut fwd, origin, mode, None, copies).map_err(tag)?;
            for &a in &addrs {
                let want = usize::from(a != origin);
                let have = got.get(&a).copied().unwrap_or(0);
                if have != want {
                    return Err(tag(format!(
                        "{mode:?} from {origin:?}: {a:?} received {have} copies, not {want}"
                    )));
                }
            }
        }
        let dest = addrs[(k * 7 + 3) % addrs.len()];
        let got = propagate(
            topos,
            &mut fwd,
            origin,
            DeliveryMode::Unicast,
            Some(dest),
            1,
        )
        .map_err(tag)?;
        let want: BTreeMap<T::Addr, usize> = [(dest, 1)].into();
        if got != want {
            return Err(tag(format!(
                "unicast {origin:?} → {dest:?} delivered {got:?}"
            )));
        }
    }
    let not_from_parent: u64 = fwd.values().map(|f| f.stats().not_from_parent).sum();
    let duplicates: u64 = fwd.values().map(|f| f.stats().duplicates).sum();
    if not_from_parent != 0 {
        return Err(tag(format!(
            "{not_from_parent} copies failed the previous-hop check"
        )));
    }
    if addrs.len() > 1 && duplicates == 0 {
        return Err(tag(
            "doubled flood copies were not counted as duplicates".into()
        ));
    }
    Ok(())
}

fn sizes(seed: u64) -> usize {
    3 + (seed as usize * 7) % 38
}

#[test]
fn forwarding_on_converged_dt_overlays() {
    for seed in 0..100u64 {
        let n = sizes(seed);
        let mut net = dt_net(seed, n);
        converge(&mut net, seed).unwrap();
        let topos: BTreeMap<DtAddr, DtTopology<'_, SimAddr>> = net
            .nodes
            .iter()
            .flatten()
            .map(|d| (d.0.addr(), DtTopology(&d.0)))
            .collect();
        assert_eq!(topos.len(), n);
        if let Err(e) = check_forwarding(&topos, seed) {
            panic!("DT, {n} nodes: {e}");
        }
    }
}

#[test]
fn forwarding_on_converged_hypercubes() {
    for seed in 0..100u64 {
        let n = sizes(seed);
        let mut net = hc_net(seed, n);
        converge(&mut net, seed).unwrap();
        let topos: BTreeMap<_, HcTopology<'_, SimAddr>> = net
            .nodes
            .iter()
            .flatten()
            .map(|h| (h.0.label().unwrap(), HcTopology(&h.0)))
            .collect();
        assert_eq!(topos.len(), n, "seed {seed}: labels held twice");
        if let Err(e) = check_forwarding(&topos, seed) {
            panic!("hypercube, {n} nodes: {e}");
        }
    }
}

/// The logical address types round-trip through the wire address.
#[test]
fn logical_addresses_round_trip() {
    let a = DtAddr::new(-5, 7).unwrap();
    assert_eq!(DtAddr::from_wire(a.to_wire()), Some(a));
    let l = viastack_overlay::HcLabel::new(6);
    assert_eq!(viastack_overlay::HcLabel::from_wire(l.to_wire()), Some(l));
    assert_eq!(DtAddr::from_wire(l.to_wire()), None);
}
