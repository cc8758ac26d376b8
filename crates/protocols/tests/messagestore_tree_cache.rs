//! The `messagestore` remembers the overlay's tree answers per topology generation (brief
//! h-svc4 item 1; seed 000 §4.3: the MessageStore runs each message's service with the node's
//! place in the message's tree, which the overlay computes from its neighbourhood).
//!
//! A stand-in overlay below the store answers tree queries with a generation and counts them;
//! a datagram starting with [`CHANGE`] changes its tree (the child) and announces the new
//! generation up, as the `overlay` layer does after a hello that changes its shape. Node 5
//! sits below node 3 in the tree of multicasts from node 1.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::{drain, node};
use viastack_kernel::event::SENDABLE;
use viastack_kernel::{
    Body, Context, Dest, Direction, Event, EventType, Layer, LayerRef, Message, NodeId, Session,
};
use viastack_protocols::messagestore::{
    addr, decode, decode_batch, encode, Config, Deploy, LocalService, MessageStore,
};
use viastack_protocols::overlay::{
    TopologyGeneration, TreeInfo, TreeQuery, GENERATION, TREE, TREE_QUERY,
};
use viastack_spec::service::Message as SMsg;

/// First byte of a datagram that changes the stand-in's tree.
const CHANGE: u8 = 0xEE;

#[derive(Debug, Default)]
struct State {
    generation: u64,
    child: u32,
    queries: u32,
    /// Answers carry no generation (not reusable).
    unreusable: bool,
    /// A change is announced (else the store hears of it only from the next answer).
    announce: bool,
}

#[derive(Debug, Clone)]
struct Shifting(Arc<Mutex<State>>);

impl Layer for Shifting {
    fn name(&self) -> &str {
        "shifting-tree"
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), TREE_QUERY.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![TREE.id(), GENERATION.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(self.clone())
    }
}

impl Session for Shifting {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        if event.ty() == TREE_QUERY.id() {
            let q = *event.custom::<TreeQuery>().unwrap();
            let mut st = self.0.lock().unwrap();
            // Debug builds check a remembered tree with a query of token u64::MAX: not one
            // the store waits for.
            if q.token != u64::MAX {
                st.queries += 1;
            }
            let info = TreeInfo {
                root: q.root,
                token: q.token,
                parent: Some(NodeId(3)),
                children: vec![NodeId(st.child)],
                neighbours: vec![NodeId(3), NodeId(st.child)],
                label: None,
                generation: (!st.unreusable).then_some(st.generation),
            };
            ctx.go(Event::new(
                TREE.id(),
                Direction::Up,
                event.channel(),
                Body::Custom(Box::new(info)),
            ));
            return;
        }
        let change = event.dir() == Direction::Up
            && event
                .sendable_mut()
                .is_some_and(|s| s.message.as_slice().first() == Some(&CHANGE));
        if change {
            let mut st = self.0.lock().unwrap();
            st.generation += 1;
            st.child += 1;
            if st.announce {
                ctx.go(Event::new(
                    GENERATION.id(),
                    Direction::Up,
                    event.channel(),
                    Body::Custom(Box::new(TopologyGeneration(st.generation))),
                ));
            }
            return;
        }
        ctx.go(event);
    }
}

fn store() -> LayerRef {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../specs/h2hack.scxml"
    ))
    .unwrap();
    let h2hack = LocalService::load("h2hack.scxml", &text, None).unwrap();
    Arc::new(MessageStore::new(
        "store",
        NodeId(5),
        Config {
            default_service: h2hack.service.id(),
            services: vec![h2hack],
            deploy: Deploy::default(),
            capacity: 100,
            queue: 100,
            flood: false,
            failure_state: Some("reset".into()),
            stream: false,
            store_forwards: false,
            batch_window: viastack_kernel::Duration::ZERO,
        },
    ))
}

fn datagram(n: &mut common::Node, body: &[u8]) -> Vec<(Dest, Vec<u8>)> {
    let mut b = (n.channels[0].0 as u16).to_be_bytes().to_vec();
    b.extend_from_slice(body);
    let now = n.now;
    n.kernel
        .handle_datagram(now, n.device, NodeId(3), Message::from_wire(b));
    drain(n).1
}

