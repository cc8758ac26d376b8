//! Issue 16 §4: services deployed at run time — a spec known at one node only reaches every
//! node of a simulated DT overlay as its messages flow (seed 000 §4.3.2), and a tampered or
//! unsigned spec is refused everywhere, never run (§4.3.1: ours, the seed had none).
//!
//! Every assertion prints the seed and the report.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::counter;
use viastack_kernel::{LayerRef, NodeId};
use viastack_protocols::messagestore::{Config, Deploy, LocalService, MessageStore};
use viastack_protocols::specbundle::{self, Signature};
use viastack_scenario::{run, Report, RunOptions};
use viastack_stack::catalog::{BuildEnv, BuildError, LayerKind, Params};

/// The private key the tests sign with, and its public key.
const SEED: [u8; 32] = [0x5a; 32];

fn h2hack() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../specs/h2hack.scxml"
    ))
    .unwrap()
}

/// A fresh directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("viastack-deploy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `text` as `dir/name` with, if given, the signature line in `name.sig`.
fn write_spec(dir: &std::path::Path, name: &str, text: &str, sig: Option<&Signature>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    if let Some(s) = sig {
        std::fs::write(dir.join(format!("{name}.sig")), s.to_line()).unwrap();
    }
    p
}

/// `nodes` nodes on DT over `loss`, every node multicasting `messages` from 30 s, with a
/// `store` layer of kind `kind` and the extra parameters `store`.
fn scenario(kind: &str, store: &str, nodes: u32, loss: f64, messages: u32) -> String {
    format!(
        r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.net]
kind = "overlay"
topology = "dt"
buddies = "0,1"
[layers.store]
kind = "{kind}"
{store}
[qos.o]
layers = ["dev", "sum", "net", "store"]
[channels.data]
qos = "o"
[scenario]
nodes = {nodes}
seed = 1
duration = "50s"
expect = "overlay-multicast"
[scenario.link]
latency = "5ms"
jitter = "2ms"
loss = {loss}
[[scenario.workload]]
channel = "data"
pattern = "multicast"
messages = {messages}
size = 32
interval = "200ms"
start = "30s"
"#
    )
}

fn run_with_catalog(src: &str, seed: u64) -> Report {
    let mut catalog = viastack_stack::standard_catalog();
    catalog.register(EVIL_STORE).unwrap();
    let file = viastack_stack::parse("test.toml", src, &catalog)
        .unwrap_or_else(|d| panic!("the test's stack file is invalid:\n{d}"));
    let options = RunOptions {
        seed: Some(seed),
        duration: None,
    };
    run(&file, &catalog, &options, |_| {}).unwrap_or_else(|e| panic!("seed {seed}: {e}"))
}

/// A `messagestore` whose node 0 runs the service of `service` but serves a tampered bundle:
/// the text with a comment appended and the original hash (a "bad hash"); the other nodes
/// start with no service.
const EVIL_STORE: LayerKind = LayerKind {
    name: "evil-store",
    doc: "test: node 0 serves a bundle whose text does not match its hash",
    params: viastack_stack::standard::MESSAGESTORE.params,
    one_of: &[],
    device: false,
    build: build_evil,
};

fn build_evil(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let path = params.get_paths("service")?.remove(0);
    let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let mut local = LocalService::load("svc", &text, None)?;
    let id = local.service.id();
    let mut tampered = text.into_bytes();
    tampered.extend_from_slice(b"<!-- tampered -->\n");
    local.bundle.text = Arc::from(tampered);
    let config = Config {
        services: if env.node == NodeId(0) {
            vec![local]
        } else {
            Vec::new()
        },
        default_service: id,
        deploy: Deploy {
            queue: 4096,
            ..Deploy::default()
        },
        capacity: 10_000,
        queue: 1024,
        flood: false,
        failure_state: None,
        stream: false,
        store_forwards: false,
        batch_window: viastack_kernel::Duration::ZERO,
    };
    Ok(Arc::new(MessageStore::new(name, env.node, config)))
}

