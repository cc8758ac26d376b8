//! The group handle (`viastack::group`) on real loopback UDP: three nodes as threads of this
//! process join a vsync + total-order group, agree on one view of all three, deliver every
//! member's messages in one total order (their own included), and install a view of the two
//! others when one leaves. Waits are on events with timeouts, never sleeps.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use viastack::group::{Group, GroupEvent, View};
use viastack::{Deployment, Node, NodeId, RecvError};

/// `stacks/group.toml`'s layers with failure-detector times loose enough for a loaded machine.
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
[layers.to]
kind = "total-order"
[qos.group]
layers = ["dev", "sum", "hb", "vs", "to"]
[channels.g]
qos = "group"
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

fn join(addrs: &[SocketAddr], id: u32) -> Group {
    Group::join_with(
        Node::builder()
            .stack_text("group.toml", STACK)
            .deployment(Deployment::new(addrs.to_vec()).with_id(NodeId(id)))
            .linger(Duration::from_millis(300)),
    )
    .expect("join")
}

/// Receives on every handle (round robin, short waits) until `done` holds or `limit` passes.
fn pump(
    groups: &mut [Group],
    seen: &mut [Vec<GroupEvent>],
    limit: Duration,
    mut done: impl FnMut(&[Vec<GroupEvent>]) -> bool,
) {
    let rounds = (limit.as_millis() / 5).max(1);
    for _ in 0..rounds {
        for (i, g) in groups.iter_mut().enumerate() {
            loop {
                match g.recv_timeout(Duration::from_millis(1)) {
                    Ok(e) => seen[i].push(e),
                    Err(RecvError::Timeout) => break,
                    Err(RecvError::Closed) => panic!("member {i} closed"),
                }
            }
        }
        if done(seen) {
            return;
        }
    }
    panic!("not done within {limit:?}: {seen:?}");
}

fn last_view(events: &[GroupEvent]) -> Option<&View> {
    events.iter().rev().find_map(|e| match e {
        GroupEvent::View(v) => Some(v),
        _ => None,
    })
}

fn messages(events: &[GroupEvent]) -> Vec<(NodeId, Vec<u8>)> {
    events
        .iter()
        .filter_map(|e| match e {
            GroupEvent::Message(m) => Some((m.from, m.payload.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn three_members_agree_on_views_and_on_one_order() {
    let addrs = free_addrs(3);
    let mut groups: Vec<Group> = (0..3).map(|i| join(&addrs, i)).collect();
    let mut seen: Vec<Vec<GroupEvent>> = vec![Vec::new(); 3];
    let all = vec![NodeId(0), NodeId(1), NodeId(2)];

    // One view of all three, the same id everywhere.
    pump(&mut groups, &mut seen, Duration::from_secs(20), |s| {
        let views: Vec<_> = s.iter().map(|e| last_view(e)).collect();
        views.iter().all(|v| v.is_some_and(|v| v.members == all))
            && views
                .windows(2)
                .all(|w| w[0].map(|v| v.id) == w[1].map(|v| v.id))
    });
    let view = groups[0].view().expect("a view").clone();
    assert_eq!(view.coordinator(), Some(NodeId(0)));
    for g in &groups {
        assert_eq!(g.view(), Some(&view));
    }

    // Every member sends 30 messages, interleaved: all deliver all 90 in one order.
    for k in 0..30u32 {
        for (i, g) in groups.iter().enumerate() {
            g.send(format!("m{i}-{k}").into_bytes()).expect("send");
        }
    }
    let before: Vec<usize> = seen.iter().map(|e| messages(e).len()).collect();
    pump(&mut groups, &mut seen, Duration::from_secs(20), |s| {
        s.iter()
            .zip(&before)
            .all(|(e, b)| messages(e).len() >= b + 90)
    });
    let orders: Vec<_> = seen.iter().map(|e| messages(e)).collect();
    assert_eq!(orders[0].len(), 90, "no duplicates, nothing extra");
    assert_eq!(orders[0], orders[1], "members 0 and 1 differ in order");
    assert_eq!(orders[0], orders[2], "members 0 and 2 differ in order");
    // FIFO per sender, and everyone's own messages delivered to itself.
    for i in 0..3u32 {
        let mine: Vec<Vec<u8>> = orders[0]
            .iter()
            .filter(|(f, _)| *f == NodeId(i))
            .map(|(_, p)| p.clone())
            .collect();
        let sent: Vec<Vec<u8>> = (0..30).map(|k| format!("m{i}-{k}").into_bytes()).collect();
        assert_eq!(mine, sent);
    }

    // Member 2 leaves: 0 and 1 install one view of the two of them.
    let g2 = groups.pop().expect("three");
    g2.leave().expect("leave");
    seen.pop();
    let two = vec![NodeId(0), NodeId(1)];
    pump(&mut groups, &mut seen, Duration::from_secs(20), |s| {
        s.iter()
            .all(|e| last_view(e).is_some_and(|v| v.members == two))
    });
    let (a, b) = (last_view(&seen[0]).cloned(), last_view(&seen[1]).cloned());
    assert_eq!(a, b);
    assert!(a.expect("view").id.counter > view.id.counter, "views grow");

    // The group goes on after the change.
    groups[1].send(b"after".to_vec()).expect("send");
    pump(&mut groups, &mut seen, Duration::from_secs(20), |s| {
        s.iter()
            .all(|e| messages(e).last().is_some_and(|(_, p)| p == b"after"))
    });
    for g in groups {
        g.leave().expect("leave");
    }
}

#[test]
fn a_stack_without_a_group_is_refused() {
    let addrs = free_addrs(1);
    let err = Group::join_with(
        Node::builder()
            .stack_text(
                "plain.toml",
                "[layers.dev]\nkind = \"device\"\n[qos.q]\nlayers = [\"dev\"]\n[channels.c]\nqos = \"q\"\n",
            )
            .deployment(Deployment::new(addrs).with_id(NodeId(0))),
    )
    .expect_err("no vsync layer");
    assert!(matches!(err, viastack::GroupError::NoGroup), "{err}");
}
