//! Library-level tests of the scenario runner (`viastack_scenario::run`) over stack files
//! written as strings: determinism from a seed, crashes with restart, partitions that heal,
//! corruption without a checksum, and the `fifo` layer's guarantee over many seeds.
#![allow(clippy::unwrap_used)]

mod common;

use viastack_scenario::Report;

/// Parses `src` (panicking with every diagnostic if it is invalid) and runs its scenario,
/// optionally with another seed.
fn run_src(src: &str, seed: Option<u64>) -> Report {
    common::run_with(src, seed)
}

/// A stack of a device and, if `fifo`, a fifo layer on top, with one channel `data`.
fn stack(fifo: bool) -> &'static str {
    if fifo {
        r#"
[layers.dev]
kind = "device"
[layers.order]
kind = "fifo"
[qos.q]
layers = ["dev", "order"]
[channels.data]
qos = "q"
"#
    } else {
        r#"
[layers.dev]
kind = "device"
[qos.q]
layers = ["dev"]
[channels.data]
qos = "q"
"#
    }
}

/// Four nodes all-to-all over a network that loses, duplicates, reorders and delays.
fn adversarial(fifo: bool) -> String {
    format!(
        r#"{}
[scenario]
nodes = 4
duration = "600ms"
expect = "fifo"
[scenario.link]
latency = "1ms"
jitter = "2ms"
loss = 0.2
duplicate = 0.1
reorder = 0.2
reorder_delay = "3ms"
[[scenario.workload]]
channel = "data"
messages = 90
size = 64
interval = "500us"
"#,
        stack(fifo)
    )
}

#[test]
fn same_seed_same_run_and_different_seeds_different_runs() {
    let src = adversarial(true);
    for seed in 0..20u64 {
        let a = run_src(&src, Some(seed));
        let b = run_src(&src, Some(seed));
        assert_eq!(
            a.seed, seed,
            "seed {seed}: the report names the seed it ran"
        );
        assert_eq!(
            a.trace_hash, b.trace_hash,
            "seed {seed}: trace hash differs"
        );
        assert_eq!(a, b, "seed {seed}: reports differ");
        // The network was actually random: something was lost on every run.
        assert!(
            a.network.lost > 0,
            "seed {seed}: no loss on a 20% lossy network"
        );
    }
    for seed in 0..20u64 {
        let other = seed + 1000;
        let a = run_src(&src, Some(seed));
        let b = run_src(&src, Some(other));
        assert_ne!(
            a.trace_hash, b.trace_hash,
            "seeds {seed} and {other} gave the same trace hash"
        );
    }
}

/// Four nodes all-to-all on perfect links with a fifo layer; node 2 is down from 0.5 s to 1 s.
fn crash_restart(messages: u64) -> String {
    format!(
        r#"{}
[scenario]
nodes = 4
duration = "2s"
expect = "fifo"
[scenario.link]
latency = "1ms"
[[scenario.crash]]
node = 2
at = "500ms"
restart = "1s"
[[scenario.workload]]
channel = "data"
messages = {messages}
size = 64
interval = "5ms"
pattern = "all-to-all"
"#,
        stack(true)
    )
}

#[test]
fn a_node_that_crashes_and_restarts_resumes_its_workload() {
    let messages = 200;
    let r = run_src(&crash_restart(messages), None);
    // Node 2 sent ~100 messages before the crash and the rest after its restart: every node's
    // workload ran to the end.
    assert_eq!(r.sent, 4 * messages, "{r}");
    assert!(
        r.network.dropped_down > 0,
        "nothing was sent to the down node: {r}"
    );
    assert!(r.lost_crashed >= r.network.dropped_down, "{r}");
    assert_eq!(
        r.lost, 0,
        "perfect links between the nodes that never crashed: {r}"
    );
    assert_eq!(r.duplicated, 0, "{r}");
    assert_eq!(r.out_of_order, 0, "{r}");
    assert_eq!(r.corrupted + r.misdelivered, 0, "{r}");
    assert_eq!(r.delivered + r.lost_crashed, r.sent, "{r}");
    assert!(r.verdict.holds, "{r}");
}

