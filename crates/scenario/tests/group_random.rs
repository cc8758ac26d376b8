//! The group stack (`heartbeat` + `vsync` + `total-order`, stacks/group.toml's layers) over
//! random faults, judged by the group checker (crates/scenario/src/group.rs): per seed, 3–6
//! nodes, loss 0–20 % with duplication and reordering on every link, up to two partitions that
//! heal, up to two crashes (most restart), sometimes a graceful leave, and a quiet end longer
//! than the liveness bound. Every property must hold on every seed; the pass count per
//! property is printed (`--nocapture`).
//!
//! `GROUP_SEEDS=n` raises the seed count (default 100; run 1,000 before a release). A failure
//! names its seed and prints the stack file; rerun it with `viastack run FILE`.
//!
//! Also here: the checker is not vacuous — stacks with a planted bug (a layer above the group
//! that loses or reorders deliveries at one member) fail the property the bug breaks.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt::Write;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_scenario::{run, Report, RunOptions};

/// The layers of stacks/group.toml (heartbeat tuned to a 1 ms network), with `extra` layers
/// declared and inserted above `top`.
fn stack(extra_layers: &str, order: &[&str]) -> String {
    let list: Vec<String> = order.iter().map(|l| format!("\"{l}\"")).collect();
    format!(
        r#"
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
[layers.to]
kind = "total-order"
[layers.co]
kind = "causal-order"
[layers.st]
kind = "state-transfer"
{extra_layers}
[qos.group]
layers = [{}]
[channels.g]
qos = "group"
"#,
        list.join(", ")
    )
}

const LAYERS: &[&str] = &["dev", "sum", "hb", "vs", "to"];

/// A random fault schedule and workload for `nodes` nodes; returns the `[scenario]` text.
fn scenario(seed: u64, expect: &str) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0001_8001);
    let nodes: u32 = rng.gen_range(3..=6);
    let loss = [0.0, 0.05, 0.1, 0.2][rng.gen_range(0..4)];
    let mut s = String::new();
    let mut last_fault = 0.5f64;
    let _ = write!(
        s,
        r#"
[scenario]
nodes = {nodes}
seed = {seed}
expect = "{expect}"
DURATION
[scenario.link]
latency = "1ms"
jitter = "1ms"
loss = {loss}
duplicate = 0.05
reorder = 0.1
reorder_delay = "3ms"
[[scenario.workload]]
channel = "g"
pattern = "multicast"
messages = 150
interval = "30ms"
start = "300ms"
size = 48
"#
    );
    for _ in 0..rng.gen_range(0..=2) {
        let at: f64 = rng.gen_range(1.0..5.0);
        let heal = at + rng.gen_range(0.3..2.0);
        last_fault = last_fault.max(heal);
        let k = rng.gen_range(2..=3usize);
        let mut groups: Vec<Vec<u32>> = vec![Vec::new(); k];
        for n in 0..nodes {
            groups[rng.gen_range(0..k)].push(n);
        }
        groups.retain(|g| !g.is_empty());
        let _ = write!(
            s,
            "[[scenario.partition]]\nat = \"{}ms\"\nheal = \"{}ms\"\ngroups = {:?}\n",
            (at * 1000.0) as u64,
            (heal * 1000.0) as u64,
            groups
        );
    }
    let mut crashed = Vec::new();
    for _ in 0..rng.gen_range(0..=2) {
        let node = rng.gen_range(0..nodes);
        if crashed.contains(&node) {
            continue;
        }
        crashed.push(node);
        let at: f64 = rng.gen_range(1.0..5.0);
        last_fault = last_fault.max(at);
        let _ = write!(
            s,
            "[[scenario.crash]]\nnode = {node}\nat = \"{}ms\"\n",
            (at * 1000.0) as u64
        );
        if rng.gen_bool(0.7) {
            let back = at + rng.gen_range(0.2..2.0);
            last_fault = last_fault.max(back);
            let _ = writeln!(s, "restart = \"{}ms\"", (back * 1000.0) as u64);
        }
    }
    if rng.gen_bool(0.2) {
        let node = rng.gen_range(0..nodes);
        if !crashed.contains(&node) {
            let at: f64 = rng.gen_range(1.0..5.0);
            last_fault = last_fault.max(at);
            let _ = write!(
                s,
                "[[scenario.leave]]\nnode = {node}\nat = \"{}ms\"\n",
                (at * 1000.0) as u64
            );
        }
    }
    // Quiet for the liveness bound plus a margin after the last fault (and the workload's end).
    let end = last_fault.max(0.3 + 150.0 * 0.03) + 5.5;
    s.replace(
        "DURATION",
        &format!("duration = \"{}ms\"", (end * 1000.0) as u64),
    )
}

