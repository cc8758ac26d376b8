//! Issue 16, brief h-rep item 1: the `messagestore` layer's repairs are acknowledged. A node
//! that holds a multicast payload and gains a child its instance never reached sends the
//! child a *repair* (MessageType [`REPAIR`]); the child's layer hands the payload to its
//! service and answers with [`REPAIR_ACK`]; the repairer sends again with back-off until the
//! answer comes, and after [`REPAIR_TRIES`] unanswered sends reports the message's failure to
//! its root — never a silent miss. (Before, a repair was sent three times, one per repair
//! pass, unacknowledged: at 30 % loss all three could be lost, and nobody was told.)
//!
//! Node 5 sits below node 3 in the tree of a multicast from node 1; it has no child when the
//! payload comes, then gains node 7.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::{advance, drain, node};
use viastack_kernel::{Dest, Direction, Duration, Event, Instant, LayerRef, Message, NodeId};
use viastack_protocols::events;
use viastack_protocols::messagestore::{
    addr, decode, decode_batch, encode, Config, Deploy, LocalService, MessageStore, FAILURE_REPORT,
    REPAIR, REPAIR_ACK, REPAIR_TRIES,
};
use viastack_protocols::overlay::{TreeInfo, TreeQuery, NEIGHBOUR_ADDED, TREE, TREE_QUERY};
use viastack_spec::service::Message as SMsg;

const H2H_ACK: u8 = 2;

fn store(me: u32) -> LayerRef {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../specs/h2hack.scxml"
    ))
    .unwrap();
    let h2hack = LocalService::load("h2hack.scxml", &text, None).unwrap();
    Arc::new(MessageStore::new(
        "store",
        NodeId(me),
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
            batch_window: Duration::ZERO,
        },
    ))
}

/// An overlay stand-in whose children the test changes: every tree query is answered with
/// parent node 3 and the children of the moment.
#[derive(Debug, Clone)]
struct Tree(Arc<Mutex<Vec<NodeId>>>);

impl viastack_kernel::Layer for Tree {
    fn name(&self) -> &str {
        "tree"
    }
    fn accepts(&self) -> Vec<viastack_kernel::EventType> {
        vec![viastack_kernel::event::SENDABLE.id(), TREE_QUERY.id()]
    }
    fn provides(&self) -> Vec<viastack_kernel::EventType> {
        vec![TREE.id(), NEIGHBOUR_ADDED.id()]
    }
    fn create_session(&self) -> Box<dyn viastack_kernel::Session> {
        Box::new(self.clone())
    }
}

impl viastack_kernel::Session for Tree {
    fn handle(&mut self, event: Event, ctx: &mut viastack_kernel::Context<'_>) {
        if event.ty() != TREE_QUERY.id() {
            ctx.go(event);
            return;
        }
        if let Some(q) = event.custom::<TreeQuery>() {
            let children = self.0.lock().unwrap().clone();
            let mut neighbours = vec![NodeId(3)];
            neighbours.extend(&children);
            let info = TreeInfo {
                root: q.root,
                token: q.token,
                parent: Some(NodeId(3)),
                children,
                neighbours,
                label: None,
                generation: None,
            };
            ctx.go(Event::new(
                TREE.id(),
                Direction::Up,
                event.channel(),
                viastack_kernel::Body::Custom(Box::new(info)),
            ));
        }
    }
}

/// Node 5 with the given children (shared with the test).
fn node5(children: &Arc<Mutex<Vec<NodeId>>>) -> common::Node {
    node(
        5,
        1,
        vec![Arc::new(Tree(Arc::clone(children))), store(5)],
        1,
    )
}

/// `m` from node `from` on the node's channel; the service messages it made.
fn receive(n: &mut common::Node, from: u32, m: &SMsg) -> Vec<(Dest, SMsg)> {
    let mut b = (n.channels[0].0 as u16).to_be_bytes().to_vec();
    b.extend_from_slice(&encode(m));
    let now = n.now;
    n.kernel
        .handle_datagram(now, n.device, NodeId(from), Message::from_wire(b));
    messages(&drain(n).1)
}

