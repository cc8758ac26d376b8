//! The encrypt layer through a real kernel: the shared hex vectors (checked against an
//! independent ChaCha20-Poly1305 when they were made), round trips between nodes, rejection of
//! forged, modified and replayed packets, bounded replay state.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use viastack_kernel::{Instant, LayerRef, NodeId};
use viastack_protocols::encrypt::{self, Config, Encrypt};

fn key() -> [u8; 32] {
    encrypt::parse_key(vectors_doc()["key"].as_str().unwrap()).unwrap()
}

fn vectors_doc() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/encrypt.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn enc_node(id: u32, seed: u64, config: Config) -> Node {
    let l: LayerRef = Arc::new(Encrypt::new("encrypt", config));
    node(id, seed, vec![l], 2)
}

#[test]
fn shared_vectors_decrypt_or_are_counted() {
    let doc = vectors_doc();
    assert_eq!(
        to_hex(&encrypt::subkey(&key(), NodeId(7))),
        doc["subkey_source_7"].as_str().unwrap()
    );
    for v in vectors("encrypt") {
        play(&v, enc_node(1, 0, Config::new(key())));
    }
}

#[test]
fn the_subkey_derivation_is_hchacha20() {
    // draft-irtf-cfrg-xchacha-03 §2.2.1 test vector.
    let key: [u8; 32] = core::array::from_fn(|i| i as u8);
    let input = hex("000000090000004a0000000031415927");
    let out =
        chacha20::hchacha::<chacha20::cipher::consts::U10>((&key).into(), input.as_slice().into());
    assert_eq!(
        to_hex(&out),
        "82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc"
    );
}

#[test]
fn nodes_sharing_the_key_talk_and_every_attack_is_counted() {
    let mut a = enc_node(1, 11, Config::new(key()));
    let mut b = enc_node(2, 22, Config::new(key()));
    let sent: Vec<Vec<u8>> = (0..5u8)
        .map(|i| {
            send(&mut a, i as usize % 2, Some(2), &[i; 40])
                .pop()
                .unwrap()
        })
        .collect();
    // Ciphertext: the payload does not appear on the wire.
    assert!(!sent[0].windows(40).any(|w| w == [0u8; 40]));
    assert_eq!(sent[0].len(), 2 + 12 + 40 + 16);
    for (i, d) in sent.iter().enumerate() {
        let got = receive(&mut b, 1, d.clone());
        assert_eq!(got.len(), 1, "message {i}");
        assert_eq!(got[0].2, vec![i as u8; 40]);
        assert_eq!(got[0].0, b.channels[i % 2]);
    }
    // Replays of each, in any order.
    for d in sent.iter().rev() {
        assert!(receive(&mut b, 1, d.clone()).is_empty());
    }
    assert_eq!(counter(&b, "encrypt.replay"), 5);
    // Every single-bit flip past the channel tag fails authentication.
    let fresh = send(&mut a, 0, Some(2), b"fresh").pop().unwrap();
    for bit in 16..fresh.len() * 8 {
        let mut bad = fresh.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(receive(&mut b, 1, bad).is_empty(), "bit {bit}");
    }
    // A flipped counter bit may name a counter already seen (5 → 4, 5 → 1): rejected as a
    // replay before authentication is even tried.
    assert_eq!(
        counter(&b, "encrypt.bad_tag") + counter(&b, "encrypt.replay") - 5,
        (fresh.len() as u64 - 2) * 8
    );
    assert_eq!(counter(&b, "encrypt.replay") - 5, 2);
    // ... and the genuine packet is still accepted afterwards: forgeries changed no state.
    assert_eq!(receive(&mut b, 1, fresh).len(), 1);
    // Another key: nothing gets through.
    let mut other = enc_node(3, 33, Config::new([9; 32]));
    let forged = send(&mut other, 0, Some(2), b"x").pop().unwrap();
    assert!(receive(&mut b, 3, forged).is_empty());
}

#[test]
fn a_restarted_sender_is_heard_and_its_old_packets_are_not() {
    let mut b = enc_node(2, 0, Config::new(key()));
    let mut a = enc_node(1, 5, Config::new(key()));
    let old: Vec<Vec<u8>> = (0..3u8)
        .map(|i| send(&mut a, 0, Some(2), &[i]).pop().unwrap())
        .collect();
    assert_eq!(receive(&mut b, 1, old[0].clone()).len(), 1);
    // Same seed, later time: a new salt even though the generator starts over.
    let mut a2 = enc_node(1, 5, Config::new(key()));
    a2.now = Instant::from_millis(1500);
    let new = send(&mut a2, 0, Some(2), b"new").pop().unwrap();
    assert_ne!(new[2..6], old[0][2..6], "a new salt");
    assert_eq!(receive(&mut b, 1, new.clone()).len(), 1);
    assert_eq!(counter(&b, "encrypt.peer_restarted"), 1);
    assert!(receive(&mut b, 1, old[1].clone()).is_empty());
    assert_eq!(counter(&b, "encrypt.stale_salt"), 1);
    assert!(receive(&mut b, 1, new).is_empty());
    assert_eq!(counter(&b, "encrypt.replay"), 1);
}

#[test]
fn replay_state_is_bounded() {
    let config = Config {
        key: key(),
        replay_window: 64,
        max_peers: 2,
    };
    let mut b = enc_node(2, 0, config.clone());
    for src in 10..16u32 {
        let mut s = enc_node(src, u64::from(src), config.clone());
        let d = send(&mut s, 0, Some(2), b"hi").pop().unwrap();
        assert_eq!(receive(&mut b, src, d).len(), 1);
    }
    assert_eq!(counter(&b, "encrypt.evicted"), 4);
    let mut s = enc_node(20, 20, config);
    let sent: Vec<Vec<u8>> = (0..70)
        .map(|_| send(&mut s, 0, Some(2), b"m").pop().unwrap())
        .collect();
    assert_eq!(receive(&mut b, 20, sent[69].clone()).len(), 1);
    assert_eq!(receive(&mut b, 20, sent[6].clone()).len(), 1, "69 - 6 < 64");
    assert!(receive(&mut b, 20, sent[5].clone()).is_empty());
    assert_eq!(counter(&b, "encrypt.too_old"), 1);
}

#[test]
fn arbitrary_datagrams_never_panic() {
    let mut n = enc_node(1, 0, Config::new(key()));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..3_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 70) as usize;
        let mut bytes: Vec<u8> = (0..len)
            .map(|i| (x >> (i % 8 * 8)) as u8 ^ i as u8)
            .collect();
        if len >= 2 {
            bytes[0] = 0;
            bytes[1] = (x % 2) as u8;
        }
        assert!(receive(&mut n, 7, bytes).is_empty());
    }
    assert!(counter(&n, "encrypt.bad_tag") > 0);
    assert!(counter(&n, "encrypt.truncated") > 0);
}
