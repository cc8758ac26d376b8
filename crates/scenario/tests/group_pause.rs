//! A whole group stopped and resumed, in the simulator (issue 18: "a group member resumed
//! after a 5 s stop is sometimes still excluded"): the deterministic counterpart of
//! `crates/cli/tests/group_stall.rs`, which stops three real processes with `SIGSTOP`.
//!
//! Every node of the group stack (`heartbeat` + `vsync` + `total-order`, the timings of
//! `viastack group chat` in that test: heartbeats every 100 ms, suspicion after 2 s,
//! confirmation 300 ms) is paused ([`viastack_sim::Sim::pause`]) for 5 s — more than twice
//! the failure detector's timeout — the pauses starting and ending a few milliseconds apart
//! in a random order per seed, as `kill` reaches processes one after the other — long after
//! the view formed, or right after it (before, at and after the failure detector's first
//! tick: without `TickGap::armed` a node stopped before that tick suspected everyone) — and,
//! in the second test, one member resumed up to 1.5 s after the others (without the
//! gone-elsewhere rule `vsync` excluded it after 800 ms of silence). No member may install a
//! view after the resumption, and the group checker's properties hold.
//!
//! Also here: a node that stays stopped (it crashed during the others' pause) is still
//! excluded after the resumption (the stall rule does not blind the failure detector).
#![allow(clippy::unwrap_used)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_kernel::{Duration, Instant, NodeId};
use viastack_scenario::{run_prepared, Report, RunOptions};

const NODES: u32 = 3;

fn stack(seed: u64, crash: Option<u32>) -> String {
    let crash = crash.map_or(String::new(), |n| {
        format!("[[scenario.crash]]\nnode = {n}\nat = \"2500ms\"\n")
    });
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.pack]
kind = "bundle"
max_bytes = 60000
[layers.hb]
kind = "heartbeat"
interval = "100ms"
timeout = "2s"
[layers.vs]
kind = "vsync"
confirm = "300ms"
[layers.to]
kind = "total-order"
capacity = 16384
[qos.group]
layers = ["dev", "sum", "pack", "hb", "vs", "to"]
[channels.g]
qos = "group"
[scenario]
nodes = {NODES}
seed = {seed}
expect = "total-order"
duration = "14s"
[scenario.link]
latency = "1ms"
jitter = "1ms"
[[scenario.workload]]
channel = "g"
pattern = "multicast"
messages = 300
interval = "40ms"
start = "300ms"
size = 48
{crash}"#
    )
}

