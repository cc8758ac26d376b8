//! Issue 17 §3: `stacks/mcast-net15.toml`, seed 004's 15-node test network (receivers four hops
//! from the source), runs DVMRP on its ten routers in the simulator. The routing tables in the
//! run report (global memory) equal a central shortest-path computation over the links that are
//! up: with every link up at the end of the run, and while R2-R4 is down (the routers then go
//! round it through R8), after router R10 rebooted.
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;

use viastack_kernel::Duration;
use viastack_scenario::{run, Report, RunOptions};
use viastack_stack::{Role, StackFile, TopologyDecl};

fn file() -> StackFile {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../stacks/mcast-net15.toml");
    let src = std::fs::read_to_string(path).unwrap();
    viastack_stack::parse(
        "mcast-net15.toml",
        &src,
        &viastack_stack::standard_catalog(),
    )
    .unwrap_or_else(|d| panic!("{d}"))
}

fn run_for(f: &StackFile, secs: u64) -> Report {
    let options = RunOptions {
        seed: None,
        duration: Some(Duration::from_secs(secs)),
    };
    run(f, &viastack_stack::standard_catalog(), &options, |_| {}).unwrap()
}

/// Router-to-router hop counts over the links that are up (hosts forward nothing).
fn hops(t: &TopologyDecl, up: &[bool]) -> Vec<Vec<Option<u8>>> {
    let n = t.nodes.len();
    let router = |i: usize| t.nodes[i].role == Role::Router;
    (0..n)
        .map(|s| {
            let mut d = vec![None; n];
            if !router(s) {
                return d;
            }
            d[s] = Some(0u8);
            let mut q = VecDeque::from([s]);
            while let Some(u) = q.pop_front() {
                for (l, link) in t.links.iter().enumerate() {
                    if !up[l] || !link.nodes.contains(&(u as u32)) {
                        continue;
                    }
                    for &v in &link.nodes {
                        let v = v as usize;
                        if router(v) && d[v].is_none() {
                            d[v] = Some(d[u].unwrap() + 1);
                            q.push_back(v);
                        }
                    }
                }
            }
            d
        })
        .collect()
}

/// Every router's routing table in `r` equals the central computation, each upstream is a
/// router one hop closer on a link that is up.
fn check(r: &Report, t: &TopologyDecl, up: &[bool]) {
    let dist = hops(t, up);
    let expected = |router: usize, link: usize| {
        t.links[link]
            .nodes
            .iter()
            .filter_map(|&a| dist[router][a as usize].map(|d| d + 1))
            .min()
    };
    let routers: Vec<usize> = (0..t.nodes.len())
        .filter(|&i| t.nodes[i].role == Role::Router)
        .collect();
    assert_eq!(r.memory.len(), routers.len(), "{:?}", r.memory.keys());
    for &i in &routers {
        let name = &t.nodes[i].name;
        let mem = &r.memory[name];
        for (l, link) in t.links.iter().enumerate() {
            let prefix = format!("10.0.{l}.0/24");
            let route = mem
                .routes
                .iter()
                .find(|x| x.prefix == prefix && x.metric < 32);
            let want = expected(i, l);
            assert_eq!(
                route.map(|x| x.metric),
                want,
                "{name}: route to {prefix} ({}) in {:#?}",
                link.name,
                mem.routes
            );
            if let Some(up_addr) = route.and_then(|x| x.upstream.as_deref()) {
                let v: usize = up_addr.rsplit('.').next().unwrap().parse().unwrap();
                assert_eq!(
                    expected(v, l).map(|m| m + 1),
                    want,
                    "{name}: {prefix} via {up_addr}, not one hop closer"
                );
            }
        }
        assert!(
            mem.neighbors.iter().all(|n| n.two_way),
            "{name}: one-way neighbours at the end: {:?}",
            mem.neighbors
        );
    }
}

#[test]
fn net15_routes_are_shortest_paths_and_go_round_a_failed_link() {
    let f = file();
    let t = f.topology.clone().unwrap();
    assert_eq!(t.nodes.len(), 15);
    let r4 = t.node_index("R4").unwrap() as usize;
    let lan_a = t.link_index("lanA").unwrap();
    let failed = t.link_index("R2-R4").unwrap();

    // Receivers are four hops from the source A.
    let all_up = vec![true; t.links.len()];
    let dist = hops(&t, &all_up);
    for h in ["H1", "H2", "H3", "H4"] {
        let host = t.node_index(h).unwrap();
        let lan = t
            .links
            .iter()
            .position(|l| l.nodes.contains(&host))
            .unwrap();
        let edge = t.links[lan].nodes.iter().find(|&&n| n != host).unwrap();
        let r1 = t.node_index("R1").unwrap() as usize;
        // A → R1, R1 → … → edge router, edge router → host.
        assert_eq!(dist[r1][*edge as usize].map(|d| d + 2), Some(4), "{h}");
    }

    // While R2-R4 is down (20 s – 40 s).
    let mid = run_for(&f, 35);
    let mut up = all_up.clone();
    up[failed] = false;
    check(&mid, &t, &up);
    let to_a = mid.memory["R4"]
        .routes
        .iter()
        .find(|x| x.prefix == format!("10.0.{lan_a}.0/24"))
        .unwrap();
    assert_eq!(
        (to_a.metric, to_a.upstream.as_deref()),
        (3, Some("10.255.0.8"))
    );
    assert!(mid.network.dropped_link_down > 0, "{mid}");
    assert!(r4 < t.nodes.len());
    // R10's reboot (8 s – 12 s) and the failed link cost its neighbours and R2, R4 theirs.
    let lost = mid
        .counters
        .get("route.neighbors_lost")
        .copied()
        .unwrap_or(0);
    assert!(lost >= 5, "neighbours lost: {lost}");
    // The same seed replays bit for bit.
    assert_eq!(run_for(&f, 35).trace_hash, mid.trace_hash);

    // A's segment is a LAN (A, R1, R10).
    assert_eq!(t.links[lan_a].nodes.len(), 3);
    // After the repair, at the end of the run: R2 and R8 are as close; the lower address wins.
    let end = run_for(&f, 60);
    check(&end, &t, &all_up);
    let to_a = end.memory["R4"]
        .routes
        .iter()
        .find(|x| x.prefix == format!("10.0.{lan_a}.0/24"))
        .unwrap();
    assert_eq!(
        (to_a.metric, to_a.upstream.as_deref()),
        (3, Some("10.255.0.2"))
    );
    assert!(end.counters.get("route.probes_sent").copied().unwrap_or(0) > 0);
}