fn run_file(src: &str) -> Report {
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("group-random.toml", src, &catalog)
        .unwrap_or_else(|d| panic!("invalid stack file:\n{d}\n{src}"));
    run(&file, &catalog, &RunOptions::default(), |_| {}).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn seeds() -> u64 {
    std::env::var("GROUP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

/// Runs `layers` over every seed's random faults, expecting `expect`; prints the pass counts
/// per property and fails with the first failing seeds.
fn many_seeds(layers: &[&str], expect: &str) {
    many_seeds_with("", layers, expect);
}

/// [`many_seeds`] with `extra` layer declarations.
fn many_seeds_with(extra: &str, layers: &[&str], expect: &str) {
    let mut tally: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut failures = Vec::new();
    for seed in 0..seeds() {
        let src = stack(extra, layers) + &scenario(seed, expect);
        let r = run_file(&src);
        for (k, v) in &r.properties {
            let t = tally.entry(k.clone()).or_default();
            if v == "held" {
                t.0 += 1;
            } else if v.starts_with("violated") {
                t.1 += 1;
            }
        }
        if !r.verdict.holds && failures.len() < 3 {
            failures.push(format!("seed {seed}:\n{r}\n{src}"));
        }
    }
    println!(
        "{expect} over {} seeds, layers {layers:?} (held / violated):",
        seeds()
    );
    for (k, (held, bad)) in &tally {
        println!("  {k:<18} {held:>6} / {bad}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // Liveness must actually be judged (not skipped) on every seed.
    assert_eq!(tally.get("liveness").map(|t| t.0), Some(seeds()));
}

#[test]
fn group_stack_keeps_every_property_over_random_faults() {
    many_seeds(LAYERS, "total-order");
}

/// The stack of `viastack group chat` and `bench group`: a `bundle` layer above the checksum
/// packs what one kernel batch sends to a member (data, `Order`s, statuses, heartbeats) into
/// one datagram, so a lost datagram loses many group packets at once; `vsync`'s NAKs repair
/// them and every property still holds.
#[test]
fn bundled_group_stack_keeps_every_property_over_random_faults() {
    many_seeds_with(
        "[layers.pack]\nkind = \"bundle\"\nmax_bytes = 60000\n",
        &["dev", "sum", "pack", "hb", "vs", "to"],
        "total-order",
    );
}

/// With `state-transfer` above the sequencer, joiners and merging members take the group's
/// state: members that go from one view to the same next view report the same digest.
#[test]
fn state_transfer_stack_keeps_every_property_over_random_faults() {
    many_seeds(&["dev", "sum", "hb", "vs", "to", "st"], "total-order");
}

#[test]
fn causal_stack_keeps_every_property_over_random_faults() {
    many_seeds(&["dev", "sum", "hb", "vs", "co"], "causal-order");
}

/// A planted bug: a layer above `causal-order` holds back some deliveries at random, so a
/// reply can overtake what it answers: the causal-order property must fail.
#[test]
fn a_planted_causal_reordering_is_caught() {
    let extra =
        "[layers.bug]\nkind = \"reorder\"\nrate = 0.3\nhold = \"60ms\"\ndirection = \"up\"\n";
    let order = ["dev", "sum", "hb", "vs", "co", "bug"];
    let caught = (0..5).any(|seed| {
        let src = stack(extra, &order) + &scenario(seed, "causal-order");
        let r = run_file(&src);
        r.properties
            .get("causal-order")
            .is_some_and(|v| v.starts_with("violated"))
    });
    assert!(
        caught,
        "deliveries reordered above causal-order went unnoticed"
    );
}

/// A planted bug: a layer above the group drops 5 % of what node-side deliveries carry up.
/// Members then disagree on what they delivered in a view: virtual synchrony must fail (on at
/// least one of a few seeds), showing the checker is not vacuous.
#[test]
fn a_planted_delivery_loss_is_caught() {
    let extra = "[layers.bug]\nkind = \"drop\"\nrate = 0.05\ndirection = \"up\"\n";
    let order = ["dev", "sum", "hb", "vs", "to", "bug"];
    let caught = (0..5).any(|seed| {
        let src = stack(extra, &order) + &scenario(seed, "virtual-synchrony");
        let r = run_file(&src);
        r.properties
            .get("virtual-synchrony")
            .is_some_and(|v| v.starts_with("violated"))
            && r.verdict.violations.iter().any(|v| v.contains("seed"))
    });
    assert!(
        caught,
        "a member losing 5% of its deliveries went unnoticed"
    );
}

/// A planted bug: a layer above the sequencer holds back some deliveries at random (a
/// reordering above `total-order`): the total-order property must fail.
#[test]
fn a_planted_reordering_is_caught() {
    let extra =
        "[layers.bug]\nkind = \"reorder\"\nrate = 0.2\nhold = \"40ms\"\ndirection = \"up\"\n";
    let order = ["dev", "sum", "hb", "vs", "to", "bug"];
    let caught = (0..5).any(|seed| {
        let src = stack(extra, &order) + &scenario(seed, "total-order");
        let r = run_file(&src);
        r.properties
            .get("total-order")
            .is_some_and(|v| v.starts_with("violated"))
    });
    assert!(
        caught,
        "deliveries reordered above total-order went unnoticed"
    );
}

/// Without the sequencer, members still agree on views and on the set of messages per view,
/// but not on their order: the vsync stack passes `virtual-synchrony` and the run shows
/// deliveries that a `total-order` check would reject on some seed.
#[test]
fn vsync_alone_is_virtually_synchronous_but_not_totally_ordered() {
    let order = ["dev", "sum", "hb", "vs"];
    let mut unordered = false;
    for seed in 0..10 {
        let r = run_file(&(stack("", &order) + &scenario(seed, "virtual-synchrony")));
        assert!(r.verdict.holds, "seed {seed}: {r}");
        let r = run_file(&(stack("", &order) + &scenario(seed, "total-order")));
        unordered |= r
            .properties
            .get("total-order")
            .is_some_and(|v| v.starts_with("violated"));
    }
    assert!(
        unordered,
        "no seed showed two members ordering a view differently"
    );
}

/// stacks/group.toml as shipped: every property holds, and liveness is judged.
#[test]
fn shipped_group_stack_holds() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../stacks/group.toml");
    let r = run_file(&std::fs::read_to_string(path).unwrap());
    assert!(r.verdict.holds, "{r}");
    assert_eq!(r.properties.len(), 8, "{r}"); // total-order's seven and liveness
    assert!(r.properties.values().all(|v| v == "held"), "{r}");
    assert!(r.notices.get("View").copied().unwrap_or(0) >= 10, "{r}");
}

/// Bounded buffers: with `capacity = 8` and a member that crashes for good, stability stops
/// until the crash is confirmed and the member excluded; senders refuse what does not fit
/// (`SendRefused`, counted `vs.refused`) instead of growing, and every property still holds
/// (a refused message is exempt from self-delivery, as its sender was told); the laggard is
/// reported in a `SlowMember` notice.
#[test]
fn a_dead_member_makes_senders_refuse_not_grow() {
    let src = stack("", LAYERS).replace(
        "kind = \"vsync\"",
        "kind = \"vsync\"\ncapacity = 8\nconfirm = \"1s\"",
    ) + r#"
[scenario]
nodes = 3
seed = 5
duration = "9s"
expect = "total-order"
[scenario.link]
latency = "1ms"
[[scenario.workload]]
channel = "g"
pattern = "multicast"
messages = 300
interval = "5ms"
start = "300ms"
size = 32
[[scenario.crash]]
node = 2
at = "1s"
"#;
    let r = run_file(&src);
    assert!(r.verdict.holds, "{r}");
    assert!(
        r.counters.get("vs.refused").copied().unwrap_or(0) > 0,
        "{r}"
    );
    assert!(
        r.notices.get("SendRefused").copied().unwrap_or(0) > 0,
        "{r}"
    );
}

/// Deliveries per view size over a run of 5 nodes split {0,1,2} | {3,4} from 1.5 s to 3 s:
/// (deliveries in views of at most 2 members, deliveries in larger views).
fn deliveries_by_view_size(primary: &str) -> (usize, usize, Report) {
    use viastack_scenario::group::Entry;
    let src = stack("", LAYERS).replace(
        "kind = \"vsync\"",
        &format!("kind = \"vsync\"\nprimary = \"{primary}\""),
    ) + r#"
[scenario]
nodes = 5
seed = 3
duration = "9s"
expect = "total-order"
[scenario.link]
latency = "1ms"
loss = 0.05
[[scenario.workload]]
channel = "g"
pattern = "multicast"
messages = 100
interval = "30ms"
start = "300ms"
size = 32
[[scenario.partition]]
at = "1500ms"
heal = "3000ms"
groups = [[0, 1, 2], [3, 4]]
"#;
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("primary.toml", &src, &catalog).unwrap();
    let (r, rec) =
        viastack_scenario::run_recorded(&file, &catalog, &RunOptions::default(), |_| {}).unwrap();
    let (mut small, mut large) = (0, 0);
    for inc in rec.group.nodes.values().flatten() {
        let mut size = 0;
        for e in &inc.entries {
            match e {
                Entry::View { members, .. } => size = members.len(),
                Entry::Delivered(_) if size <= 2 => small += 1,
                Entry::Delivered(_) => large += 1,
                Entry::Sent(_) | Entry::State(..) => {}
            }
        }
    }
    (small, large, r)
}

/// `primary = "majority"`: the minority side {3,4} of a partition neither sends nor delivers
/// (its messages wait and go out in the merged view); with `"none"` it goes on. Both runs keep
/// every property.
#[test]
fn primary_partition_is_a_parameter() {
    let (small, large, r) = deliveries_by_view_size("majority");
    assert!(r.verdict.holds, "{r}");
    assert_eq!(small, 0, "a minority view delivered: {r}");
    assert!(large > 0, "{r}");
    let (small, _, r) = deliveries_by_view_size("none");
    assert!(r.verdict.holds, "{r}");
    assert!(
        small > 0,
        "the minority side delivered nothing without primary mode: {r}"
    );
}

/// Per node, the views it installed: (time in s, members by node), incarnations in order.
type Views = BTreeMap<u32, Vec<(f64, Vec<u32>)>>;

/// The views each node installed.
fn views_of(src: &str) -> (Report, Views) {
    use viastack_scenario::group::Entry;
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("views.toml", src, &catalog).unwrap();
    let (r, rec) =
        viastack_scenario::run_recorded(&file, &catalog, &RunOptions::default(), |_| {}).unwrap();
    let mut out = BTreeMap::new();
    for (n, incs) in &rec.group.nodes {
        let v: &mut Vec<(f64, Vec<u32>)> = out.entry(n.0).or_default();
        for e in incs.iter().flat_map(|i| &i.entries) {
            if let Entry::View { at, members, .. } = e {
                v.push((
                    at.as_nanos() as f64 / 1e9,
                    members.iter().map(|m| m.0).collect(),
                ));
            }
        }
    }
    (r, out)
}

fn four_nodes(vsync_params: &str, faults: &str) -> String {
    stack("", LAYERS).replace(
        "kind = \"vsync\"",
        &format!("kind = \"vsync\"\n{vsync_params}"),
    ) + r#"
[scenario]
nodes = 4
seed = 11
duration = "9s"
expect = "total-order"
[scenario.link]
latency = "1ms"
[[scenario.workload]]
channel = "g"
pattern = "multicast"
messages = 50
interval = "40ms"
start = "300ms"
size = 32
"# + faults
}

/// A graceful leave is a view change at once (the `Leave` packet), not a suspicion: with
/// `confirm = "1s"` a crash would take over a second to exclude, the leave takes a few ticks.
#[test]
fn a_leave_is_excluded_without_waiting_for_suspicion() {
    let src = four_nodes(
        "confirm = \"1s\"",
        "[[scenario.leave]]\nnode = 3\nat = \"2s\"\n",
    );
    let (r, views) = views_of(&src);
    assert!(r.verdict.holds, "{r}");
    let (at, members) = views[&0].last().unwrap().clone();
    assert_eq!(members, vec![0, 1, 2], "{views:?}");
    assert!(at > 2.0 && at < 2.3, "excluded at {at} s: {views:?}");
}

/// Suspicion is confirmed before exclusion: node 3 cut off for 300 ms (suspected after the
/// detector's 100 ms timeout, heard again after the heal) stays in the view when `confirm`
/// is 1 s, and is excluded (then merged back) when `confirm` is 100 ms.
#[test]
fn a_short_suspicion_is_not_an_exclusion() {
    let cut = "[[scenario.partition]]\nat = \"2s\"\nheal = \"2300ms\"\ngroups = [[0, 1, 2], [3]]\n";
    let (r, views) = views_of(&four_nodes("confirm = \"1s\"", cut));
    assert!(r.verdict.holds, "{r}");
    assert!(r.notices.get("Suspect").copied().unwrap_or(0) > 0, "{r}");
    assert!(
        views[&0].iter().all(|(at, m)| *at < 1.0 || m.len() == 4),
        "a view without node 3: {views:?}"
    );
    let (r, views) = views_of(&four_nodes("confirm = \"100ms\"", cut));
    assert!(r.verdict.holds, "{r}");
    assert!(
        views[&0].iter().any(|(at, m)| *at > 2.0 && m.len() == 3),
        "node 3 never excluded: {views:?}"
    );
    assert_eq!(views[&0].last().unwrap().1, vec![0, 1, 2, 3], "{views:?}");
}

/// State transfer really happens: over a few seeds with joins (the start, restarts) and
/// merges, members adopt the provider's state (`st.adopted`), and those that came with the
/// provider keep theirs (`st.kept`); the digests then agree (`state-agreement`).
#[test]
fn joiners_and_merged_members_adopt_the_state() {
    let (mut adopted, mut kept) = (0, 0);
    for seed in 0..5 {
        let src =
            stack("", &["dev", "sum", "hb", "vs", "to", "st"]) + &scenario(seed, "total-order");
        let r = run_file(&src);
        assert!(r.verdict.holds, "seed {seed}: {r}");
        assert_eq!(
            r.properties.get("state-agreement").map(String::as_str),
            Some("held")
        );
        adopted += r.counters.get("st.adopted").copied().unwrap_or(0);
        kept += r.counters.get("st.kept").copied().unwrap_or(0);
    }
    assert!(adopted > 0 && kept > 0, "adopted {adopted}, kept {kept}");
}
