//! The generator on the constructs it once refused (issue 15 §2; the specifications in
//! `crates/spec/tests/data/codegen/`): each compiled specification against the same
//! specification in a store, on the flat machine and on the general chart engine (the
//! interpreter), through random traces — the same actions, messages and states, input by
//! input.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::Value;
use viastack_spec::service::trace::{self, Options};
use viastack_spec::service::{Runner, Service, Store, StoreConfig};

#[path = "../../spec/tests/support/random_trace.rs"]
mod random_trace;
use random_trace::random_trace;

fn load(name: &str, flat: bool) -> Store {
    let path = format!(
        "{}/../spec/tests/data/codegen/{name}.scxml",
        env!("CARGO_MANIFEST_DIR")
    );
    let src = std::fs::read_to_string(&path).unwrap();
    let (mut svc, _) = Service::load(&path, &src).unwrap_or_else(|e| panic!("{e}"));
    assert!(svc.is_flat(), "{name}: not on the flat machine");
    if !flat {
        svc.disable_flat();
    }
    Store::new(vec![Arc::new(svc)], StoreConfig::default())
}

/// Compiled, flat machine and engine alike on 300 random traces (with and without timers
/// firing by themselves); at least `min` outputs compared.
fn same<R: Runner + Default>(name: &str, min: usize) {
    let service = load(name, true).services()[0].id();
    let mut compared = 0;
    for seed in 0..300 {
        let inputs = random_trace(service, seed);
        for auto in [false, true] {
            let opts = Options {
                auto_timers: auto,
                end_ms: None,
            };
            let a = trace::run(&mut R::default(), &inputs, opts);
            for flat in [true, false] {
                let b = trace::run(&mut load(name, flat), &inputs, opts);
                if a != b {
                    let (i, (x, y)) = a
                        .iter()
                        .zip(&b)
                        .enumerate()
                        .find(|(_, (x, y))| x != y)
                        .unwrap_or((a.len().min(b.len()), (&Value::Null, &Value::Null)));
                    panic!("{name} seed {seed} auto_timers {auto} flat {flat}: first difference at output {i}:\ncompiled: {x}\nstore:    {y}\ninputs: {inputs:?}");
                }
            }
            compared += a.len();
        }
    }
    assert!(compared > min, "{name}: only {compared} outputs compared");
}

#[test]
fn the_generator_accepts_every_test_specification() {
    for (name, r) in viastack_services::gaps::GAPS {
        assert_eq!(*r, Ok(()), "{name}");
    }
    let names: Vec<&str> = viastack_services::gaps::GAPS
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(names, ["drafts", "eventless", "isbound", "nodeinfo"]);
}

/// Drafts read across actions: create/set/execute, `createMessage name="x"` … `x.Attr`,
/// `setMessage`, failures in the middle of a block, drafts that end with their step.
#[test]
fn drafts_read_across_actions_compiled_as_the_store_runs_them() {
    same::<viastack_services::gaps::drafts::Compiled>("drafts", 10_000);
}

/// `isBound()` of an expression: `isBound(_event)` in a `cond`, in `<data>` and `<assign>`,
/// with and without an event being taken.
#[test]
fn is_bound_of_an_expression_compiled_as_the_store_runs_it() {
    same::<viastack_services::gaps::isbound::Compiled>("isbound", 5_000);
}

/// `updateNodeInfo`: the node's fields written by a step, from literals and from the history,
/// read back by the same step, by a `foreach` and by composite events in later inputs; a field
/// that cannot be read ends the block with the earlier ones written; through a draft.
#[test]
fn update_node_info_compiled_as_the_store_runs_it() {
    same::<viastack_services::gaps::nodeinfo::Compiled>("nodeinfo", 5_000);
}

/// Eventless transitions, resolved by the flat machine at load time into the steps that reach
/// their states: the initial state left at once, transient states, a chain, a compound
/// state's, one reaching a top-level `<final>`.
#[test]
fn eventless_transitions_compiled_as_the_store_runs_them() {
    same::<viastack_services::gaps::eventless::Compiled>("eventless", 5_000);
}
