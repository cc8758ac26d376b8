//! The dedup layer through a real kernel: the shared hex vectors, encoding, copies dropped,
//! per-stream numbering, bounded windows and sources.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::*;
use viastack_kernel::LayerRef;
use viastack_protocols::dedup::{Config, Dedup, DedupSession};

fn dedup_node(id: u32, config: Config) -> Node {
    let l: LayerRef = Arc::new(Dedup::new("dedup", config));
    node(id, 0, vec![l], 2)
}

#[test]
fn shared_vectors_decode_or_are_counted_and_encode() {
    for v in vectors("dedup") {
        let name = v["name"].as_str().unwrap();
        play(&v, dedup_node(1, Config::default()));
        // Sending the payload as the id-th message of its stream reproduces the vector's bytes
        // (except the random epoch).
        let Some(id) = v.get("id").and_then(|i| i.as_u64()) else {
            continue;
        };
        if id > 4 || v.get("before").is_some() {
            continue;
        }
        let mut n = dedup_node(1, Config::default());
        let ch = v["channel"].as_u64().unwrap() as usize;
        let to = (v["stream"].as_u64().unwrap() == 0).then_some(7);
        let payload = hex(v["payload_hex"].as_str().unwrap());
        let mut last = vec![];
        for _ in 0..=id {
            last = send(&mut n, ch, to, &payload).pop().unwrap();
        }
        let want = hex(v["hex"].as_str().unwrap());
        assert_eq!(last.len(), want.len(), "{name}");
        assert_eq!(last[..3], want[..3], "{name}: channel tag and stream");
        assert_eq!(last[7..], want[7..], "{name}: id and payload");
        assert_ne!(last[3..7], [0, 0, 0, 0], "{name}: epochs are non-zero");
    }
}

#[test]
fn copies_are_dropped_reordering_is_not() {
    let mut a = dedup_node(1, Config::default());
    let mut b = dedup_node(2, Config::default());
    let sent: Vec<Vec<u8>> = (0..6u8)
        .map(|i| send(&mut a, 0, Some(2), &[i]).pop().unwrap())
        .collect();
    let arrivals = [0usize, 2, 1, 1, 0, 5, 3, 3, 4, 5];
    let mut delivered = vec![];
    for i in arrivals {
        for (_, _, p) in receive(&mut b, 1, sent[i].clone()) {
            delivered.push(p[0]);
        }
    }
    assert_eq!(
        delivered,
        vec![0, 2, 1, 5, 3, 4],
        "each once, in arrival order"
    );
    assert_eq!(counter(&b, "dedup.duplicate"), 4);
    // Broadcasts are numbered apart from unicasts: id 0 again, not a duplicate.
    let bc = send(&mut a, 0, None, b"all").pop().unwrap();
    assert_eq!(receive(&mut b, 1, bc).len(), 1);
}

#[test]
fn windows_and_sources_are_bounded() {
    let config = Config {
        window: 64,
        max_sources: 3,
    };
    let mut a = dedup_node(1, config);
    let mut b = dedup_node(2, config);
    let sent: Vec<Vec<u8>> = (0..100u8)
        .map(|i| send(&mut a, 0, Some(2), &[i]).pop().unwrap())
        .collect();
    assert_eq!(receive(&mut b, 1, sent[99].clone()).len(), 1);
    assert_eq!(
        receive(&mut b, 1, sent[36].clone()).len(),
        1,
        "99 - 36 < 64"
    );
    assert!(
        receive(&mut b, 1, sent[35].clone()).is_empty(),
        "99 - 35 = 64"
    );
    assert_eq!(counter(&b, "dedup.too_old"), 1);
    // Ten senders through a table of three: evictions counted, memory bounded.
    for src in 10..20 {
        assert_eq!(receive(&mut b, src, sent[0].clone()).len(), 1);
    }
    assert_eq!(counter(&b, "dedup.evicted"), 8, "{:?}", b.kernel.counters());
    let s = b.kernel.channel_sessions(b.channels[0])[1].unwrap();
    assert_eq!(b.kernel.session::<DedupSession>(s).unwrap().tracked(), 3);
}

#[test]
fn arbitrary_datagrams_never_panic() {
    let mut n = dedup_node(1, Config::default());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..5_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 30) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|i| (x >> (i % 8 * 8)) as u8).collect();
        if len >= 3 {
            bytes[0] = 0;
            bytes[1] = (x % 2) as u8;
            bytes[2] = (x % 3) as u8;
        }
        receive(&mut n, (x % 5) as u32, bytes);
    }
    assert!(counter(&n, "dedup.truncated") > 0);
}
