//! Every compiled service against the same specification loaded into the store: the same
//! random traces must give the same actions, messages and states, input by input.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::Value;
use viastack_spec::service::trace::{self, Options};
use viastack_spec::service::{Runner, Service, Store, StoreConfig};

#[path = "../../spec/tests/support/random_trace.rs"]
mod random_trace;
use random_trace::random_trace;

fn store(name: &str) -> Store {
    let path = format!("{}/../../specs/{name}.scxml", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap();
    let (svc, _) = Service::load(&path, &src).unwrap_or_else(|e| panic!("{e}"));
    Store::new(vec![Arc::new(svc)], StoreConfig::default())
}

fn same_as_store<R: Runner + Default>(name: &str, service: u32) {
    same_as::<R>(name, service, false);
}

/// The compiled service against the same specification on the store's general chart engine
/// (the interpreter, the flat machine disabled).
fn same_as_engine<R: Runner + Default>(name: &str, service: u32) {
    same_as::<R>(name, service, true);
}

fn same_as<R: Runner + Default>(name: &str, service: u32, engine: bool) {
    let store = |name: &str| {
        if !engine {
            return store(name);
        }
        let path = format!("{}/../../specs/{name}.scxml", env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(&path).unwrap();
        let (mut svc, _) = Service::load(&path, &src).unwrap_or_else(|e| panic!("{e}"));
        svc.disable_flat();
        Store::new(vec![Arc::new(svc)], StoreConfig::default())
    };
    let mut compared = 0;
    for seed in 0..400 {
        let inputs = random_trace(service, seed);
        for auto in [false, true] {
            let opts = Options {
                auto_timers: auto,
                end_ms: None,
            };
            let a = trace::run(&mut R::default(), &inputs, opts);
            let b = trace::run(&mut store(name), &inputs, opts);
            if a != b {
                let (i, (x, y)) = a
                    .iter()
                    .zip(&b)
                    .enumerate()
                    .find(|(_, (x, y))| x != y)
                    .unwrap_or((a.len().min(b.len()), (&Value::Null, &Value::Null)));
                panic!("{name} seed {seed} auto_timers {auto}: first difference at output {i}:\ncompiled: {x}\nstore:    {y}\ninputs: {inputs:?}");
            }
            compared += a.len();
        }
    }
    assert!(
        compared > 20_000,
        "{name}: only {compared} outputs compared"
    );
}

#[test]
fn every_shipped_service_is_compiled() {
    let compiled: Vec<&str> = viastack_services::CATALOG
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        compiled,
        [
            "dupelim",
            "e2eack",
            "h2hack",
            "handshake",
            "incast",
            "leakybucket",
            "ordering",
            "selection",
            "sync"
        ]
    );
}

#[test]
fn h2hack_matches_the_store() {
    use viastack_services::h2hack::{Compiled, SERVICE_ID};
    same_as_store::<Compiled>("h2hack", SERVICE_ID);
}

#[test]
fn e2eack_matches_the_store() {
    use viastack_services::e2eack::{Compiled, SERVICE_ID};
    same_as_store::<Compiled>("e2eack", SERVICE_ID);
}

#[test]
fn handshake_matches_the_store() {
    use viastack_services::handshake::{Compiled, SERVICE_ID};
    same_as_store::<Compiled>("handshake", SERVICE_ID);
}

#[test]
fn dupelim_matches_the_store() {
    use viastack_services::dupelim::{Compiled, SERVICE_ID};
    same_as_store::<Compiled>("dupelim", SERVICE_ID);
}

#[test]
fn selection_matches_the_store() {
    use viastack_services::selection::{Compiled, SERVICE_ID};
    same_as_store::<Compiled>("selection", SERVICE_ID);
}

#[test]
fn sync_matches_the_store() {
    use viastack_services::sync::{Compiled, SERVICE_ID};
    same_as_store::<Compiled>("sync", SERVICE_ID);
}

#[test]
fn incast_matches_the_store() {
    use viastack_services::incast::{Compiled, SERVICE_ID};
    same_as_store::<Compiled>("incast", SERVICE_ID);
    same_as_engine::<Compiled>("incast", SERVICE_ID);
}

#[test]
fn leakybucket_matches_the_store() {
    use viastack_services::leakybucket::{Compiled, SERVICE_ID};
    same_as_store::<Compiled>("leakybucket", SERVICE_ID);
    same_as_engine::<Compiled>("leakybucket", SERVICE_ID);
}

#[test]
fn ordering_matches_the_store() {
    use viastack_services::ordering::{Compiled, SERVICE_ID};
    same_as_store::<Compiled>("ordering", SERVICE_ID);
    same_as_engine::<Compiled>("ordering", SERVICE_ID);
}
