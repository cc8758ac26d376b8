//! The reliable-fifo layer over a device, driven through the kernel: the shared hex vectors,
//! a two-node harness with hand-picked losses (NACK repair before the timer, RTO repair, give
//! up), peer and receiver restarts, and the memory bounds under a peer that never
//! acknowledges and under a flood of out-of-order segments.
#![allow(clippy::unwrap_used)]

mod harness;

use std::sync::Arc;

use harness::{hex, node, Node};
use viastack_kernel::{Dest, Duration, Instant, LayerRef, NodeId, Tag};
use viastack_protocols::reliable::wire::{Packet, Range};
use viastack_protocols::reliable::{Config, ReliableFifo, ReliableSession};

fn cfg() -> Config {
    Config {
        rto_initial: Duration::from_millis(100),
        rto_min: Duration::from_millis(20),
        rto_max: Duration::from_millis(400),
        max_retries: 3,
        ack_delay: Duration::from_millis(5),
        send_buffer: 16,
        send_window: 8,
        receive_window: 8,
        ..Config::default()
    }
}

fn reliable(id: u32, config: Config) -> Node {
    let layer: LayerRef = Arc::new(ReliableFifo::new("reliable-fifo", config));
    node(id, vec![layer], 2)
}

fn session(n: &Node) -> &ReliableSession {
    n.kernel
        .session::<ReliableSession>(n.sessions[0][0])
        .unwrap()
}

#[test]
fn shared_vectors_decode_encode_or_are_counted() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/reliable-fifo.json"
    ))
    .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let u = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap();
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        let mut n = reliable(1, Config::default());
        let got = n.receive(7, bytes.clone());
        let check_ack = |a: &viastack_protocols::reliable::wire::Ack| {
            assert_eq!(a.nack, v["nack"].as_bool().unwrap(), "{name}");
            assert_eq!(u64::from(a.epoch), u(v, "epoch"), "{name}");
            assert_eq!(u64::from(a.incarnation), u(v, "incarnation"), "{name}");
            assert_eq!(a.cum, u(v, "cum"), "{name}");
            assert_eq!(u64::from(a.window), u(v, "window"), "{name}");
            let ranges: Vec<Range> = v["ranges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| Range {
                    start: r[0].as_u64().unwrap(),
                    end: r[1].as_u64().unwrap(),
                })
                .collect();
            assert_eq!(a.ranges(), &ranges[..], "{name}");
        };
        let check_data = |d: &viastack_protocols::reliable::wire::Data, epoch: &str| {
            assert_eq!(u64::from(d.epoch), u(v, epoch), "{name}");
            assert_eq!(u64::from(d.to), u(v, "to"), "{name}");
            assert_eq!(d.seq, u(v, "seq"), "{name}");
            assert_eq!(d.first, u(v, "first"), "{name}");
        };
        let mut m = viastack_kernel::Message::from_wire(bytes[2..].to_vec());
        match v["kind"].as_str() {
            Some("ack") => {
                // Decoded field by field, and re-encoded byte for byte.
                let Ok(Packet::Ack(a)) = Packet::parse(&mut m) else {
                    panic!("{name}: not an ACK");
                };
                check_ack(&a);
                assert_eq!(a.to_message().as_slice(), &bytes[2..], "{name}: encoding");
            }
            Some("ack_data") => {
                let Ok(Packet::AckData(a, d)) = Packet::parse(&mut m) else {
                    panic!("{name}: not an ACK+DATA");
                };
                check_ack(&a);
                check_data(&d, "data_epoch");
                // Re-encoded byte for byte: the DATA header, then the ACK in front of it.
                let mut again = viastack_kernel::Message::from_payload(m.as_slice());
                d.emit(&mut again);
                a.emit(&mut again, true);
                assert_eq!(again.as_slice(), &bytes[2..], "{name}: encoding");
            }
            Some("data") => {
                let Ok(Packet::Data(d)) = Packet::parse(&mut m) else {
                    panic!("{name}: not DATA");
                };
                check_data(&d, "epoch");
                let payload = hex(v["payload_hex"].as_str().unwrap());
                assert_eq!(m.as_slice(), &payload[..], "{name}: payload");
                // Not addressed to this (fresh) receiver: not delivered, and it introduces
                // itself with an ACK of the segment's stream that acknowledges nothing.
                assert!(got.delivered.is_empty(), "{name}");
                assert_eq!(got.transmits.len(), 1, "{name}");
                let mut intro =
                    viastack_kernel::Message::from_wire(got.transmits[0].1[2..].to_vec());
                let Ok(Packet::Ack(a)) = Packet::parse(&mut intro) else {
                    panic!("{name}: no introduction");
                };
                assert_eq!((a.epoch, a.cum), (d.epoch, d.first), "{name}");
                assert_ne!(a.incarnation, 0, "{name}");
                if d.seq == 0 && d.to == 0 {
                    // A fresh sender's first segment is the vector's bytes but for its random
                    // epoch (bytes 3..7).
                    let ch = v["channel"].as_u64().unwrap() as usize;
                    let mut fresh = reliable(1, Config::default());
                    let sent = fresh.send(ch, Dest::Node(NodeId(7)), &payload);
                    let wire = &sent.transmits[0].1;
                    assert_eq!(wire.len(), bytes.len(), "{name}");
                    assert_eq!(wire[..3], bytes[..3], "{name}: tag and type");
                    assert_eq!(wire[7..], bytes[7..], "{name}: to, seq, first, payload");
                }
            }
            _ => {}
        }
        for c in v["counts"].as_array().into_iter().flatten() {
            let c = c.as_str().unwrap();
            assert_eq!(n.counter(c), 1, "{name}: {c}: {:?}", n.kernel.counters());
        }
        if let Some(err) = v["error"].as_str() {
            assert!(got.delivered.is_empty(), "{name}");
            assert_eq!(n.counter(err), 1, "{name}: {:?}", n.kernel.counters());
        }
    }
}

