//! Fault-injection layers in simulated runs over perfect links behave like the simulator's own
//! faults, and the layers meant to counter them (fifo, dedup, encrypt) do: losses are counted,
//! copies removed, corrupted packets rejected, compressed payloads delivered intact. Every
//! assertion names its seed.
#![allow(clippy::unwrap_used)]

mod common;

use common::run_src;
use viastack_scenario::Report;

fn c(r: &Report, name: &str) -> u64 {
    r.counters.get(name).copied().unwrap_or(0)
}

const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// `layers` (TOML for `[layers.*]` after the device) stacked as `order` above `dev`, one
/// channel `data`, three nodes all-to-all, with `link` as the `[scenario.link]` table body.
fn scenario(layers: &str, order: &[&str], link: &str, expect: &str, messages: u32) -> String {
    let names: Vec<String> = std::iter::once("dev")
        .chain(order.iter().copied())
        .map(|n| format!("\"{n}\""))
        .collect();
    format!(
        r#"
[layers.dev]
kind = "device"
{layers}
[qos.q]
layers = [{}]
[channels.data]
qos = "q"
[scenario]
nodes = 3
duration = "300ms"
expect = "{expect}"
[scenario.link]
latency = "1ms"
{link}
[[scenario.workload]]
channel = "data"
messages = {messages}
size = 64
interval = "1ms"
"#,
        names.join(", ")
    )
}

#[test]
fn a_drop_layer_loses_like_a_lossy_link_and_fifo_still_holds() {
    let layered = scenario(
        "[layers.loss]\nkind = \"drop\"\nrate = 0.3\n[layers.order]\nkind = \"fifo\"\n",
        &["loss", "order"],
        "",
        "fifo",
        30,
    );
    let linked = scenario(
        "[layers.order]\nkind = \"fifo\"\n",
        &["order"],
        "loss = 0.3",
        "fifo",
        30,
    );
    let (mut lost_layer, mut lost_link, mut sent) = (0, 0, 0);
    for seed in 0..300u64 {
        let r = run_src(&layered, seed);
        assert_eq!(r.network.lost, 0, "seed {seed}: perfect links: {r}");
        assert_eq!(
            r.lost,
            c(&r, "loss.dropped"),
            "seed {seed}: every loss is a counted drop: {r}"
        );
        assert_eq!(r.delivered + r.lost, r.sent, "seed {seed}: {r}");
        assert_eq!(
            r.out_of_order + r.duplicated + r.corrupted,
            0,
            "seed {seed}: {r}"
        );
        assert!(r.verdict.holds, "seed {seed}: {r}");
        lost_layer += r.lost;
        sent += r.sent;
        let l = run_src(&linked, seed);
        assert!(l.verdict.holds, "seed {seed}: {l}");
        lost_link += l.lost;
    }
    // Both lose about 30% (27 000 messages each: a 2-point band is > 7 standard deviations).
    for (what, lost) in [("layer", lost_layer), ("link", lost_link)] {
        let pct = lost as f64 * 100.0 / sent as f64;
        assert!((28.0..32.0).contains(&pct), "{what}: {pct:.2}% lost");
    }
}

#[test]
fn duplicate_below_dedup_delivers_exactly_once_over_1000_seeds() {
    let layers = "[layers.dup]\nkind = \"duplicate\"\nrate = 0.5\n[layers.dd]\nkind = \"dedup\"\n";
    // The network reorders and duplicates too.
    let link = "jitter = \"2ms\"\nduplicate = 0.1\nreorder = 0.2\nreorder_delay = \"3ms\"";
    // Without dedup the copies reach the application (so the loop below can fail).
    let bare = run_src(
        &scenario(
            "[layers.dup]\nkind = \"duplicate\"\nrate = 0.5\n",
            &["dup"],
            link,
            "reliable",
            20,
        ),
        0,
    );
    assert!(bare.duplicated > 0 && !bare.verdict.holds, "{bare}");
    let src = scenario(layers, &["dup", "dd"], link, "reliable", 20);
    let mut removed = 0;
    for seed in 0..1000u64 {
        let r = run_src(&src, seed);
        assert!(
            c(&r, "dup.duplicated") > 0,
            "seed {seed}: no copy made: {r}"
        );
        assert_eq!(r.duplicated, 0, "seed {seed}: {r}");
        assert_eq!(r.delivered, r.sent, "seed {seed}: {r}");
        assert_eq!(r.corrupted + r.misdelivered, 0, "seed {seed}: {r}");
        assert!(r.verdict.holds, "seed {seed}: {r}");
        // Every copy, the layer's and the network's, was removed by dedup.
        assert_eq!(
            c(&r, "dd.duplicate"),
            c(&r, "dup.duplicated") + r.network.duplicated,
            "seed {seed}: {r}"
        );
        removed += c(&r, "dd.duplicate");
    }
    assert!(removed > 10_000, "{removed}");
}