/// h2hack known at node 0 only, signed by a key every node trusts: on a 50-node overlay with
/// 5 % loss every node fetches it as the messages reach it, and every node's multicasts
/// (those sent before its node had the service wait for it) reach every other node exactly
/// once (`overlay-multicast`).
#[test]
fn a_service_known_at_one_node_reaches_every_node() {
    let dir = scratch("reach");
    let text = h2hack();
    let sig = specbundle::sign(&specbundle::hash(text.as_bytes()), &SEED).unwrap();
    let path = write_spec(&dir, "h2hack.scxml", &text, Some(&sig));
    let key = specbundle::hex(&specbundle::public_key(&SEED).unwrap());
    let store = format!(
        "service = \"{}\"\nknown_at = \"0\"\ntrusted_keys = \"{key}\"\nfetch_queue = 4096\n",
        path.display()
    );
    let nodes = 50;
    let messages = 3;
    for seed in 0..3u64 {
        let r = run_with_catalog(
            &scenario("messagestore", &store, nodes, 0.05, messages),
            seed,
        );
        let what = format!("seed {seed}");
        assert!(r.verdict.holds, "{what}: {r}");
        assert!(r.network.lost > 0, "{what}: no loss: {r}");
        assert_eq!(
            counter(&r, "store.spec_accepted"),
            u64::from(nodes - 1),
            "{what}: {r}"
        );
        assert_eq!(counter(&r, "store.spec_refused"), 0, "{what}: {r}");
        assert_eq!(
            counter(&r, "store.unknown_service_dropped"),
            0,
            "{what}: {r}"
        );
        assert!(
            counter(&r, "store.spec_served") >= u64::from(nodes - 1),
            "{what}: {r}"
        );
        assert_eq!(
            counter(&r, "store.to_application"),
            u64::from(nodes * (nodes - 1) * messages),
            "{what}: {r}"
        );
        assert_eq!(r.duplicated, 0, "{what}: {r}");
    }
}

/// The spec is refused by every node that gets it (node 0's neighbours: nobody else ever
/// holds it), nothing is delivered anywhere, and the messages that waited for the service are
/// dropped and counted.
fn assert_refused_everywhere(r: &Report, what: &str) {
    assert_eq!(counter(r, "store.spec_accepted"), 0, "{what}: {r}");
    assert!(counter(r, "store.spec_refused") > 0, "{what}: {r}");
    assert_eq!(counter(r, "store.to_application"), 0, "{what}: {r}");
    assert!(
        counter(r, "store.unknown_service_dropped") > 0,
        "{what}: {r}"
    );
    assert!(!r.verdict.holds, "{what}: {r}");
}

/// A spec changed after it was signed (bad signature), an unsigned one, and one signed by a
/// key nobody trusts are refused by every node that trusts the key; a bundle whose text does
/// not match its hash is refused even with no key configured.
#[test]
fn a_tampered_spec_is_refused_everywhere() {
    let dir = scratch("tamper");
    let text = h2hack();
    let sig = specbundle::sign(&specbundle::hash(text.as_bytes()), &SEED).unwrap();
    let key = specbundle::hex(&specbundle::public_key(&SEED).unwrap());
    let changed = text.replace("</scxml>", "<!-- changed after signing -->\n</scxml>");
    assert_ne!(changed, text);
    let other = specbundle::sign(&specbundle::hash(text.as_bytes()), &[1; 32]).unwrap();
    let cases = [
        (
            "bad signature",
            write_spec(&dir, "a.scxml", &changed, Some(&sig)),
        ),
        ("unsigned", write_spec(&dir, "b.scxml", &text, None)),
        (
            "untrusted key",
            write_spec(&dir, "c.scxml", &text, Some(&other)),
        ),
    ];
    let nodes = 20;
    for (what, path) in cases {
        let store = format!(
            "service = \"{}\"\nknown_at = \"0\"\ntrusted_keys = \"{key}\"\nfetch_queue = 4096\n",
            path.display()
        );
        let r = run_with_catalog(&scenario("messagestore", &store, nodes, 0.05, 2), 4);
        assert_refused_everywhere(&r, what);
    }
    let path = write_spec(&dir, "d.scxml", &text, None);
    let store = format!("service = \"{}\"\n", path.display());
    let r = run_with_catalog(&scenario("evil-store", &store, nodes, 0.05, 2), 5);
    assert_refused_everywhere(&r, "bad hash");
}

/// No node has the service and nobody answers: each node's own 20 messages wait, at most
/// `fetch_queue` = 8 at once — the 12 oldest are dropped and counted, at every node.
#[test]
fn the_waiting_queue_is_bounded_under_a_flood_of_unknown_service_messages() {
    let dir = scratch("flood");
    let path = write_spec(&dir, "h2hack.scxml", &h2hack(), None);
    let store = format!(
        "service = \"{}\"\nknown_at = \"999\"\nfetch_queue = 8\nfetch_tries = 1000\n",
        path.display()
    );
    let nodes = 10;
    let r = run_with_catalog(&scenario("messagestore", &store, nodes, 0.0, 20), 2);
    assert_eq!(
        counter(&r, "store.unknown_service_dropped"),
        u64::from(nodes * (20 - 8)),
        "{r}"
    );
    assert_eq!(counter(&r, "store.spec_accepted"), 0, "{r}");
    assert!(counter(&r, "store.spec_request_unanswered") > 0, "{r}");
}
