//! The bundle layer over a device, driven through the kernel: the shared hex vectors, an idle
//! message leaving at once, a batch leaving as one datagram per destination and channel within
//! `max_bytes`, order kept around a message too large to share, and the segments one ACK of
//! `reliable-fifo` releases leaving together.
#![allow(clippy::unwrap_used)]

mod harness;

use std::sync::Arc;
use std::time::Duration;

use harness::{hex, node, Node, Out};
use viastack_kernel::{Dest, Instant, LayerRef, NodeId};
use viastack_protocols::bundle::{Bundle, DEFAULT_MAX_BYTES};
use viastack_protocols::reliable::{self, ReliableFifo};

fn bundling(id: u32, max_bytes: usize) -> Node {
    let layer: LayerRef = Arc::new(Bundle::new("bundle", max_bytes));
    node(id, vec![layer], 2)
}

/// Sends every `(channel, dest, payload)` as one batch of application input; every datagram
/// it made (a message too large to share leaves during the batch, the rest at its end).
fn send_batch(n: &mut Node, sends: &[(usize, u32, Vec<u8>)]) -> Out {
    n.kernel.begin_batch();
    let mut early = vec![];
    for (ch, dest, payload) in sends {
        early.extend(n.send(*ch, Dest::Node(NodeId(*dest)), payload).transmits);
    }
    n.kernel.end_batch(n.now);
    let mut out = n.drain();
    early.append(&mut out.transmits);
    out.transmits = early;
    out
}

#[test]
fn shared_vectors_decode_encode_or_are_counted() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/bundle.json"
    ))
    .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        let mut n = bundling(1, DEFAULT_MAX_BYTES);
        let got = n.receive(7, bytes.clone());
        if let Some(err) = v["error"].as_str() {
            assert!(got.delivered.is_empty(), "{name}");
            assert_eq!(n.counter(err), 1, "{name}: {:?}", n.kernel.counters());
            continue;
        }
        let messages: Vec<Vec<u8>> = v["messages_hex"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| hex(m.as_str().unwrap()))
            .collect();
        let delivered: Vec<Vec<u8>> = got.delivered.iter().map(|d| d.2.clone()).collect();
        assert_eq!(delivered, messages, "{name}");
        assert!(got.delivered.iter().all(|d| d.1 == NodeId(7)), "{name}");
        // Sending the messages as one batch produces exactly the vector's bytes.
        let batch: Vec<_> = messages.into_iter().map(|m| (0, 7, m)).collect();
        let sent = send_batch(&mut n, &batch);
        assert_eq!(sent.transmits.len(), 1, "{name}");
        assert_eq!(sent.transmits[0].1, bytes, "{name}: encoding");
    }
}

#[test]
fn an_idle_senders_message_leaves_in_the_same_call() {
    let mut n = bundling(1, DEFAULT_MAX_BYTES);
    for i in 0..3u8 {
        let out = n.send(0, Dest::Node(NodeId(2)), &[i; 10]);
        assert_eq!(out.transmits.len(), 1, "message {i} waited");
        assert_eq!(out.transmits[0].1[2], 1, "SINGLE");
    }
    assert_eq!(n.counter("bundle.singles"), 3);
    assert_eq!(n.counter("bundle.bundles"), 0);
}

#[test]
fn a_batch_leaves_as_one_datagram_per_destination_and_channel() {
    let mut a = bundling(1, DEFAULT_MAX_BYTES);
    let mut sends = vec![];
    for i in 0..10u8 {
        sends.push((0, 2, vec![i; 20]));
        sends.push((0, 3, vec![100 + i; 20]));
        sends.push((1, 2, vec![200 + i; 5]));
    }
    let out = send_batch(&mut a, &sends);
    assert_eq!(out.transmits.len(), 3);
    assert_eq!(a.counter("bundle.bundles"), 3);
    assert_eq!(a.counter("bundle.bundled"), 30);
    let mut b = bundling(2, DEFAULT_MAX_BYTES);
    let mut per_channel = [vec![], vec![]];
    for (dest, wire) in out.transmits {
        if dest != Dest::Node(NodeId(2)) {
            continue;
        }
        for (ch, from, payload) in b.receive(1, wire).delivered {
            assert_eq!(from, NodeId(1));
            let i = b.channels.iter().position(|c| *c == ch).unwrap();
            per_channel[i].push(payload);
        }
    }
    let want0: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 20]).collect();
    let want1: Vec<Vec<u8>> = (0..10u8).map(|i| vec![200 + i; 5]).collect();
    assert_eq!(
        per_channel,
        [want0, want1],
        "in send order, on their channels"
    );
    assert_eq!(b.counter("bundle.received_bundles"), 2);
}