#[test]
fn corrupt_below_encrypt_is_rejected_and_never_delivered_over_1000_seeds() {
    let layers = format!(
        "[layers.bits]\nkind = \"corrupt\"\nrate = 0.2\n[layers.enc]\nkind = \"encrypt\"\nkey = \"{KEY}\"\n"
    );
    // Without encrypt the flipped bits reach the application.
    let bare = run_src(
        &scenario(
            "[layers.bits]\nkind = \"corrupt\"\nrate = 0.2\n",
            &["bits"],
            "",
            "none",
            20,
        ),
        0,
    );
    assert!(bare.corrupted > 0, "{bare}");
    let src = scenario(&layers, &["bits", "enc"], "", "none", 20);
    let mut bad_tags = 0;
    for seed in 0..1000u64 {
        let r = run_src(&src, seed);
        assert_eq!(
            r.corrupted, 0,
            "seed {seed}: a corrupted payload was delivered: {r}"
        );
        assert_eq!(r.misdelivered + r.duplicated, 0, "seed {seed}: {r}");
        let rejected = c(&r, "enc.bad_tag")
            + c(&r, "enc.replay")
            + c(&r, "enc.too_old")
            + c(&r, "enc.stale_salt");
        // A packet is lost exactly when encrypt rejected it; it rejects only corrupted ones
        // (two flips of the same bit cancel, so at most as many as were corrupted).
        assert_eq!(r.lost, rejected, "seed {seed}: {r}");
        assert!(rejected <= c(&r, "bits.corrupted"), "seed {seed}: {r}");
        assert_eq!(r.delivered + r.lost, r.sent, "seed {seed}: {r}");
        bad_tags += c(&r, "enc.bad_tag");
    }
    assert!(bad_tags > 1_000, "{bad_tags}");
}

#[test]
fn encrypt_rejects_what_a_corrupting_network_damages() {
    let layers = format!("[layers.enc]\nkind = \"encrypt\"\nkey = \"{KEY}\"\n");
    let src = scenario(&layers, &["enc"], "corrupt = 0.2", "none", 20);
    for seed in 0..200u64 {
        let r = run_src(&src, seed);
        assert_eq!(r.corrupted + r.misdelivered, 0, "seed {seed}: {r}");
        assert!(r.network.corrupted == 0 || r.lost > 0, "seed {seed}: {r}");
    }
}

#[test]
fn compress_and_ttl_deliver_payloads_of_every_size_intact() {
    let mut src = scenario(
        "[layers.hops]\nkind = \"ttl\"\nttl = 1\n[layers.lz]\nkind = \"compress\"\n",
        &["hops", "lz"],
        "jitter = \"1ms\"",
        "reliable",
        10,
    );
    // More workloads of other sizes on the same channel (the payload filler repeats every 251
    // bytes, so the larger ones compress).
    for size in [1, 255, 256, 1000, 4096, 65_536] {
        src.push_str(&format!(
            "[[scenario.workload]]\nchannel = \"data\"\nmessages = 5\nsize = {size}\ninterval = \"2ms\"\n"
        ));
    }
    for seed in 0..50u64 {
        let r = run_src(&src, seed);
        assert_eq!(
            r.corrupted + r.misdelivered + r.duplicated,
            0,
            "seed {seed}: {r}"
        );
        assert_eq!(r.delivered, r.sent, "seed {seed}: {r}");
        assert!(r.verdict.holds, "seed {seed}: {r}");
        assert!(
            c(&r, "lz.compressed") > 0,
            "seed {seed}: nothing compressed: {r}"
        );
        assert!(c(&r, "lz.saved_bytes") > 0, "seed {seed}: {r}");
        assert_eq!(c(&r, "hops.expired"), 0, "seed {seed}: {r}");
    }
}

#[test]
fn delay_and_reorder_layers_reorder_like_the_network_and_fifo_restores_order() {
    for (layer, name) in [
        (
            "[layers.late]\nkind = \"delay\"\ndelay = \"1ms\"\njitter = \"3ms\"\n",
            "late",
        ),
        (
            "[layers.late]\nkind = \"reorder\"\nrate = 0.3\nhold = \"3ms\"\n",
            "late",
        ),
    ] {
        let bare = run_src(&scenario(layer, &[name], "", "fifo", 30), 0);
        assert!(bare.out_of_order > 0, "{layer}: {bare}");
        let src = scenario(
            &format!("{layer}[layers.order]\nkind = \"fifo\"\n"),
            &[name, "order"],
            "",
            "fifo",
            30,
        );
        let mut stale = 0;
        for seed in 0..200u64 {
            let r = run_src(&src, seed);
            assert_eq!(
                r.out_of_order + r.duplicated + r.corrupted,
                0,
                "seed {seed}: {r}"
            );
            assert_eq!(r.delivered + r.lost, r.sent, "seed {seed}: {r}");
            assert_eq!(r.lost, c(&r, "order.stale"), "seed {seed}: {r}");
            assert!(r.verdict.holds, "seed {seed}: {r}");
            assert_eq!(c(&r, "late.overflow"), 0, "seed {seed}: {r}");
            stale += r.lost;
        }
        assert!(stale > 0, "{layer}: fifo never had to drop a late message");
    }
}

#[test]
fn dedup_hears_a_restarted_sender_again() {
    let src = format!(
        "{}[[scenario.crash]]\nnode = 2\nat = \"10ms\"\nrestart = \"20ms\"\n",
        scenario("[layers.dd]\nkind = \"dedup\"\n", &["dd"], "", "none", 40)
    );
    for seed in 0..50u64 {
        let r = run_src(&src, seed);
        assert_eq!(r.duplicated, 0, "seed {seed}: {r}");
        assert_eq!(r.lost, 0, "seed {seed}: {r}");
        assert_eq!(r.lost_crashed, r.network.dropped_down, "seed {seed}: {r}");
        assert!(c(&r, "dd.peer_restarted") > 0, "seed {seed}: {r}");
        assert_eq!(
            c(&r, "dd.duplicate") + c(&r, "dd.stale_epoch"),
            0,
            "seed {seed}: {r}"
        );
    }
}