/// The service messages of transmitted datagrams, with their destinations.
fn messages(down: &[(Dest, Vec<u8>)]) -> Vec<(Dest, SMsg)> {
    let mut v = Vec::new();
    for (dest, d) in down {
        let body = &d[2..];
        match decode_batch(body) {
            Some(ranges) => v.extend(
                ranges
                    .into_iter()
                    .map(|r| (*dest, decode(&body[r]).unwrap())),
            ),
            None => v.push((*dest, decode(body).unwrap())),
        }
    }
    v
}

/// Node 1's multicast 42, forwarded to node 5 by node 3.
fn payload() -> SMsg {
    SMsg {
        service_id: 1,
        message_id: 42,
        message_type: 0x80,
        delivery_mode: 1,
        hop_limit: 250,
        source: addr(NodeId(1)),
        root: addr(NodeId(1)),
        payload: Some(Arc::from(&b"data"[..])),
        ..SMsg::default()
    }
}

/// Node 5 has the payload with no child, then the overlay gives it child 7: the repair to 7.
fn gain_child(n: &mut common::Node, children: &Arc<Mutex<Vec<NodeId>>>) -> Vec<(Dest, SMsg)> {
    let out = receive(n, 3, &payload());
    assert!(
        out.iter()
            .any(|(d, m)| *d == Dest::Node(NodeId(3)) && m.message_type == H2H_ACK),
        "acknowledged to node 3: {out:?}"
    );
    children.lock().unwrap().push(NodeId(7));
    let ch = n.channels[0];
    let now = n.now;
    n.kernel
        .inject(now, events::notice(&NEIGHBOUR_ADDED, ch, NodeId(7)))
        .unwrap();
    messages(&drain(n).1)
}

/// The repairs to node 7 among `out`.
fn repairs(out: &[(Dest, SMsg)]) -> usize {
    out.iter()
        .filter(|(d, m)| *d == Dest::Node(NodeId(7)) && m.message_type == REPAIR)
        .count()
}

/// A repair nobody answers is sent again with back-off, [`REPAIR_TRIES`] times, then given up
/// and reported to the message's root (node 1) as the message's failure. Without the
/// acknowledgements, three sends went and nothing was ever reported.
#[test]
fn an_unanswered_repair_is_retried_then_reported_to_the_root() {
    let children = Arc::new(Mutex::new(Vec::new()));
    let mut n = node5(&children);
    let first = gain_child(&mut n, &children);
    assert_eq!(repairs(&first), 1, "the repair to the new child: {first:?}");
    let r = first
        .iter()
        .find(|(_, m)| m.message_type == REPAIR)
        .unwrap();
    assert_eq!(r.1.payload.as_deref(), Some(&b"data"[..]));
    assert_eq!(r.1.root, addr(NodeId(1)));
    let mut sent = first;
    for step in 1..=400u64 {
        let at = Instant::ZERO + Duration::from_millis(50 * step);
        sent.extend(messages(&advance(&mut n, at).1));
    }
    assert_eq!(
        repairs(&sent),
        usize::from(REPAIR_TRIES),
        "sends to the silent child"
    );
    assert!(
        sent.iter()
            .any(|(d, m)| *d == Dest::Node(NodeId(1)) && m.message_type == FAILURE_REPORT),
        "the unanswered repair reported to node 1: {sent:?}"
    );
    assert_eq!(common::counter(&n, "store.repair_given_up"), 1);
    assert_eq!(common::counter(&n, "store.repair_acked"), 0);
}

