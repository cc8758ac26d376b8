//! The overlay socket (issue 16 §5) on real loopback UDP: several nodes as threads of this
//! process join `stacks/overlay-app.toml`, see each other as neighbours (the Delaunay
//! triangulation of their points), become stable, exchange multicasts, floods and unicasts
//! without a service and multicasts with one (h2hack), report their status (neighbours, one leader, live
//! instances), and see a neighbour leave. Waits are on events with timeouts, never sleeps.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use viastack::overlay::{Delivery, DtAddr, OverlayError, OverlayEvent, OverlaySocket};
use viastack::{Deployment, Node, NodeId, RecvError};

/// The shipped stack, with the service path made absolute (tests run in the crate's folder).
fn stack() -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    include_str!("../../../stacks/overlay-app.toml").replace(
        "../specs/h2hack.scxml",
        &format!("{root}/specs/h2hack.scxml"),
    )
}

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let socks: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind"))
        .collect();
    socks
        .iter()
        .map(|s| s.local_addr().expect("addr"))
        .collect()
}

fn join(addrs: &[SocketAddr], id: u32) -> OverlaySocket {
    let mut s = OverlaySocket::join_with(
        Node::builder()
            .stack_text("overlay-app.toml", stack())
            .deployment(Deployment::new(addrs.to_vec()).with_id(NodeId(id)))
            .linger(Duration::from_millis(500)),
    )
    .expect("join");
    s.set_settle(Duration::from_secs(2));
    s
}

/// Receives on every socket (round robin, short waits) until `done` holds or `limit` passes;
/// returns every socket's events in order.
fn pump(
    socks: &mut [OverlaySocket],
    limit: Duration,
    mut done: impl FnMut(&[Vec<OverlayEvent>]) -> bool,
) -> Vec<Vec<OverlayEvent>> {
    let mut seen: Vec<Vec<OverlayEvent>> = vec![Vec::new(); socks.len()];
    let rounds = (limit.as_millis() / 20).max(1);
    for _ in 0..rounds {
        for (i, s) in socks.iter_mut().enumerate() {
            match s.recv_timeout(Duration::from_millis(5)) {
                Ok(e) => seen[i].push(e),
                Err(RecvError::Timeout) => {}
                Err(RecvError::Closed) => panic!("node {i} closed"),
            }
        }
        if done(&seen) {
            return seen;
        }
    }
    panic!("not done within {limit:?}: {seen:?}");
}

