//! The fifo layer over a device, driven through the kernel: the shared hex vectors, ordering,
//! duplicate and late-copy suppression, per-sender and per-channel sequences.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{hex, vectors};

use viastack_kernel::event::SENDABLE;
use viastack_kernel::layers::Device;
use viastack_kernel::{
    ChannelId, Dest, Direction, Event, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId,
    Output, Qos, Sendable, SessionId,
};
use viastack_protocols::fifo::Fifo;

struct Node {
    kernel: Kernel,
    channels: Vec<ChannelId>,
    device: SessionId,
}

/// A node with `n` channels over one shared device session, each with its own fifo session.
fn node(n: usize) -> Node {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let fifo: LayerRef = Arc::new(Fifo::new("fifo"));
    let qos = Qos::new("q", vec![dev.clone(), fifo]).unwrap();
    let mut kernel = Kernel::new(KernelConfig {
        node: NodeId(1),
        ..KernelConfig::default()
    });
    let device = kernel.create_session(&dev);
    let mut channels = vec![];
    for i in 0..n {
        let ch = kernel.create_channel(format!("c{i}"), &qos);
        kernel.cursor(ch).unwrap().set_session(device).unwrap();
        kernel.start_channel(ch, Instant::ZERO).unwrap();
        channels.push(ch);
    }
    Node {
        kernel,
        channels,
        device,
    }
}

fn receive(node: &mut Node, from: u32, bytes: Vec<u8>) -> Vec<(ChannelId, NodeId, Vec<u8>)> {
    node.kernel.handle_datagram(
        Instant::ZERO,
        node.device,
        NodeId(from),
        Message::from_wire(bytes),
    );
    let mut out = vec![];
    while let Some(o) = node.kernel.poll_output() {
        if let Output::Deliver(e) = o {
            if let Some(s) = e.sendable_ref() {
                out.push((e.channel(), s.source, s.message.as_slice().to_vec()));
            }
        }
    }
    out
}

fn frame(channel: u16, seq: u64, payload: &[u8]) -> Vec<u8> {
    framed(channel, 7, seq, payload)
}

fn framed(channel: u16, epoch: u32, seq: u64, payload: &[u8]) -> Vec<u8> {
    streamed(channel, 0, epoch, seq, payload)
}

fn streamed(channel: u16, stream: u8, epoch: u32, seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = channel.to_be_bytes().to_vec();
    v.push(stream);
    v.extend_from_slice(&epoch.to_be_bytes());
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

#[test]
fn shared_vectors_decode_or_are_counted() {
    for v in &vectors("fifo") {
        let name = v["name"].as_str().unwrap();
        let mut n = node(4);
        let got = receive(&mut n, 7, hex(v["hex"].as_str().unwrap()));
        if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
            assert!(got.is_empty(), "{name}: delivered {got:?}");
            assert_eq!(
                n.kernel.counters().get(err),
                Some(&1),
                "{name}: {:?}",
                n.kernel.counters()
            );
        } else {
            assert_eq!(got.len(), 1, "{name}");
            let (ch, src, payload) = &got[0];
            assert_eq!(ch.0 as u64, v["channel"].as_u64().unwrap(), "{name}");
            assert_eq!(*src, NodeId(7), "{name}");
            assert_eq!(*payload, hex(v["payload_hex"].as_str().unwrap()), "{name}");
            // Sending the same payload as the vector's seq-th message reproduces its bytes.
            let seq = v["seq"].as_u64().unwrap();
            let broadcast = v["stream"].as_u64() == Some(1);
            if seq < 4 {
                let mut m = node(4);
                let mut last = vec![];
                for _ in 0..=seq {
                    m.kernel
                        .inject(
                            Instant::ZERO,
                            Event::sendable(
                                SENDABLE.id(),
                                Direction::Down,
                                *ch,
                                Sendable::new(
                                    NodeId(1),
                                    if broadcast {
                                        Dest::Broadcast
                                    } else {
                                        Dest::Node(NodeId(7))
                                    },
                                    Message::from_payload(payload),
                                ),
                            ),
                        )
                        .unwrap();
                    while let Some(o) = m.kernel.poll_output() {
                        if let Output::Transmit(t) = o {
                            last = t.message.as_slice().to_vec();
                        }
                    }
                }
                // The epoch (bytes 3..7) is drawn at random by the sender; the rest must match.
                let want = hex(v["hex"].as_str().unwrap());
                assert_eq!(last.len(), want.len(), "{name}: encoding");
                assert_eq!(last[..3], want[..3], "{name}: channel tag and stream");
                assert_eq!(last[7..], want[7..], "{name}: sequence and payload");
                assert_ne!(last[3..7], [0, 0, 0, 0], "{name}: epochs are non-zero");
            }
        }
    }
}

#[test]
fn late_and_duplicate_copies_are_dropped_gaps_counted() {
    let mut n = node(1);
    let arrivals = [0u64, 1, 1, 3, 2, 4, 0, 5];
    let mut delivered = vec![];
    for seq in arrivals {
        for (_, _, p) in receive(&mut n, 2, frame(0, seq, &[seq as u8])) {
            delivered.push(p[0]);
        }
    }
    assert_eq!(delivered, vec![0, 1, 3, 4, 5]);
    let c = n.kernel.counters();
    assert_eq!(c.get("fifo.stale"), Some(&3), "{c:?}"); // 1 again, 2 after 3, 0 again
    assert_eq!(c.get("fifo.gap"), Some(&1), "{c:?}"); // 2 skipped
}