/// Deliveries to hosts so far (the `mcast-forward` layers' counter, summed over the nodes).
fn delivered(r: &Report) -> u64 {
    r.counters.get("data.data_delivered").copied().unwrap_or(0)
}

/// The prune-table row of (lanA, G1) at `node`, if any: (upstream state, pruned by).
fn prune_row(r: &Report, node: &str) -> Option<(String, Vec<String>)> {
    r.memory[node]
        .prunes
        .iter()
        .find(|p| p.source == "10.0.0.0/24" && p.group == "239.1.1.1")
        .map(|p| (p.upstream.clone(), p.pruned_by.clone()))
}

fn members(r: &Report, node: &str) -> Vec<String> {
    r.memory[node]
        .groups
        .iter()
        .map(|g| g.group.clone())
        .collect()
}

/// Issue 17 §3: the seed's operational scenario through the stacks of `stacks/mcast-net15.toml`
/// (routing + group management + data on every node): the run report's global memory (group,
/// prune and source tables) and the deliveries at each step.
#[test]
fn net15_operational_scenario_through_the_stacks() {
    let f = file();
    // 1. Before anyone joins (4 s): source trees, no members, no prunes.
    let r = run_for(&f, 4);
    let tree = r.memory["R1"]
        .tree
        .iter()
        .find(|t| t.source == "10.0.0.0/24")
        .cloned()
        .unwrap();
    assert_eq!(tree.upstream, None, "R1 is attached to lanA");
    let deps: Vec<&String> = tree.children.values().flatten().collect();
    assert_eq!(deps, ["10.255.0.2", "10.255.0.3"], "{tree:?}");
    assert!(r.memory.values().all(|m| m.groups.is_empty()));
    assert_eq!(delivered(&r), 0);

    // 2–3. H1 and H2 joined at 5 s, A multicasts from 6 s: at 14 s R4 and R5 list G1, the
    // branches without members (R3's, R8's, R9's) are pruned, H1 and H2 get the data.
    let r = run_for(&f, 14);
    assert_eq!(members(&r, "R4"), ["239.1.1.1"]);
    assert_eq!(members(&r, "R5"), ["239.1.1.1"]);
    for n in ["R1", "R2", "R3", "R6", "R7", "R8", "R9"] {
        assert!(members(&r, n).is_empty(), "{n}");
    }
    let (up, by) = prune_row(&r, "R3").unwrap();
    assert_eq!(up, "pruned");
    assert_eq!(by.len(), 2, "R6 and R7 pruned to R3: {by:?}");
    let (_, by) = prune_row(&r, "R1").unwrap();
    assert_eq!(by, ["2/10.255.0.3"], "R3 pruned to R1 (interface 2)");
    assert!(prune_row(&r, "R2").is_none(), "R2 forwards to R4 and R5");
    let d14 = delivered(&r);
    // About 80 packets to each of H1 and H2 (1 % loss on the links).
    assert!((140..=162).contains(&d14), "delivered {d14}");

    // 4–5. H1 left at 15 s, H2 at 18 s: at 19.5 s the branches are pruned back to R1.
    let r = run_for(&f, 19);
    let d19 = delivered(&r);
    let r = run_for(&f, 44);
    assert!(members(&r, "R4").is_empty() && members(&r, "R5").is_empty());
    let (_, by) = prune_row(&r, "R1").unwrap();
    assert_eq!(by.len(), 2, "R2 and R3 pruned to R1: {by:?}");
    assert_eq!(delivered(&r), d19, "nobody is a member from 18 s to 44 s");

    // 6. H1 joined again at 45 s: grafted back through R2 to R1; H1 gets the data again.
    let r = run_for(&f, 60);
    assert_eq!(members(&r, "R4"), ["239.1.1.1"]);
    let (_, by) = prune_row(&r, "R1").unwrap();
    assert_eq!(by, ["2/10.255.0.3"], "only R3's branch is still pruned");
    let more = delivered(&r) - d19;
    assert!((130..=151).contains(&more), "H1 got {more} after rejoining");
    assert!(r.counters.get("route.grafts_sent").copied().unwrap_or(0) >= 2);
    assert!(
        r.counters
            .get("route.graft_acks_received")
            .copied()
            .unwrap_or(0)
            >= 2
    );
    assert!(r.counters.get("groups.leaves_sent").copied().unwrap_or(0) >= 2);
    eprintln!(
        "delivered: {d14} by 14 s, {d19} by 19 s, {more} after the rejoin; {}",
        r.memory["R4"].prunes.len()
    );
}
