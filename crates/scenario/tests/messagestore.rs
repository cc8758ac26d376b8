//! Issue 16 §3: the `messagestore` layer running a shipped delivery service above the DT
//! overlay, in the simulator over many seeds.
//!
//! - h2hack (specs/h2hack.scxml) over 10 % loss: every multicast reaches every other node
//!   exactly once (`expect = "overlay-multicast"`), while the bare overlay under the same loss
//!   does not, and neither does an h2hack that never retransmits — so the repair is the
//!   service's, run by the layer.
//! - dupelim under flooding: each message crosses every edge, yet reaches every application
//!   exactly once.
//! - The bounds: a store of capacity 2 refuses the instances beyond it (`store.full`).
//!
//! Every assertion prints the seed and the report; rerun one with
//! `viastack run FILE --seed N`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{counter, run_src};

fn spec(path: &str) -> String {
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
}

/// `nodes` nodes on DT over `loss`, `messages` multicasts per node from 30 s; with a
/// `messagestore` running `service` on top unless `None`.
fn scenario(service: Option<&str>, capacity: u32, nodes: u32, loss: f64) -> String {
    let (store, layers) = match service {
        Some(s) => (
            format!(
                "[layers.store]\nkind = \"messagestore\"\nservice = \"{}\"\ncapacity = {capacity}\n",
                spec(s)
            ),
            r#"["dev", "sum", "net", "store"]"#,
        ),
        None => (String::new(), r#"["dev", "sum", "net"]"#),
    };
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.net]
kind = "overlay"
topology = "dt"
buddies = "0,1"
{store}
[qos.o]
layers = {layers}
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
[[scenario.workload]]
channel = "data"
pattern = "multicast"
messages = 5
size = 32
interval = "200ms"
start = "30s"
"#
    )
}

#[test]
fn h2hack_delivers_every_multicast_over_ten_percent_loss() {
    let mut bare_failed = 0;
    let mut broken_failed = 0;
    for seed in 0..12u64 {
        let nodes = 6 + (seed as u32 * 5) % 9;
        let what = format!("seed {seed}, {nodes} nodes");
        let r = run_src(
            &scenario(Some("specs/h2hack.scxml"), 10_000, nodes, 0.1),
            seed,
        );
        assert!(r.verdict.holds, "{what}: {r}");
        assert!(r.network.lost > 0, "{what}: no loss: {r}");
        assert_eq!(r.duplicated, 0, "{what}: {r}");
        assert_eq!(
            counter(&r, "store.to_application"),
            u64::from(nodes) * u64::from(nodes - 1) * 5,
            "{what}: {r}"
        );
        assert_eq!(counter(&r, "store.full"), 0, "{what}: {r}");
        let bare = run_src(&scenario(None, 0, nodes, 0.1), seed);
        if !bare.verdict.holds {
            bare_failed += 1;
        }
        let broken = run_src(
            &scenario(
                Some("crates/spec/tests/data/h2hack_no_retransmit.scxml"),
                10_000,
                nodes,
                0.1,
            ),
            seed,
        );
        if !broken.verdict.holds {
            broken_failed += 1;
        }
    }
    eprintln!(
        "bare overlay failed {bare_failed}/12, h2hack without retransmission {broken_failed}/12"
    );
    // The check is not vacuous: without the service's retransmissions, loss shows.
    assert!(
        bare_failed >= 6,
        "bare overlay failed only {bare_failed}/12"
    );
    assert!(
        broken_failed >= 6,
        "h2hack without retransmission failed only {broken_failed}/12"
    );
}

