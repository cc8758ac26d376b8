//! Tests of multi-hop topologies: one link per datagram, interfaces, LAN segments, per-link
//! conditions, link events, determinism and validation.

use std::collections::VecDeque;

use super::*;

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

/// One received datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rx {
    at: Instant,
    from: u32,
    port: u16,
    bytes: Vec<u8>,
}

/// Sends scripted datagrams at scripted times and records what it receives.
struct Scripted {
    script: VecDeque<(Instant, Transmit)>,
    out: VecDeque<Transmit>,
    rx: Vec<Rx>,
}

impl Node for Scripted {
    fn handle_datagram(&mut self, now: Instant, port: u16, from: NodeId, bytes: Vec<u8>) {
        self.rx.push(Rx {
            at: now,
            from: from.0,
            port,
            bytes,
        });
    }
    fn handle_timeout(&mut self, now: Instant) {
        while self.script.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, t)) = self.script.pop_front() {
                self.out.push_back(t);
            }
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.script.front().map(|(at, _)| *at)
    }
    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }
}

type Script = Vec<(u32, Instant, u16, Dest, Vec<u8>)>;

fn run(config: SimConfig, script: Script) -> Sim<Scripted> {
    let mut sim = Sim::new(config, move |id, _| {
        let mut s: Vec<(Instant, Transmit)> = script
            .iter()
            .filter(|(n, ..)| *n == id.0)
            .map(|(_, at, port, dest, bytes)| {
                (
                    *at,
                    Transmit {
                        port: *port,
                        dest: *dest,
                        bytes: bytes.clone(),
                    },
                )
            })
            .collect();
        s.sort_by_key(|(at, _)| *at);
        Scripted {
            script: s.into(),
            out: VecDeque::new(),
            rx: Vec::new(),
        }
    })
    .unwrap();
    sim.run_until_idle().unwrap();
    sim
}

fn rx(sim: &Sim<Scripted>, n: u32) -> Vec<Rx> {
    sim.node(NodeId(n)).unwrap().rx.clone()
}

fn lat(ms_: u64) -> LinkConfig {
    LinkConfig {
        latency: Duration::from_millis(ms_),
        ..LinkConfig::default()
    }
}

fn with_topo(seed: u64, nodes: u32, topo: Topology) -> SimConfig {
    SimConfig {
        topology: Some(topo),
        ..SimConfig::new(seed, nodes)
    }
}

/// A chain 0 - 1 - 2: link 0 = {0,1} (2 ms), link 1 = {1,2} (10 ms).
fn chain() -> Topology {
    let mut t = Topology::default();
    t.connect(NodeId(0), NodeId(1), lat(2));
    t.connect(NodeId(1), NodeId(2), lat(10));
    t
}

fn accounted(s: &NetStats) {
    assert_eq!(
        s.sent + s.duplicated,
        s.delivered + s.lost + s.dropped_partition + s.dropped_down + s.dropped_link_down,
        "{s:?}"
    );
}

#[test]
fn a_datagram_travels_one_link_only() {
    let sim = run(
        with_topo(1, 3, chain()),
        vec![
            (0, ms(0), 0, Dest::Broadcast, b"a".to_vec()),
            // Node 1's interface 1 is link {1,2}.
            (1, ms(0), 1, Dest::Broadcast, b"b".to_vec()),
            (1, ms(0), 0, Dest::Node(NodeId(0)), b"c".to_vec()),
        ],
    );
    // Node 0's broadcast reaches its only neighbour, on node 1's interface 0, after 2 ms.
    assert_eq!(
        rx(&sim, 1),
        vec![Rx {
            at: ms(2),
            from: 0,
            port: 0,
            bytes: b"a".to_vec()
        }]
    );
    // Node 2 hears node 1 on its interface 0 (its only link), after 10 ms; never node 0.
    assert_eq!(
        rx(&sim, 2),
        vec![Rx {
            at: ms(10),
            from: 1,
            port: 0,
            bytes: b"b".to_vec()
        }]
    );
    assert_eq!(rx(&sim, 0).len(), 1);
    assert_eq!(rx(&sim, 0)[0].bytes, b"c");
    accounted(sim.stats());
    assert_eq!(sim.stats().sent, 3);
}

#[test]
fn unicast_to_a_node_off_the_link_or_on_a_missing_port_is_dropped() {
    let sim = run(
        with_topo(1, 3, chain()),
        vec![
            // Node 2 is not on node 0's link.
            (0, ms(0), 0, Dest::Node(NodeId(2)), b"x".to_vec()),
            // Node 0 has one interface only.
            (0, ms(0), 1, Dest::Broadcast, b"y".to_vec()),
            // Loopback works on any port.
            (0, ms(1), 7, Dest::Node(NodeId(0)), b"z".to_vec()),
        ],
    );
    assert!(rx(&sim, 1).is_empty() && rx(&sim, 2).is_empty());
    assert_eq!(sim.stats().dropped_no_route, 2);
    assert_eq!(rx(&sim, 0).len(), 1);
    assert_eq!(rx(&sim, 0)[0].port, 7);
    accounted(sim.stats());
}