/// The nodes node 5 forwarded payload `id` to.
fn forwarded(down: &[(Dest, Vec<u8>)], id: u64) -> Vec<Dest> {
    let mut to = Vec::new();
    for (dest, d) in down {
        let body = &d[2..];
        let ms: Vec<SMsg> = match decode_batch(body) {
            Some(rs) => rs.into_iter().map(|r| decode(&body[r]).unwrap()).collect(),
            None => vec![decode(body).unwrap()],
        };
        if ms
            .iter()
            .any(|m| m.message_type == 0x80 && m.message_id == id)
        {
            to.push(*dest);
        }
    }
    to
}

/// Node 1's multicast `id`, forwarded to node 5 by node 3.
fn payload(id: u64) -> Vec<u8> {
    encode(&SMsg {
        service_id: 1,
        message_id: id,
        message_type: 0x80,
        delivery_mode: 1,
        hop_limit: 250,
        source: addr(NodeId(3)),
        previous_hop: addr(NodeId(3)),
        root: addr(NodeId(1)),
        payload: Some(Arc::from(&b"data"[..])),
        ..SMsg::default()
    })
}

fn setup(st: State) -> (common::Node, Arc<Mutex<State>>) {
    let st = Arc::new(Mutex::new(st));
    let n = node(5, 1, vec![Arc::new(Shifting(st.clone())), store()], 1);
    (n, st)
}

/// A second message on the same tree is stepped without asking; after a change (announced),
/// the next message asks again and goes to the new child. Fails if the store kept the old
/// answer past the change (payload 3 would go to node 6) or never reused one.
#[test]
fn a_tree_is_reused_until_the_overlay_announces_a_new_generation() {
    let (mut n, st) = setup(State {
        generation: 1,
        child: 6,
        announce: true,
        ..State::default()
    });
    assert_eq!(
        forwarded(&datagram(&mut n, &payload(1)), 1),
        [Dest::Node(NodeId(6))]
    );
    assert_eq!(
        forwarded(&datagram(&mut n, &payload(2)), 2),
        [Dest::Node(NodeId(6))]
    );
    assert_eq!(
        st.lock().unwrap().queries,
        1,
        "the second message asked again"
    );
    datagram(&mut n, &[CHANGE]);
    assert_eq!(
        forwarded(&datagram(&mut n, &payload(3)), 3),
        [Dest::Node(NodeId(7))],
        "the tree of the old generation was used"
    );
    assert_eq!(st.lock().unwrap().queries, 2);
    assert_eq!(
        forwarded(&datagram(&mut n, &payload(4)), 4),
        [Dest::Node(NodeId(7))]
    );
    assert_eq!(st.lock().unwrap().queries, 2);
}

/// An answer that says it may not be reused (no generation) is asked for every input.
#[test]
fn an_answer_without_a_generation_is_not_reused() {
    let (mut n, st) = setup(State {
        child: 6,
        unreusable: true,
        ..State::default()
    });
    for id in 1..=3 {
        assert_eq!(
            forwarded(&datagram(&mut n, &payload(id)), id),
            [Dest::Node(NodeId(6))]
        );
    }
    assert_eq!(st.lock().unwrap().queries, 3);
}

/// A newer generation seen in an answer drops what was remembered of older ones too: after an
/// unannounced change the store still steps on the old tree (it cannot know), but once any
/// answer of the new generation arrives the old trees are gone.
#[test]
fn a_newer_generation_in_an_answer_drops_older_trees() {
    let (mut n, st) = setup(State {
        generation: 1,
        child: 6,
        ..State::default()
    });
    // Trees of two roots remembered: node 1's and node 2's.
    let mut other = decode(&payload(10)).unwrap();
    other.root = addr(NodeId(2));
    datagram(&mut n, &payload(1));
    datagram(&mut n, &encode(&other));
    assert_eq!(st.lock().unwrap().queries, 2);
    datagram(&mut n, &[CHANGE]);
    // Node 3's root is new: asked, answered with generation 2.
    let mut third = decode(&payload(11)).unwrap();
    third.root = addr(NodeId(4));
    datagram(&mut n, &encode(&third));
    assert_eq!(st.lock().unwrap().queries, 3);
    // Node 1's tree of generation 1 is gone: asked again, forwarded to the new child.
    assert_eq!(
        forwarded(&datagram(&mut n, &payload(2)), 2),
        [Dest::Node(NodeId(7))]
    );
    assert_eq!(st.lock().unwrap().queries, 4);
}
