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
///
/// With `back` a second move: `a` goes back to its configured heavy group
/// (`b`'s) 1.5–2.5 s after the first, asked by another random node, the faults (partition,
/// crash) around that second move — a member cut off or restarted during it must be pulled
/// over like after the first.
fn scenario_with(seed: u64, partition: bool, back: bool) -> String {
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
    let mut mover = rng.gen_range(0..nodes);
    let mut at: f64 = rng.gen_range(1.0..4.0);
    let _ = write!(
        s,
        "[[scenario.move]]\nnode = {mover}\nchannel = \"a\"\nto = \"d\"\nat = \"{}ms\"\n",
        (at * 1000.0) as u64
    );
    if back {
        // The way back, at another time and node; the faults below are around it.
        mover = rng.gen_range(0..nodes);
        at += rng.gen_range(1.5..2.5);
        let _ = write!(
            s,
            "[[scenario.move]]\nnode = {mover}\nchannel = \"a\"\nto = \"b\"\nat = \"{}ms\"\n",
            (at * 1000.0) as u64
        );
    }
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
    many_seeds(false, false);
}

/// The same with a partition around the move that heals.
#[test]
fn a_light_group_moved_across_a_partition_keeps_every_property() {
    many_seeds(true, false);
}

/// A move and a move back to the configured heavy group (a→d's, then a→b's), a crash (with or
/// without a restart) around the move back: a member restarted during it (on its configured
/// heavy group, at generation 0) or one that missed it is pulled over — liveness on `a`
/// (one light view with every live member at the end) fails otherwise.
#[test]
fn a_light_group_moved_back_keeps_every_property_over_random_faults() {
    many_seeds(false, true);
}

/// The same with a partition around the move back that heals: members cut off from the
/// move back (still on `d`'s heavy group at generation 1) are pulled back by the members at
/// generation 2 when they announce the group there after the heal.
#[test]
fn a_light_group_moved_back_across_a_partition_keeps_every_property() {
    many_seeds(true, true);
}

/// Issue 18, seed 919 of the run above (5 nodes, 10 % loss; the first move at 1.163 s, a
/// partition {0, 2, 4} | {1, 3} from 2.621 s to 2.928 s, node 0 asks the move back at 2.823 s,
/// node 2 crashes at 2.827 s and restarts at 3.334 s on `b`'s heavy group, at generation 0).
/// What happened, in `lwg`'s terms:
///
/// 1. node 0's `Switch` (generation 2) goes out on `d`'s heavy group, whose flush then stalls
///    on the crash: node 0 delivers it only at 3.64 s;
/// 2. meanwhile node 0 pulls the restarted node 2 over to `d`'s heavy group (generation 1),
///    where nodes 1 and 3 are; their switch view takes generation 2;
/// 3. in `d`'s next heavy view {0, 2} node 0 sends its `Switch` (generation 2) again, and node
///    2, already at generation 2, ignored it as a stale pull: no `Flushed` from node 2, so node
///    0's move never completed and its sends of `a` waited for ever — its last 16 messages
///    were delivered nowhere (self-delivery violated).
///
/// A `Switch` of a member of the light view is now followed whatever its generation, and a
/// move carried into a new heavy view sends it again above the generation agreed there (both
/// counted `lwg.switch_raised`; either alone repairs this seed, neither fails it on
/// self-delivery). The test checks every property holds, both moves were asked, and the
/// race still happens in this seed (else it says so: the schedule moved, find another).
#[test]
fn a_move_back_racing_a_straggler_pull_keeps_the_askers_messages() {
    let src = format!("{STACK}{}", scenario_with(919, true, true));
    let r = run_file(&src);
    assert_eq!(
        r.properties.get("self-delivery").map(String::as_str),
        Some("held"),
        "{r}"
    );
    assert!(r.verdict.holds, "{r}\n{src}");
    assert!(r.properties.values().all(|v| v == "held"), "{r}");
    assert_eq!(r.counters.get("lwg.switch_sent").copied(), Some(2), "{r}");
    assert!(
        r.counters.get("lwg.switch_raised").copied().unwrap_or(0) >= 1,
        "seed 919 no longer races a move back with a pull (no `lwg.switch_raised`):\n{r}"
    );
}

