//! Light-weight groups and order across channels (seed 001 §1 and §2.1; issue 18) over random
//! faults, judged by the group checker per channel and across channels
//! (crates/scenario/src/group.rs): three light channels `a`, `b`, `c` over one heavy group
//! through one explicitly bound `lwg` session (automatic binding fills the rest), per seed 3–6
//! nodes, loss 0–20 % with duplication and reordering, up to two partitions that heal, up to
//! two crashes (most restart), sometimes a leave, and a quiet end longer than the liveness
//! bound. Every property must hold on every seed, per light group (view agreement, virtual
//! synchrony, self-delivery, no creation, no duplication, liveness) and, over a shared
//! `total-order`, across channels (`cross-channel-order`). Pass counts per property are
//! printed (`--nocapture`).
//!
//! `GROUP_SEEDS=n` sets the seed count (default 100; 1,000 before a release), `GROUP_SEED_FROM`
//! the first seed. A failure names
//! its seed and prints the stack file; rerun it with `viastack run FILE`.
//!
//! Also here: each new check catches a planted bug — a member losing deliveries of one light
//! group only, and three channels each totally ordered by a group of its own (no shared
//! session) that disagree on the order across channels.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt::Write;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_scenario::{run, Report, RunOptions};

/// Three light channels with the layers `order` (bottom first), `lwg` bound explicitly into
/// each when `shared`; `bug` layers (declared in `extra`) go on top of channel `b` only.
fn stack(extra: &str, order: &[&str], shared: bool, bug: &[&str]) -> String {
    let list = |v: &[&str]| {
        v.iter()
            .map(|l| format!("\"{l}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut with_bug: Vec<&str> = order.to_vec();
    with_bug.extend_from_slice(bug);
    let bind = if shared {
        "bind = { lwg = \"the-lwg\" }\n"
    } else {
        ""
    };
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
[layers.lwg]
kind = "lwg"
{extra}
[qos.light]
layers = [{}]
[qos.buggy]
layers = [{}]
[channels.a]
qos = "light"
{bind}
[channels.b]
qos = "buggy"
{bind}
[channels.c]
qos = "light"
{bind}
[sessions.the-lwg]
layer = "lwg"
"#,
        list(order),
        list(&with_bug)
    )
}

const LWG: &[&str] = &["dev", "sum", "hb", "vs", "lwg"];
const CROSS: &[&str] = &["dev", "sum", "hb", "vs", "to", "lwg"];

/// A random fault schedule and three workloads (one per channel) for 3–6 nodes.
fn scenario(seed: u64, expect: &str) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0018_1861);
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
"#
    );
    for (ch, interval, start) in [("a", 40, 300), ("b", 50, 310), ("c", 70, 320)] {
        let _ = write!(
            s,
            "[[scenario.workload]]\nchannel = \"{ch}\"\npattern = \"multicast\"\nmessages = 100\n\
             interval = \"{interval}ms\"\nstart = \"{start}ms\"\nsize = 40\n"
        );
    }
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
    let end = last_fault.max(0.32 + 100.0 * 0.07) + 5.5;
    s.replace(
        "DURATION",
        &format!("duration = \"{}ms\"", (end * 1000.0) as u64),
    )
}

