//! The rendezvous server in stack files (issue 16 §1, "join through a rendezvous … a
//! rendezvous server, partitions … merged when the network heals"; brief h-ovl item 1): the
//! `overlay` layer's `rendezvous = N` makes node N the server and every other node its client,
//! with **no buddy at all** (`buddies = ""`).
//!
//! Over seeds, with loss, duplication and reordering for the whole run, several nodes start
//! together (each may find nobody and found an overlay of its own: the server introduces the
//! leaders to each other) and the rest one by one; then the network is cut in two — the server
//! on one side — long enough for the far side to form a partition of its own with its own
//! leader, and healed. The only way the far side can learn of the near one is through the
//! server (no buddies, old neighbours timed out): its leader registers again, the server
//! introduces it to the other leader, and the partitions merge. At the end the DT neighbour
//! sets must equal the central Delaunay triangulation of the members (the server is none),
//! with one leader (`expect = "overlay-converged"`); on the hypercube the cube must be
//! compact.
//!
//! `VIASTACK_RDV_SEEDS` raises the seed count (default 40). Every assertion prints the seed and
//! the report; rerun one with `viastack run FILE --seed N`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{counter, run_src};

fn seeds() -> u64 {
    std::env::var("VIASTACK_RDV_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

/// `nodes` nodes (node 0 the server) on `topology`; nodes 1–3 start at once, the others one
/// every 400 ms; with `partition`, the nodes `nodes/2..` are cut off from 20 s to 40 s.
fn scenario(topology: &str, nodes: u32, partition: bool, duration: u32) -> String {
    let mut s = format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.net]
kind = "overlay"
topology = "{topology}"
buddies = ""
rendezvous = 0
[qos.o]
layers = ["dev", "sum", "net"]
[channels.data]
qos = "o"
[scenario]
nodes = {nodes}
seed = 1
duration = "{duration}s"
expect = "overlay-converged"
[scenario.link]
latency = "5ms"
jitter = "3ms"
loss = 0.05
duplicate = 0.05
reorder = 0.1
reorder_delay = "40ms"
"#
    );
    for (k, n) in (4..nodes).enumerate() {
        s.push_str(&format!(
            "[[scenario.crash]]\nnode = {n}\nat = \"0s\"\nrestart = \"{}ms\"\n",
            400 * (k + 1)
        ));
    }
    if partition {
        let near: Vec<u32> = (0..nodes / 2).collect();
        let far: Vec<u32> = (nodes / 2..nodes).collect();
        s.push_str(&format!(
            "[[scenario.partition]]\nat = \"20s\"\nheal = \"40s\"\ngroups = [{near:?}, {far:?}]\n"
        ));
    }
    s
}

#[test]
fn dt_nodes_with_no_buddies_join_through_the_server_and_partitions_merge_through_it() {
    for seed in 0..seeds() {
        let nodes = 5 + (seed as u32 * 7) % 21;
        let src = scenario("dt", nodes, true, 90);
        let r = run_src(&src, seed);
        assert!(r.verdict.holds, "seed {seed}, {nodes} nodes: {r}");
        assert!(r.network.lost > 0, "seed {seed}: no loss: {r}");
        assert!(
            counter(&r, "net.rendezvous_handled") > 0 && counter(&r, "net.rendezvous_answers") > 0,
            "seed {seed}: the server was not used: {r}"
        );
    }
}

#[test]
fn hypercube_nodes_with_no_buddies_join_through_the_server() {
    for seed in 0..seeds() / 2 {
        let nodes = 5 + (seed as u32 * 5) % 17;
        let src = scenario("hypercube", nodes, true, 90);
        let r = run_src(&src, seed);
        assert!(r.verdict.holds, "seed {seed}, {nodes} nodes: {r}");
    }
}

/// Without the server nobody meets: the same nodes with no buddies and no server stay alone
/// (each its own leader), so the convergence check fails — the test above is not vacuous.
#[test]
fn without_the_server_nodes_with_no_buddies_stay_alone() {
    let src = scenario("dt", 8, false, 30).replace("rendezvous = 0\n", "");
    let catalog = viastack_stack::standard_catalog();
    assert!(
        viastack_stack::parse("test.toml", &src, &catalog).is_err(),
        "no buddies and no server must be refused"
    );
    // A server that nobody can reach: every client stays unplaced.
    let src = scenario("dt", 8, false, 30).replace(
        "[scenario.link]",
        "[[scenario.partition]]\nat = \"0s\"\ngroups = [[0], [1, 2, 3, 4, 5, 6, 7]]\n[scenario.link]",
    );
    let r = run_src(&src, 3);
    assert!(!r.verdict.holds, "{r}");
}

/// The server's limits are stack-file parameters: with room for only three members, the
/// registrations of eight nodes evict (counted), yet every node still finds a place (the server
/// answers from whom it remembers); and a member timeout not above `rendezvous_every` is refused.
#[test]
fn the_servers_limits_come_from_the_stack_file() {
    let src = scenario("dt", 9, false, 40).replace(
        "rendezvous = 0\n",
        "rendezvous = 0\nrendezvous_members = 3\nrendezvous_timeout = \"4s\"\n",
    );
    let r = run_src(&src, 5);
    assert!(r.verdict.holds, "{r}");
    assert!(
        counter(&r, "net.rendezvous_evicted") > 0,
        "no eviction at 3 members: {r}"
    );
    let roomy = run_src(&scenario("dt", 9, false, 40), 5);
    assert_eq!(counter(&roomy, "net.rendezvous_evicted"), 0, "{roomy}");

    let src = scenario("dt", 4, false, 10).replace(
        "rendezvous = 0\n",
        "rendezvous = 0\nrendezvous_timeout = \"1s\"\n",
    );
    let catalog = viastack_stack::standard_catalog();
    let err = viastack_stack::parse("test.toml", &src, &catalog)
        .expect_err("a member timeout equal to rendezvous_every must be refused")
        .to_string();
    assert!(err.contains("rendezvous_timeout"), "{err}");
}
