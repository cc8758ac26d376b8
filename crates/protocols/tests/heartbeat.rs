//! The heartbeat failure detector through a real kernel: the shared hex vectors, one session
//! shared by three channels raising the same notices on each, restarts, stale heartbeats,
//! where heartbeats go and that data passes through.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{hex, vectors};

use viastack_kernel::event::SENDABLE;
use viastack_kernel::layers::{Device, Ghost};
use viastack_kernel::{
    ChannelId, Dest, Direction, Duration, Event, Instant, Kernel, KernelConfig, LayerRef, Message,
    NodeId, Output, Qos, Sendable, SessionId,
};
use viastack_protocols::events::{notice_peer, ALIVE, SUSPECT};
use viastack_protocols::heartbeat::{Config, Heartbeat, HeartbeatRepr, HeartbeatSession};

const ME: u32 = 0;
const NODES: u32 = 3;

/// What left the node: (time, channel, what) where what is a notice or a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Notice(&'static str, ChannelId, NodeId),
    Data(ChannelId, NodeId, Vec<u8>),
    Sent(NodeId, Vec<u8>),
}

struct Node {
    kernel: Kernel,
    channels: Vec<ChannelId>,
    device: SessionId,
    fd: SessionId,
    now: Instant,
}

/// Node 0 of 3: channels audio, video, data over one device and ONE heartbeat session, with
/// a ghost on top of each (so notices travel through a layer above the detector).
fn node(config: Config) -> Node {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let fd: LayerRef = Arc::new(Heartbeat::new("fd", NodeId(ME), NODES, config));
    let top: LayerRef = Arc::new(Ghost::new("top"));
    let qos = Qos::new("q", vec![dev.clone(), fd.clone(), top]).unwrap();
    let mut kernel = Kernel::new(KernelConfig {
        node: NodeId(ME),
        ..KernelConfig::default()
    });
    let device = kernel.create_session(&dev);
    let fd_session = kernel.create_session(&fd);
    let mut channels = vec![];
    for name in ["audio", "video", "data"] {
        let ch = kernel.create_channel(name, &qos);
        let mut c = kernel.cursor(ch).unwrap();
        c.set_session(device).unwrap();
        c.up();
        c.set_session(fd_session).unwrap();
        kernel.start_channel(ch, Instant::ZERO).unwrap();
        channels.push(ch);
    }
    Node {
        kernel,
        channels,
        device,
        fd: fd_session,
        now: Instant::ZERO,
    }
}

impl Node {
    fn drain(&mut self, out: &mut Vec<(Instant, Out)>) {
        while let Some(o) = self.kernel.poll_output() {
            let item = match o {
                Output::Transmit(t) => {
                    let Dest::Node(to) = t.dest else {
                        panic!("heartbeats are unicast")
                    };
                    Out::Sent(to, t.message.as_slice().to_vec())
                }
                Output::Deliver(e) => {
                    if let Some(s) = e.sendable_ref() {
                        Out::Data(e.channel(), s.source, s.message.as_slice().to_vec())
                    } else if let Some(peer) = notice_peer(&e) {
                        let name = if e.ty() == SUSPECT.id() {
                            "Suspect"
                        } else if e.ty() == ALIVE.id() {
                            "Alive"
                        } else {
                            panic!("unexpected notice {:?}", e.ty())
                        };
                        Out::Notice(name, e.channel(), peer)
                    } else {
                        continue; // ChannelInit
                    }
                }
            };
            out.push((self.now, item));
        }
    }

    /// Runs timers up to `t`.
    fn advance(&mut self, t: Instant) -> Vec<(Instant, Out)> {
        let mut out = vec![];
        self.drain(&mut out);
        while let Some(due) = self.kernel.poll_timeout().filter(|d| *d <= t) {
            self.now = due;
            self.kernel.handle_timeout(due);
            self.drain(&mut out);
        }
        self.now = t;
        out
    }

    fn receive(&mut self, from: u32, bytes: Vec<u8>) -> Vec<(Instant, Out)> {
        self.kernel.handle_datagram(
            self.now,
            self.device,
            NodeId(from),
            Message::from_wire(bytes),
        );
        let mut out = vec![];
        self.drain(&mut out);
        out
    }

    fn heartbeat(&mut self, from: u32, epoch: u32, seq: u64) -> Vec<(Instant, Out)> {
        let mut b = vec![0, 0];
        b.extend_from_slice(HeartbeatRepr { epoch, seq }.emit().as_slice());
        self.receive(from, b)
    }

