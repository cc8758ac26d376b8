//! The `messagestore` layer fetching services it lacks (issue 16 §4), driven datagram by
//! datagram on one node (no overlay below: tree queries go unanswered, which the fetch does
//! not need). Bounds under a flood of unknown-service messages; a tampered bundle refused and
//! the right one accepted.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{counter, node};
use viastack_kernel::event::SENDABLE;
use viastack_kernel::{
    Body, Context, Dest, Direction, Event, EventType, Instant, Layer, LayerRef, NodeId, Session,
};
use viastack_protocols::messagestore::{
    addr, decode, encode, Config, Deploy, MessageStore, MAX_FETCHES,
};
use viastack_protocols::overlay::{TreeInfo, TreeQuery, TREE, TREE_QUERY};
use viastack_protocols::specbundle::{self, Bundle, SPEC_REQUEST, SPEC_RESPONSE};
use viastack_spec::service::Message as SMsg;

/// Stands in for the overlay: answers every tree query with no parent, no children and one
/// neighbour (node 3), and passes sendables through.
#[derive(Debug)]
struct Tree;

impl Layer for Tree {
    fn name(&self) -> &str {
        "tree"
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), TREE_QUERY.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![TREE.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(TreeSession)
    }
}

struct TreeSession;

impl Session for TreeSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if event.ty() == TREE_QUERY.id() {
            if let Body::Custom(b) = &event.body {
                if let Some(q) = b.downcast_ref::<TreeQuery>() {
                    let info = TreeInfo {
                        root: q.root,
                        token: q.token,
                        parent: None,
                        children: Vec::new(),
                        neighbours: vec![NodeId(3)],
                        label: None,
                        generation: None,
                    };
                    ctx.go(Event::new(
                        TREE.id(),
                        Direction::Up,
                        event.channel(),
                        Body::Custom(Box::new(info)),
                    ));
                }
            }
            return;
        }
        ctx.go(event);
    }
}

fn layers(queue: usize, trusted: Vec<[u8; 32]>) -> Vec<LayerRef> {
    vec![Arc::new(Tree), store(queue, trusted, None)]
}

fn store(queue: usize, trusted: Vec<[u8; 32]>, server: Option<NodeId>) -> LayerRef {
    Arc::new(MessageStore::new(
        "store",
        NodeId(5),
        Config {
            services: Vec::new(),
            default_service: 1,
            deploy: Deploy {
                queue,
                trusted_keys: trusted,
                server,
                tries: 4,
                ..Deploy::default()
            },
            capacity: 100,
            queue: 1024,
            flood: false,
            failure_state: None,
            stream: false,
            store_forwards: false,
            batch_window: viastack_kernel::Duration::ZERO,
        },
    ))
}

/// Hands `frame` from node `from` to the node's device, on its channel.
fn receive(n: &mut common::Node, from: u32, frame: Vec<u8>) {
    let mut b = (n.channels[0].0 as u16).to_be_bytes().to_vec();
    b.extend_from_slice(&frame);
    common::receive(n, from, b);
}

/// A payload multicast by node 3 for `service`.
fn payload(service: u32, id: u64) -> Vec<u8> {
    encode(&SMsg {
        service_id: service,
        message_id: id,
        message_type: 0x80,
        delivery_mode: 1,
        hop_limit: 255,
        source: addr(NodeId(3)),
        root: addr(NodeId(3)),
        payload: Some(Arc::from(&b"hi"[..])),
        ..SMsg::default()
    })
}

#[test]
fn a_flood_of_unknown_services_stays_within_the_bounds() {
    let mut n = node(5, 1, layers(64, Vec::new()), 1);
    for s in 0..40u32 {
        receive(&mut n, 3, payload(100 + s, 1));
    }
    let over = 40 - MAX_FETCHES as u64;
    assert_eq!(counter(&n, "store.fetches_full"), over);
    assert_eq!(counter(&n, "store.spec_fetch"), MAX_FETCHES as u64);
    assert_eq!(counter(&n, "store.unknown_service_dropped"), over);
    // Each fetch asked the message's sender at once.
    assert_eq!(counter(&n, "store.spec_request_sent"), MAX_FETCHES as u64);
    for id in 0..100u64 {
        receive(&mut n, 3, payload(100, 2 + id));
    }
    // 16 + 100 messages for a queue of 64: the 52 oldest dropped.
    assert_eq!(
        counter(&n, "store.unknown_service_dropped"),
        over + (MAX_FETCHES as u64 + 100 - 64)
    );
}