/// Two nodes and the datagrams in flight between them (1 ms per hop), minus the ones a
/// filter drops.
struct Pair {
    a: Node,
    b: Node,
    b_config: Config,
    to_a: Vec<Vec<u8>>,
    to_b: Vec<Vec<u8>>,
    delivered_at_b: Vec<Vec<u8>>,
    notices_at_a: Vec<String>,
    failures_at_a: Vec<(String, NodeId, Vec<Tag>)>,
}

impl Pair {
    fn new(config: Config) -> Pair {
        Pair {
            a: reliable(1, config),
            b: reliable(2, config),
            b_config: config,
            to_a: vec![],
            to_b: vec![],
            delivered_at_b: vec![],
            notices_at_a: vec![],
            failures_at_a: vec![],
        }
    }

    fn note(&mut self, o: harness::Out) {
        self.notices_at_a.extend(o.notices);
        self.failures_at_a.extend(o.failures);
        self.to_b.extend(o.transmits.into_iter().map(|t| t.1));
    }

    fn send(&mut self, payload: &[u8]) {
        let o = self.a.send(0, Dest::Node(NodeId(2)), payload);
        self.note(o);
    }

    /// Exchanges datagrams and fires timers up to `until`; `drop(towards_b, datagram)` says
    /// which datagrams are lost.
    fn run(&mut self, until: Instant, mut drop: impl FnMut(bool, &[u8]) -> bool) {
        loop {
            if self.to_a.is_empty() && self.to_b.is_empty() {
                let next = [self.a.kernel.poll_timeout(), self.b.kernel.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                match next {
                    Some(n) if n <= until => {
                        let oa = self.a.advance(n);
                        let ob = self.b.advance(n);
                        self.note(oa);
                        self.to_a.extend(ob.transmits.into_iter().map(|t| t.1));
                        continue;
                    }
                    _ => return,
                }
            }
            let t = self.a.now.max(self.b.now) + Duration::from_millis(1);
            self.a.now = t;
            self.b.now = t;
            for d in std::mem::take(&mut self.to_b) {
                if drop(true, &d) {
                    continue;
                }
                let o = self.b.receive(1, d);
                self.delivered_at_b
                    .extend(o.delivered.into_iter().map(|d| d.2));
                self.to_a.extend(o.transmits.into_iter().map(|t| t.1));
            }
            for d in std::mem::take(&mut self.to_a) {
                if drop(false, &d) {
                    continue;
                }
                let o = self.a.receive(2, d);
                self.note(o);
            }
        }
    }
}

/// The sequence number of a DATA segment (after the 2-byte channel tag).
fn seq_of(d: &[u8]) -> Option<u64> {
    (d.get(2) == Some(&0x21)).then(|| u64::from_be_bytes(d[11..19].try_into().unwrap()))
}

/// A DATA segment from the wire's fields, behind channel 0's tag.
fn data(epoch: u32, to: u32, seq: u64, first: u64, payload: &[u8]) -> Vec<u8> {
    let mut d = vec![0, 0, 0x21];
    d.extend_from_slice(&epoch.to_be_bytes());
    d.extend_from_slice(&to.to_be_bytes());
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(&first.to_be_bytes());
    d.extend_from_slice(payload);
    d
}

/// The incarnation `b` introduces itself with to a sender (node `from`) it does not know.
fn incarnation_of(b: &mut Node, from: u32) -> u32 {
    let out = b.receive(from, data(0xfeed, 0, 0, 0, b"?"));
    assert!(out.delivered.is_empty(), "not addressed to it");
    let mut m = viastack_kernel::Message::from_wire(out.transmits[0].1[2..].to_vec());
    match Packet::parse(&mut m) {
        Ok(Packet::Ack(a)) => a.incarnation,
        other => panic!("not an introduction: {other:?}"),
    }
}

/// Whether a DATA segment is addressed to a known receiver incarnation (not a probe).
fn addressed(d: &[u8]) -> bool {
    d.get(7..11).is_some_and(|to| to != [0; 4])
}

/// A filter dropping the first addressed copy of segment `seq` towards b.
fn lose_first_copy_of(seq: u64) -> impl FnMut(bool, &[u8]) -> bool {
    let mut lost = false;
    move |to_b, d| {
        if to_b && seq_of(d) == Some(seq) && addressed(d) && !lost {
            lost = true;
            return true;
        }
        false
    }
}

#[test]
fn a_gap_is_repaired_by_nack_before_the_timer() {
    let mut p = Pair::new(cfg());
    for i in 0..6u8 {
        p.send(&[i]);
    }
    p.run(Instant::from_millis(15), lose_first_copy_of(1));
    let want: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i]).collect();
    assert_eq!(p.delivered_at_b, want);
    assert!(p.b.counter("reliable-fifo.nacks_sent") >= 1);
    assert!(p.a.counter("reliable-fifo.fast_retransmits") >= 1);
    assert_eq!(
        p.a.counter("reliable-fifo.retransmits"),
        0,
        "no timeout needed"
    );
    p.run(Instant::from_millis(100), |_, _| false);
    assert_eq!(session(&p.a).pending(p.a.channels[0], NodeId(2)), 0);
}