/// Known defect, kept as a reproducer: `fifo` numbers a sender's messages from 0 in each
/// incarnation and carries no incarnation on the wire, so after node 2 restarts its peers take
/// its new messages for stale copies and drop them (`order.stale`) until its new sequence
/// numbers pass the old ones. On perfect links nothing should be stale and only the messages
/// that reached node 2 while it was down should be lost.
#[test]
fn a_restarted_sender_is_heard_again() {
    let r = run_src(&crash_restart(200), None);
    assert_eq!(
        r.counters.get("order.stale").copied().unwrap_or(0),
        0,
        "{r}"
    );
    assert_eq!(r.lost_crashed, r.network.dropped_down, "{r}");
}

#[test]
fn traffic_across_a_partition_is_lost_until_it_heals() {
    // Nodes 2 and 3 send to node 0 across the cut, node 1 to node 0 on its own side, one
    // message every 10 ms from t = 0 (t = 0, 10, …, 990 ms; 1 ms latency). The partition
    // lasts from 305 ms to 605 ms: exactly the 30 messages sent at 310..=600 ms by each of
    // nodes 2 and 3 cross it while it is up.
    let src = format!(
        r#"{}
[scenario]
nodes = 4
duration = "1500ms"
expect = "fifo"
[scenario.link]
latency = "1ms"
[[scenario.partition]]
at = "305ms"
heal = "605ms"
groups = [[0, 1], [2, 3]]
[[scenario.workload]]
channel = "data"
messages = 100
size = 64
interval = "10ms"
pattern = "to-first"
senders = [1, 2, 3]
"#,
        stack(true)
    );
    let r = run_src(&src, None);
    assert_eq!(r.sent, 300, "{r}");
    assert_eq!(r.network.dropped_partition, 60, "{r}");
    assert_eq!(
        r.lost, 60,
        "only what crossed the cut while it was up is lost: {r}"
    );
    // Everything else arrived: node 1's messages throughout, and those of nodes 2 and 3
    // before the partition and after it healed.
    assert_eq!(r.delivered, 240, "{r}");
    assert!(r.verdict.holds, "{r}");

    // Without the heal, everything nodes 2 and 3 sent from 310 ms on is lost.
    let never = src.replace("heal = \"605ms\"\n", "");
    assert_ne!(never, src);
    let r = run_src(&never, None);
    assert_eq!(r.network.dropped_partition, 2 * 69, "{r}");
    assert_eq!(r.delivered, 300 - 2 * 69, "{r}");
}

#[test]
fn corruption_without_a_checksum_layer_breaks_the_property() {
    // Neither the device nor fifo checks the bytes: flipped bits reach the application. This
    // is why a stack over a corrupting network needs a checksum layer.
    let src = format!(
        r#"{}
[scenario]
nodes = 3
duration = "1s"
expect = "fifo"
[scenario.link]
latency = "1ms"
corrupt = 0.05
[[scenario.workload]]
channel = "data"
messages = 200
size = 128
interval = "2ms"
"#,
        stack(true)
    );
    let r = run_src(&src, None);
    assert!(r.network.corrupted > 0, "{r}");
    assert!(r.corrupted > 0, "{r}");
    assert!(!r.verdict.holds, "{r}");
    assert!(
        r.verdict.violations.iter().any(|v| v.contains("corrupted")),
        "{:?}",
        r.verdict.violations
    );
    assert_eq!(r.verdict.expect, "fifo");
}

#[test]
fn fifo_delivers_once_and_in_order_over_200_seeds() {
    // The network really does reorder and duplicate: without the fifo layer the application
    // sees both (otherwise the loop below would prove nothing).
    let bare = run_src(&adversarial(false), Some(0));
    assert!(bare.out_of_order > 0, "{bare}");
    assert!(bare.duplicated > 0, "{bare}");
    assert!(!bare.verdict.holds, "{bare}");

    let src = adversarial(true);
    let mut stale = 0;
    for seed in 0..200u64 {
        let r = run_src(&src, Some(seed));
        assert_eq!(r.out_of_order, 0, "seed {seed}: {r}");
        assert_eq!(r.duplicated, 0, "seed {seed}: {r}");
        assert_eq!(r.corrupted + r.misdelivered, 0, "seed {seed}: {r}");
        assert!(r.delivered > 0, "seed {seed}: {r}");
        assert!(r.verdict.holds, "seed {seed}: {r}");
        stale += r.counters.get("order.stale").copied().unwrap_or(0);
    }
    assert!(
        stale > 0,
        "the fifo layer never had to drop a late or duplicate copy"
    );
}
