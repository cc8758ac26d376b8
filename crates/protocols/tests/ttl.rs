//! The ttl layer through a real kernel: the shared hex vectors, encoding, expiry.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use viastack_kernel::LayerRef;
use viastack_protocols::ttl::{Ttl, DEFAULT_TTL};

fn ttl_node(id: u32, ttl: u8) -> Node {
    let l: LayerRef = Arc::new(Ttl::new("ttl", ttl));
    node(id, 0, vec![l], 2)
}

#[test]
fn shared_vectors_decode_or_are_counted_and_encode() {
    for v in vectors("ttl") {
        play(&v, ttl_node(1, DEFAULT_TTL));
        if let Some(ttl) = v.get("ttl").and_then(|t| t.as_u64()) {
            let mut n = ttl_node(1, ttl as u8);
            let ch = v["channel"].as_u64().unwrap() as usize;
            let sent = send(
                &mut n,
                ch,
                Some(7),
                &hex(v["payload_hex"].as_str().unwrap()),
            );
            assert_eq!(
                to_hex(&sent[0]),
                to_hex(&hex(v["hex"].as_str().unwrap())),
                "{}",
                v["name"]
            );
        }
    }
}

#[test]
fn one_hop_reaches_a_peer_and_expired_messages_are_counted() {
    let mut a = ttl_node(1, 1);
    let mut b = ttl_node(2, 1);
    let sent = send(&mut a, 0, Some(2), b"x");
    assert_eq!(sent[0][2], 1);
    let got = receive(&mut b, 1, sent[0].clone());
    assert_eq!(got.len(), 1, "ttl 1 reaches a direct peer");
    // A message whose budget was used up on the way is dropped.
    let mut spent = sent[0].clone();
    spent[2] = 0;
    assert!(receive(&mut b, 1, spent).is_empty());
    assert_eq!(counter(&b, "ttl.expired"), 1);
}
