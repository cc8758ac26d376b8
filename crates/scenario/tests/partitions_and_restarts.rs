//! Issue 13 §1: reliable stacks across partitions longer than every timer, and across crashes
//! and restarts of senders and receivers.
//!
//! The promise checked on every seed: every message is delivered exactly once, in order, or
//! its sender was told (`PeerUnreachable`, `SendRefused`, `PeerRestarted`), or it died with a
//! crashed sender. Nothing is lost silently and nothing is delivered twice, whatever the timers:
//! `fragment` above a reliable layer keeps a partial message as long as the layer below may
//! still complete it, and a restarted peer is a new incarnation of the `reliable-fifo` stream.
//!
//! Every assertion prints the seed; rerun one with `viastack run FILE --seed N`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_delivered_once_or_reported, counter, run_src};

/// Link faults of seed `seed`: loss cycles through 0–20 %, with duplication, reordering,
/// jitter and corruption always on.
fn link(seed: u64) -> String {
    let loss = [0.0, 0.05, 0.1, 0.2][(seed % 4) as usize];
    format!(
        r#"
[scenario.link]
latency = "1ms"
jitter = "1ms"
loss = {loss}
duplicate = 0.05
reorder = 0.1
reorder_delay = "3ms"
corrupt = 0.02
"#
    )
}

/// `device < checksum < reliable-fifo < fragment` with the fragment layer's default
/// `reassembly_timeout` (2 s), reliable-fifo tuned to a 1 ms network giving up after
/// `retries` timeouts of at most 250 ms.
fn over_reliable_fifo(retries: u32) -> String {
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.rel]
kind = "reliable-fifo"
rto_initial = "100ms"
rto_min = "20ms"
rto_max = "250ms"
max_retries = {retries}
ack_delay = "5ms"
[layers.frag]
kind = "fragment"
mtu = 200
[qos.q]
layers = ["dev", "sum", "rel", "frag"]
[channels.data]
qos = "q"
"#
    )
}

/// `device < checksum < sp < fragment`, SP reliable with `attempts` tries per block.
fn over_sp(attempts: u32) -> String {
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.crc]
kind = "checksum"
[layers.sp]
kind = "sp"
reliability = "reliable"
block_size = 512
attempts = {attempts}
[layers.frag]
kind = "fragment"
mtu = 1200
[qos.q]
layers = ["dev", "crc", "sp", "frag"]
[channels.data]
qos = "q"
"#
    )
}

/// Three nodes all to all, 700-byte messages (four fragments at mtu 200, one at 1200) and
/// 3000-byte ones, node `cut` cut off from `at` for `length` ms, the run long enough to drain.
fn partitioned(stack: &str, seed: u64, cut: u32, at_ms: u64, length_ms: u64) -> String {
    let others: Vec<String> = (0..3u32)
        .filter(|&n| n != cut)
        .map(|n| n.to_string())
        .collect();
    format!(
        r#"{stack}
[scenario]
nodes = 3
duration = "{duration}ms"
expect = "reliable-fifo"
{link}
[[scenario.workload]]
channel = "data"
messages = 40
size = 700
interval = "50ms"
[[scenario.workload]]
channel = "data"
messages = 10
size = 3000
interval = "200ms"
start = "7ms"
[[scenario.partition]]
at = "{at_ms}ms"
heal = "{heal}ms"
groups = [[{cut}], [{others}]]
"#,
        duration = at_ms + length_ms + 8_000,
        link = link(seed),
        heal = at_ms + length_ms,
        others = others.join(", "),
    )
}

/// Partition lengths: always past the fragment layer's 2 s, sometimes past the transport's
/// give-up time too.
fn partition_of(seed: u64) -> (u32, u64, u64) {
    let cut = (seed % 3) as u32;
    let at = 300 + (seed * 37) % 900;
    let length = 2_500 + (seed * 613) % 4_000;
    (cut, at, length)
}

#[test]
fn fragment_over_reliable_fifo_loses_nothing_silently_across_long_partitions() {
    let seeds = 1_000u64;
    let (mut reported, mut delivered, mut waited) = (0, 0, 0);
    for seed in 0..seeds {
        // 40 retries (≈ 9 s) outlast every partition; 8 (≈ 1.5 s) give up during most.
        let retries = if seed % 2 == 0 { 40 } else { 8 };
        let (cut, at, length) = partition_of(seed);
        let r = run_src(
            &partitioned(&over_reliable_fifo(retries), seed, cut, at, length),
            seed,
        );
        let what = format!("seed {seed} (retries {retries}, node {cut} cut {at}+{length} ms)");
        assert_delivered_once_or_reported(&r, &what);
        assert_eq!(r.sent, 3 * 50, "{what}: {r}");
        if retries == 40 {
            // Nobody gave up: everything arrived, partial messages waited out the partition.
            assert_eq!(r.delivered, r.sent, "{what}: {r}");
        }
        assert_eq!(counter(&r, "frag.timeout"), 0, "{what}: {r}");
        reported += r.lost_reported;
        delivered += r.delivered;
        waited += counter(&r, "frag.reassembled");
    }
    // Both outcomes happened: full repair, and reported give-ups.
    assert!(reported > 0 && delivered > 0 && waited > 0);
    eprintln!("{seeds} seeds: delivered {delivered}, reported {reported}");
}