#[test]
fn sequences_are_per_sender_and_per_channel() {
    let mut n = node(2);
    // Sender 2 on channel 0 and sender 3 on channel 0 and sender 2 on channel 1 each start at 0.
    assert_eq!(receive(&mut n, 2, frame(0, 0, b"a")).len(), 1);
    assert_eq!(receive(&mut n, 3, frame(0, 0, b"b")).len(), 1);
    assert_eq!(receive(&mut n, 2, frame(1, 0, b"c")).len(), 1);
    assert_eq!(
        receive(&mut n, 2, frame(0, 0, b"a")).len(),
        0,
        "a duplicate"
    );
    // Sending numbers each (channel, destination) from zero.
    let mut seqs = vec![];
    for (ch, dst) in [(0usize, 5u32), (0, 5), (0, 6), (1, 5)] {
        let channel = n.channels[ch];
        n.kernel
            .inject(
                Instant::ZERO,
                Event::sendable(
                    SENDABLE.id(),
                    Direction::Down,
                    channel,
                    Sendable::new(NodeId(1), Dest::Node(NodeId(dst)), Message::new()),
                ),
            )
            .unwrap();
        while let Some(o) = n.kernel.poll_output() {
            if let Output::Transmit(t) = o {
                let b = t.message.as_slice();
                seqs.push(u64::from_be_bytes(b[7..15].try_into().unwrap()));
            }
        }
    }
    assert_eq!(seqs, vec![0, 1, 0, 0]);
}

#[test]
fn broadcasts_and_unicasts_of_one_sender_are_ordered_apart() {
    let mut n = node(1);
    // Sender 2 interleaves its unicasts (numbered 0, 1, 2) and broadcasts (0, 1).
    let arrivals = [(0u8, 0u64), (1, 0), (0, 1), (1, 1), (0, 2)];
    let mut delivered = 0;
    for (stream, seq) in arrivals {
        delivered += receive(&mut n, 2, streamed(0, stream, 9, seq, b"x")).len();
    }
    assert_eq!(delivered, 5, "{:?}", n.kernel.counters());
    assert!(!n.kernel.counters().contains_key("fifo.stale"));
}

#[test]
fn a_restarted_sender_is_heard_again_and_its_old_copies_are_not() {
    let mut n = node(1);
    let got = |n: &mut Node, epoch, seq| receive(n, 2, framed(0, epoch, seq, &[seq as u8])).len();
    assert_eq!(got(&mut n, 100, 0), 1);
    assert_eq!(got(&mut n, 100, 1), 1);
    assert_eq!(got(&mut n, 100, 2), 1);
    // The sender restarts: a new epoch, numbering from 0 again.
    assert_eq!(got(&mut n, 200, 0), 1, "heard again after a restart");
    assert_eq!(got(&mut n, 200, 1), 1);
    // A late copy from the old incarnation is dropped and does not reset the stream.
    assert_eq!(got(&mut n, 100, 3), 0);
    assert_eq!(got(&mut n, 200, 2), 1);
    assert_eq!(got(&mut n, 200, 1), 0, "stale within the new epoch");
    let c = n.kernel.counters();
    assert_eq!(c.get("fifo.peer_restarted"), Some(&1), "{c:?}");
    assert_eq!(c.get("fifo.stale_epoch"), Some(&1), "{c:?}");
    assert_eq!(c.get("fifo.stale"), Some(&1), "{c:?}");
}

#[test]
fn arbitrary_datagrams_never_panic_and_are_accounted() {
    // A deterministic stream of random-looking datagrams (xorshift), lengths 0..40.
    let mut n = node(2);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut total = 0u64;
    for _ in 0..5_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 40) as usize;
        let mut bytes: Vec<u8> = (0..len)
            .map(|i| (x >> (i % 8 * 8)) as u8 ^ i as u8)
            .collect();
        if len >= 2 && !x.is_multiple_of(4) {
            // Mostly valid channel tags, so the fifo header decoder is exercised too.
            bytes[0] = 0;
            bytes[1] = (x % 3) as u8;
        }
        total += 1;
        receive(&mut n, (x % 5) as u32, bytes);
    }
    let c = n.kernel.counters();
    let dropped: u64 = [
        "device.truncated",
        "device.unknown_channel",
        "fifo.truncated",
        "fifo.stale",
    ]
    .iter()
    .map(|k| c.get(*k).copied().unwrap_or(0))
    .sum();
    let delivered = n
        .kernel
        .session::<viastack_kernel::layers::DeviceSession>(n.device)
        .unwrap()
        .received;
    assert!(dropped > 0 && delivered > 0, "{c:?}");
    // Every datagram was either launched up by the device or dropped by it with a reason.
    assert_eq!(
        delivered
            + c.get("device.truncated").copied().unwrap_or(0)
            + c.get("device.unknown_channel").copied().unwrap_or(0),
        total
    );
}
