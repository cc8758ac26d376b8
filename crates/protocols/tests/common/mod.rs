//! A small harness for driving layers through a real kernel: one node with a device at the
//! bottom and the given layers above it, on `n` channels sharing the device session.
#![allow(clippy::unwrap_used, dead_code)]

use std::sync::Arc;

use viastack_kernel::event::SENDABLE;
use viastack_kernel::layers::Device;
use viastack_kernel::{
    ChannelId, Dest, Direction, Event, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId,
    Output, Qos, Sendable, SessionId,
};
use viastack_protocols::overlay::{TreeInfo, TreeQuery, TREE, TREE_QUERY};

pub struct Node {
    pub kernel: Kernel,
    pub channels: Vec<ChannelId>,
    pub device: SessionId,
    pub now: Instant,
}

/// Node `id` with `n` channels over one device session; `layers` bottom first above the device.
pub fn node(id: u32, seed: u64, layers: Vec<LayerRef>, n: usize) -> Node {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let mut all = vec![dev.clone()];
    all.extend(layers);
    let qos = Qos::new("q", all).unwrap();
    let mut kernel = Kernel::new(KernelConfig {
        node: NodeId(id),
        seed,
        ..KernelConfig::default()
    });
    let device = kernel.create_session(&dev);
    let mut channels = vec![];
    for i in 0..n {
        let ch = kernel.create_channel(format!("c{i}"), &qos);
        kernel.cursor(ch).unwrap().set_session(device).unwrap();
        kernel.start_channel(ch, Instant::ZERO).unwrap();
        channels.push(ch);
    }
    Node {
        kernel,
        channels,
        device,
        now: Instant::ZERO,
    }
}

pub fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A delivery at the top: (channel, source, bytes).
pub type Delivery = (ChannelId, NodeId, Vec<u8>);

/// Drains the kernel's outputs: deliveries and transmitted datagrams (destination, bytes).
pub fn drain(node: &mut Node) -> (Vec<Delivery>, Vec<(Dest, Vec<u8>)>) {
    let mut up = vec![];
    let mut down = vec![];
    while let Some(o) = node.kernel.poll_output() {
        match o {
            Output::Deliver(e) => {
                if let Some(s) = e.sendable_ref() {
                    up.push((e.channel(), s.source, s.message.as_slice().to_vec()));
                }
            }
            Output::Transmit(t) => down.push((t.dest, t.message.as_slice().to_vec())),
        }
    }
    (up, down)
}

/// Hands a datagram from `from` to the node's device; returns what reached the top.
pub fn receive(node: &mut Node, from: u32, bytes: Vec<u8>) -> Vec<Delivery> {
    let now = node.now;
    node.kernel
        .handle_datagram(now, node.device, NodeId(from), Message::from_wire(bytes));
    drain(node).0
}

/// Sends `payload` on channel index `ch` to node `to` (or broadcast); returns the datagrams the
/// device transmitted.
pub fn send(node: &mut Node, ch: usize, to: Option<u32>, payload: &[u8]) -> Vec<Vec<u8>> {
    let dest = to.map_or(Dest::Broadcast, |n| Dest::Node(NodeId(n)));
    let source = node.kernel.node();
    let now = node.now;
    node.kernel
        .inject(
            now,
            Event::sendable(
                SENDABLE.id(),
                Direction::Down,
                node.channels[ch],
                Sendable::new(source, dest, Message::from_payload(payload)),
            ),
        )
        .unwrap();
    drain(node).1.into_iter().map(|(_, b)| b).collect()
}

/// Advances the node's clock to `at` and fires due timers; returns the outputs.
pub fn advance(node: &mut Node, at: Instant) -> (Vec<Delivery>, Vec<(Dest, Vec<u8>)>) {
    node.now = at;
    node.kernel.handle_timeout(at);
    drain(node)
}

pub fn counter(node: &Node, name: &str) -> u64 {
    node.kernel.counters().get(name).copied().unwrap_or(0)
}