/// The store's `batch_window` (a delayed ACK: acknowledgements wait up to the window for
/// others to the same parent) changes when an acknowledgement arrives, never what h2hack
/// delivers: over 10 % loss, with multicasts 1 ms apart from every node so acknowledgements
/// do share datagrams, every multicast reaches every other node exactly once, on 24 seeds and
/// windows of 1 ms and 20 ms (above the 5 ms link latency: the window reorders, too).
#[test]
fn h2hack_with_a_batch_window_delivers_every_multicast_over_ten_percent_loss() {
    let mut batched = 0;
    for seed in 0..24u64 {
        let nodes = 6 + (seed as u32 * 5) % 9;
        let window = if seed % 2 == 0 { "1ms" } else { "20ms" };
        let what = format!("seed {seed}, {nodes} nodes, window {window}");
        let src = scenario(Some("specs/h2hack.scxml"), 10_000, nodes, 0.1)
            .replace(
                "capacity = 10000\n",
                &format!("capacity = 10000\nbatch_window = \"{window}\"\n"),
            )
            .replace("interval = \"200ms\"", "interval = \"1ms\"");
        let r = run_src(&src, seed);
        assert!(r.verdict.holds, "{what}: {r}");
        assert!(r.network.lost > 0, "{what}: no loss: {r}");
        assert_eq!(r.duplicated, 0, "{what}: {r}");
        assert_eq!(
            counter(&r, "store.to_application"),
            u64::from(nodes) * u64::from(nodes - 1) * 5,
            "{what}: {r}"
        );
        // Acknowledgements that waited for the window still came in time: no instance gave
        // up for want of one (a window that never closed would reset every parent).
        assert_eq!(counter(&r, "store.report_sent"), 0, "{what}: {r}");
        batched += counter(&r, "store.batched");
    }
    assert!(batched > 0, "no acknowledgement ever shared a datagram");
}

/// Seed 000 §3.1.2.2: under heavy loss (30 %) e2eack may give up (the `reset` state). Every
/// multicast that missed a node has its tag in a `PeerUnreachable` notice at its sender — no
/// payload is lost silently — and none reaches an application twice, although instances freed
/// after their lifetime are recreated by late retransmissions (the layer suppresses the second
/// delivery: without it the first 8 seeds deliver 29 duplicates).
#[test]
fn e2eack_under_heavy_loss_delivers_once_or_reports_at_the_sender() {
    let h = misses("specs/e2eack.scxml", 0.3, "30s");
    assert_eq!(h.silent, 0, "e2eack lost {} multicasts silently", h.silent);
    assert_eq!(
        h.duplicated, 0,
        "e2eack delivered {} duplicates",
        h.duplicated
    );
    assert!(
        h.reported > 0 && h.suppressed > 0,
        "30 % loss never made e2eack give up or retransmit late: the check is vacuous"
    );
}

/// h2hack's acknowledgements are hop to hop: the sender is `done` once its children have the
/// payload, so a node further down that gives up (a child never acknowledged) is the only one
/// that knows. Its layer reports the failure up the tree to the message's root, whose layer
/// tells the sender: every multicast that missed a node is reported (without the reports,
/// the first 8 seeds miss 27 multicasts silently).
#[test]
fn h2hack_under_heavy_loss_reports_every_miss_at_the_sender() {
    let h = misses("specs/h2hack.scxml", 0.3, "30s");
    assert_eq!(h.silent, 0, "h2hack lost {} multicasts silently", h.silent);
    assert_eq!(
        h.duplicated, 0,
        "h2hack delivered {} duplicates",
        h.duplicated
    );
    assert!(
        h.reported > 0 && h.reports_received > 0,
        "30 % loss never made an h2hack node give up: the check is vacuous"
    );
    // Repairs happen under this loss, and children answer them.
    assert!(
        h.repair_acked > 0 && h.repair_sent > h.repaired,
        "no repair acknowledged or retried: {h:?}"
    );
}

/// Multicasts sent while the overlay forms (from 0 s to 800 ms, no loss) travel on trees that
/// change under them: a node's parent may not yet know it as a child. The layer sends each
/// held payload to the children a node gains while the instance lives, and every multicast
/// reaches every node or is reported at its sender (without the repair, these seeds miss
/// multicasts silently: 106 on the first 8 seeds).
#[test]
fn multicasts_sent_while_the_overlay_forms_reach_every_node_or_are_reported() {
    for service in ["specs/h2hack.scxml", "specs/e2eack.scxml"] {
        let h = misses(service, 0.0, "0s");
        assert_eq!(
            h.silent, 0,
            "{service} lost {} multicasts silently",
            h.silent
        );
        assert_eq!(h.duplicated, 0, "{service}: {} duplicates", h.duplicated);
        assert!(
            h.repaired > 0,
            "{service}: nothing to repair: the check is vacuous"
        );
    }
}

