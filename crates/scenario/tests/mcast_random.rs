//! Issue 17 §1/§3 through the whole stack: random multi-hop networks written as stack files
//! (`[topology]` with point-to-point links and LAN segments, routers and hosts, duplication,
//! reordering and jitter on every link, link failures and repairs, router crashes and restarts)
//! run the `interface` + `checksum` + `dvmrp` stack in the simulator; the routing tables in the
//! run report must equal a central shortest-path computation over the links up at the end,
//! neighbour timeout + route expiration + report interval after the last event.
//!
//! Loss is left to `crates/mcast/tests/convergence.rs`, which drives the protocol directly and
//! can make links perfect for the quiet; here a link's conditions hold for the whole run.
//! `MCAST_NET_SEEDS=n` raises the seed count (default 40); a failure names its seed and prints
//! the stack file.
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::fmt::Write;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_scenario::{run, RunOptions};
use viastack_stack::Role;

/// Timers / 100: probes 100 ms, neighbour timeout 350 ms, reports 600 ms, expiry 1.4 s.
const SCALE: f64 = 0.01;

struct Net {
    src: String,
    /// Per node: router?
    routers: Vec<bool>,
    links: Vec<Vec<usize>>,
    /// Links down at the end.
    down: Vec<bool>,
}

fn random_net(seed: u64) -> Net {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0017);
    let n_routers: usize = rng.gen_range(3..=9);
    let n_hosts: usize = rng.gen_range(0..=2);
    let n = n_routers + n_hosts;
    let mut links: Vec<Vec<usize>> = Vec::new();
    for i in 1..n_routers {
        links.push(vec![i, rng.gen_range(0..i)]);
    }
    for _ in 0..rng.gen_range(0..=n_routers) {
        let (a, b) = (rng.gen_range(0..n_routers), rng.gen_range(0..n_routers));
        if a != b {
            links.push(vec![a, b]);
        }
    }
    if n_routers >= 4 && rng.gen_bool(0.5) {
        let mut m: Vec<usize> = (0..n_routers).collect();
        for i in (1..m.len()).rev() {
            m.swap(i, rng.gen_range(0..=i));
        }
        m.truncate(3);
        links.push(m);
    }
    // Each host on a segment with one or two routers.
    for h in n_routers..n {
        let mut seg = vec![h, rng.gen_range(0..n_routers)];
        let other = rng.gen_range(0..n_routers);
        if rng.gen_bool(0.5) && !seg.contains(&other) {
            seg.push(other);
        }
        links.push(seg);
    }
    let ports = (0..n)
        .map(|v| links.iter().filter(|l| l.contains(&v)).count())
        .max()
        .unwrap_or(1);

    let mut s = String::new();
    for p in 0..ports {
        writeln!(s, "[layers.if{p}]\nkind = \"interface\"\nport = {p}").unwrap();
    }
    writeln!(s, "[layers.sum]\nkind = \"checksum\"").unwrap();
    writeln!(s, "[layers.route]\nkind = \"dvmrp\"\ntime_scale = {SCALE}").unwrap();
    writeln!(s, "[sessions.routing]\nlayer = \"route\"").unwrap();
    for p in 0..ports {
        writeln!(s, "[qos.q{p}]\nlayers = [\"if{p}\", \"sum\", \"route\"]").unwrap();
        writeln!(
            s,
            "[channels.c{p}]\nqos = \"q{p}\"\nbind = {{ route = \"routing\" }}"
        )
        .unwrap();
    }
    for v in 0..n {
        let role = if v < n_routers { "router" } else { "host" };
        writeln!(s, "[[topology.node]]\nname = \"N{v}\"\nrole = \"{role}\"").unwrap();
    }
    for (i, l) in links.iter().enumerate() {
        let names: Vec<String> = l.iter().map(|v| format!("\"N{v}\"")).collect();
        writeln!(
            s,
            "[[topology.link]]\nname = \"L{i}\"\nnodes = [{}]\nlatency = \"{}ms\"\njitter = \"{}ms\"\nduplicate = {:.3}\nreorder = {:.3}\nreorder_delay = \"15ms\"",
            names.join(", "),
            rng.gen_range(1..=5),
            rng.gen_range(0..=3),
            rng.gen_range(0.0..0.05),
            rng.gen_range(0.0..0.1),
        )
        .unwrap();
    }
    let chaos_ms: u64 = 6_000;
    let bound_ms = 350 + 1_400 + 600;
    writeln!(
        s,
        "[scenario]\nnodes = {n}\nseed = {seed}\nduration = \"{}ms\"",
        chaos_ms + bound_ms
    )
    .unwrap();
    let mut down = vec![false; links.len()];
    let mut failed = vec![false; links.len()];
    for _ in 0..rng.gen_range(0..=2) {
        let l = rng.gen_range(0..links.len());
        let at = rng.gen_range(500..chaos_ms - 1_000);
        // One failure per link, so that the end state is plain.
        if std::mem::replace(&mut failed[l], true) {
            continue;
        }
        if rng.gen_bool(0.5) {
            down[l] = true;
            writeln!(
                s,
                "[[scenario.link_failure]]\nlink = \"L{l}\"\nat = \"{at}ms\""
            )
            .unwrap();
        } else {
            let repair = rng.gen_range(at + 1..chaos_ms);
            writeln!(
                s,
                "[[scenario.link_failure]]\nlink = \"L{l}\"\nat = \"{at}ms\"\nrepair = \"{repair}ms\""
            )
            .unwrap();
        }
    }
    for _ in 0..rng.gen_range(0..=2) {
        let v = rng.gen_range(0..n_routers);
        let at = rng.gen_range(500..chaos_ms - 2_000);
        let restart = rng.gen_range(at + 1..chaos_ms - 500);
        writeln!(
            s,
            "[[scenario.crash]]\nnode = {v}\nat = \"{at}ms\"\nrestart = \"{restart}ms\""
        )
        .unwrap();
    }
    let routers = (0..n).map(|v| v < n_routers).collect();
    Net {
        src: s,
        routers,
        links,
        down,
    }
}