/// A LAN segment {0,1,2,3} (link 0) plus a point-to-point link {3,4} (link 1).
fn lan() -> Topology {
    Topology {
        links: vec![
            TopoLink::new([0, 1, 2, 3].map(NodeId), lat(1)),
            TopoLink::new([3, 4].map(NodeId), lat(1)),
        ],
        events: Vec::new(),
    }
}

#[test]
fn lan_broadcast_reaches_every_other_member_and_unicast_one() {
    let sim = run(
        with_topo(1, 5, lan()),
        vec![
            (0, ms(0), 0, Dest::Broadcast, b"all".to_vec()),
            (1, ms(5), 0, Dest::Node(NodeId(2)), b"two".to_vec()),
            (4, ms(5), 0, Dest::Broadcast, b"from4".to_vec()),
        ],
    );
    for n in [1, 2, 3] {
        assert!(rx(&sim, n).iter().any(|r| r.bytes == b"all" && r.port == 0));
    }
    assert!(rx(&sim, 4).iter().all(|r| r.bytes != b"all"));
    assert!(rx(&sim, 0).is_empty());
    assert_eq!(rx(&sim, 2).iter().filter(|r| r.bytes == b"two").count(), 1);
    assert!(rx(&sim, 3).iter().all(|r| r.bytes != b"two"));
    // Node 3 hears node 4 on its interface 1.
    let r3: Vec<_> = rx(&sim, 3).into_iter().filter(|r| r.from == 4).collect();
    assert_eq!(r3.len(), 1);
    assert_eq!(r3[0].port, 1);
    assert_eq!(sim.stats().sent, 3 + 1 + 1);
    accounted(sim.stats());
}

#[test]
fn each_link_has_its_own_conditions() {
    let mut t = chain();
    t.links[1].config.loss = 1.0;
    let sim = run(
        with_topo(3, 3, t),
        vec![
            (1, ms(0), 0, Dest::Broadcast, b"ok".to_vec()),
            (1, ms(0), 1, Dest::Broadcast, b"lost".to_vec()),
        ],
    );
    assert_eq!(rx(&sim, 0).len(), 1);
    assert_eq!(rx(&sim, 0)[0].at, ms(2));
    assert!(rx(&sim, 2).is_empty());
    assert_eq!(sim.stats().lost, 1);

    // Bandwidth: 8000 bit/s, 100-byte datagrams take 100 ms each; two senders on one LAN have
    // their own queues, one sender's second datagram waits for its first.
    let mut t = lan();
    t.links[0].config.bandwidth_bps = Some(8000);
    t.links[0].config.latency = Duration::ZERO;
    let sim = run(
        with_topo(3, 5, t),
        vec![
            (0, ms(0), 0, Dest::Node(NodeId(3)), vec![0; 100]),
            (0, ms(0), 0, Dest::Node(NodeId(3)), vec![1; 100]),
            (1, ms(0), 0, Dest::Node(NodeId(3)), vec![2; 100]),
        ],
    );
    let at: Vec<(u8, Instant)> = rx(&sim, 3).iter().map(|r| (r.bytes[0], r.at)).collect();
    assert!(at.contains(&(0, ms(100))), "{at:?}");
    assert!(at.contains(&(1, ms(200))), "{at:?}");
    assert!(at.contains(&(2, ms(100))), "{at:?}");
}

#[test]
fn link_down_drops_sent_and_in_flight_datagrams_and_up_restores() {
    let mut t = chain();
    t.events = vec![
        LinkEvent {
            at: ms(5),
            link: 1,
            change: LinkChange::Down,
        },
        LinkEvent {
            at: ms(30),
            link: 1,
            change: LinkChange::Up,
        },
    ];
    let sim = run(
        with_topo(1, 3, t),
        vec![
            // In flight (10 ms) when the link fails at 5 ms: dropped on arrival.
            (1, ms(0), 1, Dest::Broadcast, b"inflight".to_vec()),
            // Sent while down.
            (1, ms(10), 1, Dest::Broadcast, b"down".to_vec()),
            // Sent while down (it would arrive after the repair): dropped at send time.
            (1, ms(25), 1, Dest::Broadcast, b"down2".to_vec()),
            // After the repair.
            (1, ms(31), 1, Dest::Broadcast, b"up".to_vec()),
            // The other link is unaffected.
            (1, ms(10), 0, Dest::Broadcast, b"other".to_vec()),
        ],
    );
    let got: Vec<Vec<u8>> = rx(&sim, 2).into_iter().map(|r| r.bytes).collect();
    assert_eq!(got, vec![b"up".to_vec()]);
    assert_eq!(rx(&sim, 0).len(), 1);
    assert_eq!(sim.stats().dropped_link_down, 3);
    assert_eq!(sim.link_is_up(1), Some(true));
    accounted(sim.stats());

    // A datagram in flight when the link comes back is delivered.
    let mut t = chain();
    t.events = vec![
        LinkEvent {
            at: ms(0),
            link: 1,
            change: LinkChange::Down,
        },
        LinkEvent {
            at: ms(1),
            link: 1,
            change: LinkChange::Up,
        },
        LinkEvent {
            at: ms(3),
            link: 1,
            change: LinkChange::Down,
        },
        LinkEvent {
            at: ms(4),
            link: 1,
            change: LinkChange::Up,
        },
    ];
    let sim = run(
        with_topo(1, 3, t),
        vec![
            // Down at time zero: dropped at send.
            (1, ms(0), 1, Dest::Broadcast, b"zero".to_vec()),
            // Sent at 2 ms, in flight across the 3–4 ms outage, arrives at 12 ms: delivered.
            (1, ms(2), 1, Dest::Broadcast, b"across".to_vec()),
        ],
    );
    let got: Vec<Vec<u8>> = rx(&sim, 2).into_iter().map(|r| r.bytes).collect();
    assert_eq!(got, vec![b"across".to_vec()]);
    assert_eq!(sim.stats().dropped_link_down, 1);
}

