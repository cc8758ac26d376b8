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
