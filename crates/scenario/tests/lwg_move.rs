//! Moving a light group to another heavy group at run time (seed 001 §2.1, Rodrigues et al.'s
//! switch; crates/group/src/lwg.rs, "Mapping light groups to heavy groups"), judged by the
//! group checker (crates/scenario/src/group.rs) on each light channel.
//!
//! Two heavy groups (`vs` over `dev` on port 0, `vs2` over `dev2` on port 1, each with its own
//! failure detector) and one `lwg` session bound into three light channels: `a` and `b` ride
//! the first, `d` the second. A `[[scenario.move]]` at a random node and time moves `a` to
//! `d`'s heavy group while all three channels multicast. Per seed: 3–5 nodes, loss 0–20 % with
//! duplication and reordering, sometimes a crash at or near the move (restarted or not), and
//! a quiet end longer than the liveness bound. Every property holds per light channel across
//! the move: view agreement and monotonicity, virtual synchrony (messages sent before the
//! switch are delivered in the old light view, after it in the new one), self-delivery, no
//! creation, no duplication, liveness.
//!
//! `GROUP_SEEDS=n` sets the seed count (default 100), `GROUP_SEED_FROM` the first seed.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt::Write;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_scenario::{run, Report, RunOptions};

const STACK: &str = r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.hb]
kind = "heartbeat"
interval = "20ms"
timeout = "100ms"
[layers.vs]
kind = "vsync"
[layers.dev2]
kind = "device"
port = 1
[layers.sum2]
kind = "checksum"
[layers.hb2]
kind = "heartbeat"
interval = "20ms"
timeout = "100ms"
[layers.vs2]
kind = "vsync"
[layers.lwg]
kind = "lwg"
[qos.light]
layers = ["dev", "sum", "hb", "vs", "lwg"]
[qos.light2]
layers = ["dev2", "sum2", "hb2", "vs2", "lwg"]
[channels.a]
qos = "light"
bind = { lwg = "the-lwg" }
[channels.b]
qos = "light"
bind = { lwg = "the-lwg" }
[channels.d]
qos = "light2"
bind = { lwg = "the-lwg" }
[sessions.the-lwg]
layer = "lwg"
"#;

/// Workloads on the three channels, a move of `a` to `d`'s heavy group, random faults (with
/// a partition that heals around the move when `partition`).
fn scenario(seed: u64, partition: bool) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0018_3003);
    let nodes: u32 = rng.gen_range(3..=5);
    let loss = [0.0, 0.05, 0.1, 0.2][rng.gen_range(0..4)];
    let mut s = String::new();
    let _ = write!(
        s,
        r#"
[scenario]
nodes = {nodes}
seed = {seed}
expect = "virtual-synchrony"
DURATION
[scenario.link]
latency = "1ms"
jitter = "1ms"
loss = {loss}
duplicate = 0.05
reorder = 0.1
reorder_delay = "3ms"
"#
    );
    for (ch, interval, start) in [("a", 40, 300), ("b", 50, 310), ("d", 70, 320)] {
        let _ = write!(
            s,
            "[[scenario.workload]]\nchannel = \"{ch}\"\npattern = \"multicast\"\nmessages = 100\n\
             interval = \"{interval}ms\"\nstart = \"{start}ms\"\nsize = 40\n"
        );
    }
    let mover = rng.gen_range(0..nodes);
    let at: f64 = rng.gen_range(1.0..4.0);
    let _ = write!(
        s,
        "[[scenario.move]]\nnode = {mover}\nchannel = \"a\"\nto = \"d\"\nat = \"{}ms\"\n",
        (at * 1000.0) as u64
    );
    let mut last = at;
    if partition {
        // A partition around the move: some members miss the `Switch`, the `Flushed` or the
        // `Moved`, and are pulled over after the heal.
        let from = at + rng.gen_range(-0.3..0.1);
        let heal = from + rng.gen_range(0.3..2.0);
        last = last.max(heal);
        let mut groups: Vec<Vec<u32>> = vec![Vec::new(); 2];
        for n in 0..nodes {
            groups[rng.gen_range(0..2)].push(n);
        }
        groups.retain(|g| !g.is_empty());
        let _ = write!(
            s,
            "[[scenario.partition]]\nat = \"{}ms\"\nheal = \"{}ms\"\ngroups = {:?}\n",
            (from * 1000.0) as u64,
            (heal * 1000.0) as u64,
            groups
        );
    }
    if rng.gen_bool(0.5) {
        // A crash during the move (the mover itself, sometimes).
        let node = if rng.gen_bool(0.3) {
            mover
        } else {
            rng.gen_range(0..nodes)
        };
        let crash = at + rng.gen_range(-0.01..0.05);
        last = last.max(crash);
        let _ = write!(
            s,
            "[[scenario.crash]]\nnode = {node}\nat = \"{}ms\"\n",
            (crash * 1000.0) as u64
        );
        if rng.gen_bool(0.6) {
            let back = crash + rng.gen_range(0.2..2.0);
            last = last.max(back);
            let _ = writeln!(s, "restart = \"{}ms\"", (back * 1000.0) as u64);
        }
    }
    let end = last.max(0.32 + 100.0 * 0.07) + 5.5;
    s.replace(
        "DURATION",
        &format!("duration = \"{}ms\"", (end * 1000.0) as u64),
    )
}

