//! The shipped overlay examples of brief h-ovl item 2 (issue 16 §1–§3), run as `viastack run`
//! runs them, with their own seed and a few more:
//!
//! - `stacks/overlay-rendezvous.toml`: nodes with no buddy list join through the rendezvous
//!   server (node 0, no member), the network is cut in two and healed, the partitions merge
//!   through the server; `overlay-multicast` holds (the server is no member).
//! - `stacks/overlay-hc-h2hack.toml`: h2hack per message over a hypercube under 10 % loss;
//!   `overlay-multicast` holds (a miss only if its sender was told).
//! - `stacks/overlay-metaops.toml`: `unicast = "hop"`: intermediate nodes run the relay
//!   service for the ring's unicasts (`processIntermediateUnicastMessage`), which forwards them
//!   (`messageStoreWillForwardMessage`); `reliable` holds.
#![allow(clippy::unwrap_used)]

mod common;

use common::{counter, run_with};

/// The shipped file, its relative service paths made absolute (the test runs elsewhere).
fn shipped(name: &str) -> String {
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(format!("{root}/stacks/{name}"))
        .unwrap()
        .replace("\"../specs/", &format!("\"{root}/specs/"))
        .replace("\"relay.scxml", &format!("\"{root}/stacks/relay.scxml"))
}

#[test]
fn the_rendezvous_example_joins_and_merges_through_the_server() {
    let src = shipped("overlay-rendezvous.toml");
    for seed in [None, Some(1), Some(2), Some(3)] {
        let r = run_with(&src, seed);
        assert!(r.verdict.holds, "seed {seed:?}: {r}");
        // 11 members, 5 multicasts each (the server sends none), each delivered at the 10
        // others.
        assert_eq!((r.sent, r.lost), (55, 0), "seed {seed:?}: {r}");
        assert_eq!(
            counter(&r, "net.delivered"),
            11 * 5 * 10,
            "seed {seed:?}: {r}"
        );
        assert!(
            counter(&r, "net.rendezvous_handled") > 0,
            "seed {seed:?}: {r}"
        );
        assert!(r.network.dropped_partition > 0, "seed {seed:?}: {r}");
    }
}

#[test]
fn the_hypercube_h2hack_example_delivers_or_tells_the_sender() {
    let src = shipped("overlay-hc-h2hack.toml");
    for seed in [None, Some(1), Some(2)] {
        let r = run_with(&src, seed);
        assert!(r.verdict.holds, "seed {seed:?}: {r}");
        assert!(r.network.lost > 0, "seed {seed:?}: {r}");
        assert_eq!(r.duplicated, 0, "seed {seed:?}: {r}");
        assert!(
            counter(&r, "store.to_application") > 0,
            "seed {seed:?}: {r}"
        );
    }
}

#[test]
fn the_metaops_example_processes_unicasts_on_their_way() {
    let src = shipped("overlay-metaops.toml");
    for seed in [None, Some(1), Some(2)] {
        let r = run_with(&src, seed);
        assert!(r.verdict.holds, "seed {seed:?}: {r}");
        assert_eq!(r.delivered, 12 * 5, "seed {seed:?}: {r}");
        assert_eq!(r.duplicated + r.misdelivered, 0, "seed {seed:?}: {r}");
        assert!(
            counter(&r, "store.transit_processed") > 0,
            "seed {seed:?}: {r}"
        );
    }
}
