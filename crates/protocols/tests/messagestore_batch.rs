//! The `messagestore` layer's batches (module doc, "Batches"; `docs/WIRE.md`): the small
//! messages one kernel batch makes for one next hop leave as one datagram, and a received
//! batch is split into its messages, each handled as if it came alone. Driven on one node
//! (node 5) whose overlay stand-in puts it below node 3 (its parent, no children): each
//! payload from node 3 is acknowledged to node 3 (h2hack's H2H ACK, MessageType 2). Plus the
//! batch format against `testdata/vectors/messagestore_batch.json`.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{counter, drain, hex, node, vectors, FixedTree};
use viastack_kernel::{Dest, LayerRef, Message, NodeId};
use viastack_protocols::messagestore::{
    addr, decode, decode_batch, encode, encode_batch, Config, Deploy, LocalService, MessageStore,
    BATCH_MAX_BYTES,
};
use viastack_spec::service::Message as SMsg;

fn store() -> LayerRef {
    store_with(viastack_kernel::Duration::ZERO)
}

fn store_with(batch_window: viastack_kernel::Duration) -> LayerRef {
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
            capacity: 1000,
            queue: 1000,
            flood: false,
            failure_state: None,
            stream: false,
            store_forwards: false,
            batch_window,
        },
    ))
}

/// h2hack's payload `id` from node 3 (root and source), `size` bytes.
fn payload(id: u64, size: usize) -> Vec<u8> {
    encode(&SMsg {
        service_id: 1,
        message_id: id,
        message_type: 0x80,
        delivery_mode: 1,
        hop_limit: 255,
        source: addr(NodeId(3)),
        root: addr(NodeId(3)),
        payload: Some(Arc::from(vec![id as u8; size])),
        ..SMsg::default()
    })
}

/// `frame` from node 3 on the node's channel (the device's 2-byte channel header first).
fn framed(n: &common::Node, frame: &[u8]) -> Message {
    let mut b = (n.channels[0].0 as u16).to_be_bytes().to_vec();
    b.extend_from_slice(frame);
    Message::from_wire(b)
}

/// The service messages in a transmitted datagram (a batch, or one message).
fn messages(datagram: &[u8]) -> Vec<SMsg> {
    let body = &datagram[2..];
    match decode_batch(body) {
        Some(ranges) => ranges
            .into_iter()
            .map(|r| decode(&body[r]).unwrap())
            .collect(),
        None => vec![decode(body).unwrap()],
    }
}

#[test]
fn the_acknowledgements_of_one_input_batch_leave_as_one_datagram() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::below(3, &[])), store()], 1);
    let now = n.now;
    n.kernel.begin_batch();
    for id in 0..10 {
        let m = framed(&n, &payload(id, 1024));
        n.kernel.handle_datagram(now, n.device, NodeId(3), m);
    }
    n.kernel.end_batch(now);
    let (up, down) = drain(&mut n);
    assert_eq!(up.len(), 10, "every payload reached the application");
    assert_eq!(down.len(), 1, "one datagram for the ten acknowledgements");
    assert_eq!(down[0].0, Dest::Node(NodeId(3)));
    let acks = messages(&down[0].1);
    let ids: Vec<u64> = acks.iter().map(|m| m.message_id).collect();
    assert_eq!(ids, (0..10).collect::<Vec<_>>(), "all of them, in order");
    for a in &acks {
        assert_eq!(a.message_type, 2, "an H2H ACK");
        assert_eq!(a.destination, addr(NodeId(3)));
    }
    assert_eq!(counter(&n, "store.batches"), 1);
    assert_eq!(counter(&n, "store.batched"), 10);
    assert_eq!(counter(&n, "store.sent"), 10);
}