#[test]
fn a_tampered_bundle_is_refused_and_the_right_one_accepted() {
    let seed = [3u8; 32];
    let text = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../specs/h2hack.scxml"
    ))
    .unwrap();
    let sig = specbundle::sign(&specbundle::hash(&text), &seed).unwrap();
    let mut n = node(5, 1, layers(8, vec![sig.key]), 1);
    receive(&mut n, 3, payload(1, 9));
    assert_eq!(counter(&n, "store.spec_fetch"), 1);
    let respond = |n: &mut common::Node, b: &Bundle| {
        for c in specbundle::chunks(b) {
            let f = encode(&SMsg {
                service_id: 1,
                message_type: SPEC_RESPONSE,
                delivery_mode: 3,
                hop_limit: 255,
                source: addr(NodeId(3)),
                destination: addr(NodeId(5)),
                payload: Some(Arc::from(specbundle::encode_chunk(&c))),
                ..SMsg::default()
            });
            receive(n, 3, f);
        }
    };
    // Text changed, hash and signature of the original: bad hash.
    let mut bad = Bundle::with_signature(&text, Some(sig));
    let mut t = text.clone();
    t.extend_from_slice(b"<!-- x -->");
    bad.text = Arc::from(t);
    respond(&mut n, &bad);
    assert_eq!(counter(&n, "store.spec_refused"), 1);
    // Its hash is the genuine spec's: not remembered as refused (that would poison the
    // genuine spec), so it is checked and refused again.
    respond(&mut n, &bad);
    assert_eq!(counter(&n, "store.spec_refused"), 2);
    // Unsigned, with a trusted key configured: refused, and remembered (hash, no signature).
    respond(&mut n, &Bundle::new(&text));
    assert_eq!(counter(&n, "store.spec_refused"), 3);
    respond(&mut n, &Bundle::new(&text));
    assert_eq!(counter(&n, "store.spec_refused"), 3);
    assert!(counter(&n, "store.spec_refused_again") > 0);
    assert_eq!(counter(&n, "store.spec_accepted"), 0);
    // The signed original: accepted despite the refusals of bundles claiming its hash.
    respond(&mut n, &Bundle::with_signature(&text, Some(sig)));
    assert_eq!(counter(&n, "store.spec_accepted"), 1);
    assert_eq!(counter(&n, "store.unknown_service_dropped"), 0);
    // Now this node serves it.
    let req = encode(&SMsg {
        service_id: 1,
        message_type: SPEC_REQUEST,
        delivery_mode: 3,
        hop_limit: 255,
        source: addr(NodeId(7)),
        destination: addr(NodeId(5)),
        payload: Some(Arc::from(&[][..])),
        ..SMsg::default()
    });
    receive(&mut n, 7, req);
    assert_eq!(counter(&n, "store.spec_served"), 1);
}

/// This node's own message for a service it lacks: it asks its neighbour (node 3) and the
/// services server (node 9) in turn, one request every 500 ms, and after 4 unanswered
/// requests drops the message and counts it.
#[test]
fn an_unanswered_fetch_asks_neighbours_and_the_server_then_drops() {
    let mut n = node(
        5,
        1,
        vec![Arc::new(Tree), store(8, Vec::new(), Some(NodeId(9)))],
        1,
    );
    let mut asked = Vec::new();
    let mut note = |out: Vec<(Dest, Vec<u8>)>| {
        for (d, b) in out {
            // The device's 2-byte channel tag, then the frame.
            if decode(&b[2..]).is_some_and(|m| m.message_type == SPEC_REQUEST) {
                asked.push(d);
            }
        }
    };
    note(
        common::send(&mut n, 0, None, b"hello")
            .into_iter()
            .map(|b| (Dest::Broadcast, b))
            .collect(),
    );
    assert_eq!(counter(&n, "store.spec_fetch"), 1);
    for i in 1..=6u64 {
        let (_, out) = common::advance(&mut n, Instant::from_nanos(i * 500_000_000));
        note(out);
    }
    assert_eq!(counter(&n, "store.spec_request_sent"), 4);
    assert_eq!(counter(&n, "store.spec_fetch_failed"), 1);
    assert_eq!(counter(&n, "store.unknown_service_dropped"), 1);
    let to: Vec<Dest> = asked
        .into_iter()
        .filter(|d| *d != Dest::Broadcast)
        .collect();
    assert!(to.contains(&Dest::Node(NodeId(3))), "{to:?}");
    assert!(to.contains(&Dest::Node(NodeId(9))), "{to:?}");
}
