//! Issue 16, the hypercube's missing pieces (brief h-hc): trees rooted at any node, unicast,
//! and the `messagestore` above a hypercube, in the simulator over many seeds.
//!
//! - **Trees for any root.** A hypercube node cannot compute another node's label, so the
//!   `messagestore` carries the root's label in its messages (wire version 2, `docs/WIRE.md`
//!   "MessageStore") and hands it to the overlay with each tree query; the overlay computes the
//!   bit-rule tree rooted at that label. h2hack, which forwards to the children of the tree
//!   rooted at the sender, then delivers every multicast to every node exactly once over 10 %
//!   loss, or tells the sender: h2hack gives up on a hop by design (Timeout_maxACK, 5 s, when
//!   a child's payload, ACK requests and NACKs keep getting lost; about 6 seeds of 100), and
//!   with `failure_state = "reset"` the node that gave up reports up to the root, whose
//!   application gets `PeerUnreachable` (the property excuses exactly those messages). Without the label the overlay knows no children and nothing is forwarded (the
//!   check is not vacuous: the counters show the forwarding was the store's).
//! - **e2eack** (acknowledgements aggregated up the tree rooted at the sender, by unicast to
//!   the previous hop) finishes every instance on a hypercube: no root gives up.
//! - **Unicast.** A bare overlay (no store) unicasts to nodes whose labels it learned from
//!   their multicasts (the directory): a ring of unicasts after a round of multicasts reaches
//!   every addressee, most over several hops up the tree rooted at the addressee's label.
//!
//! Every assertion prints the seed and the report; rerun one with
//! `viastack run FILE --seed N`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{counter, run_src};

fn spec(path: &str) -> String {
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
}

/// `nodes` nodes on a hypercube over `loss`, 5 multicasts per node from 30 s, with a
/// `messagestore` running `service`.
fn scenario(service: &str, nodes: u32, loss: f64) -> String {
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.net]
kind = "overlay"
topology = "hypercube"
buddies = "0,1"
[layers.store]
kind = "messagestore"
service = "{}"
capacity = 10000
[qos.o]
layers = ["dev", "sum", "net", "store"]
[channels.data]
qos = "o"
[scenario]
nodes = {nodes}
seed = 1
duration = "50s"
expect = "overlay-multicast"
[scenario.link]
latency = "5ms"
jitter = "2ms"
loss = {loss}
duplicate = 0.02
reorder = 0.05
reorder_delay = "30ms"
[[scenario.workload]]
channel = "data"
pattern = "multicast"
messages = 5
size = 32
interval = "200ms"
start = "30s"
"#,
        spec(service)
    )
}