#[test]
fn bundles_stay_within_max_bytes_and_keep_order_around_a_large_message() {
    let max = 200;
    let mut a = bundling(1, max);
    let mut sends: Vec<_> = (0..20u8).map(|i| (0, 2, vec![i; 30])).collect();
    sends.insert(7, (0, 2, vec![0xee; 500]));
    let out = send_batch(&mut a, &sends);
    let mut b = bundling(2, max);
    let mut got = vec![];
    for (_, wire) in &out.transmits {
        // The device's 2-byte channel tag is below the bundle.
        let is_large = wire.len() > 2 + 1 + 500 - 1;
        assert!(
            is_large || wire.len() - 2 <= max,
            "{} bytes",
            wire.len() - 2
        );
        got.extend(
            b.receive(1, wire.clone())
                .delivered
                .into_iter()
                .map(|d| d.2),
        );
    }
    let want: Vec<Vec<u8>> = sends.into_iter().map(|s| s.2).collect();
    assert_eq!(got, want);
    // A bundle of six 30-byte messages takes 3 + 6 × 32 = 195 bytes: the 7 before the large
    // one leave as six and one, the large one alone, the 13 after as six, six and one.
    assert_eq!(a.counter("bundle.bundles"), 3, "{:?}", a.kernel.counters());
    assert_eq!(a.counter("bundle.bundled"), 18);
    assert_eq!(a.counter("bundle.singles"), 3);
}

#[test]
fn segments_an_ack_releases_leave_together() {
    let make = |id| {
        let config = reliable::Config {
            send_window: 4,
            ..reliable::Config::default()
        };
        let rel: LayerRef = Arc::new(ReliableFifo::new("rel", config));
        let pack: LayerRef = Arc::new(Bundle::new("bundle", DEFAULT_MAX_BYTES));
        node(id, vec![pack, rel], 1)
    };
    let mut a = make(1);
    let mut b = make(2);
    let sends: Vec<_> = (0..16u8).map(|i| (0, 2, vec![i; 40])).collect();
    let mut to_b: Vec<Vec<u8>> = send_batch(&mut a, &sends)
        .transmits
        .into_iter()
        .map(|t| t.1)
        .collect();
    let mut got = vec![];
    let mut data_datagrams = 0;
    let mut t = 0;
    while got.len() < 16 && t < 10_000 {
        let mut to_a = vec![];
        for wire in to_b.drain(..) {
            data_datagrams += 1;
            let out = b.receive(1, wire);
            got.extend(out.delivered.into_iter().map(|d| d.2));
            to_a.extend(out.transmits.into_iter().map(|t| t.1));
        }
        t += 10;
        to_a.extend(
            b.advance(Instant::ZERO + Duration::from_millis(t))
                .transmits
                .into_iter()
                .map(|t| t.1),
        );
        for wire in to_a {
            to_b.extend(a.receive(2, wire).transmits.into_iter().map(|t| t.1));
        }
        to_b.extend(
            a.advance(Instant::ZERO + Duration::from_millis(t))
                .transmits
                .into_iter()
                .map(|t| t.1),
        );
    }
    let want: Vec<Vec<u8>> = sends.into_iter().map(|s| s.2).collect();
    assert_eq!(got, want);
    assert_eq!(a.counter("rel.retransmits"), 0, "{:?}", a.kernel.counters());
    // 16 segments in windows of 4: each window one datagram, not four.
    assert!(
        data_datagrams <= 6,
        "{data_datagrams} datagrams: {:?}",
        a.kernel.counters()
    );
    assert!(
        a.counter("bundle.bundled") >= 12,
        "{:?}",
        a.kernel.counters()
    );
}

#[test]
fn the_segments_of_one_bundle_are_answered_by_one_ack() {
    let make = |id| {
        let rel: LayerRef = Arc::new(ReliableFifo::new("rel", reliable::Config::default()));
        let pack: LayerRef = Arc::new(Bundle::new("bundle", 9000));
        node(id, vec![pack, rel], 1)
    };
    let (mut a, mut b) = (make(1), make(2));
    // Introduce the two (the first segment carries no receiver incarnation yet): exchange
    // until neither has anything to say.
    let mut to_b: Vec<Vec<u8>> = a
        .send(0, Dest::Node(NodeId(2)), b"hello")
        .transmits
        .into_iter()
        .map(|t| t.1)
        .collect();
    while !to_b.is_empty() {
        let to_a: Vec<Vec<u8>> = to_b
            .drain(..)
            .flat_map(|w| b.receive(1, w).transmits)
            .map(|t| t.1)
            .collect();
        to_b = to_a
            .into_iter()
            .flat_map(|w| a.receive(2, w).transmits)
            .map(|t| t.1)
            .collect();
    }
    let acks_before = b.counter("rel.acks_sent");
    let sends: Vec<_> = (0..40u8).map(|i| (0, 2, vec![i; 30])).collect();
    let out = send_batch(&mut a, &sends);
    assert_eq!(out.transmits.len(), 1, "one bundle");
    let got = b.receive(1, out.transmits[0].1.clone());
    assert_eq!(got.delivered.len(), 40);
    assert_eq!(got.transmits.len(), 1, "one datagram back");
    assert_eq!(
        b.counter("rel.acks_sent"),
        acks_before + 1,
        "one ACK for forty segments (one is due at the 16th and at the 32nd)"
    );
}