    fn suspected(&self) -> Vec<NodeId> {
        self.kernel
            .session::<HeartbeatSession>(self.fd)
            .unwrap()
            .suspected()
    }
}

fn notices(out: &[(Instant, Out)]) -> Vec<(Instant, &'static str, u32, NodeId)> {
    out.iter()
        .filter_map(|(t, o)| match o {
            Out::Notice(n, ch, p) => Some((*t, *n, ch.0, *p)),
            _ => None,
        })
        .collect()
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

#[test]
fn shared_vectors_decode_or_are_counted() {
    for v in &vectors("heartbeat") {
        let name = v["name"].as_str().unwrap();
        let bytes = hex(v["hex"].as_str().unwrap());
        let mut n = node(Config::default());
        n.drain(&mut vec![]); // the start-up heartbeats
        let before = n.kernel.counters();
        let got = n.receive(1, bytes.clone());
        let counters = n.kernel.counters();
        if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
            assert!(got.is_empty(), "{name}: delivered {got:?}");
            assert_eq!(counters.get(err), Some(&1), "{name}: {counters:?}");
            continue;
        }
        assert_eq!(counters, before, "{name}: nothing counted");
        let ch = n.channels[v["channel"].as_u64().unwrap() as usize].0;
        match v["kind"].as_str().unwrap() {
            "data" => {
                let payload = hex(v["payload_hex"].as_str().unwrap());
                assert_eq!(
                    got,
                    vec![(
                        Instant::ZERO,
                        Out::Data(ChannelId(ch), NodeId(1), payload.clone())
                    )],
                    "{name}"
                );
                // Sending the payload down that channel reproduces the vector.
                n.kernel
                    .inject(
                        Instant::ZERO,
                        Event::sendable(
                            SENDABLE.id(),
                            Direction::Down,
                            ChannelId(ch),
                            Sendable::new(
                                NodeId(ME),
                                Dest::Node(NodeId(1)),
                                Message::from_payload(&payload),
                            ),
                        ),
                    )
                    .unwrap();
                let mut out = vec![];
                n.drain(&mut out);
                assert_eq!(
                    out,
                    vec![(Instant::ZERO, Out::Sent(NodeId(1), bytes))],
                    "{name}"
                );
            }
            "heartbeat" => {
                // Consumed: nothing reaches the application.
                assert!(got.is_empty(), "{name}: {got:?}");
                let repr = HeartbeatRepr {
                    epoch: v["epoch"].as_u64().unwrap() as u32,
                    seq: v["seq"].as_u64().unwrap(),
                };
                // The repr emits the vector's bytes after the tag (trailing bytes aside).
                let emitted = repr.emit();
                assert_eq!(
                    emitted.as_slice(),
                    &bytes[2..2 + viastack_protocols::heartbeat::HEARTBEAT_LEN],
                    "{name}"
                );
            }
            k => panic!("{name}: unknown kind {k}"),
        }
    }
}

#[test]
fn heartbeats_go_to_every_peer_down_the_first_channel_every_interval() {
    let mut n = node(Config::default());
    let mut out = vec![];
    n.drain(&mut out); // the heartbeats sent when the first channel started
    out.extend(n.advance(ms(1000)));
    let sent: Vec<(Instant, NodeId, Vec<u8>)> = out
        .iter()
        .filter_map(|(t, o)| match o {
            Out::Sent(to, b) => Some((*t, *to, b.clone())),
            _ => None,
        })
        .collect();
    // At start and at 100, 200, ..., 1000 ms: 11 rounds to each of the 2 peers.
    assert_eq!(sent.len(), 22, "{sent:?}");
    let epoch = u32::from_be_bytes(sent[0].2[3..7].try_into().unwrap());
    assert_ne!(epoch, 0);
    for (i, (t, to, b)) in sent.iter().enumerate() {
        let round = (i / 2) as u64;
        assert_eq!(*t, ms(100 * round), "round {round}");
        assert_eq!(*to, NodeId(1 + (i % 2) as u32));
        assert_eq!(b[..3], [0, 0, 1], "channel 0, kind heartbeat");
        let mut m = Message::from_wire(b[3..].to_vec());
        assert_eq!(
            HeartbeatRepr::parse(&mut m).unwrap(),
            HeartbeatRepr { epoch, seq: round }
        );
    }
    assert_eq!(n.kernel.counters().get("fd.sent"), Some(&22));
}