fn run_file(src: &str) -> Report {
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("lwg-random.toml", src, &catalog)
        .unwrap_or_else(|d| panic!("invalid stack file:\n{d}\n{src}"));
    run(&file, &catalog, &RunOptions::default(), |_| {}).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn seeds() -> u64 {
    std::env::var("GROUP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

/// Runs the three light channels over `layers` on every seed's random faults, expecting
/// `expect`; prints the pass counts per property and fails with the first failing seeds.
fn many_seeds(layers: &[&str], expect: &str) {
    many_seeds_primary(layers, expect, "none");
}

/// [`many_seeds`] with `vsync`'s `primary` parameter set to `primary`.
fn many_seeds_primary(layers: &[&str], expect: &str, primary: &str) {
    let mut tally: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut failures = Vec::new();
    let first: u64 = std::env::var("GROUP_SEED_FROM")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in first..first + seeds() {
        let src = stack("", layers, true, &[]).replace(
            "kind = \"vsync\"",
            &format!("kind = \"vsync\"\nprimary = \"{primary}\""),
        ) + &scenario(seed, expect);
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
        "{expect} over {} seeds, three light channels over {layers:?}, primary {primary} \
         (held / violated):",
        seeds()
    );
    for (k, (held, bad)) in &tally {
        println!("  {k:<20} {held:>6} / {bad}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(tally.get("liveness").map(|t| t.0), Some(seeds()));
    if expect == "cross-channel-order" {
        assert_eq!(tally.get("cross-channel-order").map(|t| t.0), Some(seeds()));
    }
}

#[test]
fn light_weight_groups_keep_every_property_over_random_faults() {
    many_seeds(LWG, "virtual-synchrony");
}

/// With `primary = "majority"`: only views of more than half the nodes carry messages.
/// Was ignored (self-delivery misses on seeds 19, then 57 and 59): not `lwg`'s doing — the same
/// faults without `lwg` miss the same messages. A member left in a minority view at the end
/// (node 2 leaves, node 3 crashes: 2 of 4 nodes remain) keeps its messages sent since in its
/// queue, waiting for a primary view that never comes; the checker counted them as lost. It
/// now exempts them when nobody delivered them and the sender's last view is not primary
/// (crates/scenario/src/group.rs, self-delivery).
#[test]
fn majority_light_weight_groups_keep_every_property_over_random_faults() {
    many_seeds_primary(CROSS, "cross-channel-order", "majority");
}

#[test]
fn cross_channel_order_holds_over_random_faults() {
    many_seeds(CROSS, "cross-channel-order");
}

/// A planted bug: channel `b` drops 5 % of its deliveries (a layer above `lwg` in that channel
/// only): the per-light-group check names channel `b`'s virtual synchrony.
#[test]
fn a_planted_loss_in_one_light_group_is_caught() {
    let extra = "[layers.bug]\nkind = \"drop\"\nrate = 0.05\ndirection = \"up\"\n";
    let caught = (0..5).any(|seed| {
        let src = stack(extra, LWG, true, &["bug"]) + &scenario(seed, "virtual-synchrony");
        let r = run_file(&src);
        r.properties
            .get("virtual-synchrony")
            .is_some_and(|v| v.starts_with("violated") && v.contains("channel `b`"))
    });
    assert!(
        caught,
        "a light group losing 5% of its deliveries went unnoticed"
    );
}

/// A planted bug: three channels, each totally ordered by a heavy group and sequencer of its
/// own (no shared session: default binding), keep total order per channel but not across
/// channels — the cross-channel check must say so on some seed.
#[test]
fn separate_total_orders_are_not_one_order_across_channels() {
    let mut crossed = false;
    for seed in 0..8 {
        let src = stack("", CROSS, false, &[]) + &scenario(seed, "cross-channel-order");
        let r = run_file(&src);
        assert_eq!(
            r.properties.get("total-order").map(String::as_str),
            Some("held"),
            "seed {seed}: {r}"
        );
        crossed |= r
            .properties
            .get("cross-channel-order")
            .is_some_and(|v| v.starts_with("violated"));
        if crossed {
            break;
        }
    }
    assert!(
        crossed,
        "separate sequencers never disagreed across channels"
    );
}

fn shipped(name: &str) -> Report {
    let path = format!("{}/../../stacks/{name}", env!("CARGO_MANIFEST_DIR"));
    run_file(&std::fs::read_to_string(path).unwrap())
}

/// stacks/lwg.toml as shipped: every property holds on each light group, liveness judged.
#[test]
fn shipped_lwg_stack_holds() {
    let r = shipped("lwg.toml");
    assert!(r.verdict.holds, "{r}");
    assert!(r.properties.values().all(|v| v == "held"), "{r}");
    assert!(r.properties.contains_key("liveness"), "{r}");
    assert!(
        r.counters.get("lwg.installed").copied().unwrap_or(0) > 0,
        "{r}"
    );
}

/// stacks/cross-channel.toml as shipped: total order per channel and across channels.
#[test]
fn shipped_cross_channel_stack_holds() {
    let r = shipped("cross-channel.toml");
    assert!(r.verdict.holds, "{r}");
    assert_eq!(
        r.properties.get("cross-channel-order").map(String::as_str),
        Some("held"),
        "{r}"
    );
    assert!(r.properties.values().all(|v| v == "held"), "{r}");
}

/// Ten user groups over five nodes, each with a light-weight group over one shared heavy
/// group (`shared`) or a heavy group of its own; a member crashes at 2 s (one view change);
/// `messages` per group.
fn ten_groups(shared: bool, messages: u64, crash: bool) -> Report {
    let bind = if shared {
        "bind = { lwg = \"the-lwg\" }\n"
    } else {
        ""
    };
    let mut src = String::from(
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
[layers.lwg]
kind = "lwg"
[qos.light]
layers = ["dev", "sum", "hb", "vs", "lwg"]
[sessions.the-lwg]
layer = "lwg"
[scenario]
nodes = 5
seed = 3
duration = "4s"
expect = "virtual-synchrony"
[scenario.link]
latency = "1ms"
"#,
    );
    for g in 0..10 {
        let _ = write!(src, "[channels.g{g}]\nqos = \"light\"\n{bind}");
        if messages > 0 {
            let _ = write!(
                src,
                "[[scenario.workload]]\nchannel = \"g{g}\"\npattern = \"multicast\"\n\
                 messages = {messages}\ninterval = \"20ms\"\nstart = \"500ms\"\nsize = 100\n"
            );
        }
    }
    if crash {
        src.push_str("[[scenario.crash]]\nnode = 4\nat = \"2s\"\n");
    }
    run_file(&src)
}

/// The cost of light-weight groups (issue 18's LWG figure, in the simulator): ten light groups
/// over one heavy group send fewer datagrams than ten heavy groups, for the same traffic with
/// a crash (one view change), and without traffic (control only: heartbeats, status gossip).
/// Prints the figures (`--nocapture`).
#[test]
fn ten_light_groups_cost_less_than_ten_heavy_groups() {
    let mut figures = Vec::new();
    for shared in [true, false] {
        let busy = ten_groups(shared, 50, true);
        assert!(busy.verdict.holds, "{busy}");
        let quiet = ten_groups(shared, 0, false).network.sent;
        figures.push((busy.network.sent, quiet));
    }
    let name = ["10 light groups over 1 heavy group", "10 heavy groups"];
    for (n, (busy, quiet)) in name.iter().zip(&figures) {
        println!(
            "{n:<36} datagrams: {busy} with 10x50 multicasts and a crash; {quiet} control-only \
             in 4 s"
        );
    }
    assert!(figures[0].0 < figures[1].0, "{figures:?}");
    assert!(figures[0].1 < figures[1].1, "{figures:?}");
}

/// Issue 18 regression (seed 20's faults, fixed here): node 2 restarts at 2.761 s and, 29 ms
/// later, a partition cuts it off from node 0 in the middle of the flush merging it; node 0's
/// coordinator leaves the silent new incarnation out (`unresponsive`) and, alone in its view,
/// installed no view that would have cleared that mark: it never merged node 2 again after the
/// heal. Plain `vsync` groups, three channels, no `lwg`.
#[test]
fn a_member_cut_off_mid_merge_is_merged_after_the_heal() {
    let heavy: Vec<&str> = LWG.iter().copied().filter(|l| *l != "lwg").collect();
    let src = stack("", &heavy, false, &[]) + SEED20_FAULTS;
    let r = run_file(&src);
    assert_eq!(
        r.properties.get("liveness").map(String::as_str),
        Some("held"),
        "{r}"
    );
    assert!(r.verdict.holds, "{r}");
}

/// The scenario seed 20 of [`scenario`] drew (kept literal: independent of the generator).
const SEED20_FAULTS: &str = r#"
[scenario]
nodes = 3
seed = 20
expect = "virtual-synchrony"
duration = "12820ms"
[scenario.link]
latency = "1ms"
jitter = "1ms"
loss = 0.1
duplicate = 0.05
reorder = 0.1
reorder_delay = "3ms"
[[scenario.workload]]
channel = "a"
pattern = "multicast"
messages = 100
interval = "40ms"
start = "300ms"
size = 40
[[scenario.workload]]
channel = "b"
pattern = "multicast"
messages = 100
interval = "50ms"
start = "310ms"
size = 40
[[scenario.workload]]
channel = "c"
pattern = "multicast"
messages = 100
interval = "70ms"
start = "320ms"
size = 40
[[scenario.partition]]
at = "2790ms"
heal = "3884ms"
groups = [[1, 2], [0]]
[[scenario.partition]]
at = "1885ms"
heal = "2547ms"
groups = [[0, 2], [1]]
[[scenario.crash]]
node = 2
at = "1282ms"
restart = "2761ms"
[[scenario.crash]]
node = 1
at = "1357ms"
"#;

/// Issue 18 regression (seed 756 of the majority test, 1,000-seed run): node 1 leaves, node 0
/// crashes and restarts at the instant node 2 crashes, so the restarted node 0 is alone in a
/// minority view (`primary = "majority"`) to the end. Its heavy view came up before its light
/// channels opened, and their `Joined` announcements waited for a primary view: it never
/// installed a light view (liveness) and its messages counted as lost (self-delivery). A
/// channel opened during a minority view now gets its light view at once.
#[test]
fn a_member_restarted_alone_in_a_minority_installs_its_light_views() {
    let src = stack("", CROSS, true, &[]).replace(
        "kind = \"vsync\"",
        "kind = \"vsync\"\nprimary = \"majority\"",
    ) + SEED756_FAULTS;
    let r = run_file(&src);
    assert!(r.verdict.holds, "{r}");
    assert!(r.properties.values().all(|v| v == "held"), "{r}");
}

/// The scenario seed 756 of [`scenario`] drew (kept literal).
const SEED756_FAULTS: &str = r#"
[scenario]
nodes = 3
seed = 756
expect = "cross-channel-order"
duration = "12820ms"
[scenario.link]
latency = "1ms"
jitter = "1ms"
loss = 0.05
duplicate = 0.05
reorder = 0.1
reorder_delay = "3ms"
[[scenario.workload]]
channel = "a"
pattern = "multicast"
messages = 100
interval = "40ms"
start = "300ms"
size = 40
[[scenario.workload]]
channel = "b"
pattern = "multicast"
messages = 100
interval = "50ms"
start = "310ms"
size = 40
[[scenario.workload]]
channel = "c"
pattern = "multicast"
messages = 100
interval = "70ms"
start = "320ms"
size = 40
[[scenario.crash]]
node = 2
at = "4624ms"
[[scenario.crash]]
node = 0
at = "2838ms"
restart = "4624ms"
[[scenario.leave]]
node = 1
at = "1552ms"
"#;
