//! The reliable-fifo layer over a device, driven through the kernel: the shared hex vectors,
//! a two-node harness with hand-picked losses (NACK repair before the timer, RTO repair, give
//! up), peer and receiver restarts, and the memory bounds under a peer that never
//! acknowledges and under a flood of out-of-order segments.
#![allow(clippy::unwrap_used)]

mod harness;

use std::sync::Arc;

use harness::{hex, node, Node};
use viastack_kernel::{Dest, Duration, Instant, LayerRef, NodeId};
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
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        let mut n = reliable(1, Config::default());
        let got = n.receive(7, bytes.clone());
        if v["kind"] == "ack" {
            // Decoded field by field, and re-encoded byte for byte.
            let mut m = viastack_kernel::Message::from_wire(bytes[2..].to_vec());
            let Ok(Packet::Ack(a)) = Packet::parse(&mut m) else {
                panic!("{name}: not an ACK");
            };
            assert_eq!(a.nack, v["nack"].as_bool().unwrap(), "{name}");
            assert_eq!(u64::from(a.epoch), v["epoch"].as_u64().unwrap(), "{name}");
            assert_eq!(a.cum, v["cum"].as_u64().unwrap(), "{name}");
            assert_eq!(u64::from(a.window), v["window"].as_u64().unwrap(), "{name}");
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
            assert_eq!(a.to_message().as_slice(), &bytes[2..], "{name}: encoding");
        }
        if v["kind"] == "ack_data" {
            let mut m = viastack_kernel::Message::from_wire(bytes[2..].to_vec());
            let Ok(Packet::AckData(a, d)) = Packet::parse(&mut m) else {
                panic!("{name}: not an ACK+DATA");
            };
            assert_eq!(u64::from(a.epoch), v["epoch"].as_u64().unwrap(), "{name}");
            assert_eq!(a.cum, v["cum"].as_u64().unwrap(), "{name}");
            assert_eq!(u64::from(a.window), v["window"].as_u64().unwrap(), "{name}");
            assert_eq!(
                a.ranges().len(),
                v["ranges"].as_array().unwrap().len(),
                "{name}"
            );
            assert_eq!(
                u64::from(d.epoch),
                v["data_epoch"].as_u64().unwrap(),
                "{name}"
            );
            assert_eq!(d.seq, v["seq"].as_u64().unwrap(), "{name}");
            assert_eq!(d.first, v["first"].as_u64().unwrap(), "{name}");
            // Re-encoded byte for byte: the DATA header, then the ACK in front of it.
            let mut again = viastack_kernel::Message::from_payload(m.as_slice());
            d.emit(&mut again);
            a.emit(&mut again, true);
            assert_eq!(again.as_slice(), &bytes[2..], "{name}: encoding");
        }
        if let Some(c) = v["counts"].as_str() {
            assert_eq!(n.counter(c), 1, "{name}: {:?}", n.kernel.counters());
        }
        if let Some(err) = v["error"].as_str() {
            assert!(got.delivered.is_empty(), "{name}");
            assert_eq!(n.counter(err), 1, "{name}: {:?}", n.kernel.counters());
            continue;
        }
        let payload = hex(v["payload_hex"].as_str().unwrap());
        assert_eq!(got.delivered.len(), 1, "{name}");
        assert_eq!(got.delivered[0].2, payload, "{name}");
        let ch = v["channel"].as_u64().unwrap() as usize;
        assert_eq!(got.delivered[0].0, n.channels[ch], "{name}");
        if v["kind"] == "data" && v["seq"] == 0 {
            // The first message a node sends on a stream has the vector's bytes but for the
            // epoch (bytes 3..7), which is drawn at random. (A fresh node: `n` owes node 7 an
            // ACK now, which its DATA would carry.)
            let mut fresh = reliable(1, Config::default());
            let sent = fresh.send(ch, Dest::Node(NodeId(7)), &payload);
            let wire = &sent.transmits[0].1;
            assert_eq!(wire.len(), bytes.len(), "{name}");
            assert_eq!(wire[..3], bytes[..3], "{name}: tag and type");
            assert_eq!(wire[7..], bytes[7..], "{name}: seq, first, payload");
        }
    }
}

/// Two nodes and the datagrams in flight between them (1 ms per hop), minus the ones a
/// filter drops.
struct Pair {
    a: Node,
    b: Node,
    to_a: Vec<Vec<u8>>,
    to_b: Vec<Vec<u8>>,
    delivered_at_b: Vec<Vec<u8>>,
    notices_at_a: Vec<String>,
}

impl Pair {
    fn new(config: Config) -> Pair {
        Pair {
            a: reliable(1, config),
            b: reliable(2, config),
            to_a: vec![],
            to_b: vec![],
            delivered_at_b: vec![],
            notices_at_a: vec![],
        }
    }

    fn send(&mut self, payload: &[u8]) {
        let o = self.a.send(0, Dest::Node(NodeId(2)), payload);
        self.notices_at_a.extend(o.notices);
        self.to_b.extend(o.transmits.into_iter().map(|t| t.1));
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
                        self.notices_at_a.extend(oa.notices);
                        self.to_b.extend(oa.transmits.into_iter().map(|t| t.1));
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
                self.notices_at_a.extend(o.notices);
                self.to_b.extend(o.transmits.into_iter().map(|t| t.1));
            }
        }
    }
}

fn seq_of(d: &[u8]) -> Option<u64> {
    (d.get(2) == Some(&0x11)).then(|| u64::from_be_bytes(d[7..15].try_into().unwrap()))
}

