//! The `messagestore` layer's two input buffers (seed 000 §5.1.2, Figure 5.9: messages wait in
//! a DataBuffer or a ControlBuffer before the MessageProcessor takes them). Driven on one node
//! whose overlay stand-in never answers a tree query, so every input stays queued: a flood of
//! data messages must not push out the control messages queued before it, nor the reverse,
//! and each buffer keeps its bound. And the sender is told when its own message never reached
//! the service (pushed out of the buffer, or refused by a full store): nothing is lost
//! silently (DESIGN.md §4.7).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{counter, node, FixedTree};
use viastack_kernel::event::SENDABLE;
use viastack_kernel::{Dest, Direction, Event, LayerRef, Message, NodeId, Output, Sendable, Tag};
use viastack_protocols::events::{send_failure, SEND_REFUSED};
use viastack_protocols::messagestore::{addr, encode, Config, Deploy, LocalService, MessageStore};
use viastack_spec::service::Message as SMsg;

const QUEUE: usize = 8;

fn store() -> LayerRef {
    store_with(100)
}

fn store_with(capacity: usize) -> LayerRef {
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
            capacity,
            queue: QUEUE,
            flood: false,
            failure_state: None,
            stream: false,
            store_forwards: false,
            batch_window: viastack_kernel::Duration::ZERO,
        },
    ))
}

/// Hands `frame` from node 3 to the node's device, on its channel.
fn receive(n: &mut common::Node, frame: Vec<u8>) {
    let mut b = (n.channels[0].0 as u16).to_be_bytes().to_vec();
    b.extend_from_slice(&frame);
    common::receive(n, 3, b);
}

/// A message of h2hack (ServiceID 1) from node 3: a payload (type 0x80) or, without one, a
/// control message (an H2H ACK, type 2).
fn message(id: u64, payload: bool) -> Vec<u8> {
    encode(&SMsg {
        service_id: 1,
        message_id: id,
        message_type: if payload { 0x80 } else { 2 },
        delivery_mode: if payload { 1 } else { 3 },
        hop_limit: 255,
        source: addr(NodeId(3)),
        destination: addr(NodeId(5)),
        root: addr(NodeId(3)),
        payload: payload.then(|| Arc::from(&b"data"[..])),
        ..SMsg::default()
    })
}

#[test]
fn a_data_flood_does_not_push_out_queued_control_messages() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::silent()), store()], 1);
    for id in 0..5 {
        receive(&mut n, message(id, false));
    }
    for id in 100..150 {
        receive(&mut n, message(id, true));
    }
    assert_eq!(counter(&n, "store.malformed"), 0);
    assert_eq!(counter(&n, "store.control_queue_evicted"), 0);
    assert_eq!(counter(&n, "store.data_queue_evicted"), 50 - QUEUE as u64);
}

#[test]
fn a_control_flood_does_not_push_out_queued_data_messages() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::silent()), store()], 1);
    for id in 0..3 {
        receive(&mut n, message(id, true));
    }
    for id in 100..140 {
        receive(&mut n, message(id, false));
    }
    assert_eq!(counter(&n, "store.data_queue_evicted"), 0);
    assert_eq!(
        counter(&n, "store.control_queue_evicted"),
        40 - QUEUE as u64
    );
}

/// The application of node 5 multicasts a message tagged `tag`; returns the tags of the
/// `SendRefused` notices that came up.
fn send_tagged(n: &mut common::Node, tag: u64) -> Vec<u64> {
    let now = n.now;
    n.kernel
        .inject(
            now,
            Event::sendable(
                SENDABLE.id(),
                Direction::Down,
                n.channels[0],
                Sendable::new(NodeId(5), Dest::Broadcast, Message::from_payload(b"mine"))
                    .with_tag(Tag(tag)),
            ),
        )
        .unwrap();
    let mut refused = Vec::new();
    while let Some(o) = n.kernel.poll_output() {
        if let Output::Deliver(e) = o {
            if e.ty() == SEND_REFUSED.id() {
                refused.extend(send_failure(&e).unwrap().tags.iter().map(|t| t.0));
            }
        }
    }
    refused
}

#[test]
fn own_messages_pushed_out_of_the_buffer_are_refused_to_the_sender() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::silent()), store()], 1);
    let mut refused = Vec::new();
    for tag in 1..=10 {
        refused.extend(send_tagged(&mut n, tag));
    }
    assert_eq!(counter(&n, "store.data_queue_evicted"), 2);
    assert_eq!(refused, vec![1, 2], "the two oldest, by their tags");
}

#[test]
fn a_full_store_refuses_the_senders_message_with_a_notice() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::default()), store_with(1)], 1);
    // The first message's instance lives (h2hack keeps it for Timeout_Delete).
    assert!(send_tagged(&mut n, 1).is_empty());
    assert_eq!(counter(&n, "store.full"), 0);
    assert_eq!(send_tagged(&mut n, 2), vec![2]);
    assert_eq!(counter(&n, "store.full"), 1);
    assert_eq!(counter(&n, "store.send_refused"), 1);
}