#[test]
fn a_lost_tail_is_repaired_by_the_timer_and_the_rtt_is_measured() {
    let mut p = Pair::new(cfg());
    for i in 0..4u8 {
        p.send(&[i]);
    }
    // The last segment's first copy is lost: no later segment reveals the gap.
    p.run(Instant::from_millis(2_000), lose_first_copy_of(3));
    let want: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i]).collect();
    assert_eq!(p.delivered_at_b, want);
    assert_eq!(
        p.a.counter("reliable-fifo.retransmits"),
        1,
        "{:?}",
        p.a.kernel.counters()
    );
    assert!(session(&p.a).srtt(p.a.channels[0], NodeId(2)).is_some());
    assert!(p.notices_at_a.is_empty(), "{:?}", p.notices_at_a);
    assert_eq!(session(&p.a).pending(p.a.channels[0], NodeId(2)), 0);
}

#[test]
fn exactly_once_in_order_under_random_loss_both_ways() {
    let mut gave_up = 0;
    for seed in 0..200u64 {
        let mut p = Pair::new(Config {
            max_retries: 8,
            send_buffer: 64,
            ..cfg()
        });
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        for i in 0..40u8 {
            p.send(&[i]);
        }
        p.run(Instant::from_millis(120_000), |_, _| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % 100 < 30
        });
        let want: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i]).collect();
        if p.notices_at_a.is_empty() {
            assert_eq!(p.delivered_at_b, want, "seed {seed}");
        } else {
            // Gave up (8 timeouts in a row at 30% loss each way): an in-order prefix arrived.
            gave_up += 1;
            assert_eq!(p.notices_at_a, vec!["PeerUnreachable"], "seed {seed}");
            assert!(want.starts_with(&p.delivered_at_b), "seed {seed}");
        }
    }
    assert!(gave_up < 10, "{gave_up}");
}

