//! Issue 13 §5: `bundle` below `reliable-fifo` (and `fragment` above it), over many seeds of
//! loss up to 20 %, duplication, reordering, corruption and partitions: a lost or damaged
//! bundle loses several segments at once, and the reliable layer still delivers every message
//! exactly once, in order, or tells its sender. Bundling must actually happen for the test to
//! mean anything, so the totals are checked too.
//!
//! Every assertion prints the seed; rerun one with `viastack run FILE --seed N`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{assert_delivered_once_or_reported, counter, run_src};

/// Three nodes all to all: 100-byte messages every 2 ms and 3000-byte ones (fragmented) every
/// 50 ms, over `device < checksum < bundle < reliable-fifo < fragment`; node `seed % 3` cut off
/// for 0.3–2.7 s, `retries` timeouts before reliable-fifo gives up.
fn bundled(seed: u64, retries: u32) -> String {
    let loss = [0.0, 0.05, 0.1, 0.2][(seed % 4) as usize];
    let cut = seed % 3;
    let others: Vec<String> = (0..3u64)
        .filter(|&n| n != cut)
        .map(|n| n.to_string())
        .collect();
    let at = 200 + (seed * 37) % 500;
    let heal = at + 300 + (seed * 613) % 2_400;
    let max_bytes = [300, 1400, 9000][(seed % 3) as usize];
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.pack]
kind = "bundle"
max_bytes = {max_bytes}
[layers.rel]
kind = "reliable-fifo"
rto_initial = "100ms"
rto_min = "20ms"
rto_max = "250ms"
max_retries = {retries}
ack_delay = "5ms"
[layers.frag]
kind = "fragment"
mtu = 1000
[qos.q]
layers = ["dev", "sum", "pack", "rel", "frag"]
[channels.data]
qos = "q"
[scenario]
nodes = 3
duration = "{duration}ms"
expect = "reliable-fifo"
[scenario.link]
latency = "1ms"
jitter = "1ms"
loss = {loss}
duplicate = 0.05
reorder = 0.1
reorder_delay = "3ms"
corrupt = 0.02
[[scenario.workload]]
channel = "data"
messages = 60
size = 100
interval = "2ms"
[[scenario.workload]]
channel = "data"
messages = 6
size = 3000
interval = "50ms"
start = "1ms"
[[scenario.partition]]
at = "{at}ms"
heal = "{heal}ms"
groups = [[{cut}], [{others}]]
"#,
        duration = heal + 8_000,
        others = others.join(", "),
    )
}

#[test]
fn bundled_reliable_fifo_loses_and_duplicates_nothing_over_a_thousand_seeds() {
    let seeds = 1_000u64;
    let (mut delivered, mut reported, mut bundles, mut bundled_msgs, mut damaged) = (0, 0, 0, 0, 0);
    for seed in 0..seeds {
        // 40 retries (≈ 9 s) outlast every partition; 6 give up during most.
        let retries = if seed % 2 == 0 { 40 } else { 6 };
        let r = run_src(&bundled(seed, retries), seed);
        let what = format!("seed {seed} (retries {retries})");
        assert_delivered_once_or_reported(&r, &what);
        assert_eq!(r.sent, 3 * 66, "{what}: {r}");
        if retries == 40 {
            assert_eq!(r.delivered, r.sent, "{what}: {r}");
        }
        delivered += r.delivered;
        reported += r.lost_reported;
        bundles += counter(&r, "pack.received_bundles");
        bundled_msgs += counter(&r, "pack.bundled");
        damaged += counter(&r, "sum.bad");
    }
    eprintln!(
        "{seeds} seeds: delivered {delivered}, reported {reported}, bundles received {bundles} \
         ({bundled_msgs} messages sent in bundles), damaged datagrams {damaged}"
    );
    assert!(delivered > 0 && reported > 0);
    assert!(bundles > seeds * 10, "bundling happened: {bundles}");
    assert!(damaged > 0, "corruption reached the bundles");
}
