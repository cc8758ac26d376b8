//! The checksum layer over a device, driven through the kernel: the shared hex vectors, and
//! every single-bit flip of a datagram caught.
#![allow(clippy::unwrap_used)]

mod harness;

use std::sync::Arc;

use harness::{hex, node, Node};
use viastack_kernel::{Dest, LayerRef, NodeId};
use viastack_protocols::checksum::Checksum;

fn checksummed(id: u32) -> Node {
    let layer: LayerRef = Arc::new(Checksum::new("checksum"));
    node(id, vec![layer], 2)
}

#[test]
fn shared_vectors_decode_encode_or_are_counted() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/checksum.json"
    ))
    .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        let mut n = checksummed(1);
        let got = n.receive(7, bytes.clone());
        if let Some(err) = v["error"].as_str() {
            assert!(got.delivered.is_empty(), "{name}");
            assert_eq!(n.counter(err), 1, "{name}: {:?}", n.kernel.counters());
            continue;
        }
        let payload = hex(v["payload_hex"].as_str().unwrap());
        let ch = v["channel"].as_u64().unwrap() as usize;
        assert_eq!(got.delivered.len(), 1, "{name}");
        assert_eq!(got.delivered[0].2, payload, "{name}");
        assert_eq!(got.delivered[0].0, n.channels[ch], "{name}");
        // Sending the payload produces exactly the vector's bytes.
        let sent = n.send(ch, Dest::Node(NodeId(7)), &payload);
        assert_eq!(sent.transmits.len(), 1, "{name}");
        assert_eq!(sent.transmits[0].1, bytes, "{name}: encoding");
    }
}

#[test]
fn every_single_bit_flip_is_caught() {
    let mut a = checksummed(1);
    let payload: Vec<u8> = (0..200u8).collect();
    let wire = a.send(0, Dest::Node(NodeId(2)), &payload).transmits[0]
        .1
        .clone();
    let mut b = checksummed(2);
    assert_eq!(b.receive(1, wire.clone()).delivered.len(), 1);
    let mut flips = 0;
    // Every bit after the device's channel tag (a flipped tag goes to another channel's CRC).
    for bit in 16..wire.len() * 8 {
        let mut bad = wire.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(b.receive(1, bad).delivered.is_empty(), "bit {bit}");
        flips += 1;
    }
    assert_eq!(b.counter("checksum.bad"), flips);
}