#[test]
fn a_peer_that_never_acknowledges_bounds_the_send_buffer_and_is_reported() {
    let config = cfg();
    let mut a = reliable(1, config);
    let mut notices = vec![];
    for i in 0..10_000u32 {
        let o = a.send(0, Dest::Node(NodeId(2)), &i.to_be_bytes());
        notices.extend(o.notices);
        assert!(session(&a).pending(a.channels[0], NodeId(2)) <= config.send_buffer);
    }
    assert_eq!(a.counter("reliable-fifo.refused"), 10_000 - 16);
    assert_eq!(
        notices.iter().filter(|n| *n == "SendRefused").count(),
        10_000 - 16
    );
    // Timeouts: after max_retries retransmissions without progress, the peer is given up.
    let mut notices = vec![];
    for ms in (0..30_000).step_by(10) {
        notices.extend(a.advance(Instant::from_millis(ms)).notices);
    }
    assert_eq!(notices, vec!["PeerUnreachable".to_string()]);
    assert_eq!(a.counter("reliable-fifo.retransmits"), 3);
    assert_eq!(a.counter("reliable-fifo.dropped_unreachable"), 16);
    assert_eq!(session(&a).pending(a.channels[0], NodeId(2)), 0);
    // A stale timer after the reset is harmless, and the peer can be tried again.
    a.advance(Instant::from_millis(60_000));
    let o = a.send(0, Dest::Node(NodeId(2)), b"again");
    assert_eq!(o.transmits.len(), 1);
    assert_eq!(session(&a).pending(a.channels[0], NodeId(2)), 1);
    assert_eq!(a.kernel.pending_timers(), 1);
}

#[test]
fn the_reorder_ring_is_bounded_under_any_flood() {
    let config = Config {
        receive_window: 64,
        reorder_bytes: 10_000,
        ..cfg()
    };
    let mut b = reliable(2, config);
    let me = incarnation_of(&mut b, 1);
    let mut x: u64 = 0x1234_5678_9abc_def1;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let epoch = (x >> 40) as u32 % 3 + 1; // a few epochs
        let seq = x % 200 + 1; // never 0: nothing is in order
        let payload = vec![7u8; (x >> 8) as usize % 3000];
        b.receive(1, data(epoch, me, seq, 0, &payload));
        let s = session(&b);
        assert!(s.reorder_bytes(b.channels[0], NodeId(1)) <= 10_000);
        assert!(s.reorder_slots(b.channels[0], NodeId(1)) <= 64);
    }
    assert!(b.counter("reliable-fifo.reorder_full") > 0);
    assert!(b.counter("reliable-fifo.beyond_window") > 0);
}

