//! The compress layer through a real kernel: the shared hex vectors, exact encoding, round trips
//! of many sizes, bounded decompression.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use viastack_kernel::LayerRef;
use viastack_protocols::compress::{Compress, Config};

fn compress_node(id: u32) -> Node {
    let l: LayerRef = Arc::new(Compress::new("compress", Config::default()));
    node(id, 0, vec![l], 2)
}

#[test]
fn shared_vectors_decode_or_are_counted_and_encode() {
    for v in vectors("compress") {
        play(&v, compress_node(1));
        if v.get("encodes").and_then(|e| e.as_bool()) == Some(true) {
            let mut n = compress_node(1);
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
fn payloads_of_many_sizes_round_trip_exactly() {
    let mut a = compress_node(1);
    let mut b = compress_node(2);
    let mut x: u64 = 1;
    for size in [0usize, 1, 100, 255, 256, 257, 1000, 4096, 65_536, 1 << 20] {
        for kind in 0..3 {
            let payload: Vec<u8> = (0..size)
                .map(|i| match kind {
                    0 => (i % 251) as u8,
                    1 => {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    }
                    _ => (i / 100) as u8,
                })
                .collect();
            let sent = send(&mut a, 0, Some(2), &payload).pop().unwrap();
            assert!(
                sent.len() <= payload.len() + 3,
                "size {size} kind {kind}: grew"
            );
            let got = receive(&mut b, 1, sent);
            assert_eq!(got.len(), 1, "size {size} kind {kind}");
            assert!(got[0].2 == payload, "size {size} kind {kind}: bytes differ");
        }
    }
    assert!(counter(&a, "compress.compressed") > 0);
    assert!(counter(&a, "compress.incompressible") > 0);
}

#[test]
fn arbitrary_blocks_never_panic() {
    let mut n = compress_node(1);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..5_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 60) as usize;
        let mut bytes: Vec<u8> = (0..len)
            .map(|i| (x >> (i % 8 * 8)) as u8 ^ i as u8)
            .collect();
        if len >= 7 {
            bytes[0] = 0;
            bytes[1] = 0;
            bytes[2] = 1;
            bytes[3] = 0;
            bytes[4] = 0;
            bytes[5] &= 0x03;
        }
        receive(&mut n, 7, bytes);
    }
    assert!(
        counter(&n, "compress.corrupt") > 0,
        "{:?}",
        n.kernel.counters()
    );
}