#[test]
fn shared_session_suspects_on_all_three_channels_in_the_same_order_then_alive() {
    let mut n = node(Config::default());
    let mut all = vec![];
    // Peer 1 keeps beating every 100 ms; peer 2 beats until 200 ms, then falls silent.
    for k in 0..=12u64 {
        all.extend(n.advance(ms(100 * k)));
        all.extend(n.heartbeat(1, 11, k));
        if k <= 2 {
            all.extend(n.heartbeat(2, 22, k));
        }
    }
    let got = notices(&all);
    // Last heard at 200 ms; timeout 500 ms: suspected at the first tick at or after 700 ms.
    assert_eq!(
        got,
        vec![
            (ms(700), "Suspect", 0, NodeId(2)),
            (ms(700), "Suspect", 1, NodeId(2)),
            (ms(700), "Suspect", 2, NodeId(2)),
        ],
        "{all:?}"
    );
    // The three copies are consecutive at the application: nothing between them.
    let pos: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, (_, o))| matches!(o, Out::Notice(..)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(pos, vec![pos[0], pos[0] + 1, pos[0] + 2]);
    assert_eq!(n.suspected(), vec![NodeId(2)]);

    // Peer 2 comes back (same incarnation, a newer round): Alive on the three channels.
    n.advance(ms(1250));
    let back = n.heartbeat(2, 22, 3);
    assert_eq!(
        notices(&back),
        vec![
            (ms(1250), "Alive", 0, NodeId(2)),
            (ms(1250), "Alive", 1, NodeId(2)),
            (ms(1250), "Alive", 2, NodeId(2)),
        ]
    );
    assert!(n.suspected().is_empty());
    let c = n.kernel.counters();
    assert_eq!(c.get("fd.suspected"), Some(&1), "{c:?}");
    assert_eq!(c.get("fd.alive"), Some(&1), "{c:?}");
    // Peer 1 beat all along: never suspected, no notice about it.
    assert!(notices(&all).iter().all(|(_, _, _, p)| *p != NodeId(1)));
}

#[test]
fn two_silent_peers_are_announced_in_node_order_on_each_channel() {
    let mut n = node(Config::default());
    let all = n.advance(ms(600));
    let got: Vec<(&str, u32, NodeId)> = notices(&all)
        .iter()
        .map(|(_, a, b, c)| (*a, *b, *c))
        .collect();
    assert_eq!(
        got,
        vec![
            ("Suspect", 0, NodeId(1)),
            ("Suspect", 1, NodeId(1)),
            ("Suspect", 2, NodeId(1)),
            ("Suspect", 0, NodeId(2)),
            ("Suspect", 1, NodeId(2)),
            ("Suspect", 2, NodeId(2)),
        ]
    );
    assert!(notices(&all).iter().all(|(t, ..)| *t == ms(500)));
}

#[test]
fn stale_rounds_and_old_incarnations_are_not_life() {
    let mut n = node(Config::default());
    n.heartbeat(1, 11, 5);
    n.heartbeat(2, 22, 0);
    n.advance(ms(300));
    // A duplicate and a reordered older round from peer 1 do not refresh it.
    n.heartbeat(1, 11, 5);
    n.heartbeat(1, 11, 4);
    n.heartbeat(2, 22, 1);
    let out = n.advance(ms(500));
    assert_eq!(
        notices(&out).iter().map(|x| (x.1, x.3)).collect::<Vec<_>>(),
        vec![("Suspect", NodeId(1)); 3],
        "peer 1 was last heard at 0 ms"
    );
    assert_eq!(n.kernel.counters().get("fd.stale"), Some(&2));

    // Peer 1 restarts (new epoch 12): Alive. A late heartbeat of epoch 11 is then stale.
    let back = n.heartbeat(1, 12, 0);
    assert_eq!(
        notices(&back)
            .iter()
            .map(|x| (x.1, x.3))
            .collect::<Vec<_>>(),
        vec![("Alive", NodeId(1)); 3]
    );
    assert!(notices(&n.heartbeat(1, 11, 9)).is_empty());
    let c = n.kernel.counters();
    assert_eq!(c.get("fd.stale_epoch"), Some(&1), "{c:?}");
    assert_eq!(c.get("fd.peer_restarted"), Some(&1), "{c:?}");
}

