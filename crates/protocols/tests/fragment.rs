//! The fragment layer over a device, driven through the kernel: the shared hex vectors,
//! splitting and reassembly in any order, the reassembly timeout and the memory bound under a
//! flood of first fragments; over a path that promises reliable FIFO delivery (a ghost layer
//! standing in for `reliable-fifo`), no timer, and a bound that refuses and tells the sender.
#![allow(clippy::unwrap_used)]

mod harness;

use std::sync::Arc;

use harness::{hex, node, Node};
use viastack_kernel::layers::Ghost;
use viastack_kernel::{Delivery, Dest, Duration, Instant, LayerRef, NodeId, Tag};
use viastack_protocols::fragment::{Config, Fragment, FragmentSession, HEADER_LEN};

fn fragmenting(id: u32, config: Config) -> Node {
    let layer: LayerRef = Arc::new(Fragment::new("fragment", config));
    node(id, vec![layer], 2)
}

/// A node whose fragment layer sits over a path promising reliable FIFO delivery.
fn reliably_fragmenting(id: u32, config: Config) -> Node {
    let path: LayerRef = Arc::new(Ghost::promising("reliable", Delivery::RELIABLE_FIFO));
    let layer: LayerRef = Arc::new(Fragment::new("fragment", config));
    node(id, vec![path, layer], 2)
}

fn with_mtu(mtu: usize) -> Config {
    Config {
        mtu,
        ..Config::default()
    }
}

fn session(n: &Node) -> &FragmentSession {
    let top = *n.sessions[0].last().unwrap();
    n.kernel.session::<FragmentSession>(top).unwrap()
}

#[test]
fn shared_vectors_decode_encode_or_are_counted() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/fragment.json"
    ))
    .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let datagrams: Vec<Vec<u8>> = match v.get("fragments") {
            Some(f) => f
                .as_array()
                .unwrap()
                .iter()
                .map(|h| hex(h.as_str().unwrap()))
                .collect(),
            None => vec![hex(v["hex"].as_str().unwrap())],
        };
        let mut n = fragmenting(1, Config::default());
        let mut delivered = vec![];
        for d in &datagrams {
            delivered.extend(n.receive(7, d.clone()).delivered);
        }
        if let Some(err) = v["error"].as_str() {
            assert!(delivered.is_empty(), "{name}");
            assert_eq!(n.counter(err), 1, "{name}: {:?}", n.kernel.counters());
            continue;
        }
        let payload = hex(v["payload_hex"].as_str().unwrap());
        assert_eq!(delivered.len(), 1, "{name}");
        assert_eq!(delivered[0].2, payload, "{name}");
        assert_eq!(
            delivered[0].0,
            n.channels[v["channel"].as_u64().unwrap() as usize],
            "{name}"
        );
        if let Some(c) = v["counter"].as_str() {
            assert_eq!(n.counter(c), 1, "{name}");
        }
        // Sending the payload with the vector's MTU produces exactly its fragments.
        if let Some(mtu) = v["mtu"].as_u64() {
            let mut s = fragmenting(1, with_mtu(mtu as usize));
            let ch = v["channel"].as_u64().unwrap() as usize;
            let sent = s.send(ch, Dest::Node(NodeId(7)), &payload);
            let wire: Vec<Vec<u8>> = sent.transmits.into_iter().map(|t| t.1).collect();
            // The message id (bytes 3..7, after the channel tag and the type byte) starts at
            // random: the fragments share one id, and the rest is the vector's bytes.
            let ids: Vec<&[u8]> = wire.iter().map(|d| &d[3..7]).collect();
            assert!(ids.windows(2).all(|w| w[0] == w[1]), "{name}: one id");
            let masked = |d: &Vec<u8>| [&d[..3], &d[7..]].concat();
            assert_eq!(
                wire.iter().map(masked).collect::<Vec<_>>(),
                datagrams.iter().map(masked).collect::<Vec<_>>(),
                "{name}: encoding"
            );
        }
    }
}

