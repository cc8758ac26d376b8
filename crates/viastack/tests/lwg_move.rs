//! Moving a light group on the embedding API (`Channel::move_light_group`; crates/group/src/
//! lwg.rs, "Mapping light groups to heavy groups") on real loopback UDP: three nodes as threads
//! of this process run one `lwg` session over two heavy groups (`vs` and `vs2` over one device
//! and failure detector: a node on real sockets has one device);
//! light channel `a` rides the first, `d` the second. Once every member sees a light view of
//! all three on `a`, node 0 moves `a` to `d`'s heavy group: every member installs a switch view
//! on `a` (its id carries the move count above the heavy counter) and a message sent on `a`
//! afterwards reaches every member. A move to the heavy group `a` already rides is refused
//! with an `LwgRefused` notice. Waits are on events with timeouts, never sleeps.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use viastack::{Deployment, Node, NodeEvent, NodeId, Notice, RecvError};

const STACK: &str = r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.hb]
kind = "heartbeat"
interval = "50ms"
timeout = "1s"
[layers.vs]
kind = "vsync"
confirm = "200ms"
[layers.vs2]
kind = "vsync"
confirm = "200ms"
[layers.lwg]
kind = "lwg"
[qos.light]
layers = ["dev", "sum", "hb", "vs", "lwg"]
[qos.light2]
layers = ["dev", "sum", "hb", "vs2", "lwg"]
[channels.a]
qos = "light"
bind = { lwg = "the-lwg" }
[channels.b]
qos = "light"
bind = { lwg = "the-lwg" }
[channels.d]
qos = "light2"
bind = { lwg = "the-lwg" }
[sessions.the-lwg]
layer = "lwg"
"#;

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let socks: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind"))
        .collect();
    socks
        .iter()
        .map(|s| s.local_addr().expect("addr"))
        .collect()
}

/// Receives on every node (round robin, short waits) until `done` holds or `limit` passes.
fn pump(
    nodes: &[Node],
    seen: &mut [Vec<NodeEvent>],
    limit: Duration,
    mut done: impl FnMut(&[Vec<NodeEvent>]) -> bool,
) {
    let rounds = (limit.as_millis() / 5).max(1);
    for _ in 0..rounds {
        for (i, n) in nodes.iter().enumerate() {
            loop {
                match n.recv_timeout(Duration::from_millis(1)) {
                    Ok(e) => seen[i].push(e),
                    Err(RecvError::Timeout) => break,
                    Err(RecvError::Closed) => panic!("node {i} closed"),
                }
            }
        }
        if done(seen) {
            return;
        }
    }
    panic!("not done within {limit:?}: {seen:?}");
}

/// The last view (counter, member count) node events show on channel `ch`.
fn last_view(events: &[NodeEvent], ch: &str) -> Option<(u64, usize)> {
    events.iter().rev().find_map(|e| match e {
        NodeEvent::Notice(Notice::View {
            channel,
            id,
            members,
            ..
        }) if &**channel == ch => Some((id.counter, members.len())),
        _ => None,
    })
}

#[test]
fn a_light_group_moves_on_the_embedding_api() {
    let addrs = free_addrs(3);
    let nodes: Vec<Node> = (0..3)
        .map(|i| {
            Node::builder()
                .stack_text("lwg-move.toml", STACK)
                .deployment(Deployment::new(addrs.clone()).with_id(NodeId(i)))
                .linger(Duration::from_millis(300))
                .open()
                .expect("open")
        })
        .collect();
    let mut seen: Vec<Vec<NodeEvent>> = vec![Vec::new(); 3];
    let all_three = |ev: &[Vec<NodeEvent>], ch: &str| {
        ev.iter()
            .all(|e| last_view(e, ch).is_some_and(|(_, n)| n == 3))
    };
    pump(&nodes, &mut seen, Duration::from_secs(30), |ev| {
        all_three(ev, "a") && all_three(ev, "d")
    });

    // Refused: `b` rides the same heavy group as `a`.
    nodes[0]
        .channel("a")
        .unwrap()
        .move_light_group("b")
        .unwrap();
    pump(&nodes, &mut seen, Duration::from_secs(10), |ev| {
        ev[0].iter().any(|e| {
            matches!(e, NodeEvent::Notice(Notice::Other { channel, kind, .. })
                if &**channel == "a" && *kind == "LwgRefused")
        })
    });

    nodes[0]
        .channel("a")
        .unwrap()
        .move_light_group("d")
        .unwrap();
    // Every member installs a light view of all three with the move count (1) above the heavy
    // counter.
    pump(&nodes, &mut seen, Duration::from_secs(30), |ev| {
        ev.iter()
            .all(|e| last_view(e, "a").is_some_and(|(counter, n)| counter >> 40 >= 1 && n == 3))
    });
    nodes[1]
        .channel("a")
        .unwrap()
        .send_to_all(b"after the move".to_vec())
        .unwrap();
    pump(&nodes, &mut seen, Duration::from_secs(30), |ev| {
        ev.iter().all(|e| {
            e.iter().any(|x| {
                matches!(x, NodeEvent::Message(m)
                    if &*m.channel == "a" && m.payload == b"after the move")
            })
        })
    });
    for n in nodes {
        n.close().expect("close");
    }
}