/// The child's answer ends the repair: no more sends, no report.
#[test]
fn an_acknowledged_repair_is_not_sent_again() {
    let children = Arc::new(Mutex::new(Vec::new()));
    let mut n = node5(&children);
    let first = gain_child(&mut n, &children);
    assert_eq!(repairs(&first), 1, "{first:?}");
    // The first send was lost: the second comes after the first back-off.
    let mut sent = Vec::new();
    for step in 1..=8u64 {
        let at = Instant::ZERO + Duration::from_millis(50 * step);
        sent.extend(messages(&advance(&mut n, at).1));
    }
    assert_eq!(repairs(&sent), 1, "one retry within 400 ms: {sent:?}");
    let ack = SMsg {
        message_type: REPAIR_ACK,
        delivery_mode: 3,
        hop_limit: 255,
        source: addr(NodeId(7)),
        destination: addr(NodeId(5)),
        payload: None,
        ..payload()
    };
    receive(&mut n, 7, &ack);
    let mut after = Vec::new();
    for step in 9..=400u64 {
        let at = Instant::ZERO + Duration::from_millis(50 * step);
        after.extend(messages(&advance(&mut n, at).1));
    }
    assert_eq!(
        repairs(&after),
        0,
        "sent after its acknowledgement: {after:?}"
    );
    assert!(
        !after.iter().any(|(_, m)| m.message_type == FAILURE_REPORT),
        "reported although acknowledged: {after:?}"
    );
    assert_eq!(common::counter(&n, "store.repair_acked"), 1);
    assert_eq!(common::counter(&n, "store.repair_given_up"), 0);
}

/// A child that leaves the children is no longer waited for: no report for it (its new
/// parent repairs it), and it is repaired anew when it comes back.
#[test]
fn a_repair_to_a_child_that_left_ends_without_a_report() {
    let children = Arc::new(Mutex::new(Vec::new()));
    let mut n = node5(&children);
    gain_child(&mut n, &children);
    children.lock().unwrap().clear();
    let ch = n.channels[0];
    n.kernel
        .inject(
            n.now,
            events::notice(
                &viastack_protocols::overlay::NEIGHBOUR_REMOVED,
                ch,
                NodeId(7),
            ),
        )
        .unwrap();
    let mut after = messages(&drain(&mut n).1);
    for step in 1..=400u64 {
        let at = Instant::ZERO + Duration::from_millis(50 * step);
        after.extend(messages(&advance(&mut n, at).1));
    }
    assert_eq!(repairs(&after), 0, "{after:?}");
    assert!(!after.iter().any(|(_, m)| m.message_type == FAILURE_REPORT));
    assert_eq!(common::counter(&n, "store.repair_abandoned"), 1);
}

/// The child's side: a repair is the payload to its service (delivered once, acknowledged to
/// the service's previous hop as h2hack does) and is answered with a [`REPAIR_ACK`] to the
/// repairer, also when the service had the payload already.
#[test]
fn a_repair_is_delivered_and_acknowledged() {
    let children = Arc::new(Mutex::new(Vec::new()));
    let mut n = node5(&children);
    let repair = SMsg {
        message_type: REPAIR,
        ..payload()
    };
    let mut b = (n.channels[0].0 as u16).to_be_bytes().to_vec();
    b.extend_from_slice(&encode(&repair));
    n.kernel
        .handle_datagram(n.now, n.device, NodeId(3), Message::from_wire(b.clone()));
    let (up, down) = drain(&mut n);
    assert_eq!(up.len(), 1, "delivered: {up:?}");
    assert_eq!(up[0].1, NodeId(1));
    assert_eq!(up[0].2, b"data");
    let out = messages(&down);
    let acks: Vec<&SMsg> = out
        .iter()
        .filter(|(d, m)| *d == Dest::Node(NodeId(3)) && m.message_type == REPAIR_ACK)
        .map(|(_, m)| m)
        .collect();
    assert_eq!(acks.len(), 1, "{out:?}");
    assert_eq!(acks[0].message_id, 42);
    assert_eq!(acks[0].source, addr(NodeId(5)));
    assert!(
        out.iter()
            .any(|(d, m)| *d == Dest::Node(NodeId(3)) && m.message_type == H2H_ACK),
        "the service's own acknowledgement: {out:?}"
    );
    // Again (the acknowledgement was lost): answered again, not delivered again.
    n.kernel
        .handle_datagram(n.now, n.device, NodeId(3), Message::from_wire(b));
    let (up, down) = drain(&mut n);
    assert!(up.is_empty(), "delivered twice: {up:?}");
    let out = messages(&down);
    assert_eq!(
        out.iter()
            .filter(|(_, m)| m.message_type == REPAIR_ACK)
            .count(),
        1,
        "{out:?}"
    );
}