/// Seeds run: `VIASTACK_HC_SEEDS`, else `default`. Known with 400: seed 163 (16 nodes) fails
/// the h2hack test at its 50 s end although all 1,200 deliveries arrived — the check catches a
/// label episode mid-repair: at 49.5 s n5 and n7 both hold 0b100 (how n7 came to take a label
/// already held is not traced), by 50 s n7 holds 0b1000 with its neighbour 0b1010 not yet
/// re-added, and from 50.5 s on (checked to 80 s) the cube is compact and consistent again.
/// Why a quiet cube under 10 % loss re-labels a node is not yet traced.
fn seeds(default: u64) -> u64 {
    std::env::var("VIASTACK_HC_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn h2hack_on_a_hypercube_delivers_every_multicast_or_tells_the_sender() {
    let n = seeds(100);
    let (mut reported_seeds, mut reported, mut deliveries) = (Vec::new(), 0, 0);
    for seed in 0..n {
        let nodes = 5 + (seed as u32 * 5) % 12;
        let what = format!("seed {seed}, {nodes} nodes");
        // `failure_state = "reset"`: an instance that gives up (Timeout_maxACK: a child never
        // acknowledged) reports up to the root, whose application is told.
        let src = scenario("specs/h2hack.scxml", nodes, 0.1).replace(
            "capacity = 10000\n",
            "capacity = 10000\nfailure_state = \"reset\"\n",
        );
        let r = run_src(&src, seed);
        assert!(r.network.lost > 0, "{what}: no loss: {r}");
        assert_eq!(r.duplicated, 0, "{what}: {r}");
        // The overlay did not multicast: every copy was a one-hop unicast of the store's.
        assert_eq!(counter(&r, "net.not_from_parent"), 0, "{what}: {r}");
        assert_eq!(counter(&r, "net.no_label"), 0, "{what}: {r}");
        // Strict: every multicast reached every other node exactly once, or its sender was
        // told (the property excuses a miss only for a message the sender's stack reported).
        assert!(r.verdict.holds, "{what}: {r}");
        let want = u64::from(nodes) * u64::from(nodes - 1) * 5;
        let got = counter(&r, "store.to_application");
        deliveries += got;
        if got != want {
            // (The property above already matched each miss to a report of that message.)
            assert!(
                counter(&r, "store.failure_reported") > 0,
                "{what}: a miss with no report: {r}"
            );
            reported_seeds.push(seed);
        }
        reported += counter(&r, "store.failure_reported");
    }
    // Under 10 % loss h2hack gives up on a hop now and then (Timeout_maxACK, 5 s; seeds 26
    // and 33 of the first 40): by design, and the sender is told.
    eprintln!(
        "h2hack on a hypercube: {n} seeds, {deliveries} deliveries; seeds {reported_seeds:?} \
         missed a delivery, every one reported ({reported} multicasts reported to their senders)"
    );
}

#[test]
fn e2eack_on_a_hypercube_finishes_every_instance() {
    for seed in 0..seeds(20) {
        let nodes = 6 + (seed as u32 * 5) % 11;
        let what = format!("seed {seed}, {nodes} nodes");
        let src = scenario("specs/e2eack.scxml", nodes, 0.0).replace(
            "capacity = 10000\n",
            "capacity = 10000\nfailure_state = \"reset\"\n",
        );
        let r = run_src(&src, seed);
        assert!(r.verdict.holds, "{what}: {r}");
        assert_eq!(r.duplicated, 0, "{what}: {r}");
        assert_eq!(counter(&r, "net.no_route"), 0, "{what}: {r}");
        assert_eq!(counter(&r, "net.no_label"), 0, "{what}: {r}");
        // No root gave up: every acknowledgement came back.
        assert_eq!(counter(&r, "store.failure_reported"), 0, "{what}: {r}");
    }
}

#[test]
fn unicast_on_a_hypercube_reaches_nodes_whose_labels_were_learned() {
    for seed in 0..seeds(30) {
        let nodes = 12;
        let src = format!(
            r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.net]
kind = "overlay"
topology = "hypercube"
buddies = "0,1"
[qos.o]
layers = ["dev", "sum", "net"]
[channels.data]
qos = "o"
[scenario]
nodes = {nodes}
seed = 1
duration = "50s"
expect = "reliable"
[scenario.link]
latency = "5ms"
jitter = "2ms"
[[scenario.workload]]
channel = "data"
pattern = "multicast"
messages = 1
size = 32
interval = "200ms"
start = "25s"
[[scenario.workload]]
channel = "data"
pattern = "ring"
messages = 5
size = 32
interval = "200ms"
start = "35s"
"#
        );
        let r = run_src(&src, seed);
        let what = format!("seed {seed}");
        assert!(r.verdict.holds, "{what}: {r}");
        assert_eq!(r.misdelivered, 0, "{what}: {r}");
        assert_eq!(counter(&r, "net.no_label"), 0, "{what}: {r}");
        assert_eq!(counter(&r, "net.refused"), 0, "{what}: {r}");
        // Every ring message went to the next node, most of them over several hops.
        assert!(counter(&r, "net.forwarded") > 0, "{what}: {r}");
    }
}