#[test]
fn a_restarted_sender_is_heard_again_and_a_receiver_delivers_only_what_is_addressed_to_it() {
    let mut b = reliable(2, cfg());
    let me = incarnation_of(&mut b, 1);
    let got = |b: &mut Node, d| b.receive(1, d).delivered.len();
    assert_eq!(got(&mut b, data(100, me, 0, 0, b"0")), 1);
    assert_eq!(got(&mut b, data(100, me, 1, 0, b"1")), 1);
    assert_eq!(got(&mut b, data(100, me, 1, 0, b"1")), 0, "duplicate");
    assert_eq!(
        got(&mut b, data(100, me, 3, 0, b"3")),
        0,
        "buffered behind 2"
    );
    // The sender restarts: a new epoch from 0, still addressed to b (it was introduced again);
    // what was buffered of the old stream is dropped.
    assert_eq!(got(&mut b, data(200, me, 0, 0, b"0")), 1);
    assert_eq!(
        got(&mut b, data(100, me, 2, 0, b"2")),
        0,
        "late copy of the old epoch"
    );
    assert_eq!(b.counter("reliable-fifo.peer_restarted"), 1);
    assert_eq!(b.counter("reliable-fifo.reset_dropped"), 1);
    assert_eq!(b.counter("reliable-fifo.stale_epoch"), 1);
    // A restarted receiver (a fresh one) never delivers what was addressed to its previous
    // incarnation, which may have delivered it already: it introduces itself instead.
    let mut fresh = reliable(3, cfg());
    // (It boots later: incarnations mix the clock into the kernel's seeded generator, as a
    // restarted node's does.)
    fresh.now = Instant::from_millis(5);
    for seq in 0..3 {
        assert_eq!(got(&mut fresh, data(200, me, seq, 0, b"x")), 0, "seq {seq}");
    }
    assert_eq!(fresh.counter("reliable-fifo.other_incarnation"), 3);
    assert_eq!(fresh.counter("reliable-fifo.introductions"), 3);
    // A segment claiming we acknowledged what we never received is refused.
    let new = incarnation_of(&mut fresh, 1);
    assert_eq!(got(&mut fresh, data(300, new, 5, 5, b"5")), 0);
    assert_eq!(fresh.counter("reliable-fifo.inconsistent"), 1);
}

/// A pair whose receiver restarts (fresh state) while messages are in flight: the sender
/// reports those the old incarnation may have delivered, by their tags, and sends the rest to
/// the new one; no message is delivered twice, and every one is delivered or reported.
#[test]
fn a_restarted_receiver_is_detected_and_every_message_is_delivered_once_or_reported() {
    let (mut reported_some, mut reached_new) = (false, false);
    for seed in 0..100u64 {
        let mut p = Pair::new(Config {
            send_buffer: 64,
            send_window: 8,
            ..cfg()
        });
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut failures = vec![];
        for i in 0..12u8 {
            let o =
                p.a.send_tagged(0, Dest::Node(NodeId(2)), &[i], Tag(u64::from(i) + 1));
            failures.extend(o.failures);
            p.to_b.extend(o.transmits.into_iter().map(|t| t.1));
        }
        // Lose a random part of the traffic both ways, up to a random moment.
        let crash_at = 3 + x % 20;
        p.run(Instant::from_millis(crash_at), |_, _| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % 100 < 30
        });
        let before = std::mem::take(&mut p.delivered_at_b);
        // b crashes and restarts: everything in flight to it is lost with it.
        p.b = reliable(2, p.b_config);
        p.to_b.clear();
        p.to_a.clear();
        for i in 12..20u8 {
            let o =
                p.a.send_tagged(0, Dest::Node(NodeId(2)), &[i], Tag(u64::from(i) + 1));
            failures.extend(o.failures);
            p.to_b.extend(o.transmits.into_iter().map(|t| t.1));
        }
        p.run(Instant::from_millis(60_000), |_, _| false);
        failures.extend(std::mem::take(&mut p.failures_at_a));
        let reported: Vec<u8> = failures
            .iter()
            .inspect(|(name, peer, _)| {
                assert_eq!(
                    (name.as_str(), *peer),
                    ("PeerRestarted", NodeId(2)),
                    "seed {seed}"
                );
            })
            .flat_map(|(_, _, tags)| tags.iter().map(|t| (t.0 - 1) as u8))
            .collect();
        reported_some |= !reported.is_empty();
        let after = &p.delivered_at_b;
        for i in 0..20u8 {
            let n = before.iter().chain(after).filter(|d| d[..] == [i]).count();
            assert!(n <= 1, "seed {seed}: message {i} delivered {n} times");
            assert!(
                n == 1 || reported.contains(&i),
                "seed {seed}: message {i} lost silently (delivered {before:?} then {after:?}, reported {reported:?})"
            );
        }
        // In order within each incarnation.
        for d in [&before, after] {
            assert!(d.windows(2).all(|w| w[0] < w[1]), "seed {seed}: {d:?}");
        }
        // The stream went on with the new incarnation: what the sender had not transmitted
        // to the old one when it learnt of the restart reached the new one (what it had
        // transmitted, even after the crash, is reported: it cannot know when b crashed).
        assert!(
            after.contains(&vec![19]) || reported.contains(&19),
            "seed {seed}: {after:?} {reported:?}"
        );
        reached_new |= !after.is_empty();
    }
    assert!(
        reported_some,
        "no seed restarted the receiver with messages in flight"
    );
    assert!(
        reached_new,
        "no seed's stream went on with the new incarnation"
    );
}

