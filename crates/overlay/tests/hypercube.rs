//! The hypercube protocol over seeds: nodes join at random times through the buddy list over a
//! network that loses, duplicates and reorders messages for the first 15 virtual seconds; once
//! quiet, the cube must be compact and consistent — the labels are exactly G(0) … G(N−1), each
//! held once; every node's neighbours are exactly the present labels one bit away; every node
//! knows the HRoot G(N−1), which alone is root — and every bit-rule tree spans the cube without
//! a cycle. Then nodes leave and crash, and the cube must be compact again.

#![allow(clippy::unwrap_used)]

mod util;

use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use util::{Engine, Faults, Net};
use viastack_kernel::{Duration, Instant};
use viastack_overlay::hypercube::{Config, Message, Node};
use viastack_overlay::tree::{hc_children, hc_parent};
use viastack_overlay::{HcLabel, SimAddr};

impl Engine for Node<SimAddr> {
    type Msg = Message<SimAddr>;
    fn handle_message(&mut self, now: Instant, from: SimAddr, msg: Self::Msg) {
        Node::handle_message(self, now, from, msg)
    }
    fn handle_timeout(&mut self, now: Instant) {
        Node::handle_timeout(self, now)
    }
    fn poll_transmit(&mut self) -> Option<(SimAddr, Self::Msg)> {
        Node::poll_transmit(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Node::poll_timeout(self)
    }
    fn drain_events(&mut self) -> usize {
        let mut n = 0;
        while self.poll_event().is_some() {
            n += 1;
        }
        n
    }
}

const STEP_CAP: u64 = 5_000_000;

fn network(seed: u64, n: usize, start_within: Duration) -> Net<Node<SimAddr>> {
    let mut net = Net::new(seed, n);
    let config = Config {
        buddies: vec![SimAddr(0), SimAddr(1)],
        ..Config::default()
    };
    for i in 0..n {
        let at = Instant::from_nanos(net.rng.gen_range(0..=start_within.as_nanos() as u64));
        net.start_at(i, at, Node::new(config.clone(), SimAddr(i as u32), at));
    }
    net
}

fn check_compact(net: &Net<Node<SimAddr>>) -> Result<(), String> {
    let live: Vec<&Node<SimAddr>> = net.nodes.iter().flatten().collect();
    let n = live.len() as u32;
    let mut labels = BTreeMap::new();
    for node in &live {
        let l = node.label().ok_or("a live node without a label")?;
        if labels.insert(l, *node).is_some() {
            return Err(format!("label {l} held twice"));
        }
    }
    let want: BTreeSet<HcLabel> = (0..n).map(HcLabel::gray).collect();
    let have: BTreeSet<HcLabel> = labels.keys().copied().collect();
    if have != want {
        return Err(format!("labels {have:?} are not G(0..{n})"));
    }
    let top = HcLabel::gray(n - 1);
    for (&l, node) in &labels {
        let nb: BTreeSet<HcLabel> = node.neighbour_labels().collect();
        let want_nb: BTreeSet<HcLabel> = (0..32)
            .map(|b| l.flip(b))
            .filter(|x| want.contains(x))
            .collect();
        if nb != want_nb {
            return Err(format!("{l}: neighbours {nb:?}, expected {want_nb:?}"));
        }
        if node.root_label() != Some(top) {
            return Err(format!(
                "{l} knows root {:?}, expected {top}",
                node.root_label()
            ));
        }
        if node.is_root() != (l == top) {
            return Err(format!("{l}: is_root {}", node.is_root()));
        }
    }
    Ok(())
}

fn check_trees(net: &Net<Node<SimAddr>>) -> Result<(), String> {
    let by_label: BTreeMap<HcLabel, &Node<SimAddr>> = net
        .nodes
        .iter()
        .flatten()
        .filter_map(|n| Some((n.label()?, n)))
        .collect();
    let n = by_label.len() as u32;
    for &root in by_label.keys() {
        for (&l, node) in &by_label {
            let mut cur = l;
            let mut hops = 0;
            while cur != root {
                cur =
                    hc_parent(cur, root, n - 1).ok_or(format!("{cur} has no parent to {root}"))?;
                if !by_label.contains_key(&cur) {
                    return Err(format!("parent {cur} is not in the cube"));
                }
                hops += 1;
                if hops > 32 {
                    return Err(format!("cycle from {l} to {root}"));
                }
            }
            let children: BTreeSet<HcLabel> = hc_children(node, root).collect();
            let want: BTreeSet<HcLabel> = by_label
                .keys()
                .copied()
                .filter(|&c| c != root && hc_parent(c, root, n - 1) == Some(l))
                .collect();
            if children != want {
                return Err(format!(
                    "children of {l} towards {root}: {children:?}, expected {want:?}"
                ));
            }
        }
    }
    Ok(())
}

fn run_seed(seed: u64, n: usize) -> Result<Net<Node<SimAddr>>, String> {
    let mut net = network(seed, n, Duration::from_secs(5));
    net.faults = Faults {
        loss: 0.05,
        duplicate: 0.02,
        reorder: 0.05,
    };
    net.run_until(Instant::from_millis(15_000), STEP_CAP)?;
    net.faults = Faults::default();
    net.run_until_quiet(
        Instant::from_millis(20_000),
        Duration::from_secs(10),
        Instant::from_millis(600_000),
        STEP_CAP,
    )?;
    check_compact(&net)?;
    Ok(net)
}

#[test]
fn hypercube_is_compact_and_consistent_over_seeds() {
    let only: Option<u64> = std::env::var("HC_SEED").ok().and_then(|s| s.parse().ok());
    let mut failures = Vec::new();
    let mut count = 0;
    for seed in 0..300u64 {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let n = if seed < 250 {
            2 + (seed as usize * 7) % 30
        } else {
            33 + (seed as usize * 13) % 68
        };
        count += 1;
        match run_seed(seed, n) {
            Ok(net) => {
                if seed % 10 == 0 {
                    if let Err(e) = check_trees(&net) {
                        failures.push(format!("seed {seed} ({n} nodes) trees: {e}"));
                    }
                }
            }
            Err(e) => failures.push(format!("seed {seed} ({n} nodes): {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} seeds failed (rerun one with HC_SEED=N):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn leaves_and_crashes_are_repaired_compactly() {
    for seed in 0..40u64 {
        let n = 20 + (seed as usize % 13);
        let mut net = run_seed(seed, n).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Never the bootstrap buddy (node 0): a crash of the rendezvous is out of scope.
        let victims: BTreeSet<usize> = (0..4).map(|_| rng.gen_range(2..n)).collect();
        for (k, &i) in victims.iter().enumerate() {
            if k % 2 == 0 {
                net.with_node(i, |node, now| node.leave(now));
            }
            net.crash(i);
        }
        let t = net.now;
        let quiet = net.run_until_quiet(
            t + Duration::from_secs(1),
            Duration::from_secs(10),
            t + Duration::from_secs(600),
            STEP_CAP,
        );
        if let Err(e) = quiet.map(|_| ()).and_then(|_| check_compact(&net)) {
            for node in net.nodes.iter().flatten() {
                eprintln!(
                    "{:?} root {:?} is_root {} nbrs {:?} stats {:?}",
                    node.label(),
                    node.root_label(),
                    node.is_root(),
                    node.neighbour_labels().collect::<Vec<_>>(),
                    node.stats()
                );
            }
            panic!("seed {seed} after {victims:?} left: {e}");
        }
    }
}

/// A cube split in two (node 0 on one side, node 1 on the other: each side keeps a buddy)
/// becomes two cubes; when the partition heals they find each other through the buddies (the
/// HRoots beacon to them) and merge into one compact, consistent cube.
fn partition_and_heal(seed: u64, n: usize) -> Result<(), String> {
    let mut net = run_seed(seed, n)?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    for i in 0..n {
        net.group[i] = u8::from(i == 1 || (i >= 2 && rng.gen_bool(0.5)));
    }
    // A partition that lasts (longer than `fragment_after`: a fragment cut off from its
    // HRoot founds a cube of its own).
    let t = net.now;
    net.run_until(t + Duration::from_secs(30), STEP_CAP)?;
    let t = net.now;
    net.run_until_quiet(
        t + Duration::from_secs(1),
        Duration::from_secs(10),
        t + Duration::from_secs(600),
        STEP_CAP,
    )?;
    let roots = net.nodes.iter().flatten().filter(|n| n.is_root()).count();
    if std::env::var("HC_DEBUG").is_ok() {
        eprintln!("{roots} HRoots during the partition");
    }
    let debug = std::env::var("HC_DEBUG").is_ok();
    if check_compact(&net).is_err() && debug {
        {
            for (i, node) in net.nodes.iter().enumerate() {
                if let Some(node) = node {
                    eprintln!(
                        "n{i} g{} {:?} root {:?} is_root {} nbrs {:?} {:?}",
                        net.group[i],
                        node.label(),
                        node.root_label(),
                        node.is_root(),
                        node.neighbour_labels().collect::<Vec<_>>(),
                        node.stats()
                    );
                }
            }
        }
    }
    net.group = vec![0; n];
    let t = net.now;
    net.run_until_quiet(
        t + Duration::from_secs(1),
        Duration::from_secs(10),
        t + Duration::from_secs(900),
        STEP_CAP,
    )?;
    if let Err(e) = check_compact(&net) {
        if std::env::var("HC_DEBUG").is_ok() {
            for (i, node) in net.nodes.iter().enumerate() {
                if let Some(node) = node {
                    eprintln!(
                        "after n{i} {:?} root {:?} is_root {} nbrs {:?} {:?}",
                        node.label(),
                        node.root_label(),
                        node.is_root(),
                        node.neighbour_labels().collect::<Vec<_>>(),
                        node.stats()
                    );
                }
            }
        }
        return Err(format!("after the heal: {e}"));
    }
    check_trees(&net).map_err(|e| format!("after the heal, trees: {e}"))
}

/// Every seed must merge; `--nocapture` lists failures, `HC_DEBUG=1 HC_SEED=N` prints the
/// nodes.
#[test]
fn partitions_merge_into_one_compact_cube_when_healed() {
    let only: Option<u64> = std::env::var("HC_SEED").ok().and_then(|s| s.parse().ok());
    let mut failures = Vec::new();
    let mut count = 0;
    for seed in 0..60u64 {
        if only.is_some_and(|o| o != seed) {
            continue;
        }
        let n = 4 + (seed as usize * 7) % 29;
        count += 1;
        if let Err(e) = partition_and_heal(seed, n) {
            failures.push(format!("seed {seed} ({n} nodes): {e}"));
        }
    }
    eprintln!(
        "partition merges: {} of {count} seeds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        failures.is_empty(),
        "{} of {count} seeds failed (rerun one with HC_SEED=N):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
