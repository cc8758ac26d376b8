//! The intermedia sync layer through a real kernel: the shared hex vectors, the playout
//! buffer releasing audio and video of one sender at pts + a fixed offset, late media within
//! the skew, too-late media dropped, per-sender mappings, restarts and the memory bound.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{hex, vectors};

use viastack_kernel::event::SENDABLE;
use viastack_kernel::layers::Device;
use viastack_kernel::{
    ChannelId, Dest, Direction, Duration, Event, Instant, Kernel, KernelConfig, LayerRef, Message,
    NodeId, Output, Qos, Sendable, SessionId,
};
use viastack_protocols::sync::{Config, Sync, SyncSession};

struct Node {
    kernel: Kernel,
    channels: Vec<ChannelId>,
    device: SessionId,
    sync: SessionId,
    now: Instant,
}

/// (delivery time, channel, source, payload)
type Delivery = (Instant, u32, NodeId, Vec<u8>);

/// Channels audio and video over one device and ONE sync session.
fn node(config: Config) -> Node {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let sync: LayerRef = Arc::new(Sync::new("sync", config));
    let qos = Qos::new("q", vec![dev.clone(), sync.clone()]).unwrap();
    let mut kernel = Kernel::new(KernelConfig::default());
    let device = kernel.create_session(&dev);
    let sync_session = kernel.create_session(&sync);
    let mut channels = vec![];
    for name in ["audio", "video"] {
        let ch = kernel.create_channel(name, &qos);
        let mut c = kernel.cursor(ch).unwrap();
        c.set_session(device).unwrap();
        c.up();
        c.set_session(sync_session).unwrap();
        kernel.start_channel(ch, Instant::ZERO).unwrap();
        channels.push(ch);
    }
    Node {
        kernel,
        channels,
        device,
        sync: sync_session,
        now: Instant::ZERO,
    }
}

impl Node {
    fn drain(&mut self, out: &mut Vec<Delivery>) {
        while let Some(o) = self.kernel.poll_output() {
            if let Output::Deliver(e) = o {
                if let Some(s) = e.sendable_ref() {
                    out.push((
                        self.kernel.now(),
                        e.channel().0,
                        s.source,
                        s.message.as_slice().to_vec(),
                    ));
                }
            }
        }
    }

    fn advance(&mut self, t: Instant, out: &mut Vec<Delivery>) {
        while let Some(due) = self.kernel.poll_timeout().filter(|d| *d <= t) {
            self.kernel.handle_timeout(due);
            self.drain(out);
        }
        self.now = t;
    }

    /// A datagram arriving at `at` (timers before it fire first).
    fn arrive(&mut self, at: Instant, from: u32, bytes: Vec<u8>, out: &mut Vec<Delivery>) {
        self.advance(at, out);
        self.kernel
            .handle_datagram(at, self.device, NodeId(from), Message::from_wire(bytes));
        self.drain(out);
    }

    fn held(&self) -> usize {
        self.kernel
            .session::<SyncSession>(self.sync)
            .unwrap()
            .held()
    }
}