#[test]
fn condition_events_change_a_link_from_their_instant() {
    let mut t = chain();
    t.events = vec![LinkEvent {
        at: ms(10),
        link: 0,
        change: LinkChange::Condition(LinkConfig {
            loss: 1.0,
            ..lat(2)
        }),
    }];
    let sim = run(
        with_topo(1, 3, t),
        vec![
            (0, ms(9), 0, Dest::Broadcast, b"before".to_vec()),
            (0, ms(10), 0, Dest::Broadcast, b"after".to_vec()),
        ],
    );
    let got: Vec<Vec<u8>> = rx(&sim, 1).into_iter().map(|r| r.bytes).collect();
    assert_eq!(got, vec![b"before".to_vec()]);
    assert_eq!(sim.stats().lost, 1);
}

fn lossy_lan_run(seed: u64) -> Sim<Scripted> {
    let mut t = lan();
    for l in &mut t.links {
        l.config = LinkConfig {
            latency: Duration::from_millis(1),
            jitter: Duration::from_millis(3),
            loss: 0.2,
            duplicate: 0.2,
            reorder: 0.2,
            reorder_delay: Duration::from_millis(5),
            corrupt: 0.1,
            bandwidth_bps: Some(1_000_000),
        };
    }
    t.events.push(LinkEvent {
        at: ms(20),
        link: 1,
        change: LinkChange::Down,
    });
    let mut script = Script::new();
    for i in 0..50u64 {
        for n in 0..5u32 {
            script.push((n, ms(i), 0, Dest::Broadcast, vec![n as u8; 30]));
        }
        script.push((3, ms(i), 1, Dest::Node(NodeId(4)), vec![9; 30]));
    }
    run(with_topo(seed, 5, t), script)
}

#[test]
fn topology_runs_are_deterministic_and_accounted() {
    let a = lossy_lan_run(42);
    let b = lossy_lan_run(42);
    assert_eq!(a.trace_hash(), b.trace_hash());
    assert_eq!(a.stats(), b.stats());
    let c = lossy_lan_run(43);
    assert_ne!(a.trace_hash(), c.trace_hash());
    for s in [a.stats(), c.stats()] {
        accounted(s);
        assert!(s.lost > 0 && s.duplicated > 0 && s.corrupted > 0 && s.dropped_link_down > 0);
    }
}

#[test]
fn without_topology_the_full_mesh_stays() {
    let sim = run(
        SimConfig::new(1, 3),
        vec![(0, ms(0), 5, Dest::Broadcast, b"m".to_vec())],
    );
    assert_eq!(rx(&sim, 1)[0].port, 5);
    assert_eq!(rx(&sim, 2)[0].port, 5);
}

#[test]
fn invalid_topologies_are_rejected() {
    let bad = |t: Topology| config::validate(&with_topo(1, 3, t)).unwrap_err();
    let mut t = Topology::default();
    t.links.push(TopoLink::new([NodeId(0)], lat(1)));
    assert!(matches!(bad(t), SimError::InvalidLink { index: 0, .. }));
    let mut t = Topology::default();
    t.links.push(TopoLink::new([NodeId(0), NodeId(0)], lat(1)));
    assert!(matches!(bad(t), SimError::InvalidLink { .. }));
    let mut t = Topology::default();
    t.connect(NodeId(0), NodeId(3), lat(1));
    assert!(matches!(bad(t), SimError::UnknownNode { .. }));
    let mut t = chain();
    t.links[1].config.loss = 2.0;
    let e = bad(t);
    assert_eq!(
        e.to_string(),
        "topology link #1: loss must be a probability in 0..=1, got 2"
    );
    let mut t = chain();
    t.events.push(LinkEvent {
        at: ms(1),
        link: 2,
        change: LinkChange::Down,
    });
    assert!(matches!(
        bad(t),
        SimError::InvalidLinkEvent { index: 0, .. }
    ));
}

#[test]
fn interface_numbers_follow_link_order() {
    let t = lan();
    assert_eq!(t.interfaces(NodeId(3)), vec![0, 1]);
    assert_eq!(t.interface_of(NodeId(3), 1), Some(1));
    assert_eq!(t.interface_of(NodeId(4), 1), Some(0));
    assert_eq!(t.interface_of(NodeId(4), 0), None);
}