#[test]
fn a_restart_within_the_timeout_is_still_reported() {
    let mut n = node(Config::default());
    n.heartbeat(1, 11, 0);
    n.heartbeat(2, 22, 0);
    n.advance(ms(100));
    n.heartbeat(2, 22, 1);
    // Peer 1 is back under a new incarnation before anyone could suspect it.
    let out = n.heartbeat(1, 13, 0);
    let got: Vec<(&str, u32, NodeId)> = notices(&out)
        .iter()
        .map(|(_, a, b, c)| (*a, *b, *c))
        .collect();
    assert_eq!(
        got,
        vec![
            ("Suspect", 0, NodeId(1)),
            ("Suspect", 1, NodeId(1)),
            ("Suspect", 2, NodeId(1)),
            ("Alive", 0, NodeId(1)),
            ("Alive", 1, NodeId(1)),
            ("Alive", 2, NodeId(1)),
        ]
    );
    assert!(n.suspected().is_empty());
}

#[test]
fn heartbeats_from_self_or_unknown_nodes_are_dropped() {
    let mut n = node(Config::default());
    n.heartbeat(ME, 5, 0);
    n.heartbeat(NODES + 4, 5, 0);
    let c = n.kernel.counters();
    assert_eq!(c.get("fd.from_self"), Some(&1), "{c:?}");
    assert_eq!(c.get("fd.unknown_peer"), Some(&1), "{c:?}");
}

#[test]
fn custom_timing_is_honoured() {
    let mut n = node(Config {
        interval: Duration::from_millis(10),
        timeout: Duration::from_millis(35),
    });
    let out = n.advance(ms(100));
    // Ticks at 10, 20, 30, 40 ms: silent since 0 → suspected at the 40 ms tick.
    assert!(!notices(&out).is_empty());
    assert!(notices(&out).iter().all(|(t, ..)| *t == ms(40)), "{out:?}");
}

/// A node that was itself stopped (its ticks came late) does not suspect peers it could not
/// listen to; a peer that stays silent after it resumes is still suspected, one timeout later.
#[test]
fn a_node_that_was_stalled_does_not_suspect_its_peers_for_its_own_silence() {
    let mut n = node(Config::default());
    let mut all = vec![];
    for k in 0..=2u64 {
        all.extend(n.advance(ms(100 * k)));
        all.extend(n.heartbeat(1, 11, k));
        all.extend(n.heartbeat(2, 22, k));
    }
    // Stopped from 200 ms to 2.2 s: the next tick fires only then, 2 s late.
    n.now = ms(2200);
    n.kernel.handle_timeout(ms(2200));
    n.drain(&mut all);
    assert!(notices(&all).is_empty(), "{all:?}");
    assert_eq!(n.kernel.counters().get("fd.local_stall"), Some(&1));
    // Peer 1 is heard again after the stall; peer 2 stays silent and is suspected once its
    // silence outside the stall reaches the timeout (200 ms before, 100 ms after the late
    // tick's first interval, so by 2.6 s).
    for k in 3..=10u64 {
        all.extend(n.advance(ms(2200 + 50 * k)));
        all.extend(n.heartbeat(1, 11, k));
    }
    let got: Vec<(&str, NodeId)> = notices(&all).iter().map(|(_, a, _, p)| (*a, *p)).collect();
    assert_eq!(got, vec![("Suspect", NodeId(2)); 3], "{all:?}");
    let at = notices(&all)[0].0;
    assert!(at > ms(2200) && at <= ms(2700), "suspected at {at}");
}

/// A node stopped before its first tick (right after it started) sees that stall too: its
/// first tick, 2 s late, suspects nobody (issue 18: a group stopped as soon as its view formed,
/// within the detector's first interval, split on resumption).
#[test]
fn a_node_stalled_before_its_first_tick_does_not_suspect_its_peers() {
    let mut n = node(Config::default());
    let mut all = vec![];
    all.extend(n.heartbeat(1, 11, 0));
    all.extend(n.heartbeat(2, 22, 0));
    n.now = ms(2200);
    n.kernel.handle_timeout(ms(2200));
    n.drain(&mut all);
    assert!(notices(&all).is_empty(), "{all:?}");
    assert_eq!(n.kernel.counters().get("fd.local_stall"), Some(&1));
}