#[test]
fn broadcasts_are_counted_and_dropped() {
    let mut a = reliable(1, cfg());
    let o = a.send(0, Dest::Broadcast, b"all");
    assert!(o.transmits.is_empty());
    assert_eq!(a.counter("reliable-fifo.broadcast"), 1);
}

/// Sends one message each way between fresh nodes, so both streams are introduced; returns
/// the nodes with nothing in flight.
fn introduced_pair(config: Config) -> (Node, Node) {
    let mut a = reliable(1, config);
    let mut b = reliable(2, config);
    for (from, to) in [(1u32, 2u32), (2, 1)] {
        let (s, r) = if from == 1 {
            (&mut a, &mut b)
        } else {
            (&mut b, &mut a)
        };
        let probe = s.send(0, Dest::Node(NodeId(to)), b"hello");
        let intro = r.receive(from, probe.transmits[0].1.clone());
        assert!(intro.delivered.is_empty(), "a probe is not delivered");
        let again = s.receive(to, intro.transmits[0].1.clone());
        let got = r.receive(from, again.transmits[0].1.clone());
        assert_eq!(got.delivered.len(), 1, "delivered once introduced");
        // Let every delayed ACK go out.
        let t = r.now + config.ack_delay;
        for t2 in r.advance(t).transmits {
            s.receive(to, t2.1);
        }
        s.now = t;
    }
    (a, b)
}

#[test]
fn request_response_acks_ride_on_the_replies() {
    let (mut a, mut b) = introduced_pair(Config::default());
    let base = |n: &Node, k: &str| n.counter(k);
    let (a_acks, b_acks) = (
        base(&a, "reliable-fifo.acks_sent"),
        base(&b, "reliable-fifo.acks_sent"),
    );
    let (a_pig, b_pig) = (
        base(&a, "reliable-fifo.acks_piggybacked"),
        base(&b, "reliable-fifo.acks_piggybacked"),
    );
    for i in 0..50u8 {
        let req = a.send(0, Dest::Node(NodeId(2)), &[i; 64]);
        assert_eq!(req.transmits.len(), 1, "round {i}");
        let got = b.receive(1, req.transmits[0].1.clone());
        assert_eq!(got.delivered.len(), 1, "round {i}");
        assert!(
            got.transmits.is_empty(),
            "round {i}: b sent an ACK of its own"
        );
        let rep = b.send(0, Dest::Node(NodeId(1)), &[i; 64]);
        assert_eq!(rep.transmits.len(), 1, "round {i}");
        // The reply is an ACK+DATA segment (after the 2-byte channel tag).
        assert_eq!(rep.transmits[0].1[2], 0x24, "round {i}");
        let back = a.receive(2, rep.transmits[0].1.clone());
        assert_eq!(back.delivered.len(), 1, "round {i}");
        assert!(
            back.transmits.is_empty(),
            "round {i}: a sent an ACK of its own"
        );
    }
    assert_eq!(a.counter("reliable-fifo.acks_sent"), a_acks);
    assert_eq!(b.counter("reliable-fifo.acks_sent"), b_acks);
    assert_eq!(b.counter("reliable-fifo.acks_piggybacked") - b_pig, 50);
    assert_eq!(a.counter("reliable-fifo.acks_piggybacked") - a_pig, 49);
    // Every request was acknowledged by the reply that carried it.
    let (ch_a, ch_b) = (a.channels[0], b.channels[0]);
    assert_eq!(session(&a).pending(ch_a, NodeId(2)), 0);
    // The last reply is acknowledged on its own once the delayed ACK is due.
    assert_eq!(session(&b).pending(ch_b, NodeId(1)), 1);
    let later = a.now + Config::default().ack_delay;
    let ack = a.advance(later);
    assert_eq!(ack.transmits.len(), 1);
    assert_eq!(a.counter("reliable-fifo.acks_sent"), a_acks + 1);
    b.receive(1, ack.transmits[0].1.clone());
    assert_eq!(session(&b).pending(ch_b, NodeId(1)), 0);
}

