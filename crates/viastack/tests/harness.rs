//! The simulator handed to applications: an application's own logic over seeds with loss,
//! duplication, reordering and partitions; an application-defined layer in a stack file.

use std::collections::BTreeMap;
use std::sync::Arc;

use viastack::kernel::event::{EventType, SENDABLE};
use viastack::kernel::{Context, Direction, Event, Instant, Layer, LayerRef, Session};
use viastack::sim::{Harness, Partition, SimConfig};
use viastack::{AppNode, Application, BuildError, Duration, LayerKind, NodeEvent, NodeId, Params};

const STACK: &str = r#"
[layers.dev]
kind = "device"
[layers.sum]
kind = "checksum"
[layers.rel]
kind = "reliable-fifo"
[layers.frag]
kind = "fragment"
mtu = 600
[qos.q]
layers = ["dev", "sum", "rel", "frag"]
[channels.data]
qos = "q"
"#;

/// Sends `per_peer` numbered messages to every other node, one every 10 ms, and records what
/// it receives.
struct Numbers {
    per_peer: u32,
    next: u32,
    got: BTreeMap<NodeId, Vec<u32>>,
    failures: usize,
}

impl Numbers {
    fn new(per_peer: u32) -> Self {
        Numbers {
            per_peer,
            next: 0,
            got: BTreeMap::new(),
            failures: 0,
        }
    }
}

impl Application for Numbers {
    fn start(&mut self, node: &mut AppNode<'_>) {
        node.wake_after(Duration::from_millis(10));
    }

    fn wake(&mut self, node: &mut AppNode<'_>) {
        let mut body = self.next.to_be_bytes().to_vec();
        body.resize(1500, 7); // three fragments
        node.send_to_all("data", &body).expect("send");
        self.next += 1;
        if self.next < self.per_peer {
            node.wake_after(Duration::from_millis(10));
        }
    }

    fn handle(&mut self, event: NodeEvent, _node: &mut AppNode<'_>) {
        match event {
            NodeEvent::Message(m) => {
                let n = u32::from_be_bytes(m.payload[..4].try_into().expect("4 bytes"));
                self.got.entry(m.from).or_default().push(n);
            }
            NodeEvent::Notice(_) => self.failures += 1,
        }
    }
}

#[test]
fn an_application_over_hostile_links_for_300_seeds() {
    for seed in 0..300u64 {
        let mut config = SimConfig::new(seed, 3);
        config.link.loss = 0.2;
        config.link.duplicate = 0.05;
        config.link.reorder = 0.1;
        config.link.corrupt = 0.02;
        config.partitions.push(Partition {
            start: Instant::from_millis(100),
            heal: Some(Instant::from_millis(600)),
            groups: vec![vec![NodeId(0)], vec![NodeId(1), NodeId(2)]],
        });
        let mut h = Harness::new("numbers.toml", STACK, config, |_| Numbers::new(40))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        h.run_for(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for n in 0..3 {
            let app = h.app(NodeId(n)).expect("up");
            assert_eq!(app.failures, 0, "seed {seed}: node {n} got failure notices");
            for from in (0..3).filter(|&f| f != n) {
                let got = app.got.get(&NodeId(from)).cloned().unwrap_or_default();
                assert_eq!(
                    got,
                    (0..40).collect::<Vec<_>>(),
                    "seed {seed}: node {n} from {from}: every message once, in order"
                );
            }
        }
    }
}

#[test]
fn the_same_seed_replays_the_same_run() {
    let run = |seed| {
        let mut config = SimConfig::new(seed, 3);
        config.link.loss = 0.3;
        let mut h =
            Harness::new("numbers.toml", STACK, config, |_| Numbers::new(10)).expect("harness");
        h.run_for(Duration::from_secs(10)).expect("run");
        (
            h.net_stats().clone(),
            h.node(NodeId(1)).expect("up").events().len(),
        )
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5).0, run(6).0);
}

/// An application-defined layer: marks each message on the way down and counts the marks on
/// the way up.
struct Marker;
struct MarkerSession;

impl Layer for Marker {
    fn name(&self) -> &str {
        "marker"
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(MarkerSession)
    }
}

impl Session for MarkerSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let dir = event.dir();
        if let Some(s) = event.sendable_mut() {
            match dir {
                Direction::Down => s.message.push(b"M"),
                Direction::Up => match s.message.pop(1) {
                    Ok(b"M") => ctx.count("marked"),
                    _ => {
                        ctx.count("unmarked");
                        return;
                    }
                },
            }
        }
        ctx.go(event);
    }
}

fn build_marker(_: &str, _: &Params, _: &viastack_stack::BuildEnv) -> Result<LayerRef, BuildError> {
    Ok(Arc::new(Marker))
}

const MARKER: LayerKind = LayerKind {
    name: "marker",
    doc: "Marks each message (a test of application-defined layers).",
    params: &[],
    one_of: &[],
    device: false,
    build: build_marker,
};

struct Counter(u32);
impl Application for Counter {
    fn start(&mut self, node: &mut AppNode<'_>) {
        if node.id() == NodeId(0) {
            for i in 0..5u8 {
                node.send("data", NodeId(1), &[i]).expect("send");
            }
        }
    }
    fn handle(&mut self, event: NodeEvent, _: &mut AppNode<'_>) {
        if let NodeEvent::Message(m) = event {
            assert_eq!(
                m.payload,
                [self.0 as u8],
                "the mark is gone and the order kept"
            );
            self.0 += 1;
        }
    }
}

#[test]
fn an_application_layer_in_a_stack_file() {
    let mut catalog = viastack_stack::standard_catalog();
    catalog.register(MARKER).expect("register");
    let text = STACK.replace(
        "layers = [\"dev\", \"sum\", \"rel\", \"frag\"]",
        "layers = [\"dev\", \"sum\", \"rel\", \"mark\"]",
    ) + "[layers.mark]\nkind = \"marker\"\n";
    let file = viastack_stack::parse("marked.toml", &text, &catalog).expect("parse");
    let mut h = Harness::with_catalog(file, catalog, SimConfig::new(1, 2), |_| Counter(0))
        .expect("harness");
    h.run_for(Duration::from_secs(2)).expect("run");
    assert_eq!(h.app(NodeId(1)).expect("up").0, 5);
    // Without the kind registered the file is refused, with the line of the layer.
    let e = viastack_stack::parse("marked.toml", &text, &viastack_stack::standard_catalog())
        .expect_err("unknown kind");
    assert!(e.to_string().contains("marker"), "{e}");
}
