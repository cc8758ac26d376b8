//! Issue 16 §2: the `overlay` layer in the simulator over many seeds, for both topologies.
//!
//! - Under loss, duplication and reordering for the whole run, with late starts, a node that
//!   leaves and one that crashes, the overlay converges: the DT neighbour sets equal the
//!   central Delaunay triangulation of the live nodes (one leader), the hypercube is compact
//!   (`expect = "overlay-converged"`).
//! - Without loss (duplication and reordering only), every multicast — down the tree, or
//!   flooded — from a node that stayed up reaches every other such node exactly once
//!   (`expect = "overlay-multicast"`); unicast reaches its addressee.
//! - The checks are not vacuous: a run that ends before a crash can have been noticed fails
//!   `overlay-converged`, naming the node whose neighbours are wrong.
//!
//! Every assertion prints the seed and the report; rerun one with
//! `viastack run FILE --seed N`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{counter, run_src};

/// A scenario of `nodes` nodes on `topology`: nodes `nodes/2..` start one every 700 ms, node
/// 2 leaves at 12 s, node 3 crashes at 14 s; `pattern` messages from 40 s; the run lasts
/// `duration` s.
#[allow(clippy::too_many_arguments)]
fn scenario(
    topology: &str,
    broadcast: &str,
    nodes: u32,
    loss: f64,
    expect: &str,
    pattern: &str,
    crash_at: u32,
    duration: u32,
) -> String {
    let mut s = format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.net]
kind = "overlay"
topology = "{topology}"
broadcast = "{broadcast}"
buddies = "0,1"
[qos.o]
layers = ["dev", "sum", "net"]
[channels.data]
qos = "o"
[scenario]
nodes = {nodes}
seed = 1
duration = "{duration}s"
expect = "{expect}"
[scenario.link]
latency = "5ms"
jitter = "3ms"
loss = {loss}
duplicate = 0.05
reorder = 0.1
reorder_delay = "40ms"
[[scenario.leave]]
node = 2
at = "12s"
[[scenario.crash]]
node = 3
at = "{crash_at}s"
[[scenario.workload]]
channel = "data"
pattern = "{pattern}"
messages = 5
size = 32
interval = "200ms"
start = "40s"
"#
    );
    for (k, n) in (nodes / 2..nodes).enumerate() {
        s.push_str(&format!(
            "[[scenario.crash]]\nnode = {n}\nat = \"0s\"\nrestart = \"{}ms\"\n",
            700 * (k + 1)
        ));
    }
    s
}

#[test]
fn overlays_converge_under_loss_duplication_reordering_and_churn() {
    for seed in 0..40u64 {
        for topology in ["dt", "hypercube"] {
            let nodes = 6 + (seed as u32 * 5) % 19;
            let src = scenario(
                topology,
                "multicast",
                nodes,
                0.05,
                "overlay-converged",
                "multicast",
                14,
                60,
            );
            let r = run_src(&src, seed);
            assert!(
                r.verdict.holds,
                "seed {seed}, {topology}, {nodes} nodes: {r}"
            );
            assert!(
                r.network.lost > 0 && r.network.duplicated > 0,
                "seed {seed}: {r}"
            );
        }
    }
}

#[test]
fn multicast_and_flood_reach_every_node_exactly_once() {
    for seed in 0..30u64 {
        for (topology, broadcast) in [
            ("dt", "multicast"),
            ("hypercube", "multicast"),
            ("dt", "flood"),
            ("hypercube", "flood"),
        ] {
            let nodes = 5 + (seed as u32 * 3) % 16;
            let src = scenario(
                topology,
                broadcast,
                nodes,
                0.0,
                "overlay-multicast",
                "multicast",
                14,
                50,
            );
            let r = run_src(&src, seed);
            let what = format!("seed {seed}, {topology}/{broadcast}, {nodes} nodes");
            assert!(r.verdict.holds, "{what}: {r}");
            assert_eq!(r.duplicated, 0, "{what}: {r}");
            if broadcast == "flood" {
                // Flooding sends every message over every edge: copies are suppressed.
                assert!(counter(&r, "net.duplicates") > 0, "{what}: {r}");
            } else {
                assert_eq!(counter(&r, "net.not_from_parent"), 0, "{what}: {r}");
            }
        }
    }
}

#[test]
fn unicast_on_dt_reaches_the_addressee() {
    for seed in 0..10u64 {
        let src = scenario("dt", "multicast", 12, 0.0, "reliable", "ring", 14, 50)
            .replace("[[scenario.crash]]\nnode = 3\nat = \"14s\"\n", "")
            .replace("[[scenario.leave]]\nnode = 2\nat = \"12s\"\n", "");
        let r = run_src(&src, seed);
        assert!(r.verdict.holds, "seed {seed}: {r}");
        assert_eq!(r.delivered, 12 * 5, "seed {seed}: {r}");
        assert_eq!(r.misdelivered, 0, "seed {seed}: {r}");
    }
}

#[test]
fn a_crash_not_yet_noticed_fails_convergence() {
    for (topology, seed) in [("dt", 3u64), ("hypercube", 4)] {
        // The crash at 45 s is not timed out by 46 s: its neighbours still list it.
        let src = scenario(
            topology,
            "multicast",
            10,
            0.0,
            "overlay-converged",
            "multicast",
            45,
            46,
        );
        let r = run_src(&src, seed);
        assert!(!r.verdict.holds, "{topology}: {r}");
        let all = r.verdict.violations.join("\n");
        assert!(
            all.contains("neighbours") || all.contains("compact"),
            "{topology}: {all}"
        );
    }
}

/// Leaving says goodbye: within 200 ms of node 2's leave at 12 s its neighbours have removed it
/// (a crash would take the 10 s neighbour timeout).
#[test]
fn a_leave_is_noticed_at_once() {
    for (topology, seed) in [("dt", 1u64), ("hypercube", 2)] {
        let removed = |duration: &str| {
            let src = scenario(topology, "multicast", 10, 0.0, "none", "multicast", 30, 50)
                .replace("duration = \"50s\"", &format!("duration = \"{duration}\""));
            let r = run_src(&src, seed);
            r.notices
                .get("OverlayNeighbourRemoved")
                .copied()
                .unwrap_or(0)
        };
        let before = removed("11900ms");
        let after = removed("12200ms");
        assert!(after > before, "{topology}: {before} → {after} removals");
    }
}