#[test]
fn split_and_reassembled_in_any_order() {
    let mut a = fragmenting(1, with_mtu(100));
    let mut b = fragmenting(2, with_mtu(100));
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for len in [0usize, 1, 99, 100, 101, 250, 1000, 4097] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let mut frags: Vec<Vec<u8>> = a
            .send(0, Dest::Node(NodeId(2)), &payload)
            .transmits
            .into_iter()
            .map(|t| t.1)
            .collect();
        assert_eq!(frags.len(), len.div_ceil(100).max(1), "len {len}");
        for f in &frags {
            assert!(f.len() <= 2 + HEADER_LEN + 100, "len {len}");
        }
        // Shuffle (xorshift) and duplicate one (of a split message: a single fragment is
        // forwarded as is, duplicates included — suppressing those is reliable-fifo's job).
        for i in (1..frags.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            frags.swap(i, (x % (i as u64 + 1)) as usize);
        }
        // (a copy arriving after the message completed would start a new, incomplete one,
        // left to the timeout: the duplicate comes before the last fragment).
        if frags.len() > 1 {
            let dup = frags[0].clone();
            frags.insert(1, dup);
        }
        let mut got = vec![];
        for f in frags {
            got.extend(b.receive(1, f).delivered);
        }
        assert_eq!(got.len(), 1, "len {len}");
        assert_eq!(got[0].2, payload, "len {len}");
    }
    assert_eq!(session(&b).incomplete(), 0);
    assert_eq!(session(&b).reassembly_bytes(), 0);
}

#[test]
fn incomplete_messages_time_out() {
    let cfg = Config {
        mtu: 10,
        reassembly_timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let mut a = fragmenting(1, cfg);
    let mut b = fragmenting(2, cfg);
    let frags = a.send(0, Dest::Node(NodeId(2)), &[5u8; 30]).transmits;
    assert_eq!(frags.len(), 3);
    b.receive(1, frags[0].1.clone());
    b.advance(Instant::from_millis(1_999));
    assert_eq!(session(&b).incomplete(), 1);
    b.advance(Instant::from_millis(2_000));
    assert_eq!(session(&b).incomplete(), 0);
    assert_eq!(b.counter("fragment.timeout"), 1);
    // Its last fragments, late, start a new message that times out in turn.
    assert!(b.receive(1, frags[1].1.clone()).delivered.is_empty());
    b.advance(Instant::from_millis(5_000));
    assert_eq!(b.counter("fragment.timeout"), 2);
    assert_eq!(session(&b).reassembly_bytes(), 0);
}

#[test]
fn memory_stays_under_the_bound_under_a_flood_of_first_fragments() {
    let bound = 64 * 1024;
    let cfg = Config {
        mtu: 1000,
        reassembly_timeout: Duration::from_secs(3600),
        max_reassembly_bytes: bound,
    };
    let mut b = fragmenting(2, cfg);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for id in 0..20_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // First fragments of distinct ids, with totals from tiny to the whole bound, from
        // several sources and channels.
        let total = (x % (bound as u64 - 200)) as u32 + 2;
        let count = ((x >> 20) % 60) as u16 + 2;
        let mut d = vec![0, (id % 2) as u8, 0x11];
        d.extend_from_slice(&id.to_be_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        d.extend_from_slice(&count.to_be_bytes());
        d.extend_from_slice(&0u32.to_be_bytes());
        d.extend_from_slice(&total.to_be_bytes());
        d.push(1);
        b.receive(id % 5, d);
        let s = session(&b);
        assert!(
            s.reassembly_bytes() <= bound,
            "id {id}: {}",
            s.reassembly_bytes()
        );
    }
    assert!(
        b.counter("fragment.evicted") > 19_000,
        "{:?}",
        b.kernel.counters()
    );
    assert!(session(&b).incomplete() > 0);
}

#[test]
fn a_restarted_sender_does_not_complete_its_previous_incarnations_partials() {
    let mut b = fragmenting(2, with_mtu(100));
    let old: Vec<u8> = vec![0xaa; 250];
    let new: Vec<u8> = vec![0x55; 250];
    // The first incarnation's message: only its first fragment arrives.
    let mut a = fragmenting(1, with_mtu(100));
    let frags = a.send(0, Dest::Node(NodeId(2)), &old).transmits;
    assert_eq!(frags.len(), 3);
    assert!(b.receive(1, frags[0].1.clone()).delivered.is_empty());
    // The sender restarts (same seed, later clock) and sends another message of that size.
    let mut a = fragmenting(1, with_mtu(100));
    a.now += Duration::from_millis(10);
    let frags2 = a.send(0, Dest::Node(NodeId(2)), &new).transmits;
    assert_ne!(frags[0].1[2..6], frags2[0].1[2..6], "a fresh message id");
    let mut delivered = Vec::new();
    for f in frags2 {
        delivered.extend(b.receive(1, f.1).delivered);
    }
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].2, new, "never a mix of the two incarnations");
}