fn messages(events: &[OverlayEvent]) -> Vec<(NodeId, Option<u32>, Vec<u8>)> {
    events
        .iter()
        .filter_map(|e| match e {
            OverlayEvent::Message(m) => Some((m.from, m.service, m.payload.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn nodes_form_one_overlay_and_exchange_messages_in_every_mode() {
    let n = 4;
    let addrs = free_addrs(n);
    let mut socks: Vec<OverlaySocket> = (0..n as u32).map(|i| join(&addrs, i)).collect();
    let service = socks[0]
        .services()
        .into_iter()
        .flatten()
        .next()
        .expect("a service lane");

    // Every socket becomes stable, with neighbours; four points in general position have a
    // connected triangulation, so every node has at least two neighbours.
    pump(&mut socks, Duration::from_secs(30), |seen| {
        seen.iter().all(|ev| {
            let last_stable = ev.iter().rposition(|e| *e == OverlayEvent::Stable);
            let last_change = ev.iter().rposition(|e| {
                matches!(
                    e,
                    OverlayEvent::NeighbourAdded(_) | OverlayEvent::NeighbourRemoved(_)
                )
            });
            matches!((last_stable, last_change), (Some(s), Some(c)) if s > c)
        })
    });
    let status: Vec<_> = socks.iter().map(|s| s.status().expect("status")).collect();
    for (i, st) in status.iter().enumerate() {
        assert!(st.stable, "{st:?}");
        assert!(st.neighbours.len() >= 2, "node {i}: {st:?}");
        assert!(!st.neighbours.contains(&NodeId(i as u32)));
        assert_eq!(
            st.neighbours.iter().copied().collect::<BTreeSet<_>>(),
            *socks[i].neighbours(),
            "the notices and the overlay agree"
        );
        assert_eq!(st.topology, "dt");
        assert!(st.logical.is_some());
        assert_eq!(st.services.len(), 1, "{st:?}");
        assert_eq!(st.services[0].service_id, service);
    }
    // Symmetric neighbourhoods and one leader.
    for (i, st) in status.iter().enumerate() {
        for nb in &st.neighbours {
            assert!(
                status[nb.0 as usize].neighbours.contains(&NodeId(i as u32)),
                "{i} lists {nb}, not the other way round: {status:?}"
            );
        }
    }
    assert_eq!(status.iter().filter(|s| s.leader).count(), 1, "{status:?}");

    // Multicast and flood without a service, multicast with h2hack, unicast both ways.
    socks[0]
        .send(Delivery::Multicast, None, b"m0".to_vec())
        .expect("multicast");
    socks[1]
        .send(Delivery::Flood, None, b"f1".to_vec())
        .expect("flood");
    socks[2]
        .send(Delivery::Multicast, Some(service), b"h2".to_vec())
        .expect("service multicast");
    socks[3]
        .send(Delivery::Unicast(NodeId(0)), None, b"u3".to_vec())
        .expect("unicast");
    // A unicast to node 1's point (its logical address, as its status gives it).
    let point = |st: &viastack::overlay::Status| -> DtAddr {
        let text = st.logical.as_deref().expect("a point");
        let (x, y) = text
            .trim_matches(|c| c == '(' || c == ')')
            .split_once(',')
            .expect("(x,y)");
        DtAddr::new(x.parse().expect("x"), y.parse().expect("y")).expect("in range")
    };
    socks[2]
        .send(
            Delivery::UnicastLogical(point(&status[1])),
            None,
            b"l2".to_vec(),
        )
        .expect("logical unicast");
    let want = |i: usize| -> BTreeSet<(NodeId, Option<u32>, Vec<u8>)> {
        let mut w = BTreeSet::new();
        if i != 0 {
            w.insert((NodeId(0), None, b"m0".to_vec()));
        }
        if i != 1 {
            w.insert((NodeId(1), None, b"f1".to_vec()));
        }
        if i != 2 {
            w.insert((NodeId(2), Some(service), b"h2".to_vec()));
        }
        if i == 0 {
            w.insert((NodeId(3), None, b"u3".to_vec()));
        }
        if i == 1 {
            w.insert((NodeId(2), None, b"l2".to_vec()));
        }
        w
    };
    let seen = pump(&mut socks, Duration::from_secs(20), |seen| {
        (0..n).all(|i| messages(&seen[i]).into_iter().collect::<BTreeSet<_>>() == want(i))
    });
    for (i, ev) in seen.iter().enumerate() {
        let got = messages(ev);
        assert_eq!(
            got.len(),
            want(i).len(),
            "node {i}: a message twice: {got:?}"
        );
    }

    // Refusals: no such service; per-message flood on a service lane.
    assert!(matches!(
        socks[0].send(Delivery::Multicast, Some(service ^ 1), vec![1]),
        Err(OverlayError::NoService(_))
    ));
    assert!(matches!(
        socks[0].send(Delivery::Flood, Some(service), vec![1]),
        Err(OverlayError::Unsupported(_))
    ));

    // A node leaves: its neighbours hear of it (goodbye), and become unstable then stable.
    let gone = socks.pop().expect("node 3");
    let gone_id = gone.id();
    let had: BTreeSet<NodeId> = status[3].neighbours.iter().copied().collect();
    gone.leave().expect("leave");
    let seen = pump(&mut socks, Duration::from_secs(30), |seen| {
        had.iter().all(|nb| {
            let ev = &seen[nb.0 as usize];
            let removed = ev
                .iter()
                .position(|e| *e == OverlayEvent::NeighbourRemoved(gone_id));
            let stable = ev.iter().rposition(|e| *e == OverlayEvent::Stable);
            matches!((removed, stable), (Some(r), Some(s)) if s > r)
        })
    });
    for nb in &had {
        assert!(seen[nb.0 as usize].contains(&OverlayEvent::Unstable));
    }
    let by_node: BTreeMap<NodeId, Vec<NodeId>> = socks
        .iter()
        .map(|s| {
            let st = s.status().expect("status");
            (st.node, st.neighbours)
        })
        .collect();
    for (node, nbs) in &by_node {
        assert!(!nbs.contains(&gone_id), "{node} still lists {gone_id}");
    }
    for s in socks {
        s.leave().expect("leave");
    }
}
