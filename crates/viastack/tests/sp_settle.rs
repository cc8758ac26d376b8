//! `sp` tells a node what it still holds: two sans-IO [`NodeCore`]s over an SP stack, their
//! datagrams carried (or held back) by hand in virtual time. While messages wait for their
//! acknowledgement the node counts them unsettled (what a closing node lingers for and what
//! holds back a fast sender); once acknowledged they are settled; a channel closed before
//! then names each of them in a `SendAborted` notice.

use viastack::kernel::Dest;
use viastack::{Duration, FailureKind, Instant, NodeCore, NodeEvent, NodeId, Notice, Tag};

const SP: &str = r#"
[layers.dev]
kind = "device"
[layers.crc]
kind = "checksum"
[layers.sp]
kind = "sp"
reliability = "reliable"
block_size = 512
[qos.q]
layers = ["dev", "crc", "sp"]
[channels.data]
qos = "q"
"#;

/// Two nodes and the link between them, which the test may cut.
struct Pair {
    nodes: [NodeCore; 2],
    now: Instant,
    link_up: bool,
}

impl Pair {
    fn new() -> Self {
        let catalog = viastack_stack::standard_catalog();
        let file = viastack_stack::parse("sp.toml", SP, &catalog).expect("stack");
        let node = |id| NodeCore::build(&file, &catalog, NodeId(id), 2, 7, Instant::ZERO);
        Pair {
            nodes: [node(0).expect("node 0"), node(1).expect("node 1")],
            now: Instant::ZERO,
            link_up: true,
        }
    }

    /// Node 0 sends a message of `len` bytes to node 1; its tag.
    fn send(&mut self, tag: u64, len: usize) -> Tag {
        let data = self.nodes[0].channel("data").expect("channel");
        let payload: Vec<u8> = (0..len).map(|i| (i as u64 * 31 + tag) as u8).collect();
        self.nodes[0]
            .send(self.now, data, Dest::Node(NodeId(1)), &payload, Tag(tag))
            .expect("send");
        Tag(tag)
    }

    /// Carries every datagram waiting (dropping them while the link is cut) until none is
    /// left, then fires timers, for `d` of virtual time.
    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        for _ in 0..100_000 {
            let mut moved = false;
            for from in 0..2 {
                while let Some(t) = self.nodes[from].poll_transmit() {
                    moved = true;
                    if self.link_up {
                        let to = 1 - from;
                        assert_eq!(t.dest, Dest::Node(NodeId(to as u32)));
                        let bytes = t.message.into_vec();
                        self.nodes[to].handle_datagram(
                            self.now,
                            t.port,
                            NodeId(from as u32),
                            bytes,
                        );
                    }
                }
            }
            if moved {
                continue;
            }
            let next = self.nodes.iter().filter_map(NodeCore::poll_timeout).min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    for n in &mut self.nodes {
                        n.handle_timeout(self.now);
                    }
                }
                _ => {
                    self.now = end;
                    return;
                }
            }
        }
        panic!("no quiet moment in 100,000 steps: a livelock");
    }

    fn events(&mut self, node: usize) -> Vec<NodeEvent> {
        std::iter::from_fn(|| self.nodes[node].poll_event()).collect()
    }
}

#[test]
fn unsettled_counts_messages_until_they_are_acknowledged() {
    let mut p = Pair::new();
    assert_eq!(p.nodes[0].unsettled(), 0);
    // 3 blocks each: sent in several datagrams, acknowledged only once all arrived.
    let tags: Vec<Tag> = (1..=5).map(|t| p.send(t, 1400)).collect();
    assert_eq!(
        p.nodes[0].unsettled(),
        5,
        "queued and in flight, none acknowledged"
    );
    p.run_for(Duration::from_millis(500));
    assert_eq!(p.nodes[0].unsettled(), 0, "every message acknowledged");
    assert_eq!(
        p.nodes[1].unsettled(),
        0,
        "the receiver holds nothing of its own"
    );
    let got: Vec<Vec<u8>> = p
        .events(1)
        .into_iter()
        .filter_map(|e| match e {
            NodeEvent::Message(m) => Some(m.payload),
            _ => None,
        })
        .collect();
    assert_eq!(got.len(), tags.len());
    assert!(p.events(0).is_empty(), "no notice about settled messages");
    // The link cut: messages stay unsettled however long the node waits (short of giving up).
    p.link_up = false;
    p.send(6, 100);
    p.send(7, 100);
    p.run_for(Duration::from_millis(40));
    assert_eq!(p.nodes[0].unsettled(), 2);
    p.link_up = true;
    p.run_for(Duration::from_secs(2));
    assert_eq!(p.nodes[0].unsettled(), 0, "settled once the link is back");
}

#[test]
fn closing_names_the_messages_not_acknowledged() {
    let mut p = Pair::new();
    for t in 1..=3 {
        p.send(t, 700);
    }
    p.run_for(Duration::from_millis(500));
    assert_eq!(p.nodes[0].unsettled(), 0);
    // The peer hears nothing more: these four are never acknowledged.
    p.link_up = false;
    let held: Vec<Tag> = (4..=7).map(|t| p.send(t, 700)).collect();
    p.run_for(Duration::from_millis(20));
    assert_eq!(p.nodes[0].unsettled(), held.len());
    p.events(0);
    p.nodes[0].close(p.now);
    let mut aborted = Vec::new();
    for e in p.events(0) {
        match e {
            NodeEvent::Notice(Notice::SendFailed {
                kind: FailureKind::SendAborted,
                peer,
                tags,
                channel,
            }) => {
                assert_eq!(peer, NodeId(1));
                assert_eq!(&*channel, "data");
                aborted.extend(tags);
            }
            other => panic!("unexpected event at close: {other:?}"),
        }
    }
    assert_eq!(
        aborted, held,
        "each unacknowledged message named once, in send order"
    );
    assert_eq!(p.nodes[0].unsettled(), 0, "nothing held after the close");
    assert_eq!(p.nodes[0].counters().get("sp.closed_pending"), Some(&4));
}
