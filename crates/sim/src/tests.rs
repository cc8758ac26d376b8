//! Tests of the simulator driver, with small test nodes.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::hash::Hasher;
use std::rc::Rc;

use super::*;

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn us(n: u64) -> Instant {
    Instant::from_micros(n)
}

/// One received datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rx {
    at: Instant,
    from: NodeId,
    port: u16,
    bytes: Vec<u8>,
}

/// What a pinger sends: every `interval` from `start`, `burst` datagrams, each to the next
/// target (round robin), `count` datagrams in all.
#[derive(Clone, Debug)]
struct PingPlan {
    targets: Vec<Dest>,
    start: Instant,
    interval: Duration,
    burst: usize,
    count: u64,
    size: usize,
}

impl PingPlan {
    fn none() -> Self {
        PingPlan {
            targets: Vec::new(),
            start: Instant::ZERO,
            interval: Duration::from_millis(1),
            burst: 1,
            count: 0,
            size: PAYLOAD_MIN,
        }
    }

    fn to(target: u32, count: u64) -> Self {
        PingPlan {
            targets: vec![Dest::Node(NodeId(target))],
            count,
            ..PingPlan::none()
        }
    }
}

const PAYLOAD_MIN: usize = 20;

fn check_of(from: NodeId, seq: u64) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(&seq.to_le_bytes());
    h.write(&from.0.to_le_bytes());
    h.finish()
}

/// `seq || sender || check(seq, sender) || zero padding`.
fn payload(from: NodeId, seq: u64, size: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(size.max(PAYLOAD_MIN));
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(&from.0.to_be_bytes());
    b.extend_from_slice(&check_of(from, seq).to_be_bytes());
    b.resize(size.max(PAYLOAD_MIN), 0);
    b
}

/// `(sender, seq)` of an intact payload, `None` if corrupted.
fn parse(bytes: &[u8]) -> Option<(NodeId, u64)> {
    let seq = u64::from_be_bytes(bytes.get(0..8)?.try_into().ok()?);
    let from = NodeId(u32::from_be_bytes(bytes.get(8..12)?.try_into().ok()?));
    (payload(from, seq, bytes.len()) == bytes).then_some((from, seq))
}

/// Sends numbered datagrams on the schedule of its [`PingPlan`], kept in its own timeout, and
/// records everything it receives.
struct Pinger {
    id: NodeId,
    boot: u32,
    plan: PingPlan,
    next_send: Option<Instant>,
    sent: u64,
    rr: usize,
    out: VecDeque<Transmit>,
    received: Vec<Rx>,
    timeouts: u64,
}

impl Pinger {
    fn new(id: NodeId, now: Instant, boot: u32, plan: PingPlan) -> Self {
        let next_send = (plan.count > 0 && !plan.targets.is_empty()).then_some(plan.start.max(now));
        Pinger {
            id,
            boot,
            plan,
            next_send,
            sent: 0,
            rr: 0,
            out: VecDeque::new(),
            received: Vec::new(),
            timeouts: 0,
        }
    }

    /// Seqs received from `from`, intact ones only, in arrival order.
    fn seqs_from(&self, from: u32) -> Vec<u64> {
        self.received
            .iter()
            .filter_map(|r| parse(&r.bytes))
            .filter(|&(f, _)| f == NodeId(from))
            .map(|(_, s)| s)
            .collect()
    }
}

impl Node for Pinger {
    fn handle_datagram(&mut self, now: Instant, port: u16, from: NodeId, bytes: Vec<u8>) {
        self.received.push(Rx {
            at: now,
            from,
            port,
            bytes,
        });
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.timeouts += 1;
        let Some(due) = self.next_send else { return };
        if due > now {
            return; // early or repeated call: harmless
        }
        for _ in 0..self.plan.burst {
            if self.sent >= self.plan.count {
                break;
            }
            let dest = self.plan.targets[self.rr % self.plan.targets.len()];
            self.rr += 1;
            self.out.push_back(Transmit {
                port: 7,
                dest,
                bytes: payload(self.id, self.sent, self.plan.size),
            });
            self.sent += 1;
        }
        self.next_send = (self.sent < self.plan.count).then(|| due + self.plan.interval);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next_send
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }
}

type Boots = Rc<RefCell<Vec<u32>>>;

/// A simulation of pingers; `plan(id)` gives each node's plan. Returns the boot counters.
fn pingers(config: SimConfig, plan: impl Fn(NodeId) -> PingPlan + 'static) -> (Sim<Pinger>, Boots) {
    let boots: Boots = Rc::new(RefCell::new(vec![0; config.nodes as usize]));
    let b = boots.clone();
    let sim = Sim::new(config, move |id, now| {
        let mut boots = b.borrow_mut();
        boots[id.0 as usize] += 1;
        Pinger::new(id, now, boots[id.0 as usize], plan(id))
    })
    .unwrap();
    (sim, boots)
}