#[test]
fn a_stream_of_small_messages_is_still_acknowledged_at_once() {
    let (mut a, mut b) = introduced_pair(Config::default());
    let every =
        Config::default().ack_every * viastack_protocols::reliable::receiver::SMALL_SEGMENTS_FACTOR;
    let mut acks = 0;
    for i in 0..(3 * every) {
        let req = a.send(0, Dest::Node(NodeId(2)), &[1; 16]);
        let got = b.receive(1, req.transmits[0].1.clone());
        if (i + 1) % every == 0 {
            assert_eq!(got.transmits.len(), 1, "segment {i}: ACK due");
            acks += 1;
            a.receive(2, got.transmits[0].1.clone());
        } else {
            assert!(got.transmits.is_empty(), "segment {i}");
        }
    }
    assert_eq!(acks, 3);
    assert_eq!(session(&a).pending(a.channels[0], NodeId(2)), 0);
}

#[test]
fn a_stream_starts_with_probes_and_its_window_follows_the_introduction() {
    let mut a = reliable(1, cfg());
    let mut b = reliable(2, cfg());
    let mut first = vec![];
    for i in 0..6u8 {
        first.extend(a.send(0, Dest::Node(NodeId(2)), &[i]).transmits);
    }
    assert_eq!(
        first.len(),
        viastack_protocols::reliable::sender::PROBES,
        "a few probes until the receiver is known"
    );
    assert!(first.iter().all(|t| !addressed(&t.1)));
    // The first probes are lost; the last one gets through.
    let intro = b.receive(1, first[first.len() - 1].1.clone());
    assert!(intro.delivered.is_empty());
    let window = a.receive(2, intro.transmits[0].1.clone());
    assert_eq!(a.counter("reliable-fifo.introduced"), 1);
    assert_eq!(window.transmits.len(), 6, "the whole window, addressed");
    assert!(window.transmits.iter().all(|t| addressed(&t.1)));
    let mut got = vec![];
    for t in window.transmits {
        got.extend(b.receive(1, t.1).delivered.into_iter().map(|d| d.2));
    }
    assert_eq!(got, (0..6u8).map(|i| vec![i]).collect::<Vec<_>>());
}

#[test]
fn a_closing_receiver_acknowledges_what_waits_for_a_delayed_ack() {
    let (mut a, mut b) = introduced_pair(Config::default());
    // A small last message: its ACK is delayed (no ACK of its own at once).
    let req = a.send(0, Dest::Node(NodeId(2)), b"last words");
    let got = b.receive(1, req.transmits[0].1.clone());
    assert_eq!(got.delivered.len(), 1);
    assert!(got.transmits.is_empty(), "the ACK is delayed");
    let (ch_a, ch_b) = (a.channels[0], b.channels[0]);
    assert_eq!(session(&a).pending(ch_a, NodeId(2)), 1);
    // b closes before its delayed ACK is due: the close sends it.
    b.kernel.close_channel(ch_b, b.now).unwrap();
    let closing = b.drain();
    assert_eq!(closing.transmits.len(), 1, "one ACK at the close");
    assert!(closing.failures.is_empty(), "b held nothing to send");
    a.receive(2, closing.transmits[0].1.clone());
    assert_eq!(session(&a).pending(ch_a, NodeId(2)), 0, "acknowledged");
    // Nothing owed: a close sends nothing.
    a.kernel.close_channel(ch_a, a.now).unwrap();
    assert!(a.drain().transmits.is_empty());
}