fn framed(channel: u16, epoch: u32, pts: Instant, payload: &[u8]) -> Vec<u8> {
    let mut v = channel.to_be_bytes().to_vec();
    v.extend_from_slice(&epoch.to_be_bytes());
    v.extend_from_slice(&pts.as_nanos().to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

#[test]
fn shared_vectors_decode_or_are_counted() {
    for v in &vectors("sync") {
        let name = v["name"].as_str().unwrap();
        let mut n = node(Config::default());
        let mut got = vec![];
        n.arrive(ms(5), 3, hex(v["hex"].as_str().unwrap()), &mut got);
        n.advance(ms(1000), &mut got);
        if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
            assert!(got.is_empty(), "{name}: delivered {got:?}");
            assert_eq!(n.kernel.counters().get(err), Some(&1), "{name}");
            continue;
        }
        // The first message of a source is presented playout_delay after it arrived.
        let payload = hex(v["payload_hex"].as_str().unwrap());
        let ch = v["channel"].as_u64().unwrap() as u32;
        assert_eq!(
            got,
            vec![(ms(105), ch, NodeId(3), payload.clone())],
            "{name}"
        );
        // Sending reproduces the layout: epoch (random, non-zero) then the sender's clock.
        let pts = v["pts"].as_u64().unwrap();
        if pts < 1 << 40 {
            let mut m = node(Config::default());
            let at = Instant::from_nanos(pts);
            m.kernel
                .inject(
                    at,
                    Event::sendable(
                        SENDABLE.id(),
                        Direction::Down,
                        m.channels[ch as usize],
                        Sendable::new(
                            NodeId(0),
                            Dest::Node(NodeId(3)),
                            Message::from_payload(&payload),
                        ),
                    ),
                )
                .unwrap();
            let t = std::iter::from_fn(|| m.kernel.poll_output())
                .find_map(|o| match o {
                    Output::Transmit(t) => Some(t),
                    Output::Deliver(_) => None,
                })
                .unwrap_or_else(|| panic!("{name}: nothing sent"));
            let want = hex(v["hex"].as_str().unwrap());
            let b = t.message.as_slice();
            assert_eq!(b.len(), want.len(), "{name}");
            assert_eq!(b[..2], want[..2], "{name}: channel tag");
            assert_ne!(b[2..6], [0, 0, 0, 0], "{name}: epochs are non-zero");
            assert_eq!(b[6..], want[6..], "{name}: pts and payload");
        }
    }
}

/// Audio every 20 ms and video every 33 ms from node 1, with transit times that vary; the
/// first message's transit is 10 ms, so on-time media are presented at pts + 110 ms.
#[test]
fn audio_and_video_are_presented_in_step_within_the_skew() {
    let config = Config::default(); // playout 100 ms, max skew 80 ms
    let mut n = node(config);
    let mut got = vec![];
    let mut sends = vec![];
    for k in 0..50u64 {
        sends.push((ms(20 * k), 0u16));
        sends.push((ms(33 * k), 1u16));
    }
    sends.sort();
    // Transit: 10 ms for the first, then a pattern from 0 to 250 ms.
    let transit = |i: usize| -> u64 {
        if i == 0 {
            10
        } else {
            [0, 5, 40, 109, 110, 111, 150, 189, 190, 191, 250][i % 11]
        }
    };
    let mut arrivals: Vec<(Instant, u16, Instant)> = sends
        .iter()
        .enumerate()
        .map(|(i, (pts, ch))| (*pts + Duration::from_millis(transit(i)), *ch, *pts))
        .collect();
    arrivals.sort();
    for (at, ch, pts) in &arrivals {
        let payload = pts.as_nanos().to_be_bytes();
        n.arrive(*at, 1, framed(*ch, 9, *pts, &payload), &mut got);
    }
    n.advance(ms(5000), &mut got);
    // The first arrival fixes the mapping: base = its transit, D = base + playout_delay.
    let (first_at, _, first_pts) = arrivals[0];
    let base = first_at - first_pts;
    let d = base + config.playout_delay;
    let mut too_late = 0;
    let mut late = 0;
    for (at, _, pts) in &arrivals {
        let lateness = (*at - *pts).saturating_sub(d);
        if lateness > config.max_skew {
            too_late += 1;
        } else if !lateness.is_zero() {
            late += 1;
        }
    }
    let mut offsets = vec![];
    for (at, _ch, _src, payload) in &got {
        let pts = Instant::from_nanos(u64::from_be_bytes(payload[..8].try_into().unwrap()));
        let offset = *at - pts;
        assert!(offset >= d, "presented early: {offset:?}");
        assert!(offset <= d + config.max_skew, "beyond the skew: {offset:?}");
        offsets.push(offset);
    }
    let c = n.kernel.counters();
    assert_eq!(
        c.get("sync.too_late").copied().unwrap_or(0),
        too_late,
        "{c:?}"
    );
    assert_eq!(c.get("sync.late").copied().unwrap_or(0), late, "{c:?}");
    assert_eq!(got.len() as u64, 100 - too_late);
    assert!(too_late > 0 && late > 0, "the pattern exercises both");
    // On-time media (most of them) are presented at exactly pts + D: zero skew.
    let exact = offsets.iter().filter(|o| **o == d).count() as u64;
    assert_eq!(exact, 100 - too_late - late);
    assert_eq!(n.held(), 0);
}

#[test]
fn held_media_of_both_channels_leave_in_presentation_order() {
    let mut n = node(Config::default());
    let mut got = vec![];
    // First message fixes the offset (transit 0). Then video pts 30 arrives before audio pts 20.
    n.arrive(ms(0), 1, framed(0, 9, ms(0), b"a0"), &mut got);
    n.arrive(ms(31), 1, framed(1, 9, ms(30), b"v30"), &mut got);
    n.arrive(ms(32), 1, framed(0, 9, ms(20), b"a20"), &mut got);
    n.arrive(ms(33), 1, framed(0, 9, ms(30), b"a30"), &mut got);
    n.advance(ms(1000), &mut got);
    let seen: Vec<(Instant, u32, &[u8])> = got
        .iter()
        .map(|(t, c, _, p)| (*t, *c, p.as_slice()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (ms(100), 0, &b"a0"[..]),
            (ms(120), 0, &b"a20"[..]),
            (ms(130), 1, &b"v30"[..]),
            (ms(130), 0, &b"a30"[..]),
        ]
    );
}

#[test]
fn each_sender_has_its_own_clock_mapping_and_a_restart_resets_it() {
    let mut n = node(Config::default());
    let mut got = vec![];
    // Node 1's clock is 1 s ahead of ours, node 2's is at 0: both mapped from their first message.
    n.arrive(ms(10), 1, framed(0, 5, ms(1005), b"x"), &mut got);
    n.arrive(ms(10), 2, framed(1, 6, ms(0), b"y"), &mut got);
    n.advance(ms(500), &mut got);
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        vec![ms(110), ms(110)]
    );
    // Node 1 restarts: its clock starts over; the new epoch resets the mapping.
    got.clear();
    n.arrive(ms(600), 1, framed(0, 7, ms(3), b"z"), &mut got);
    // A late message of the old incarnation is dropped.
    n.arrive(ms(601), 1, framed(0, 5, ms(1100), b"old"), &mut got);
    n.advance(ms(1000), &mut got);
    assert_eq!(
        got.iter().map(|g| (g.0, g.3.clone())).collect::<Vec<_>>(),
        vec![(ms(700), b"z".to_vec())]
    );
    let c = n.kernel.counters();
    assert_eq!(c.get("sync.source_restarted"), Some(&1), "{c:?}");
    assert_eq!(c.get("sync.stale_epoch"), Some(&1), "{c:?}");
}

#[test]
fn the_buffer_is_bounded() {
    let mut n = node(Config {
        capacity: 3,
        ..Config::default()
    });
    let mut got = vec![];
    for k in 0..10 {
        n.arrive(ms(k), 1, framed(0, 9, ms(k), &[k as u8]), &mut got);
    }
    assert_eq!(n.held(), 3);
    assert_eq!(n.kernel.counters().get("sync.overflow"), Some(&7));
    n.advance(ms(1000), &mut got);
    assert_eq!(got.len(), 3);
}

#[test]
fn closing_a_channel_drops_its_held_media_and_keeps_the_others_on_time() {
    let mut n = node(Config::default());
    let mut got = vec![];
    n.arrive(ms(0), 1, framed(0, 9, ms(0), b"a"), &mut got);
    n.arrive(ms(1), 1, framed(1, 9, ms(1), b"v"), &mut got);
    n.kernel.close_channel(n.channels[1], ms(2)).unwrap();
    assert_eq!(n.kernel.counters().get("sync.flushed"), Some(&1));
    n.advance(ms(1000), &mut got);
    assert_eq!(got, vec![(ms(100), 0, NodeId(1), b"a".to_vec())]);
}