fn many_seeds(partition: bool, back: bool) {
    let mut tally: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut failures = Vec::new();
    let first: u64 = std::env::var("GROUP_SEED_FROM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut moved = 0;
    let mut both = 0;
    for seed in first..first + seeds() {
        let src = format!("{STACK}{}", scenario_with(seed, partition, back));
        let r = run_file(&src);
        // Both moves asked were carried out (neither refused at its asking node).
        both += u64::from(r.counters.get("lwg.switch_sent").copied() == Some(2));
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
        "moving light group a to d's heavy group over {} seeds, partition {partition}, \
         back {back} (held / violated); {moved} seeds moved, {both} seeds with both moves:",
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
    if back {
        // Most seeds move back too (the second asker may have crashed, or be cut off from
        // the first move and refuse: the group is not where it asks from).
        assert!(
            both * 10 >= seeds() * 6,
            "{both} of {} seeds moved there and back",
            seeds()
        );
    }
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

/// Moves under `primary = "majority"` (issue 18): a partition splits the nodes at random and
/// a random node asks to move `a` while it lasts. In a minority view (no more than half the
/// nodes) the move is refused at the asking node — an `LwgRefused` notice, `lwg.move_refused`,
/// no `Switch` — and nothing moves; in the majority the move proceeds, and after the heal
/// the minority's members (still on `b`'s heavy group) are pulled over. Every property holds
/// on each light channel, liveness included.
#[test]
fn moves_under_majority_are_refused_in_minority_views_and_proceed_in_the_majority() {
    let stack = STACK.replace(
        "kind = \"vsync\"",
        "kind = \"vsync\"\nprimary = \"majority\"",
    );
    assert_eq!(stack.matches("primary = \"majority\"").count(), 2);
    let (mut refused_seeds, mut moved_seeds) = (0, 0);
    let mut failures = Vec::new();
    let first: u64 = std::env::var("GROUP_SEED_FROM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut tally: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for seed in first..first + seeds() {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0018_4004);
        let nodes: u32 = rng.gen_range(3..=5);
        let loss = [0.0, 0.05, 0.1][rng.gen_range(0..3)];
        let mut sides: Vec<Vec<u32>> = vec![Vec::new(); 2];
        for n in 0..nodes {
            sides[rng.gen_range(0..2)].push(n);
        }
        sides.retain(|g| !g.is_empty());
        let mover = rng.gen_range(0..nodes);
        let majority = sides
            .iter()
            .find(|g| g.contains(&mover))
            .is_some_and(|g| g.len() * 2 > nodes as usize);
        let from: f64 = rng.gen_range(1.0..2.0);
        // Long after the partition's views are installed, well before the heal.
        let at = from + rng.gen_range(0.8..1.2);
        let heal = at + rng.gen_range(1.0..2.0);
        let end = heal.max(0.32 + 100.0 * 0.07) + 5.5;
        let mut s = stack.clone();
        let _ = write!(
            s,
            r#"
[scenario]
nodes = {nodes}
seed = {seed}
expect = "virtual-synchrony"
duration = "{}ms"
[scenario.link]
latency = "1ms"
jitter = "1ms"
loss = {loss}
duplicate = 0.05
reorder = 0.1
reorder_delay = "3ms"
[[scenario.move]]
node = {mover}
channel = "a"
to = "d"
at = "{}ms"
[[scenario.partition]]
at = "{}ms"
heal = "{}ms"
groups = {:?}
"#,
            (end * 1000.0) as u64,
            (at * 1000.0) as u64,
            (from * 1000.0) as u64,
            (heal * 1000.0) as u64,
            sides
        );
        for (ch, interval, start) in [("a", 40, 300), ("b", 50, 310), ("d", 70, 320)] {
            let _ = write!(
                s,
                "[[scenario.workload]]\nchannel = \"{ch}\"\npattern = \"multicast\"\n\
                 messages = 100\ninterval = \"{interval}ms\"\nstart = \"{start}ms\"\nsize = 40\n"
            );
        }
        let r = run_file(&s);
        for (k, v) in &r.properties {
            let t = tally.entry(k.clone()).or_default();
            if v == "held" {
                t.0 += 1;
            } else if v.starts_with("violated") {
                t.1 += 1;
            }
        }
        let c = |k: &str| r.counters.get(k).copied().unwrap_or(0);
        let refusals = r.notices.get("LwgRefused").copied().unwrap_or(0);
        let ok_move = if majority {
            // Proceeds: the Switch went out, every member ends up moved (the minority's
            // pulled after the heal), nothing refused.
            moved_seeds += 1;
            c("lwg.switch_sent") == 1
                && c("lwg.move_refused") == 0
                && refusals == 0
                && c("lwg.moved") >= u64::from(nodes)
        } else {
            refused_seeds += 1;
            c("lwg.move_refused") == 1
                && refusals == 1
                && c("lwg.switch_sent") == 0
                && c("lwg.moved") == 0
        };
        if (!r.verdict.holds || !ok_move) && failures.len() < 3 {
            failures.push(format!(
                "seed {seed} (mover {mover} in the majority: {majority}; sides {sides:?}):\n{r}\n{s}"
            ));
        }
    }
    println!(
        "moves under primary = \"majority\" over {} seeds: {moved_seeds} asked in the majority \
         (proceeded), {refused_seeds} asked in a minority (refused); (held / violated):",
        seeds()
    );
    for (k, (held, bad)) in &tally {
        println!("  {k:<20} {held:>6} / {bad}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(tally.get("liveness").map(|t| t.0), Some(seeds()));
    assert!(refused_seeds > 0 && moved_seeds > 0);
}

/// `expect = "cross-channel-order"` with a `[[scenario.move]]` is refused at the move's line:
/// one order over every channel cannot hold once a light group rides a second heavy group
/// (two heavy groups' total orders are separate).
#[test]
fn cross_channel_order_with_a_move_is_refused_at_the_moves_line() {
    let src = format!(
        "{STACK}{}",
        r#"
[scenario]
nodes = 3
expect = "cross-channel-order"
[[scenario.move]]
node = 0
channel = "a"
to = "d"
at = "1s"
"#
    );
    let move_line = src.lines().position(|l| l == "[[scenario.move]]").unwrap() + 1;
    let catalog = viastack_stack::standard_catalog();
    let err = viastack_stack::parse("lwg-move.toml", &src, &catalog).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "lwg-move.toml:{move_line}: [[scenario.move]] #1: `expect = \"cross-channel-order\"`"
        )),
        "{text}"
    );
    assert!(text.contains("expect = \"total-order\""), "{text}");
}

/// What holds across a move with a `total-order` layer on each heavy group (the stack that
/// gives cross-channel order on one heavy group): each light channel keeps one total order
/// across its move — members that go from one light view to the same next one deliver its
/// messages in one order, the switch view included — with every other property.
#[test]
fn a_light_group_moved_between_totally_ordered_heavy_groups_keeps_its_total_order() {
    let mut tally: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut moved = 0;
    let first: u64 = std::env::var("GROUP_SEED_FROM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in first..first + seeds() {
        let src = total_order_scenario(seed);
        let r = run_file(&src);
        for (k, v) in &r.properties {
            let t = tally.entry(k.clone()).or_default();
            if v == "held" {
                t.0 += 1;
            } else if v.starts_with("violated") {
                t.1 += 1;
            }
        }
        moved += u64::from(r.counters.get("lwg.moved").copied().unwrap_or(0) > 0);
        if !r.verdict.holds && failures.len() < 3 {
            failures.push(format!("seed {seed}:\n{r}\n{src}"));
        }
    }
    println!(
        "moving light group a between totally ordered heavy groups over {} seeds; {moved} \
         moved (held / violated):",
        seeds()
    );
    for (k, (held, bad)) in &tally {
        println!("  {k:<20} {held:>6} / {bad}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(tally.get("total-order").map(|t| t.0), Some(seeds()));
    assert!(moved * 10 >= seeds() * 8, "{moved} of {} moved", seeds());
}

/// The stack file of [`a_light_group_moved_between_totally_ordered_heavy_groups_keeps_its_total_order`]
/// at `seed`: a `total-order` layer on each heavy group, a partition on odd seeds, a move back
/// on seeds 2 and 3 modulo 4.
fn total_order_scenario(seed: u64) -> String {
    let stack = STACK
        .replace(
            "[layers.lwg]",
            "[layers.to]\nkind = \"total-order\"\n[layers.to2]\nkind = \"total-order\"\n[layers.lwg]",
        )
        .replace("\"vs\", \"lwg\"]", "\"vs\", \"to\", \"lwg\"]")
        .replace("\"vs2\", \"lwg\"]", "\"vs2\", \"to2\", \"lwg\"]");
    assert_eq!(stack.matches("\"to\", \"lwg\"").count(), 1);
    assert_eq!(stack.matches("\"to2\", \"lwg\"").count(), 1);
    format!(
        "{stack}{}",
        scenario_with(seed, seed % 2 == 1, seed % 4 >= 2)
    )
    .replace("expect = \"virtual-synchrony\"", "expect = \"total-order\"")
}

/// Issue 18, seed 533 of the run above (5 nodes, 20 % loss, a partition {0, 1, 3} | {2, 4}
/// around the move, healed at 3.103 s; the full light view of `a` was installed at 3.506 s).
/// At 7.300 s node 1's detector of `d`'s heavy group suspected node 0 (its heartbeats lost ten
/// times in a row on that link: the 100 ms timeout plus `vsync`'s 100 ms confirmation), node 1
/// proposed a view without it at 7.400 s, and node 0's `Alive` came at 7.401 s — 150 ms before
/// the other members' `FlushOk`s were in (20 % loss). The view without node 0 was installed
/// anyway; node 0 left its view on its own flush timeout and came back by a merge, the full
/// view again at 8.165 s: 65 ms past the bound (last fault + 5 s), although nothing failed.
/// The move was not slow: the group was whole 0.4 s after the heal.
///
/// `vsync` now proposes anew, with the member, when its suspicion was withdrawn before the
/// view was installed (`vsync.flush_renewed`): one view with every member at ≈ 7.5 s. The
/// test checks the renewal happens in this seed (else the schedule moved: find another)
/// and that every property, liveness included, holds.
#[test]
fn a_member_suspected_falsely_after_a_move_is_kept_in_the_view() {
    let src = total_order_scenario(533);
    let r = run_file(&src);
    assert_eq!(
        r.properties.get("liveness").map(String::as_str),
        Some("held"),
        "{r}"
    );
    assert!(r.verdict.holds, "{r}\n{src}");
    assert!(r.properties.values().all(|v| v == "held"), "{r}");
    assert!(
        r.counters.get("vs2.flush_renewed").copied().unwrap_or(0) >= 1,
        "seed 533 no longer excludes a live member on a withdrawn suspicion:\n{r}"
    );
}

/// stacks/lwg-move-back.toml as shipped (a move and a move back to the configured heavy
/// group; a member cut off during the move back, another crashed and restarted during it):
/// every property holds on each light channel, both moves happened, the cut-off member was
/// pulled.
#[test]
fn shipped_lwg_move_back_stack_holds() {
    let path = format!(
        "{}/../../stacks/lwg-move-back.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let r = run_file(&std::fs::read_to_string(path).unwrap());
    assert!(r.verdict.holds, "{r}");
    assert!(r.properties.values().all(|v| v == "held"), "{r}");
    assert!(r.properties.contains_key("liveness"), "{r}");
    assert_eq!(r.counters.get("lwg.switch_sent").copied(), Some(2), "{r}");
    assert!(
        r.counters.get("lwg.pulled").copied().unwrap_or(0) >= 1,
        "{r}"
    );
}