fn seeds() -> u64 {
    std::env::var("GROUP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

/// Every node in `paused` stopped from about `at` ms for about 5 s, `kill` reaching the
/// processes one after the other: starts and ends a few ms apart, in any order; node
/// `late`, if any, resumes later by a random delay in `late_by` (ms).
fn pauses(
    seed: u64,
    at: u64,
    paused: &[u32],
    late: Option<(u32, std::ops::Range<u64>)>,
) -> Vec<(u32, u64, u64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0018);
    paused
        .iter()
        .map(|&n| {
            let from = at + rng.gen_range(0..5);
            let mut until = at + 5000 + rng.gen_range(0..30);
            if let Some((l, by)) = &late {
                if *l == n {
                    until += rng.gen_range(by.clone());
                }
            }
            (n, from, until)
        })
        .collect()
}

/// Runs `seed` with the `pauses` (node, from, until in ms, each from before 3 s to after
/// 3 s); returns the report and, per node, the views it installed by 3 s (during the
/// pauses) and by the end.
fn run_paused(
    seed: u64,
    pauses: &[(u32, u64, u64)],
    crash: Option<u32>,
) -> (Report, Vec<(u64, u64)>) {
    let src = stack(seed, crash);
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("group-pause.toml", &src, &catalog)
        .unwrap_or_else(|d| panic!("invalid stack file:\n{d}\n{src}"));
    let ms = |n: u64| Instant::ZERO + Duration::from_millis(n);
    let mut views = vec![(0u64, 0u64); NODES as usize];
    let views_of = |sim: &viastack_sim::Sim<viastack_scenario::SimNode>, n: u32| {
        sim.node(NodeId(n))
            .and_then(|x| x.kernel().counters().get("vs.views").copied())
            .unwrap_or(0)
    };
    let (report, _) = run_prepared(
        &file,
        &catalog,
        &RunOptions::default(),
        14,
        |sim| {
            for &(n, from, until) in pauses {
                sim.pause(NodeId(n), ms(from), ms(until));
            }
        },
        |slice, _, sim| {
            for n in 0..NODES {
                let v = views_of(sim, n);
                if slice == 3 {
                    views[n as usize].0 = v;
                }
                views[n as usize].1 = v;
            }
        },
    )
    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    (report, views)
}

fn counter(r: &Report, name: &str) -> u64 {
    r.counters.get(name).copied().unwrap_or(0)
}

/// The whole group paused for 5 s and resumed: nobody is excluded, no view changes.
#[test]
fn a_group_paused_for_five_seconds_keeps_its_view_over_many_seeds() {
    keeps_its_view(None);
}

/// The same, one member (any) running again up to 1.5 s after the others — a process that
/// the machine's scheduler lets run late after the `SIGCONT` (issue 18: under load one member
/// in about ten was excluded). Its silence stays within the failure detector's 2 s: it is not
/// excluded. Without the rule that a member silent in the view is excluded only if it was
/// heard in another view, `vsync` excluded it after 2 × `flush_timeout` (800 ms) of silence.
#[test]
fn a_member_resumed_late_is_not_excluded_over_many_seeds() {
    keeps_its_view(Some(850..1500));
}

fn keeps_its_view(late_by: Option<std::ops::Range<u64>>) {
    let mut failures = Vec::new();
    for seed in 0..seeds() {
        let late = late_by.clone().map(|by| ((seed % 3) as u32, by));
        // Long after the group formed (at 25 ms), or right after it: before the failure
        // detector's first tick (100 ms), at it, or just after it.
        let at = [2500, 30, 100, 150][(seed / 3 % 4) as usize];
        let (r, views) = run_paused(seed, &pauses(seed, at, &[0, 1, 2], late), None);
        assert!(
            counter(&r, "vs.local_stall") >= 3,
            "seed {seed}: the pause was not noticed: {r}"
        );
        let changed = views.iter().any(|(before, after)| before != after);
        let first_view = views.iter().all(|(before, _)| *before >= 1);
        if changed || !first_view || !r.verdict.holds {
            failures.push(format!("seed {seed}: views (before, after) {views:?}\n{r}"));
        }
    }
    println!(
        "{} of {} seeds kept their view",
        seeds() - failures.len() as u64,
        seeds()
    );
    assert!(
        failures.is_empty(),
        "{} of {} seeds changed views:\n{}",
        failures.len(),
        seeds(),
        failures
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Nodes 1 and 2 paused while node 0 crashed: after the resumption node 0 is still suspected
/// and excluded, and the two survivors install a view of two.
#[test]
fn a_member_that_crashed_during_the_pause_is_still_excluded() {
    for seed in 0..20 {
        let (r, views) = run_paused(seed, &pauses(seed, 2500, &[1, 2], None), Some(0));
        // Every property but liveness, whose bound the checker counts from the crash: the
        // pause, a fault it does not know of, delays the exclusion past it.
        for (property, verdict) in &r.properties {
            assert!(
                property == "liveness" || verdict == "held",
                "seed {seed}: {property} {verdict}: {r}"
            );
        }
        assert!(counter(&r, "hb.suspected") >= 2, "seed {seed}: {r}");
        for n in [1usize, 2] {
            assert!(
                views[n].1 > views[n].0,
                "seed {seed}: node {n} never excluded the crashed node: {views:?}\n{r}"
            );
        }
    }
}