#[test]
fn with_a_batch_window_the_acknowledgements_of_several_input_batches_share_a_datagram() {
    let window = viastack_kernel::Duration::from_millis(1);
    let mut n = node(
        5,
        1,
        vec![Arc::new(FixedTree::below(3, &[])), store_with(window)],
        1,
    );
    let t0 = n.now;
    // Three batches of input, 100 µs apart: nothing leaves before the window closes.
    for id in 0..3u64 {
        let at = t0 + viastack_kernel::Duration::from_micros(100 * id);
        n.kernel.begin_batch();
        let m = framed(&n, &payload(id, 1024));
        n.kernel.handle_datagram(at, n.device, NodeId(3), m);
        n.kernel.end_batch(at);
        let (up, down) = drain(&mut n);
        assert_eq!(up.len(), 1, "payload {id} delivered at once");
        assert!(down.is_empty(), "acknowledgement {id} waits for the window");
    }
    assert_eq!(
        n.kernel.poll_timeout(),
        Some(t0 + window),
        "the window closes 1 ms after the first batch"
    );
    n.kernel.handle_timeout(t0 + window);
    let (_, down) = drain(&mut n);
    assert_eq!(down.len(), 1, "one datagram for the three acknowledgements");
    let ids: Vec<u64> = messages(&down[0].1).iter().map(|m| m.message_id).collect();
    assert_eq!(ids, [0, 1, 2]);
    assert_eq!(counter(&n, "store.batches"), 1);
    // The next acknowledgement opens a new window.
    let later = t0 + viastack_kernel::Duration::from_millis(5);
    let m = framed(&n, &payload(9, 100));
    n.kernel.handle_datagram(later, n.device, NodeId(3), m);
    assert!(drain(&mut n).1.is_empty());
    n.kernel.handle_timeout(later + window);
    let (_, down) = drain(&mut n);
    assert_eq!(down.len(), 1);
    assert_eq!(messages(&down[0].1)[0].message_id, 9);
}

#[test]
fn a_lone_acknowledgement_leaves_as_a_plain_message() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::below(3, &[])), store()], 1);
    let now = n.now;
    let m = framed(&n, &payload(7, 100));
    n.kernel.handle_datagram(now, n.device, NodeId(3), m);
    let (up, down) = drain(&mut n);
    assert_eq!(up.len(), 1);
    assert_eq!(down.len(), 1);
    assert_eq!(down[0].1[2], 1, "version 1: not a batch");
    assert_eq!(messages(&down[0].1)[0].message_id, 7);
    assert_eq!(counter(&n, "store.batches"), 0);
}

#[test]
fn a_full_batch_leaves_and_the_next_one_starts() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::below(3, &[])), store()], 1);
    let now = n.now;
    let count = 3 * BATCH_MAX_BYTES / 51;
    n.kernel.begin_batch();
    for id in 0..count as u64 {
        let m = framed(&n, &payload(id, 1024));
        n.kernel.handle_datagram(now, n.device, NodeId(3), m);
    }
    n.kernel.end_batch(now);
    let (up, down) = drain(&mut n);
    assert_eq!(up.len(), count);
    assert!(down.len() >= 3, "{} datagrams", down.len());
    let mut ids = Vec::new();
    for (_, d) in &down {
        assert!(d.len() - 2 <= BATCH_MAX_BYTES, "{} bytes", d.len());
        ids.extend(messages(d).iter().map(|m| m.message_id));
    }
    assert_eq!(ids, (0..count as u64).collect::<Vec<_>>());
}

#[test]
fn a_received_batch_is_handled_message_by_message_and_a_damaged_one_not_at_all() {
    let mut n = node(5, 1, vec![Arc::new(FixedTree::below(3, &[])), store()], 1);
    let now = n.now;
    let (a, b) = (payload(1, 40), payload(2, 40));
    let batch = encode_batch(&[&a, &b]);
    let m = framed(&n, &batch);
    n.kernel.handle_datagram(now, n.device, NodeId(3), m);
    let (up, _) = drain(&mut n);
    assert_eq!(up.len(), 2, "both payloads delivered");
    assert_eq!(counter(&n, "store.batches_received"), 1);
    let mut damaged = encode_batch(&[&payload(3, 40), &payload(4, 40)]);
    damaged.push(0);
    let m = framed(&n, &damaged);
    n.kernel.handle_datagram(now, n.device, NodeId(3), m);
    let (up, _) = drain(&mut n);
    assert!(up.is_empty(), "nothing of a damaged batch is handed up");
    assert_eq!(counter(&n, "store.malformed"), 1);
}

#[test]
fn batch_vectors_decode_encode_and_refuse() {
    let all = vectors("messagestore_batch");
    assert!(all.len() >= 6);
    for v in all {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        let got = decode_batch(&bytes);
        if v.get("error").is_some() {
            assert!(got.is_none(), "{name}: decoded {got:?}");
            continue;
        }
        let ranges = got.unwrap_or_else(|| panic!("{name}: refused"));
        let ids: Vec<u64> = ranges
            .iter()
            .map(|r| decode(&bytes[r.clone()]).unwrap().message_id)
            .collect();
        let want: Vec<u64> = v["message_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(ids, want, "{name}");
        let parts: Vec<&[u8]> = ranges.iter().map(|r| &bytes[r.clone()]).collect();
        assert_eq!(encode_batch(&parts), bytes, "{name}: re-encoded");
    }
}