#[test]
fn over_a_reliable_path_a_partial_message_waits_for_the_layer_below_whatever_the_timer() {
    let cfg = Config {
        mtu: 10,
        reassembly_timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let mut a = reliably_fragmenting(1, cfg);
    let mut b = reliably_fragmenting(2, cfg);
    let payload: Vec<u8> = (0..30).collect();
    let frags = a.send(0, Dest::Node(NodeId(2)), &payload).transmits;
    assert_eq!(frags.len(), 3);
    b.receive(1, frags[0].1.clone());
    // A partition far longer than the timeout: the reliable layer below is still repairing.
    b.advance(Instant::from_millis(600_000));
    assert_eq!(session(&b).incomplete(), 1);
    assert_eq!(b.counter("fragment.timeout"), 0);
    let mut got = b.receive(1, frags[1].1.clone()).delivered;
    got.extend(b.receive(1, frags[2].1.clone()).delivered);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2, payload);
    assert_eq!(session(&b).reassembly_bytes(), 0);
}

#[test]
fn over_a_reliable_path_a_new_message_abandons_the_unfinished_one() {
    let mut a = reliably_fragmenting(1, with_mtu(10));
    let mut b = reliably_fragmenting(2, with_mtu(10));
    let first = a.send(0, Dest::Node(NodeId(2)), &[1u8; 25]).transmits;
    let second = a.send(0, Dest::Node(NodeId(2)), &[2u8; 25]).transmits;
    // Only the first fragment of the first message arrives: the layer below gave up on the
    // rest (and told the sender); the next message starts in order.
    b.receive(1, first[0].1.clone());
    let mut got = Vec::new();
    for f in second {
        got.extend(b.receive(1, f.1).delivered);
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2, vec![2u8; 25]);
    assert_eq!(b.counter("fragment.abandoned"), 1);
    assert_eq!(session(&b).incomplete(), 0);
}

#[test]
fn over_a_reliable_path_the_memory_bound_refuses_and_the_sender_is_told_which_message() {
    let cfg = Config {
        mtu: 100,
        max_reassembly_bytes: 1_000,
        ..Config::default()
    };
    let mut a = reliably_fragmenting(1, cfg);
    let mut b = reliably_fragmenting(2, cfg);
    let small = a.send_tagged(0, Dest::Node(NodeId(2)), &[7u8; 300], Tag(11));
    let big = a.send_tagged(0, Dest::Node(NodeId(2)), &[9u8; 5_000], Tag(12));
    let mut got = Vec::new();
    let mut back = Vec::new();
    for f in small.transmits.into_iter().chain(big.transmits) {
        let out = b.receive(1, f.1);
        got.extend(out.delivered);
        back.extend(out.transmits);
    }
    assert_eq!(
        got.len(),
        1,
        "the small message arrives, the big one is refused"
    );
    assert_eq!(got[0].2, vec![7u8; 300]);
    assert_eq!(b.counter("fragment.refused"), 1);
    assert!(session(&b).reassembly_bytes() <= 1_000);
    assert_eq!(back.len(), 1, "one REFUSED for the whole message: {back:?}");
    let out = a.receive(2, back[0].1.clone());
    assert_eq!(
        out.failures,
        vec![("SendRefused".to_string(), NodeId(2), vec![Tag(12)])]
    );
    assert_eq!(a.counter("fragment.refused_by_peer"), 1);
    // A refusal of an id this sender never used names no message (and is counted).
    let mut unknown = back[0].1.clone();
    let last = unknown.len() - 1;
    unknown[last] ^= 0xff;
    let out = a.receive(2, unknown);
    assert_eq!(
        out.failures,
        vec![("SendRefused".to_string(), NodeId(2), vec![])]
    );
    assert_eq!(a.counter("fragment.refused_unknown"), 1);
}
