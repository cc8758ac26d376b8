//! h2hack's Reset belongs to its message's tree (brief h-ovl item 4; seed 000 §3.1.2.1, Table
//! 3.1: "a node that receives a Reset sends it to all of its children"). The Reset is a
//! message the service builds afresh (no `from`), so the spec gives it no RootAddress: the
//! `messagestore` layer stamps the instance's root on it. Before, it left with none, and its
//! receivers took its *sender* for the root: they forwarded it down the sender's tree and
//! reported their give-up to the sender, never to the message's original source.
//!
//! Node 5 sits below node 3 with child 6, in the tree of a multicast from node 1.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{advance, drain, node, FixedTree};
use viastack_kernel::{Dest, Duration, LayerRef, Message, NodeId};
use viastack_protocols::messagestore::{
    addr, decode, decode_batch, encode, Config, Deploy, LocalService, MessageStore, FAILURE_REPORT,
};
use viastack_spec::service::{Addr, Message as SMsg};

const RESET: u8 = 4;

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

/// `m` from node 3 on the node's channel.
fn receive(n: &mut common::Node, m: &SMsg) -> Vec<(Dest, Vec<u8>)> {
    let mut b = (n.channels[0].0 as u16).to_be_bytes().to_vec();
    b.extend_from_slice(&encode(m));
    let now = n.now;
    n.kernel
        .handle_datagram(now, n.device, NodeId(3), Message::from_wire(b));
    drain(n).1
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
        source: addr(NodeId(3)),
        previous_hop: addr(NodeId(3)),
        root: addr(NodeId(1)),
        payload: Some(Arc::from(&b"data"[..])),
        ..SMsg::default()
    }
}

/// Node 5 gives up on its child (Timeout_maxACK): its Reset to the child carries node 1 as its
/// root, and its failure report goes to node 1.
#[test]
fn a_reset_sent_on_giving_up_carries_the_message_root() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::below(3, &[6])), store()], 1);
    let out = messages(&receive(&mut n, &payload()));
    assert!(
        out.iter()
            .any(|(d, m)| *d == Dest::Node(NodeId(6)) && m.message_type == 0x80),
        "forwarded to the child: {out:?}"
    );
    let mut sent = Vec::new();
    for step in 1..=14u64 {
        let at = viastack_kernel::Instant::ZERO + Duration::from_millis(500 * step);
        sent.extend(messages(&advance(&mut n, at).1));
    }
    let resets: Vec<&SMsg> = sent
        .iter()
        .filter(|(d, m)| *d == Dest::Node(NodeId(6)) && m.message_type == RESET)
        .map(|(_, m)| m)
        .collect();
    assert!(!resets.is_empty(), "no Reset to the child: {sent:?}");
    for r in resets {
        assert_eq!(r.root, addr(NodeId(1)), "the Reset's root: {r:?}");
        assert_eq!(r.message_id, 42);
    }
    assert!(
        sent.iter()
            .any(|(d, m)| *d == Dest::Node(NodeId(1)) && m.message_type == FAILURE_REPORT),
        "the give-up reported to node 1: {sent:?}"
    );
}

/// A Reset that arrives with no root (from a node that did not stamp one) belongs to the
/// instance it names: node 5 passes it down node 1's tree and reports to node 1, not to the
/// Reset's sender, node 3.
#[test]
fn a_reset_without_a_root_is_taken_for_its_instance_root() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::below(3, &[6])), store()], 1);
    receive(&mut n, &payload());
    let reset = SMsg {
        message_type: RESET,
        payload: None,
        root: Addr(0),
        hop_limit: 1,
        ..payload()
    };
    let out = messages(&receive(&mut n, &reset));
    let reports: Vec<Dest> = out
        .iter()
        .filter(|(_, m)| m.message_type == FAILURE_REPORT)
        .map(|(d, _)| *d)
        .collect();
    assert_eq!(reports, vec![Dest::Node(NodeId(1))], "{out:?}");
    let passed: Vec<&SMsg> = out
        .iter()
        .filter(|(d, m)| *d == Dest::Node(NodeId(6)) && m.message_type == RESET)
        .map(|(_, m)| m)
        .collect();
    assert_eq!(passed.len(), 1, "{out:?}");
    assert_eq!(passed[0].root, addr(NodeId(1)));
}
