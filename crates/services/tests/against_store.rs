//! Every compiled service against the same specification loaded into the store: the same
//! random traces must give the same actions, messages and states, input by input.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use viastack_kernel::time::Instant;
use viastack_spec::service::trace::{self, Input, Options};
use viastack_spec::service::{
    Addr, InstanceKey, Message, NodeInfo, Runner, Service, Store, StoreConfig,
};

fn store(name: &str) -> Store {
    let path = format!("{}/../../specs/{name}.scxml", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap();
    let (svc, _) = Service::load(&path, &src).unwrap_or_else(|e| panic!("{e}"));
    Store::new(vec![Arc::new(svc)], StoreConfig::default())
}

fn node(children: Vec<Addr>) -> NodeInfo {
    NodeInfo {
        address: Addr(1),
        parent: Addr(9),
        children,
        neighbours: vec![Addr(7)],
    }
}

/// Messages of every type the shipped services filter on (and one none does), from a few
/// sources, with payloads, now and then of another service; timers 1…10; node changes; four
/// message ids interleaved.
fn random_trace(service: u32, seed: u64) -> Vec<Input> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![Input::Node(Instant::ZERO, node(vec![Addr(2), Addr(3)]))];
    let mut t = 0u64;
    let payload: Arc<[u8]> = Arc::from(&b"data"[..]);
    for _ in 0..rng.gen_range(5..90) {
        t += rng.gen_range(0..700);
        let at = Instant::from_millis(t);
        let id = rng.gen_range(1..5);
        match rng.gen_range(0..10) {
            0..=5 => {
                let types = [0x80u8, 0x80, 1, 2, 2, 3, 4, 5, 6, 20, 21, 22, 23, 99];
                let ty = types[rng.gen_range(0..types.len())];
                out.push(Input::Message(
                    at,
                    Message {
                        service_id: if rng.gen_bool(0.02) { 77 } else { service },
                        message_id: id,
                        message_type: ty,
                        delivery_mode: rng.gen_range(1..4),
                        hop_limit: 255,
                        source: Addr(rng.gen_range(1..7)),
                        previous_hop: Addr(rng.gen_range(1..7)),
                        destination: Addr(rng.gen_range(0..3)),
                        root: Addr(9),
                        seq: rng.gen_range(0..4),
                        payload: (ty == 0x80).then(|| Arc::clone(&payload)),
                        ..Message::default()
                    },
                ));
            }
            6..=8 => out.push(Input::Timer(
                at,
                InstanceKey {
                    service,
                    message: id,
                },
                rng.gen_range(1..11),
            )),
            _ => {
                let children = (2..6).filter(|_| rng.gen_bool(0.5)).map(Addr).collect();
                out.push(Input::Node(at, node(children)));
            }
        }
    }
    out
}

fn same_as_store<R: Runner + Default>(name: &str, service: u32) {
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
fn every_shipped_flat_service_is_compiled() {
    let compiled: Vec<&str> = viastack_services::CATALOG
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        compiled,
        ["dupelim", "e2eack", "h2hack", "selection", "sync"]
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