#[test]
fn fragment_over_sp_loses_nothing_silently_across_long_partitions() {
    let seeds = 1_000u64;
    let (mut reported, mut delivered) = (0, 0);
    for seed in 0..seeds {
        // SP's default timers with many attempts outlast some partitions, with few none.
        let attempts = if seed % 2 == 0 { 60 } else { 6 };
        let (cut, at, length) = partition_of(seed);
        let r = run_src(
            &partitioned(&over_sp(attempts), seed, cut, at, length),
            seed,
        );
        let what = format!("seed {seed} (attempts {attempts}, node {cut} cut {at}+{length} ms)");
        assert_delivered_once_or_reported(&r, &what);
        assert_eq!(r.sent, 3 * 50, "{what}: {r}");
        assert_eq!(counter(&r, "frag.timeout"), 0, "{what}: {r}");
        reported += r.lost_reported;
        delivered += r.delivered;
    }
    assert!(reported > 0 && delivered > 0);
    eprintln!("{seeds} seeds: delivered {delivered}, reported {reported}");
}

/// The case the issue reported: 8 KiB messages every 10 ms in fragments of 1000 bytes, 5 %
/// loss, node 2 cut off from 1 s to 6 s, the stack's default timers throughout.
#[test]
fn eight_kib_messages_across_a_five_second_partition_with_default_timers() {
    let stack = r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.rel]
kind = "reliable-fifo"
[layers.frag]
kind = "fragment"
mtu = 1000
[qos.q]
layers = ["dev", "sum", "rel", "frag"]
[channels.data]
qos = "q"
[scenario]
nodes = 3
duration = "20s"
expect = "reliable-fifo"
[scenario.link]
latency = "1ms"
loss = 0.05
[[scenario.workload]]
channel = "data"
messages = 300
size = "8KiB"
interval = "10ms"
[[scenario.partition]]
at = "1s"
heal = "6s"
groups = [[2], [0, 1]]
"#;
    for seed in 0..24u64 {
        let r = run_src(stack, seed);
        let what = format!("seed {seed}");
        assert_delivered_once_or_reported(&r, &what);
        // Default reliable-fifo outlasts 5 s: every message arrives.
        assert_eq!(r.delivered, r.sent, "{what}: {r}");
    }
}

/// `device < checksum < reliable-fifo`, every node sending to every other (or only
/// `senders`), `crashes` appended.
fn crashing(seed: u64, senders: &str, pattern: &str, nodes: u32, crashes: &str) -> String {
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.rel]
kind = "reliable-fifo"
rto_initial = "100ms"
rto_min = "20ms"
rto_max = "250ms"
max_retries = 40
ack_delay = "5ms"
[qos.q]
layers = ["dev", "sum", "rel"]
[channels.data]
qos = "q"
[scenario]
nodes = {nodes}
duration = "14s"
expect = "reliable-fifo"
{link}
[[scenario.workload]]
channel = "data"
messages = 200
size = 100
interval = "20ms"
pattern = "{pattern}"
{senders}
{crashes}
"#,
        link = link(seed),
    )
}

fn crash(node: u32, at_ms: u64, restart_ms: u64) -> String {
    format!("[[scenario.crash]]\nnode = {node}\nat = \"{at_ms}ms\"\nrestart = \"{restart_ms}ms\"\n")
}

/// The issue's case: three nodes, 10 % loss, node 2 crashed at 1 s and restarted with fresh
/// state at 3 s: nobody is handed a message twice, and what the old incarnation may have
/// missed is reported to its senders.
#[test]
fn a_restarted_node_is_a_new_incarnation_never_a_duplicate() {
    let seeds = 1_000u64;
    let mut restarts = 0;
    for seed in 0..seeds {
        let r = run_src(
            &crashing(seed, "", "all-to-all", 3, &crash(2, 1_000, 3_000)),
            seed,
        );
        let what = format!("seed {seed}");
        assert_delivered_once_or_reported(&r, &what);
        restarts += counter(&r, "rel.peer_restarts");
    }
    assert!(restarts > 0, "no run ever noticed the restart");
}

/// A sender alone, a receiver alone, both, and each together with a partition: one stream
/// from node 0 to node 1.
#[test]
fn restarts_of_senders_and_receivers_alone_and_with_partitions() {
    let seeds = 1_000u64;
    let partition =
        "[[scenario.partition]]\nat = \"1500ms\"\nheal = \"4500ms\"\ngroups = [[0], [1]]\n";
    let mut reported = 0;
    for seed in 0..seeds {
        let at = 500 + (seed * 53) % 1_500;
        let back = at + 200 + (seed * 97) % 2_500;
        let crashes = match seed % 3 {
            0 => crash(0, at, back),
            1 => crash(1, at, back),
            _ => crash(0, at, back) + &crash(1, back / 2 + at / 2, back + 300),
        };
        let crashes = if seed % 2 == 0 {
            crashes
        } else {
            crashes + partition
        };
        let r = run_src(&crashing(seed, "senders = [0]", "ring", 2, &crashes), seed);
        let what = format!("seed {seed}: {}", crashes.replace('\n', " "));
        assert_delivered_once_or_reported(&r, &what);
        reported += r.lost_reported;
    }
    assert!(reported > 0, "no run ever reported a message");
}