/// The vectors of `testdata/vectors/NAME.json`.
pub fn vectors(name: &str) -> Vec<serde_json::Value> {
    let path = format!(
        "{}/../../testdata/vectors/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    doc["vectors"].as_array().unwrap().clone()
}

/// Plays a vector: its `before` datagrams, then `hex`, all from node 7; checks that the last
/// one delivers `payload_hex` on `channel`, or is dropped with exactly one `error` counted.
/// Returns the node for further checks.
pub fn play(v: &serde_json::Value, mut n: Node) -> Node {
    let name = v["name"].as_str().unwrap();
    let from = v.get("source").and_then(|s| s.as_u64()).unwrap_or(7) as u32;
    if let Some(before) = v.get("before").and_then(|b| b.as_array()) {
        for b in before {
            let got = receive(&mut n, from, hex(b.as_str().unwrap()));
            assert_eq!(
                got.len(),
                1,
                "{name}: a `before` datagram was not delivered"
            );
        }
    }
    let got = receive(&mut n, from, hex(v["hex"].as_str().unwrap()));
    if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
        assert!(got.is_empty(), "{name}: delivered {got:?}");
        assert_eq!(
            counter(&n, err),
            1,
            "{name}: wanted one {err}: {:?}",
            n.kernel.counters()
        );
    } else {
        assert_eq!(got.len(), 1, "{name}: {:?}", n.kernel.counters());
        let (ch, src, payload) = &got[0];
        assert_eq!(ch.0 as u64, v["channel"].as_u64().unwrap(), "{name}");
        assert_eq!(*src, NodeId(from), "{name}");
        assert_eq!(
            to_hex(payload),
            to_hex(&hex(v["payload_hex"].as_str().unwrap())),
            "{name}"
        );
    }
    n
}

/// An overlay stand-in below a `messagestore`: it answers every tree query with the same
/// neighbourhood (`parent`, `children`, `neighbours`) in every tree, or never answers
/// (`silent`), so every input stays queued. Sends pass down unchanged.
#[derive(Debug, Clone, Default)]
pub struct FixedTree {
    pub parent: Option<NodeId>,
    pub children: Vec<NodeId>,
    pub neighbours: Vec<NodeId>,
    pub silent: bool,
}

impl FixedTree {
    /// Never answers a tree query.
    pub fn silent() -> Self {
        FixedTree {
            silent: true,
            ..FixedTree::default()
        }
    }

    /// Answers with `parent`, `children` and the neighbours they make.
    pub fn below(parent: u32, children: &[u32]) -> Self {
        let children: Vec<NodeId> = children.iter().map(|&c| NodeId(c)).collect();
        let mut neighbours = vec![NodeId(parent)];
        neighbours.extend(&children);
        FixedTree {
            parent: Some(NodeId(parent)),
            children,
            neighbours,
            silent: false,
        }
    }
}

impl viastack_kernel::Layer for FixedTree {
    fn name(&self) -> &str {
        "fixed-tree"
    }
    fn accepts(&self) -> Vec<viastack_kernel::EventType> {
        vec![SENDABLE.id(), TREE_QUERY.id()]
    }
    fn provides(&self) -> Vec<viastack_kernel::EventType> {
        vec![TREE.id()]
    }
    fn create_session(&self) -> Box<dyn viastack_kernel::Session> {
        Box::new(self.clone())
    }
}

impl viastack_kernel::Session for FixedTree {
    fn handle(&mut self, event: Event, ctx: &mut viastack_kernel::Context<'_>) {
        if event.ty() != TREE_QUERY.id() {
            ctx.go(event);
            return;
        }
        if self.silent {
            return;
        }
        if let Some(q) = event.custom::<TreeQuery>() {
            let info = TreeInfo {
                root: q.root,
                token: q.token,
                parent: self.parent,
                children: self.children.clone(),
                neighbours: self.neighbours.clone(),
                label: None,
                generation: None,
            };
            ctx.go(Event::new(
                TREE.id(),
                Direction::Up,
                event.channel(),
                viastack_kernel::Body::Custom(Box::new(info)),
            ));
        }
    }
}