fn assert_conserved(s: &NetStats, seed: u64) {
    assert_eq!(
        s.sent + s.duplicated,
        s.delivered + s.lost + s.dropped_partition + s.dropped_down,
        "seed {seed}: every copy accounted for: {s:?}"
    );
}

fn is_sorted(v: &[u64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

/// A lossy, jittery, duplicating, reordering, corrupting 4-node mesh.
fn nasty_link() -> LinkConfig {
    LinkConfig {
        latency: Duration::from_millis(2),
        jitter: Duration::from_millis(3),
        bandwidth_bps: Some(10_000_000),
        loss: 0.1,
        duplicate: 0.05,
        reorder: 0.1,
        reorder_delay: Duration::from_millis(4),
        corrupt: 0.05,
    }
}

fn nasty_run(seed: u64) -> Sim<Pinger> {
    let config = SimConfig {
        link: nasty_link(),
        ..SimConfig::new(seed, 4)
    };
    let (mut sim, _) = pingers(config, |id| PingPlan {
        targets: vec![
            Dest::Node(NodeId((id.0 + 1) % 4)),
            Dest::Broadcast,
            Dest::Node(NodeId((id.0 + 2) % 4)),
        ],
        interval: Duration::from_micros(700),
        count: 60,
        size: 40,
        ..PingPlan::none()
    });
    sim.run_until_idle().unwrap();
    sim
}

#[test]
fn same_seed_same_trace_different_seed_different_trace() {
    for seed in 0..50 {
        let a = nasty_run(seed);
        let b = nasty_run(seed);
        assert_eq!(
            a.trace_hash(),
            b.trace_hash(),
            "seed {seed}: not reproducible"
        );
        assert_eq!(a.stats(), b.stats(), "seed {seed}");
        assert_eq!(a.now(), b.now(), "seed {seed}");
        assert_conserved(a.stats(), seed);
        for n in 0..4 {
            let (ra, rb) = (
                &a.node(NodeId(n)).unwrap().received,
                &b.node(NodeId(n)).unwrap().received,
            );
            assert_eq!(ra, rb, "seed {seed}: node {n} received differently");
        }
        let other = seed + 1000;
        let c = nasty_run(other);
        assert_ne!(
            a.trace_hash(),
            c.trace_hash(),
            "seeds {seed} and {other} gave the same trace"
        );
    }
}

#[test]
fn trace_hash_covers_delivered_bytes() {
    // Same events and times, only the datagrams' length and bytes differ: different hash.
    let run = |size: usize| {
        let (mut sim, _) = pingers(SimConfig::new(0, 2), move |id| {
            if id.0 == 0 {
                PingPlan {
                    size,
                    ..PingPlan::to(1, 3)
                }
            } else {
                PingPlan::none()
            }
        });
        sim.run_until_idle().unwrap();
        sim.trace_hash()
    };
    assert_eq!(run(30), run(30));
    assert_ne!(run(30), run(31));
}

#[test]
fn loss_rate_matches_config() {
    for seed in 0..5 {
        let config = SimConfig {
            link: LinkConfig {
                loss: 0.25,
                ..LinkConfig::default()
            },
            ..SimConfig::new(seed, 2)
        };
        let (mut sim, _) = pingers(config, |id| {
            if id.0 == 0 {
                PingPlan {
                    burst: 100,
                    ..PingPlan::to(1, 20_000)
                }
            } else {
                PingPlan::none()
            }
        });
        sim.run_until_idle().unwrap();
        let s = sim.stats();
        assert_eq!(s.sent, 20_000, "seed {seed}");
        // Expected 5000 lost, standard deviation ~61: ±1000 never flakes.
        assert!(
            (4_000..=6_000).contains(&s.lost),
            "seed {seed}: lost {}",
            s.lost
        );
        assert_eq!(s.delivered + s.lost, s.sent, "seed {seed}");
        assert_eq!(
            sim.node(NodeId(1)).unwrap().received.len() as u64,
            s.delivered,
            "seed {seed}"
        );
        assert_conserved(s, seed);
    }
}

#[test]
fn duplication_and_corruption_happen_and_are_counted() {
    for seed in 0..5 {
        let config = SimConfig {
            link: LinkConfig {
                duplicate: 0.2,
                corrupt: 0.1,
                ..LinkConfig::default()
            },
            ..SimConfig::new(seed, 2)
        };
        let (mut sim, _) = pingers(config, |id| {
            if id.0 == 0 {
                PingPlan {
                    burst: 10,
                    ..PingPlan::to(1, 5_000)
                }
            } else {
                PingPlan::none()
            }
        });
        sim.run_until_idle().unwrap();
        let s = sim.stats().clone();
        // Expected 1000 duplicates and 600 corrupted copies.
        assert!((700..=1_300).contains(&s.duplicated), "seed {seed}: {s:?}");
        assert!((400..=800).contains(&s.corrupted), "seed {seed}: {s:?}");
        assert_eq!(s.delivered, s.sent + s.duplicated, "seed {seed}");
        let rx = &sim.node(NodeId(1)).unwrap().received;
        assert_eq!(rx.len() as u64, s.delivered, "seed {seed}");
        // Every corrupted copy differs from what was sent; every other copy is intact.
        let broken = rx.iter().filter(|r| parse(&r.bytes).is_none()).count() as u64;
        assert_eq!(broken, s.corrupted, "seed {seed}");
        // Duplicates show up as repeated sequence numbers.
        let mut seqs = sim.node(NodeId(1)).unwrap().seqs_from(0);
        let intact = seqs.len();
        seqs.sort_unstable();
        seqs.dedup();
        assert!(intact > seqs.len(), "seed {seed}: no duplicate seen");
    }
}

#[test]
fn perfect_link_keeps_fifo_order() {
    let (mut sim, _) = pingers(SimConfig::new(3, 2), |id| {
        if id.0 == 0 {
            PingPlan {
                interval: Duration::from_micros(10),
                burst: 3,
                ..PingPlan::to(1, 3_000)
            }
        } else {
            PingPlan::none()
        }
    });
    sim.run_until_idle().unwrap();
    let node = sim.node(NodeId(1)).unwrap();
    let seqs = node.seqs_from(0);
    assert_eq!(seqs, (0..3_000).collect::<Vec<_>>());
    // Every datagram takes exactly the 1 ms latency.
    for (i, r) in node.received.iter().enumerate() {
        let sent = us(10 * (i as u64 / 3));
        assert_eq!(r.at, sent + Duration::from_millis(1), "datagram {i}");
        assert_eq!((r.from, r.port), (NodeId(0), 7));
    }
}

#[test]
fn jitter_and_reorder_break_fifo_order() {
    let jittery = LinkConfig {
        jitter: Duration::from_millis(1),
        ..LinkConfig::default()
    };
    let reordering = LinkConfig {
        reorder: 0.1,
        reorder_delay: Duration::from_millis(5),
        ..LinkConfig::default()
    };
    for (name, link) in [("jitter", jittery), ("reorder", reordering)] {
        for seed in 0..5 {
            let config = SimConfig {
                link: link.clone(),
                ..SimConfig::new(seed, 2)
            };
            let (mut sim, _) = pingers(config, |id| {
                if id.0 == 0 {
                    PingPlan {
                        interval: Duration::from_micros(100),
                        ..PingPlan::to(1, 500)
                    }
                } else {
                    PingPlan::none()
                }
            });
            sim.run_until_idle().unwrap();
            let seqs = sim.node(NodeId(1)).unwrap().seqs_from(0);
            assert_eq!(seqs.len(), 500, "{name} seed {seed}: nothing may be lost");
            assert!(
                !is_sorted(&seqs),
                "{name} seed {seed}: arrivals stayed in order"
            );
        }
    }
}

#[test]
fn bandwidth_spaces_arrivals_by_serialization_time() {
    let config = SimConfig {
        link: LinkConfig {
            // 1000 bytes at 8 Mbit/s: exactly 1 ms each.
            bandwidth_bps: Some(8_000_000),
            latency: Duration::from_millis(1),
            ..LinkConfig::default()
        },
        ..SimConfig::new(0, 3)
    };
    let (mut sim, _) = pingers(config, |id| match id.0 {
        // A burst of 10 at time 0, then one more at 100 ms on an idle link.
        0 => PingPlan {
            burst: 10,
            interval: Duration::from_millis(100),
            size: 1000,
            ..PingPlan::to(1, 11)
        },
        // The reverse direction and other links have their own queues.
        2 => PingPlan {
            size: 1000,
            ..PingPlan::to(1, 1)
        },
        _ => PingPlan::none(),
    });
    sim.run_until_idle().unwrap();
    let rx = &sim.node(NodeId(1)).unwrap().received;
    let from0: Vec<Instant> = rx
        .iter()
        .filter(|r| r.from == NodeId(0))
        .map(|r| r.at)
        .collect();
    let mut want: Vec<Instant> = (1..=10).map(|i| ms(1 + i)).collect();
    want.push(ms(102));
    assert_eq!(from0, want);
    let from2: Vec<Instant> = rx
        .iter()
        .filter(|r| r.from == NodeId(2))
        .map(|r| r.at)
        .collect();
    assert_eq!(from2, [ms(2)]);
}

#[test]
fn link_overrides_apply_to_one_direction() {
    let config = SimConfig {
        links: vec![LinkOverride {
            from: NodeId(0),
            to: NodeId(1),
            config: LinkConfig {
                latency: Duration::from_millis(7),
                ..LinkConfig::default()
            },
        }],
        ..SimConfig::new(0, 2)
    };
    let (mut sim, _) = pingers(config, |id| PingPlan::to(1 - id.0, 1));
    sim.run_until_idle().unwrap();
    assert_eq!(sim.node(NodeId(1)).unwrap().received[0].at, ms(7));
    assert_eq!(sim.node(NodeId(0)).unwrap().received[0].at, ms(1));
}

/// Nodes 0 and 2 each ping node 1 every ms from 0 to 30 ms over 1.5 ms links; node 0 is
/// isolated from 10 ms to 20 ms.
#[test]
fn partition_drops_cross_group_traffic_only_while_active() {
    let config = SimConfig {
        link: LinkConfig {
            latency: Duration::from_micros(1500),
            ..LinkConfig::default()
        },
        partitions: vec![Partition {
            start: ms(10),
            heal: Some(ms(20)),
            groups: vec![vec![NodeId(0)]],
        }],
        ..SimConfig::new(0, 3)
    };
    let (mut sim, _) = pingers(config, |id| match id.0 {
        0 | 2 => PingPlan::to(1, 31),
        _ => PingPlan::none(),
    });
    sim.run_until_idle().unwrap();
    let n1 = sim.node(NodeId(1)).unwrap();
    // Sent at 9 ms: in flight at 10 ms, dropped on arrival. Sent at 10..=19 ms: dropped at
    // send. Sent at 20 ms: the heal (queued first) already happened.
    let want: Vec<u64> = (0..=8).chain(20..=30).collect();
    assert_eq!(n1.seqs_from(0), want);
    // Node 2 is unlisted, so it shares node 1's group: nothing of its traffic is lost.
    assert_eq!(n1.seqs_from(2), (0..=30).collect::<Vec<_>>());
    assert_eq!(sim.stats().dropped_partition, 11);
    assert_conserved(sim.stats(), 0);
}

#[test]
fn partition_groups_and_unlisted_rest() {
    // Groups {0,1} and {2}; nodes 3 and 4 are unlisted and form a third group.
    let config = SimConfig {
        partitions: vec![Partition {
            start: Instant::ZERO,
            heal: None,
            groups: vec![vec![NodeId(0), NodeId(1)], vec![NodeId(2)]],
        }],
        ..SimConfig::new(0, 5)
    };
    let (mut sim, _) = pingers(config, |_| PingPlan {
        targets: vec![Dest::Broadcast],
        ..PingPlan::to(0, 1)
    });
    sim.run_until_idle().unwrap();
    let heard = |n: u32| -> Vec<NodeId> {
        let mut v: Vec<NodeId> = sim
            .node(NodeId(n))
            .unwrap()
            .received
            .iter()
            .map(|r| r.from)
            .collect();
        v.sort();
        v
    };
    assert_eq!(heard(0), [NodeId(1)]);
    assert_eq!(heard(1), [NodeId(0)]);
    assert_eq!(heard(2), []);
    assert_eq!(heard(3), [NodeId(4)]);
    assert_eq!(heard(4), [NodeId(3)]);
    // Active from time zero: even the first datagrams are dropped at send.
    assert_eq!(sim.stats().dropped_partition, 20 - 4);
    assert_eq!(sim.stats().delivered, 4);
}

/// Broadcasts one datagram from its constructor, and records what it receives.
struct Greeter {
    received: Vec<NodeId>,
    hello: Option<Transmit>,
}

impl Node for Greeter {
    fn handle_datagram(&mut self, _: Instant, _: u16, from: NodeId, _: Vec<u8>) {
        self.received.push(from);
    }
    fn handle_timeout(&mut self, _: Instant) {}
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.hello.take()
    }
}

#[test]
fn factory_transmits_are_sent_and_a_partition_at_zero_already_applies() {
    // Node 0 is isolated during [0, 1 ms); datagrams sent by the factories at time zero arrive
    // at 1 ms, after the heal — they are dropped anyway, at send time.
    let config = SimConfig {
        partitions: vec![Partition {
            start: Instant::ZERO,
            heal: Some(ms(1)),
            groups: vec![vec![NodeId(0)]],
        }],
        ..SimConfig::new(0, 3)
    };
    let mut sim = Sim::new(config, |id, _| Greeter {
        received: Vec::new(),
        hello: Some(Transmit {
            port: 1,
            dest: Dest::Broadcast,
            bytes: id.0.to_be_bytes().to_vec(),
        }),
    })
    .unwrap();
    sim.run_until_idle().unwrap();
    let heard = |n: u32| sim.node(NodeId(n)).unwrap().received.clone();
    assert_eq!(heard(0), []);
    assert_eq!(heard(1), [NodeId(2)]);
    assert_eq!(heard(2), [NodeId(1)]);
    assert_eq!(sim.stats().dropped_partition, 4);
    assert_eq!(sim.now(), ms(1));
}

/// Node 0 pings node 1 and node 1 pings node 0, every ms, over 1.5 ms links; node 1 crashes at
/// 10 ms and restarts at 20 ms.
#[test]
fn crash_drops_state_and_restart_rebuilds_the_node() {
    let config = SimConfig {
        link: LinkConfig {
            latency: Duration::from_micros(1500),
            ..LinkConfig::default()
        },
        crashes: vec![CrashPlan {
            node: NodeId(1),
            at: ms(10),
            restart: Some(ms(20)),
        }],
        ..SimConfig::new(0, 2)
    };
    let (mut sim, boots) = pingers(config, |id| PingPlan::to(1 - id.0, 31));
    sim.run_until(ms(15)).unwrap();
    assert!(!sim.is_up(NodeId(1)));
    assert!(sim.node(NodeId(1)).is_none());
    assert!(sim.is_up(NodeId(0)));
    assert_eq!(*boots.borrow(), [1, 1]);
    sim.run_until_idle().unwrap();
    assert_eq!(*boots.borrow(), [1, 2]);

    let n1 = sim.node(NodeId(1)).unwrap();
    assert_eq!(n1.boot, 2);
    // Fresh state: only what arrived after the restart (sent at 19 ms, arriving 20.5 ms, on).
    assert_eq!(n1.seqs_from(0), (19..=30).collect::<Vec<_>>());
    assert!(n1.received.iter().all(|r| r.at >= ms(20)));
    // Sent at 9..=18 ms, arriving 10.5..=19.5 ms while down.
    assert_eq!(sim.stats().dropped_down, 10);

    // The first incarnation sent at 0..=9 ms; its timeout at 10 ms and later was forgotten.
    // The second started over at 20 ms with seq 0.
    let n0 = sim.node(NodeId(0)).unwrap();
    let arrivals: Vec<(Instant, u64)> = n0
        .received
        .iter()
        .map(|r| (r.at, parse(&r.bytes).unwrap().1))
        .collect();
    let want: Vec<(Instant, u64)> = (0..=9)
        .map(|s| (us(1500) + Duration::from_millis(s), s))
        .chain((0..=30).map(|s| (us(21_500) + Duration::from_millis(s), s)))
        .collect();
    assert_eq!(arrivals, want);
    assert_conserved(sim.stats(), 0);
}

#[test]
fn crashing_a_down_node_and_restarting_an_up_node_are_no_ops() {
    let plan = |node, at, restart: Option<u64>| CrashPlan {
        node: NodeId(node),
        at: ms(at),
        restart: restart.map(ms),
    };
    let config = SimConfig {
        crashes: vec![
            plan(0, 5, Some(8)),
            plan(0, 6, Some(10)), // crash while down: no-op; restart at 10 while up: no-op
            plan(1, 3, None),     // never comes back
        ],
        ..SimConfig::new(0, 3)
    };
    let (mut sim, boots) = pingers(config, |id| PingPlan::to((id.0 + 1) % 3, 50));
    sim.run_until(ms(7)).unwrap();
    assert!(!sim.is_up(NodeId(0)) && !sim.is_up(NodeId(1)) && sim.is_up(NodeId(2)));
    sim.run_until_idle().unwrap();
    assert_eq!(*boots.borrow(), [2, 1, 1]);
    assert!(sim.is_up(NodeId(0)));
    assert!(!sim.is_up(NodeId(1)));
    // The restarted node 0 kept its state from 8 ms on (not rebuilt again at 10 ms): it
    // still holds what node 2 sent it at 8 ms.
    let n0 = sim.node(NodeId(0)).unwrap();
    assert_eq!(n0.sent, 50);
    assert!(
        n0.received.iter().any(|r| r.at < ms(10)),
        "node 0 rebuilt at 10 ms"
    );
    // Everything node 0 sent to the dead node 1 from 2 ms on was dropped (sent before the
    // crash at 3 ms: 0..=1 ms delivered; 2 ms arrives at 3 ms, after the crash).
    assert!(sim.stats().dropped_down > 40);
    assert_conserved(sim.stats(), 0);
}

#[test]
fn broadcast_reaches_every_other_node_once() {
    let (mut sim, _) = pingers(SimConfig::new(0, 5), |id| {
        if id.0 == 2 {
            PingPlan {
                targets: vec![Dest::Broadcast],
                ..PingPlan::to(0, 1)
            }
        } else {
            PingPlan::none()
        }
    });
    sim.run_until_idle().unwrap();
    for n in 0..5 {
        let rx = &sim.node(NodeId(n)).unwrap().received;
        if n == 2 {
            assert!(rx.is_empty(), "the sender must not hear its own broadcast");
        } else {
            assert_eq!(rx.len(), 1, "node {n}");
            assert_eq!(parse(&rx[0].bytes), Some((NodeId(2), 0)), "node {n}");
            assert_eq!(rx[0].at, ms(1));
        }
    }
    assert_eq!((sim.stats().sent, sim.stats().delivered), (4, 4));

    // Also from the last node, and in a single-node scenario (no one to reach).
    for (nodes, from) in [(3u32, 2u32), (1, 0)] {
        let (mut sim, _) = pingers(SimConfig::new(0, nodes), move |id| {
            if id.0 == from {
                PingPlan {
                    targets: vec![Dest::Broadcast],
                    ..PingPlan::to(0, 1)
                }
            } else {
                PingPlan::none()
            }
        });
        sim.run_until_idle().unwrap();
        assert_eq!(sim.stats().delivered, u64::from(nodes - 1), "{nodes} nodes");
    }
}

#[test]
fn loopback_is_immediate_and_lossless() {
    let config = SimConfig {
        link: LinkConfig {
            loss: 1.0,
            ..LinkConfig::default()
        },
        ..SimConfig::new(0, 2)
    };
    let (mut sim, _) = pingers(config, |id| PingPlan {
        start: ms(3),
        targets: vec![Dest::Node(id), Dest::Node(NodeId(1 - id.0))],
        ..PingPlan::to(0, 4)
    });
    sim.run_until_idle().unwrap();
    let rx = &sim.node(NodeId(0)).unwrap().received;
    let got: Vec<(Instant, NodeId, u64)> = rx
        .iter()
        .map(|r| (r.at, r.from, parse(&r.bytes).unwrap().1))
        .collect();
    assert_eq!(got, [(ms(3), NodeId(0), 0), (ms(5), NodeId(0), 2)]);
    assert_eq!(sim.stats().lost, 4);
}

#[test]
fn unknown_destination_is_counted_not_sent() {
    let (mut sim, _) = pingers(SimConfig::new(0, 2), |id| {
        if id.0 == 0 {
            PingPlan::to(99, 3)
        } else {
            PingPlan::none()
        }
    });
    sim.run_until_idle().unwrap();
    assert_eq!(sim.stats().dropped_unknown_dest, 3);
    assert_eq!(sim.stats().sent, 0);
}

/// A node that always wants a timeout at time zero: it wakes itself forever at one instant.
struct Spinner;

impl Node for Spinner {
    fn handle_datagram(&mut self, _: Instant, _: u16, _: NodeId, _: Vec<u8>) {}
    fn handle_timeout(&mut self, _: Instant) {}
    fn poll_timeout(&self) -> Option<Instant> {
        Some(Instant::ZERO)
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        None
    }
}

#[test]
fn step_cap_stops_a_livelock() {
    let config = SimConfig {
        step_cap: 1_000,
        ..SimConfig::new(42, 1)
    };
    let mut sim = Sim::new(config.clone(), |_, _| Spinner).unwrap();
    let err = sim.run_until_idle().unwrap_err();
    assert_eq!(
        err,
        SimError::StepCapExceeded {
            steps: 1_000,
            seed: 42
        }
    );
    assert_eq!(sim.now(), Instant::ZERO, "virtual time never moved");
    assert_eq!(sim.steps(), 1_000);

    let mut sim = Sim::new(config.clone(), |_, _| Spinner).unwrap();
    assert!(matches!(
        sim.run_for(Duration::from_secs(1)),
        Err(SimError::StepCapExceeded { .. })
    ));
    let mut sim = Sim::new(config, |_, _| Spinner).unwrap();
    let mut ok = 0;
    let err = loop {
        match sim.step() {
            Ok(true) => ok += 1,
            Ok(false) => panic!("a spinner is never idle"),
            Err(e) => break e,
        }
    };
    assert_eq!(ok, 1_000);
    assert!(matches!(
        err,
        SimError::StepCapExceeded {
            steps: 1_000,
            seed: 42
        }
    ));
}

#[test]
fn step_cap_is_not_hit_by_a_finite_run() {
    let config = SimConfig {
        step_cap: 2 * 31, // exactly the 31 wake-ups and 31 arrivals of one pinger
        ..SimConfig::new(0, 2)
    };
    let (mut sim, _) = pingers(config, |id| {
        if id.0 == 0 {
            PingPlan::to(1, 31)
        } else {
            PingPlan::none()
        }
    });
    sim.run_until_idle().unwrap();
    assert_eq!(sim.steps(), 62);
    assert_eq!(sim.step(), Ok(false));
}

#[test]
fn invalid_config_is_an_error_not_a_panic() {
    let config = SimConfig {
        link: LinkConfig {
            loss: 1.5,
            ..LinkConfig::default()
        },
        ..SimConfig::new(0, 2)
    };
    let r = Sim::new(config, |_, _| Spinner);
    assert!(matches!(
        r.err(),
        Some(SimError::InvalidProbability {
            link: LinkRef::Default,
            field: "loss",
            ..
        })
    ));
}

/// Records when it is woken, and follows a script of deadlines: each datagram replaces the
/// deadline with the next entry of `script`.
struct Sleeper {
    deadline: Option<Instant>,
    script: VecDeque<Option<Instant>>,
    woken: Vec<Instant>,
}

impl Node for Sleeper {
    fn handle_datagram(&mut self, _: Instant, _: u16, _: NodeId, _: Vec<u8>) {
        self.deadline = self.script.pop_front().flatten();
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.woken.push(now);
        self.deadline = None;
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        None
    }
}

/// Node 0 is a [`Sleeper`] with an initial deadline of 100 ms; node 1 sends it a datagram at
/// 1, 2, 3, … ms (arriving 1 ms later), each of which applies the next entry of `script`.
/// Returns when node 0 was woken and when the run ended.
fn run_sleeper(script: Vec<Option<Instant>>) -> (Vec<Instant>, Instant) {
    /// Node 0 or node 1 of the scenario, as one type.
    enum Either {
        Sleeper(Sleeper),
        Pinger(Pinger),
    }
    impl Node for Either {
        fn handle_datagram(&mut self, now: Instant, port: u16, from: NodeId, bytes: Vec<u8>) {
            match self {
                Either::Sleeper(n) => n.handle_datagram(now, port, from, bytes),
                Either::Pinger(n) => n.handle_datagram(now, port, from, bytes),
            }
        }
        fn handle_timeout(&mut self, now: Instant) {
            match self {
                Either::Sleeper(n) => n.handle_timeout(now),
                Either::Pinger(n) => n.handle_timeout(now),
            }
        }
        fn poll_timeout(&self) -> Option<Instant> {
            match self {
                Either::Sleeper(n) => n.poll_timeout(),
                Either::Pinger(n) => n.poll_timeout(),
            }
        }
        fn poll_transmit(&mut self) -> Option<Transmit> {
            match self {
                Either::Sleeper(n) => n.poll_transmit(),
                Either::Pinger(n) => n.poll_transmit(),
            }
        }
    }
    let pokes = script.len() as u64;
    let mut script = Some(VecDeque::from(script));
    let mut sim = Sim::new(SimConfig::new(0, 2), move |id, now| {
        if id.0 == 0 {
            Either::Sleeper(Sleeper {
                deadline: Some(ms(100)),
                script: script.take().unwrap_or_default(),
                woken: Vec::new(),
            })
        } else {
            let plan = PingPlan {
                start: ms(1),
                ..PingPlan::to(0, pokes)
            };
            Either::Pinger(Pinger::new(id, now, 1, plan))
        }
    })
    .unwrap();
    sim.run_until_idle().unwrap();
    match sim.node(NodeId(0)) {
        Some(Either::Sleeper(s)) => (s.woken.clone(), sim.now()),
        _ => panic!("node 0 is the sleeper"),
    }
}

#[test]
fn wake_ups_follow_the_current_deadline() {
    let (woken, end) = run_sleeper(vec![
        Some(ms(1)),   // at 2 ms: in the past → woken at once
        Some(ms(50)),  // at 3 ms: earlier than the queued 100 ms → new wake-up
        Some(ms(200)), // at 4 ms: later → the 50 ms wake-up calls nothing, re-queues 200 ms
    ]);
    assert_eq!(woken, [ms(2), ms(200)], "handle_timeout only when due");
    assert_eq!(end, ms(200));

    let (woken, end) = run_sleeper(vec![
        Some(ms(50)), // at 2 ms
        None,         // at 3 ms: cancelled → neither the 50 ms nor the 100 ms wake-up calls
    ]);
    assert!(woken.is_empty(), "cancelled timeout fired: {woken:?}");
    assert_eq!(
        end,
        ms(100),
        "stale wake-ups are still popped (and skipped)"
    );

    let (woken, _) = run_sleeper(vec![]);
    assert_eq!(woken, [ms(100)], "the initial deadline");
}

#[test]
fn node_mut_commands_are_picked_up() {
    let (mut sim, _) = pingers(SimConfig::new(0, 2), |_| PingPlan::none());
    sim.run_for(Duration::from_millis(10)).unwrap();
    assert_eq!(sim.now(), ms(10));
    // Give node 0 a plan now; the sim must notice its new deadline and transmits.
    let n0 = sim.node_mut(NodeId(0)).unwrap();
    n0.plan = PingPlan::to(1, 2);
    n0.next_send = Some(ms(10));
    sim.run_until_idle().unwrap();
    let at: Vec<Instant> = sim
        .node(NodeId(1))
        .unwrap()
        .received
        .iter()
        .map(|r| r.at)
        .collect();
    assert_eq!(at, [ms(11), ms(12)]);
}

#[test]
fn run_until_advances_the_clock_and_stops_at_the_bound() {
    let (mut sim, _) = pingers(SimConfig::new(0, 2), |id| {
        if id.0 == 0 {
            PingPlan::to(1, 10)
        } else {
            PingPlan::none()
        }
    });
    sim.run_until(ms(5)).unwrap();
    assert_eq!(sim.now(), ms(5));
    // Arrivals at exactly 5 ms are included.
    assert_eq!(sim.node(NodeId(1)).unwrap().received.len(), 5);
    sim.run_until(ms(2)).unwrap();
    assert_eq!(sim.now(), ms(5), "the clock never goes back");
    sim.run_for(Duration::from_micros(2500)).unwrap();
    assert_eq!(sim.now(), us(7500));
    assert_eq!(sim.node(NodeId(1)).unwrap().received.len(), 7);
    sim.run_until_idle().unwrap();
    assert_eq!(sim.now(), ms(10));
    assert_eq!(sim.seed(), 0);
}

#[test]
fn conservation_over_many_seeds_with_partitions_and_crashes() {
    for seed in 0..20 {
        let config = SimConfig {
            link: nasty_link(),
            partitions: vec![Partition {
                start: ms(5),
                heal: Some(ms(15)),
                groups: vec![vec![NodeId(0), NodeId(1)]],
            }],
            crashes: vec![CrashPlan {
                node: NodeId(3),
                at: ms(8),
                restart: Some(ms(12)),
            }],
            ..SimConfig::new(seed, 4)
        };
        let (mut sim, boots) = pingers(config, |_| PingPlan {
            targets: vec![Dest::Broadcast],
            interval: Duration::from_micros(500),
            ..PingPlan::to(0, 50)
        });
        sim.run_until_idle().unwrap();
        let s = sim.stats();
        assert_conserved(s, seed);
        assert!(
            s.dropped_partition > 0 && s.dropped_down > 0,
            "seed {seed}: {s:?}"
        );
        assert_eq!(boots.borrow()[3], 2, "seed {seed}");
    }
}

/// A paused node runs nothing and loses nothing: datagrams that reach it wait and are handed
/// over, in arrival order, at its resumption; its own sends stop meanwhile (issue 18).
#[test]
fn a_paused_node_gets_its_datagrams_at_the_resumption_and_is_silent_meanwhile() {
    let config = SimConfig::new(7, 2);
    let (mut sim, _) = pingers(config, |id| {
        if id.0 == 0 {
            PingPlan {
                interval: Duration::from_millis(1),
                ..PingPlan::to(1, 100)
            }
        } else {
            PingPlan {
                interval: Duration::from_millis(5),
                ..PingPlan::to(0, 30)
            }
        }
    });
    sim.pause(NodeId(1), ms(20), ms(60));
    sim.run_until(ms(40)).unwrap();
    assert!(sim.is_paused(NodeId(1)));
    sim.run_until_idle().unwrap();
    assert!(!sim.is_paused(NodeId(1)));
    let n1 = sim.node(NodeId(1)).unwrap();
    assert!(
        n1.received.iter().all(|r| r.at <= ms(20) || r.at >= ms(60)),
        "nothing handed over during the pause"
    );
    let at_resume = n1.received.iter().filter(|r| r.at == ms(60)).count();
    assert!(
        at_resume >= 35,
        "held datagrams delivered at 60 ms: {at_resume}"
    );
    assert_eq!(
        n1.seqs_from(0),
        (0..100).collect::<Vec<u64>>(),
        "nothing lost, in order"
    );
    assert!(sim.stats().held_paused >= 35, "{:?}", sim.stats());
    let n0 = sim.node(NodeId(0)).unwrap();
    assert!(
        n0.received.iter().all(|r| r.at <= ms(22) || r.at >= ms(60)),
        "the paused node sent nothing"
    );
    assert_conserved(sim.stats(), 7);
}