fn check(seed: u64) -> Result<(), String> {
    let net = random_net(seed);
    let catalog = viastack_stack::standard_catalog();
    let file =
        viastack_stack::parse("random.toml", &net.src, &catalog).map_err(|d| d.to_string())?;
    let t = file.topology.as_ref().unwrap();
    assert!(t
        .nodes
        .iter()
        .zip(&net.routers)
        .all(|(d, &r)| (d.role == Role::Router) == r));
    let report = run(
        &file,
        &catalog,
        &RunOptions {
            seed: None,
            duration: None,
        },
        |_| {},
    )
    .map_err(|e| e.to_string())?;
    let n = net.routers.len();
    // Router-to-router hops over the links up at the end.
    let dist: Vec<Vec<Option<u8>>> = (0..n)
        .map(|s| {
            let mut d = vec![None; n];
            if !net.routers[s] {
                return d;
            }
            d[s] = Some(0u8);
            let mut q = VecDeque::from([s]);
            while let Some(u) = q.pop_front() {
                for (l, link) in net.links.iter().enumerate() {
                    if net.down[l] || !link.contains(&u) {
                        continue;
                    }
                    for &v in link {
                        if net.routers[v] && d[v].is_none() {
                            d[v] = Some(d[u].unwrap() + 1);
                            q.push_back(v);
                        }
                    }
                }
            }
            d
        })
        .collect();
    for r in (0..n).filter(|&r| net.routers[r]) {
        let mem = report
            .memory
            .get(&format!("N{r}"))
            .ok_or_else(|| format!("router N{r} has no memory in the report"))?;
        for (l, link) in net.links.iter().enumerate() {
            let want = link.iter().filter_map(|&a| dist[r][a].map(|d| d + 1)).min();
            let prefix = format!("10.0.{l}.0/24");
            let got = mem
                .routes
                .iter()
                .find(|x| x.prefix == prefix && x.metric < 32)
                .map(|x| x.metric);
            if got != want {
                return Err(format!(
                    "router N{r}: {prefix} (L{l}) expected {want:?}, has {got:?}"
                ));
            }
        }
    }
    if report.memory.len() != net.routers.iter().filter(|&&r| r).count() {
        return Err(format!("memory of {:?}", report.memory.keys()));
    }
    Ok(())
}

#[test]
fn dvmrp_stacks_route_shortest_paths_on_random_networks() {
    let seeds: u64 = std::env::var("MCAST_NET_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let mut failed = Vec::new();
    for seed in 0..seeds {
        if let Err(e) = check(seed) {
            eprintln!(
                "seed {seed}: {e}\n--- stack file ---\n{}",
                random_net(seed).src
            );
            failed.push(seed);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {seeds} seeds failed: {failed:?}",
        failed.len()
    );
}
