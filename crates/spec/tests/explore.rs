//! `spec explore` (issue 15 §5): every shipped service explored on tree:7 with a loss (and a
//! duplicate where it fits the test time) holds its declared properties; a service broken on
//! purpose (h2hack without retransmission) is caught with a shortest trace that `spec run`'s
//! multi-node replay reproduces.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::Value;
use viastack_spec::service::explore::{explore, Declaration, Options, Report, TimerMode, Topology};
use viastack_spec::service::trace;
use viastack_spec::service::{Service, Store, StoreConfig};

fn read(path: &str) -> String {
    let p = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn load(path: &str) -> (Arc<Service>, Declaration) {
    let src = read(path);
    let (svc, _) = Service::load(path, &src).unwrap_or_else(|e| panic!("{e}"));
    let decl = Declaration::read(path, &src).unwrap().unwrap();
    (Arc::new(svc), decl)
}

fn run(path: &str, topo: &str, opts: Options) -> Report {
    let (svc, decl) = load(path);
    explore(&svc, &decl, &Topology::parse(topo).unwrap(), opts)
}

fn opts(loss: u32, dup: u32, max_states: usize) -> Options {
    Options {
        loss,
        dup,
        max_states,
        ..Options::default()
    }
}

const SHIPPED: [&str; 9] = [
    "h2hack",
    "e2eack",
    "dupelim",
    "ordering",
    "sync",
    "incast",
    "selection",
    "handshake",
    "leakybucket",
];

#[test]
fn topologies_are_what_they_say() {
    let t = Topology::parse("tree:7").unwrap();
    assert_eq!(t.nodes.len(), 7);
    assert_eq!(t.nodes[0].parent.0, 0, "node 0 is the root");
    let kids: Vec<u64> = t.nodes[0].children.iter().map(|a| a.0).collect();
    assert_eq!(
        kids,
        [2, 3],
        "node i has address i+1; root's children are nodes 1, 2"
    );
    let kids: Vec<u64> = t.nodes[2].children.iter().map(|a| a.0).collect();
    assert_eq!(kids, [6, 7]);
    assert_eq!(t.nodes[6].parent.0, 3);
    assert_eq!(t.nodes[6].neighbours.len(), 1);
    let line = Topology::parse("line:3").unwrap();
    assert_eq!(line.nodes[2].parent.0, 2);
    let star = Topology::parse("star:4").unwrap();
    assert_eq!(star.nodes[0].children.len(), 3);
    assert!(Topology::parse("ring:3").is_err());
    assert!(Topology::parse("tree:0").is_err());
    assert!(Topology::parse("tree:x").is_err());
}

#[test]
fn every_shipped_service_holds_its_properties_with_one_loss() {
    for name in SHIPPED {
        // sync resynchronises every second for its whole lifetime: bounded here, and by the
        // depth the others never reach.
        let bound = if name == "sync" { 3_000 } else { 200_000 };
        let r = run(
            &format!("../../specs/{name}.scxml"),
            "tree:7",
            opts(1, 0, bound),
        );
        assert!(r.violation.is_none(), "{name}: {:?}", r.violation);
        assert!(
            r.states > 1 && r.transitions >= r.states - 1,
            "{name}: {r:?}"
        );
        if name != "sync" {
            assert!(r.exhausted, "{name}: not exhausted: {r:?}");
            assert!(r.terminal > 0, "{name}: no terminal state: {r:?}");
        }
    }
}

#[test]
fn small_services_hold_their_properties_with_a_loss_and_a_duplicate() {
    for name in [
        "dupelim",
        "ordering",
        "selection",
        "handshake",
        "leakybucket",
    ] {
        let r = run(
            &format!("../../specs/{name}.scxml"),
            "tree:7",
            opts(1, 1, 100_000),
        );
        assert!(r.violation.is_none(), "{name}: {:?}", r.violation);
        assert!(r.exhausted, "{name}: {r:?}");
    }
    // h2hack on a smaller tree (tree:7 with a duplicate is the release binary's job).
    let r = run("../../specs/h2hack.scxml", "tree:3", opts(1, 1, 100_000));
    assert!(r.violation.is_none(), "{:?}", r.violation);
    assert!(r.exhausted);
}

#[test]
fn a_loss_adds_states_and_a_duplicate_more() {
    let p = "../../specs/dupelim.scxml";
    let a = run(p, "tree:7", opts(0, 0, 100_000));
    let b = run(p, "tree:7", opts(1, 0, 100_000));
    let c = run(p, "tree:7", opts(1, 1, 100_000));
    assert!(
        a.states < b.states && b.states < c.states,
        "{a:?} {b:?} {c:?}"
    );
}

const BROKEN: &str = "tests/data/h2hack_no_retransmit.scxml";

/// Replays a violation's trace through `spec run`'s multi-node runner: which nodes'
/// applications got a payload, and every state entered.
fn replay(path: &str, lines: &[String]) -> (Vec<u64>, Vec<String>) {
    let (svc, _) = load(path);
    let inputs = trace::parse_nodes(&lines.join("\n")).unwrap();
    let out = trace::run_nodes(
        || Store::new(vec![svc.clone()], StoreConfig::default()),
        &inputs,
    );
    let mut got: Vec<u64> = out
        .iter()
        .filter(|l| l["action"] == "toApplication")
        .map(|l| l["at"].as_u64().unwrap())
        .collect();
    got.sort_unstable();
    got.dedup();
    let states = out
        .iter()
        .filter_map(|l| l.get("state").and_then(Value::as_str).map(str::to_string))
        .collect();
    (got, states)
}

#[test]
fn a_service_without_retransmission_is_caught_and_its_trace_replays() {
    // Without a loss the broken service still delivers everywhere ...
    let ok = run(BROKEN, "tree:7", opts(0, 0, 100_000));
    assert!(ok.violation.is_none(), "{:?}", ok.violation);
    // ... one loss is enough to lose a subtree silently.
    let r = run(BROKEN, "tree:7", opts(1, 0, 100_000));
    let v = r
        .violation
        .expect("the broken service must violate its property");
    assert_eq!(v.property, "reaches-every-node");
    assert!(
        v.trace.iter().any(|l| l.starts_with("# lost")),
        "{:?}",
        v.trace
    );
    let (got, states) = replay(BROKEN, &v.trace);
    assert!(got.contains(&0), "the root's application got it: {got:?}");
    assert!(
        got.len() < 7,
        "replay must reproduce a node without the payload: {got:?}"
    );
    assert!(
        !states.iter().any(|s| s == "reset"),
        "nobody reset (the property is not waived): {states:?}"
    );
    // The same replay of the shipped service (same inputs) is no counterexample there: the
    // explorer finds none.
    let fixed = run("../../specs/h2hack.scxml", "tree:7", opts(1, 0, 200_000));
    assert!(fixed.violation.is_none());
}

#[test]
fn the_reported_trace_is_a_shortest_one() {
    // line:2, broken h2hack, one loss. The shortest counterexample: the root's application
    // hands it the payload (1), the copy to node 1 is lost (2), Timeout_ACK (1 s) fires and
    // does nothing (3), Timeout_maxACK (5 s) deletes the root's instance (4): terminal, and
    // node 1 never got the payload. No run is shorter: timers fire only with nothing in flight,
    // earliest first, and the terminal state needs both fired.
    let r = run(BROKEN, "line:2", opts(1, 0, 100_000));
    let v = r.violation.unwrap();
    assert_eq!(v.events, 4, "{:#?}", v.trace);
    let events: Vec<&String> = v.trace.iter().filter(|l| !l.contains("\"node\"")).collect();
    assert_eq!(events.len(), 4);
    assert!(events[0].contains("\"at\":0") && events[0].contains("\"message\""));
    assert!(events[1].starts_with("# lost"));
    assert!(events[2].contains("\"TimerIdentifier\":3"));
    assert!(events[3].contains("\"TimerIdentifier\":4"));
    // On line:3 too: losing the first hop beats losing the second (which needs node 1 to get,
    // acknowledge and forward the payload first).
    let r = run(BROKEN, "line:3", opts(1, 0, 100_000));
    assert_eq!(r.violation.unwrap().events, 4);
    // On tree:7 the terminal state needs the other subtree's run too: the counterexample is
    // longer, but none shorter exists at a smaller depth than the one reported.
    let r = run(BROKEN, "tree:7", opts(1, 0, 100_000));
    let v = r.violation.unwrap();
    assert!(v.events > 4 && v.events <= r.depth, "{v:?}");
    for depth in 1..v.events {
        let shallow = run(
            BROKEN,
            "tree:7",
            Options {
                max_depth: depth,
                ..opts(1, 0, 100_000)
            },
        );
        assert!(
            shallow.violation.is_none(),
            "a shorter one at depth {depth}"
        );
    }
}

const STUCK: &str = r#"<?xml version="1.0"?>
<scxml version="1.0" xmlns="http://www.w3.org/2005/07/scxml"
       xmlns:action="http://my.custom-actions.domain/action" initial="idle">
  <datamodel>
    <data name="service"><Name>stuck</Name><ServiceID>40</ServiceID></data>
    <data name="explore"><Inject at="root" MessageType="-128" DeliveryMode="1" Payload="p"/></data>
    <data name="events"><Basic>
      <Event name="payloadmessage"><Message><MessageType>-128</MessageType></Message></Event>
      <Event name="gone"><Timer><TimerIdentifier>1</TimerIdentifier></Timer></Event>
    </Basic></data>
  </datamodel>
  <state id="idle">
    <transition event="payloadmessage" target="waiting">
      <action:sendDataMessage from="last(payloadmessage)" DeliveryMode="1"/>
    </transition>
  </state>
  <state id="waiting"><transition event="gone" target="end"/></state>
  <final id="end"/>
</scxml>"#;

#[test]
fn an_instance_left_without_timer_is_stuck_and_growth_is_bounded() {
    let (svc, _) = Service::load("stuck.scxml", STUCK).unwrap();
    let decl = Declaration::read("stuck.scxml", STUCK).unwrap().unwrap();
    let svc = Arc::new(svc);
    let topo = Topology::parse("tree:3").unwrap();
    let r = explore(&svc, &decl, &topo, Options::default());
    let v = r.violation.unwrap();
    assert_eq!(v.property, "stuck");
    assert!(v.message.contains("waiting"), "{}", v.message);
    // Two messages in flight (to both children) exceed a bound of one.
    let r = explore(
        &svc,
        &decl,
        &topo,
        Options {
            max_inflight: 1,
            ..Options::default()
        },
    );
    assert_eq!(r.violation.unwrap().property, "growth");
}

#[test]
fn bounds_are_reported_as_not_exhausted() {
    let r = run("../../specs/h2hack.scxml", "tree:7", opts(1, 0, 50));
    assert!(!r.exhausted);
    assert_eq!(r.states, 50);
    let r = run(
        "../../specs/h2hack.scxml",
        "tree:7",
        Options {
            max_depth: 3,
            ..opts(0, 0, 100_000)
        },
    );
    assert!(!r.exhausted);
    assert!(r.depth <= 3);
}

#[test]
fn any_order_timers_find_the_race_deadline_order_rules_out() {
    // dupelim forgets a message id after Timeout_Msg: with timers free to fire while a
    // duplicate is still in flight, the application gets the message twice; in deadline order
    // (the default: the network is faster than every timeout) it does not.
    let p = "../../specs/dupelim.scxml";
    let any = Options {
        timers: TimerMode::Any,
        ..opts(0, 1, 100_000)
    };
    let v = run(p, "line:2", any).violation.unwrap();
    assert_eq!(v.property, "once");
    assert!(run(p, "line:2", opts(0, 1, 100_000)).violation.is_none());
}

#[test]
fn declarations_are_checked() {
    let bad = STUCK.replace("<Inject at=\"root\"", "<Inject at=\"everywhere\"");
    let e = Declaration::read("x.scxml", &bad).unwrap_err().to_string();
    assert!(e.starts_with("x.scxml:6:"), "{e}");
    let bad = STUCK.replace(
        "MessageType=\"-128\" DeliveryMode",
        "Colour=\"red\" DeliveryMode",
    );
    assert!(Declaration::read("x.scxml", &bad).is_err());
    assert!(Declaration::read("x.scxml", "<scxml/>").unwrap().is_none());
}
