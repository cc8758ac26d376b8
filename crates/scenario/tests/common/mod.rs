//! What the scenario tests share: running a stack file's scenario from source with a seed, and
//! the check every reliable run must pass.
#![allow(dead_code, clippy::unwrap_used)]

use viastack_scenario::{run, Report, RunOptions};

/// Runs the scenario of the stack file `src` (named `test.toml` in diagnostics) with `seed`,
/// or the file's own seed for `None`; panics with the diagnostic or the seed on failure.
pub fn run_with(src: &str, seed: Option<u64>) -> Report {
    let catalog = viastack_stack::standard_catalog();
    let file = viastack_stack::parse("test.toml", src, &catalog)
        .unwrap_or_else(|d| panic!("the test's stack file is invalid:\n{d}"));
    let options = RunOptions {
        seed,
        duration: None,
    };
    run(&file, &catalog, &options, |_| {}).unwrap_or_else(|e| panic!("seed {seed:?}: {e}"))
}

/// [`run_with`] a given seed.
pub fn run_src(src: &str, seed: u64) -> Report {
    run_with(src, Some(seed))
}

/// The promise of a reliable FIFO stack (DESIGN.md §4.7): its property holds, and every
/// message was delivered exactly once, in order and intact, or its sender was told (or died).
pub fn assert_delivered_once_or_reported(r: &Report, what: &str) {
    assert!(r.verdict.holds, "{what}: {r}");
    assert_eq!(r.lost, 0, "{what}: messages lost silently: {r}");
    assert_eq!(r.duplicated, 0, "{what}: {r}");
    assert_eq!(r.out_of_order, 0, "{what}: {r}");
    assert_eq!(r.corrupted + r.misdelivered, 0, "{what}: {r}");
    assert_eq!(
        r.delivered + r.lost_reported + r.lost_crashed,
        r.sent,
        "{what}: {r}"
    );
}

/// A counter summed over the nodes (0 when absent).
pub fn counter(r: &Report, name: &str) -> u64 {
    r.counters.get(name).copied().unwrap_or(0)
}