/// What [`misses`] saw over its seeds.
#[derive(Debug, Default)]
struct Misses {
    /// Multicasts that missed a node and were reported at their sender.
    reported: u32,
    /// Multicasts that missed a node with no report.
    silent: u32,
    /// Deliveries beyond the first.
    duplicated: u64,
    /// Second deliveries the layer suppressed.
    suppressed: u64,
    /// Failure reports that reached a root.
    reports_received: u64,
    /// Children gained after the instance forwarded, sent the payload (repairs begun).
    repaired: u64,
    /// Repair sends (first sends and retries).
    repair_sent: u64,
    /// Repairs a child acknowledged.
    repair_acked: u64,
    /// Repairs given up after their last retry (each reported as the message's failure).
    repair_given_up: u64,
    /// Unanswered repairs to a child that left the children.
    repair_abandoned: u64,
}

/// Runs `service` over `loss` on 60 seeds (`VIASTACK_MISSES_SEEDS`, from
/// `VIASTACK_MISSES_FROM`, default 0) with `failure_state = "reset"`, the multicasts starting
/// at `start`; a silent miss prints the nodes it missed.
///
/// Issue 16, found on seeds 37, 47, 50 and 52 at 30 % loss (8 seeds did not show it): a node
/// the payload went to whose copy was lost left its parent's children (a DT neighbour timed
/// out), so the parent's h2hack was `done` without its acknowledgement; it came back as a child
/// while the instance lived, but the layer's repair took it for reached (seed 50: n1's
/// multicasts 2–4 to n12, and n12's subtree n7, n4). And a node that got the payload by
/// unicast retransmission (answering its NACK) with no children then held nothing to repair
/// the children it gained (seed 37: n9 → n8). Both are fixed in the layer's repair.
///
/// Then (`VIASTACK_MISSES_SEEDS=1000`): h2hack missed 6 multicasts silently on seeds 375 (4),
/// 530 and 712; e2eack none. Seed 530: n5's multicast 2 reached n0 by a NACK answer from n4;
/// n0, with no children then, was `done`; at 35.5 s n0 gained n7 as a child and sent it the
/// held payload in three repair passes, all lost — repair sends were not acknowledged (six
/// sends instead of three only moved the misses). Now a repair is acknowledged by the child's
/// layer and sent again with back-off until answered, or given up after 8 sends and reported
/// at the sender as the message's failure: 1,000 seeds, h2hack 0 silent (8,108 repairs
/// acknowledged, 32 given up and reported), e2eack 0 silent (9,601 acknowledged, 20 given up).
fn misses(service: &str, loss: f64, start: &str) -> Misses {
    let mut h = Misses::default();
    let seeds: u64 = std::env::var("VIASTACK_MISSES_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let first: u64 = std::env::var("VIASTACK_MISSES_FROM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for seed in first..first + seeds {
        let nodes = 6 + (seed as u32 * 5) % 9;
        let what = format!("{service}, seed {seed}, {nodes} nodes");
        let src = scenario(Some(service), 10_000, nodes, loss)
            .replace("start = \"30s\"", &format!("start = \"{start}\""))
            .replace(
                "capacity = 10000\n",
                "capacity = 10000\nfailure_state = \"reset\"\n",
            )
            .replace("duration = \"50s\"", "duration = \"60s\"");
        let catalog = viastack_stack::standard_catalog();
        let file = viastack_stack::parse("test.toml", &src, &catalog).unwrap();
        let options = viastack_scenario::RunOptions {
            seed: Some(seed),
            duration: None,
        };
        let (r, rec) = viastack_scenario::run_recorded(&file, &catalog, &options, |_| {}).unwrap();
        let all: Vec<_> = (0..nodes).map(viastack_kernel::NodeId).collect();
        for (&(w, src, dst), stream) in &rec.streams {
            for seq in 0..stream.sent {
                let got = rec.multicast.get(&(w, src, seq));
                let missed = all
                    .iter()
                    .any(|n| *n != src && got.and_then(|m| m.get(n)).copied().unwrap_or(0) == 0);
                if missed && stream.reported.contains(&seq) {
                    h.reported += 1;
                } else if missed {
                    let lacking: Vec<_> = all
                        .iter()
                        .filter(|n| {
                            **n != src && got.and_then(|m| m.get(n)).copied().unwrap_or(0) == 0
                        })
                        .collect();
                    eprintln!(
                        "{what}: multicast {seq} from {src} (to {dst}) missed {lacking:?}, not reported"
                    );
                    h.silent += 1;
                }
            }
        }
        if r.duplicated > 0 {
            eprintln!("{what}: {} duplicate deliveries", r.duplicated);
        }
        h.duplicated += r.duplicated;
        h.suppressed += counter(&r, "store.duplicate_suppressed");
        h.reports_received += counter(&r, "store.report_received");
        h.repaired += counter(&r, "store.repaired");
        h.repair_sent += counter(&r, "store.repair_sent");
        h.repair_acked += counter(&r, "store.repair_acked");
        h.repair_given_up += counter(&r, "store.repair_given_up");
        h.repair_abandoned += counter(&r, "store.repair_abandoned");
    }
    eprintln!("{service}: {h:?}");
    h
}

#[test]
fn dupelim_leaves_no_duplicate_under_flooding() {
    for seed in 0..10u64 {
        let nodes = 6 + (seed as u32 * 5) % 9;
        let what = format!("seed {seed}, {nodes} nodes");
        let src = scenario(Some("specs/dupelim.scxml"), 10_000, nodes, 0.0).replace(
            "capacity = 10000\n",
            "capacity = 10000\nbroadcast = \"flood\"\n",
        );
        let r = run_src(&src, seed);
        assert!(r.verdict.holds, "{what}: {r}");
        assert_eq!(r.duplicated, 0, "{what}: {r}");
        // Flooding sends each message over every edge: far more sends than deliveries.
        assert!(
            counter(&r, "store.sent") > 2 * counter(&r, "store.to_application"),
            "{what}: {r}"
        );
    }
}

/// ordering (one stream per sender, forwarded by the store) under reordering links: no node
/// receives a sender's multicasts out of order, where the bare overlay under the same links
/// delivers thousands out of order (order is checked per receiver).
#[test]
fn ordering_delivers_in_order() {
    let shipped = std::fs::read_to_string(format!(
        "{}/../../stacks/overlay-ordering.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let with = shipped.replace(
        "service = \"../specs/ordering.scxml\"",
        &format!("service = \"{}\"", spec("specs/ordering.scxml")),
    );
    let bare = shipped
        .replace(
            r#"layers = ["dev", "sum", "net", "store"]"#,
            r#"layers = ["dev", "sum", "net"]"#,
        )
        .replace(
            "[layers.store]\nkind = \"messagestore\"\nservice = \"../specs/ordering.scxml\"\nstream = true\nforward = \"store\"\n",
            "",
        );
    let mut bare_out_of_order = 0;
    for seed in 0..8u64 {
        let r = run_src(&with, seed);
        assert!(r.delivered > r.sent * 9 / 10, "seed {seed}: {r}");
        assert_eq!(r.duplicated, 0, "seed {seed}: {r}");
        assert_eq!(r.out_of_order, 0, "seed {seed}: {r}");
        bare_out_of_order += run_src(&bare, seed).out_of_order;
    }
    eprintln!("out of order over the bare overlay: {bare_out_of_order}");
    assert!(
        bare_out_of_order > 0,
        "the links never reordered: the check is vacuous"
    );
    let shipped_seed = run_src(&with, 7);
    assert!(shipped_seed.verdict.holds, "{shipped_seed}");
}

#[test]
fn the_store_is_bounded_by_its_capacity() {
    let r = run_src(&scenario(Some("specs/h2hack.scxml"), 2, 8, 0.0), 3);
    assert!(counter(&r, "store.full") > 0, "{r}");
    assert!(
        !r.verdict.holds,
        "a store of 2 instances cannot carry 40 multicasts: {r}"
    );
}