/// A filter dropping the first copy of segment `seq` towards b.
fn lose_first_copy_of(seq: u64) -> impl FnMut(bool, &[u8]) -> bool {
    let mut lost = false;
    move |to_b, d| {
        if to_b && seq_of(d) == Some(seq) && !lost {
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
    let mut x: u64 = 0x1234_5678_9abc_def1;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut d = vec![0, 0, 0x11];
        d.extend_from_slice(&((x >> 40) as u32 % 3 + 1).to_be_bytes()); // a few epochs
        d.extend_from_slice(&(x % 200 + 1).to_be_bytes()); // seq, never 0: nothing is in order
        d.extend_from_slice(&1u64.to_be_bytes()); // first
        d.extend(std::iter::repeat_n(7u8, (x >> 8) as usize % 3000));
        b.receive(1, d);
        let s = session(&b);
        assert!(s.reorder_bytes(b.channels[0], NodeId(1)) <= 10_000);
        assert!(s.reorder_slots(b.channels[0], NodeId(1)) <= 64);
    }
    assert!(b.counter("reliable-fifo.reorder_full") > 0);
    assert!(b.counter("reliable-fifo.beyond_window") > 0);
}

#[test]
fn a_restarted_sender_is_heard_again_and_a_restarted_receiver_joins_midstream() {
    let data = |epoch: u32, seq: u64, first: u64| {
        let mut d = vec![0, 0, 0x11];
        d.extend_from_slice(&epoch.to_be_bytes());
        d.extend_from_slice(&seq.to_be_bytes());
        d.extend_from_slice(&first.to_be_bytes());
        d.push(seq as u8);
        d
    };
    let mut b = reliable(2, cfg());
    let got = |b: &mut Node, d| b.receive(1, d).delivered.len();
    assert_eq!(got(&mut b, data(100, 0, 0)), 1);
    assert_eq!(got(&mut b, data(100, 1, 0)), 1);
    assert_eq!(got(&mut b, data(100, 1, 0)), 0, "duplicate");
    assert_eq!(got(&mut b, data(100, 3, 0)), 0, "buffered behind 2");
    // The sender restarts: a new epoch from 0; what was buffered of the old one is dropped.
    assert_eq!(got(&mut b, data(200, 0, 0)), 1);
    assert_eq!(
        got(&mut b, data(100, 2, 0)),
        0,
        "late copy of the old epoch"
    );
    assert_eq!(b.counter("reliable-fifo.peer_restarted"), 1);
    assert_eq!(b.counter("reliable-fifo.reset_dropped"), 1);
    assert_eq!(b.counter("reliable-fifo.stale_epoch"), 1);
    // A fresh receiver joins a stream at the sender's first unacknowledged segment.
    let mut fresh = reliable(3, cfg());
    assert_eq!(
        got(&mut fresh, data(100, 42, 40)),
        0,
        "40 and 41 are still to come"
    );
    assert_eq!(got(&mut fresh, data(100, 40, 40)), 1);
    assert_eq!(
        got(&mut fresh, data(100, 41, 40)),
        2,
        "41, then the buffered 42"
    );
    // The sender let go of 43..45 (acknowledged by our previous incarnation): skipped.
    assert_eq!(got(&mut fresh, data(100, 46, 46)), 1);
    assert_eq!(fresh.counter("reliable-fifo.skipped"), 3);
}

#[test]
fn broadcasts_are_counted_and_dropped() {
    let mut a = reliable(1, cfg());
    let o = a.send(0, Dest::Broadcast, b"all");
    assert!(o.transmits.is_empty());
    assert_eq!(a.counter("reliable-fifo.broadcast"), 1);
}

#[test]
fn request_response_acks_ride_on_the_replies() {
    let mut a = reliable(1, Config::default());
    let mut b = reliable(2, Config::default());
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
        assert_eq!(rep.transmits[0].1[2], 0x14, "round {i}");
        let back = a.receive(2, rep.transmits[0].1.clone());
        assert_eq!(back.delivered.len(), 1, "round {i}");
        assert!(
            back.transmits.is_empty(),
            "round {i}: a sent an ACK of its own"
        );
    }
    assert_eq!(a.counter("reliable-fifo.acks_sent"), 0);
    assert_eq!(b.counter("reliable-fifo.acks_sent"), 0);
    assert_eq!(b.counter("reliable-fifo.acks_piggybacked"), 50);
    assert_eq!(a.counter("reliable-fifo.acks_piggybacked"), 49);
    // Every request was acknowledged by the reply that carried it.
    let (ch_a, ch_b) = (a.channels[0], b.channels[0]);
    assert_eq!(session(&a).pending(ch_a, NodeId(2)), 0);
    // The last reply is acknowledged on its own once the delayed ACK is due.
    assert_eq!(session(&b).pending(ch_b, NodeId(1)), 1);
    let later = a.now + Config::default().ack_delay;
    let ack = a.advance(later);
    assert_eq!(ack.transmits.len(), 1);
    assert_eq!(a.counter("reliable-fifo.acks_sent"), 1);
    b.receive(1, ack.transmits[0].1.clone());
    assert_eq!(session(&b).pending(ch_b, NodeId(1)), 0);
}

#[test]
fn a_stream_of_small_messages_is_still_acknowledged_at_once() {
    let mut a = reliable(1, Config::default());
    let mut b = reliable(2, Config::default());
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
