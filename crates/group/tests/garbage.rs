//! Bad input never crashes the group stack (DESIGN.md §4.6): a node running `device` +
//! `heartbeat` + `vsync` + `total-order` is fed random datagrams — random bytes, and valid
//! group packets (views, flushes, cuts, NAKs, data for views it is in and not in) with random
//! fields and random byte flips — at advancing times, with application sends between them.
//! Nothing panics, malformed packets are counted, and the node's buffers stay within their
//! bounds. The same input as the `group_stack` fuzz target, at a fixed seed.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use viastack_group::vsync::{self, VsyncSession};
use viastack_group::wire::{Cut, Member, Pdu, TotalPdu, ViewId};
use viastack_group::{TotalOrder, Vsync};
use viastack_kernel::event::SENDABLE;
use viastack_kernel::layers::Device;
use viastack_kernel::{
    Dest, Direction, Duration, Event, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId,
    Qos, Sendable, SessionId,
};
use viastack_protocols::heartbeat::{self, Heartbeat};

/// This node's epoch (drawn at start), so that random packets often name it.
static ME: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

fn epoch(rng: &mut ChaCha8Rng, node: u32) -> u32 {
    if node == 0 && rng.gen_bool(0.7) {
        ME.load(std::sync::atomic::Ordering::Relaxed)
    } else {
        rng.gen_range(1..4)
    }
}

fn member(rng: &mut ChaCha8Rng) -> Member {
    let node = rng.gen_range(0..5);
    Member {
        node: NodeId(node),
        epoch: epoch(rng, node),
    }
}

fn view(rng: &mut ChaCha8Rng) -> ViewId {
    ViewId {
        counter: rng.gen_range(0..6),
        coord: member(rng),
    }
}

fn members(rng: &mut ChaCha8Rng) -> Vec<Member> {
    let mut v = Vec::new();
    for n in 0..5u32 {
        if rng.gen_bool(0.6) {
            let epoch = epoch(rng, n);
            v.push(Member {
                node: NodeId(n),
                epoch,
            });
        }
    }
    v
}

fn digest(rng: &mut ChaCha8Rng) -> Vec<u64> {
    (0..rng.gen_range(0..6))
        .map(|_| rng.gen_range(0..40))
        .collect()
}

fn random_pdu(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let pdu = match rng.gen_range(0..9) {
        0 => Pdu::Data {
            view: view(rng),
            origin: member(rng),
            seq: rng.gen_range(1..50),
        },
        1 => Pdu::Status {
            view: view(rng),
            from: member(rng),
            digest: digest(rng),
        },
        2 => {
            let first = rng.gen_range(1..30);
            Pdu::Nak {
                view: view(rng),
                origin: NodeId(rng.gen_range(0..5)),
                first,
                last: first + rng.gen_range(0..1000),
            }
        }
        3 => Pdu::Flush {
            proposal: view(rng),
            members: members(rng),
        },
        4 => Pdu::FlushOk {
            proposal: view(rng),
            from: member(rng),
            old: view(rng),
            digest: digest(rng),
        },
        5 => Pdu::FlushNo {
            proposal: view(rng),
            from: member(rng),
            accepted: rng.gen_range(0..10),
        },
        6 => {
            let upto = digest(rng);
            let holders = upto.iter().map(|_| NodeId(rng.gen_range(0..5))).collect();
            Pdu::NewView {
                view: view(rng),
                members: members(rng),
                cuts: vec![Cut {
                    old: view(rng),
                    upto,
                    holders,
                }],
            }
        }
        7 => Pdu::Beacon {
            view: view(rng),
            members: members(rng),
        },
        _ => Pdu::Leave {
            view: view(rng),
            from: member(rng),
        },
    };
    let mut bytes = pdu.emit();
    if matches!(pdu, Pdu::Data { .. }) {
        let inner = if rng.gen_bool(0.5) {
            TotalPdu::Data {
                local: rng.gen_range(0..20),
            }
            .emit()
        } else {
            TotalPdu::Order {
                view: view(rng),
                entries: vec![(NodeId(rng.gen_range(0..5)), rng.gen_range(0..20))],
            }
            .emit()
        };
        bytes.extend_from_slice(&inner);
    }
    bytes
}

#[test]
fn random_and_mutated_packets_never_crash_the_group_stack() {
    let dev: LayerRef = Arc::new(Device::new("dev", 0));
    let fd: LayerRef = Arc::new(Heartbeat::new(
        "fd",
        NodeId(0),
        5,
        heartbeat::Config::default(),
    ));
    let config = vsync::Config {
        capacity: 16,
        ..vsync::Config::default()
    };
    let vs: LayerRef = Arc::new(Vsync::new("vs", NodeId(0), 5, config));
    let to: LayerRef = Arc::new(TotalOrder::new("to", NodeId(0), 16));
    let qos = Qos::new("q", vec![dev.clone(), fd, vs.clone(), to]).unwrap();
    let mut k = Kernel::new(KernelConfig::default());
    let device = k.create_session(&dev);
    let group: SessionId = k.create_session(&vs);
    let ch = k.create_channel("g", &qos);
    {
        let mut c = k.cursor(ch).unwrap();
        c.set_session(device).unwrap();
        c.up();
        c.up();
        c.set_session(group).unwrap();
    }
    k.start_channel(ch, Instant::ZERO).unwrap();
    let me = k.session::<VsyncSession>(group).unwrap().member();
    ME.store(me.epoch, std::sync::atomic::Ordering::Relaxed);
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    let mut now = Instant::ZERO;
    for i in 0..20_000u32 {
        now += Duration::from_micros(rng.gen_range(0..3_000));
        k.handle_timeout(now);
        let mut body = if rng.gen_bool(0.2) {
            (0..rng.gen_range(0..60)).map(|_| rng.gen()).collect()
        } else {
            random_pdu(&mut rng)
        };
        if rng.gen_bool(0.3) && !body.is_empty() {
            let at = rng.gen_range(0..body.len());
            body[at] ^= 1 << rng.gen_range(0..8);
        }
        // Device tag (channel 0), heartbeat data kind, then the group packet.
        let mut bytes = vec![0, 0, 0];
        bytes.extend_from_slice(&body);
        let from = NodeId(rng.gen_range(1..5));
        k.handle_datagram(now, device, from, Message::from_wire(bytes));
        if i % 7 == 0 {
            let s = Sendable::new(NodeId(0), Dest::Broadcast, Message::from_payload(b"app"));
            let _ = k.inject(now, Event::sendable(SENDABLE.id(), Direction::Down, ch, s));
        }
        while k.poll_output().is_some() {}
        let session = k.session::<VsyncSession>(group).unwrap();
        // Per sender at most `capacity` unstable + `capacity` ahead; a bounded queue; and a
        // previous view's store: a fixed bound, whatever the input.
        assert!(
            session.buffered() <= 16 * 2 * 5 * 2 + 16,
            "{}",
            session.buffered()
        );
    }
    let counters = k.counters();
    assert!(
        counters.get("vs.malformed").copied().unwrap_or(0) > 0,
        "{counters:?}"
    );
    // The input reached the protocol's depths: flushes run, NAKs answered, deliveries made.
    for c in [
        "vs.flushes",
        "vs.naks",
        "vs.retransmitted",
        "vs.delivered",
        "to.delivered",
    ] {
        assert!(
            counters.get(c).copied().unwrap_or(0) > 0,
            "{c}: {counters:?}"
        );
    }
}