fn run_file(src: &str) -> Report {
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("lwg-move.toml", src, &catalog)
        .unwrap_or_else(|d| panic!("invalid stack file:\n{d}\n{src}"));
    run(&file, &catalog, &RunOptions::default(), |_| {}).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn seeds() -> u64 {
    std::env::var("GROUP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

/// Without faults: every member moves `a` (counted `lwg.moved` once per node), and each
/// channel keeps every property.
#[test]
fn a_light_group_moves_to_another_heavy_group() {
    let src = format!(
        "{STACK}{}",
        r#"
[scenario]
nodes = 4
seed = 1
duration = "9s"
expect = "virtual-synchrony"
[scenario.link]
latency = "1ms"
[[scenario.workload]]
channel = "a"
pattern = "multicast"
messages = 100
interval = "30ms"
start = "300ms"
size = 40
[[scenario.workload]]
channel = "d"
pattern = "multicast"
messages = 100
interval = "30ms"
start = "300ms"
size = 40
[[scenario.move]]
node = 2
channel = "a"
to = "d"
at = "1500ms"
"#
    );
    let r = run_file(&src);
    assert!(r.verdict.holds, "{r}");
    assert!(r.properties.values().all(|v| v == "held"), "{r}");
    assert_eq!(r.counters.get("lwg.moved").copied(), Some(4), "{r}");
    assert_eq!(r.counters.get("lwg.switch_sent").copied(), Some(1), "{r}");
    assert!(
        r.counters.get("lwg.switch_installed").copied().unwrap_or(0) >= 4,
        "{r}"
    );
    assert_eq!(r.counters.get("lwg.move_refused"), None, "{r}");
}

/// A move to the group's own heavy group is refused (`lwg.move_refused`), nothing moves.
#[test]
fn a_move_to_the_same_heavy_group_is_refused() {
    let src = format!(
        "{STACK}{}",
        r#"
[scenario]
nodes = 3
seed = 1
duration = "3s"
expect = "virtual-synchrony"
[scenario.link]
latency = "1ms"
[[scenario.move]]
node = 0
channel = "a"
to = "b"
at = "1500ms"
[[scenario.workload]]
channel = "a"
pattern = "multicast"
messages = 20
interval = "50ms"
start = "300ms"
size = 40
"#
    );
    let r = run_file(&src);
    assert!(r.verdict.holds, "{r}");
    assert_eq!(r.counters.get("lwg.move_refused").copied(), Some(1), "{r}");
    assert_eq!(r.counters.get("lwg.moved"), None, "{r}");
}

#[test]
fn a_moving_light_group_keeps_every_property_over_random_faults() {
    many_seeds(false);
}

/// The same with a partition around the move that heals.
#[test]
fn a_light_group_moved_across_a_partition_keeps_every_property() {
    many_seeds(true);
}

fn many_seeds(partition: bool) {
    let mut tally: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut failures = Vec::new();
    let first: u64 = std::env::var("GROUP_SEED_FROM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut moved = 0;
    for seed in first..first + seeds() {
        let src = format!("{STACK}{}", scenario(seed, partition));
        let r = run_file(&src);
        for (k, v) in &r.properties {
            let t = tally.entry(k.clone()).or_default();
            if v == "held" {
                t.0 += 1;
            } else if v.starts_with("violated") {
                t.1 += 1;
            }
        }
        let did = r.counters.get("lwg.moved").copied().unwrap_or(0) > 0;
        moved += u64::from(did);
        if !did && std::env::var("LWG_MOVE_DEBUG").is_ok() {
            println!("seed {seed} did not move:\n{r}");
        }
        if !r.verdict.holds && failures.len() < 3 {
            failures.push(format!("seed {seed}:\n{r}\n{src}"));
        }
    }
    println!(
        "moving light group a to d's heavy group over {} seeds, partition {partition} \
         (held / violated); {moved} seeds moved:",
        seeds()
    );
    for (k, (held, bad)) in &tally {
        println!("  {k:<20} {held:>6} / {bad}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(tally.get("liveness").map(|t| t.0), Some(seeds()));
    // Every seed moves unless the crash took the mover down before its move (or, with a
    // partition, the move was asked during a flush and refused).
    assert!(
        moved * 10 >= seeds() * 8,
        "{moved} of {} seeds moved",
        seeds()
    );
}

/// A `[[scenario.move]]` naming a channel the file does not declare is an error at its line.
#[test]
fn a_move_naming_an_unknown_channel_is_reported() {
    let src = format!(
        "{STACK}{}",
        r#"
[scenario]
nodes = 3
[[scenario.move]]
node = 0
channel = "a"
to = "zz"
at = "1s"
"#
    );
    let catalog = viastack_stack::standard_catalog();
    let err = viastack_stack::parse("lwg-move.toml", &src, &catalog).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("[[scenario.move]] #1: no channel `zz`"),
        "{text}"
    );
}

/// stacks/lwg-move.toml as shipped (two `vsync` layers over one device; a crash during the
/// move and a restart pulled over): every property holds on each light channel, the move
/// happened, and the restarted member was pulled.
#[test]
fn shipped_lwg_move_stack_holds() {
    let path = format!("{}/../../stacks/lwg-move.toml", env!("CARGO_MANIFEST_DIR"));
    let r = run_file(&std::fs::read_to_string(path).unwrap());
    assert!(r.verdict.holds, "{r}");
    assert!(r.properties.values().all(|v| v == "held"), "{r}");
    assert!(r.properties.contains_key("liveness"), "{r}");
    assert!(
        r.counters.get("lwg.moved").copied().unwrap_or(0) >= 3,
        "{r}"
    );
    assert!(
        r.counters.get("lwg.pulled").copied().unwrap_or(0) >= 1,
        "{r}"
    );
}
