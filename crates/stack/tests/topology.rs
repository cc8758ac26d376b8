//! `[topology]` in stack files: nodes with roles, point-to-point links and LAN segments with
//! their own conditions, link failures in the scenario; every mistake reported at its line
//! (issue 17 §3).
#![allow(clippy::unwrap_used)]

mod common;

use viastack_kernel::Duration;
use viastack_stack::{parse, Diagnostics, Role};

const HEAD: &str = r#"[layers.dev]
kind = "sim-device"
[layers.t]
kind = "transparent"
[qos.data]
layers = ["dev", "t"]
[channels.data]
qos = "data"
"#; // 8 lines

fn errors(src: &str) -> Diagnostics {
    match parse("t.toml", &format!("{HEAD}{src}"), &common::catalog()) {
        Ok(f) => panic!("expected errors, parsed: {f:#?}"),
        Err(d) => d,
    }
}

#[track_caller]
fn has(d: &Diagnostics, line: usize, needles: &[&str]) {
    let found =
        d.0.iter()
            .any(|x| x.line == line && needles.iter().all(|n| x.message.contains(n)));
    assert!(
        found,
        "no diagnostic at line {line} with {needles:?} in:\n{d}"
    );
}

const NET: &str = r#"[[topology.node]]
name = "A"
role = "host"
[[topology.node]]
name = "R1"
[[topology.node]]
name = "R2"
[[topology.node]]
name = "H1"
role = "host"
[[topology.link]]
nodes = ["A", "R1"]
[[topology.link]]
nodes = ["R1", "R2"]
latency = "2ms"
loss = 0.01
bandwidth = "10Mbit"
[[topology.link]]
name = "lan"
nodes = ["R2", "H1", "R1"]
[scenario]
nodes = 4
[scenario.link]
latency = "5ms"
[[scenario.link_failure]]
link = "R1-R2"
at = "1s"
repair = "2s"
"#;

#[test]
fn a_topology_parses_into_the_model_and_the_scenario() {
    let f = parse("t.toml", &format!("{HEAD}{NET}"), &common::catalog()).unwrap();
    let t = f.topology.as_ref().unwrap();
    let names: Vec<&str> = t.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["A", "R1", "R2", "H1"]);
    assert_eq!(t.nodes[0].role, Role::Host);
    assert_eq!(t.nodes[1].role, Role::Router, "router by default");
    let links: Vec<(&str, &[u32])> = t
        .links
        .iter()
        .map(|l| (l.name.as_str(), l.nodes.as_slice()))
        .collect();
    assert_eq!(
        links,
        [
            ("A-R1", &[0, 1][..]),
            ("R1-R2", &[1, 2][..]),
            ("lan", &[2, 3, 1][..])
        ]
    );
    let c = &t.links[1].conditions;
    assert_eq!(c.latency, Some(Duration::from_millis(2)));
    assert_eq!(c.loss, Some(0.01));
    assert_eq!(c.bandwidth, Some(10_000_000));
    assert_eq!(t.links[1].line, 21);
    // Unset conditions come from [scenario.link].
    let s = f.scenario.as_ref().unwrap();
    assert_eq!(
        t.links[0].conditions.apply(&s.link).latency,
        Duration::from_millis(5)
    );
    assert_eq!(s.topology.as_ref(), Some(t));
    assert_eq!(s.link_failures.len(), 1);
    assert_eq!(s.link_failures[0].link, 1);
    assert_eq!(s.link_failures[0].repair, Some(Duration::from_secs(2)));
    // R1's interfaces: A-R1 (port 0), R1-R2 (port 1), lan (port 2).
    let v = t.node_view(1);
    assert_eq!((v.role, v.links), (Role::Router, vec![0, 1, 2]));
    assert_eq!(t.node_view(3).links, vec![2]);
}

#[test]
fn topology_mistakes_are_reported_at_their_line() {
    let d = errors(
        r#"[[topology.node]]
name = "R1"
[[topology.node]]
name = "R1"
[[topology.node]]
name = "R2"
role = "switch"
[[topology.link]]
nodes = ["R1", "R3"]
[[topology.link]]
nodes = ["R1"]
[[topology.link]]
nodes = ["R1", "R1"]
[[topology.link]]
nodes = ["R1", "R2"]
los = 0.1
[topology.extra]
x = 1
"#,
    );
    has(&d, 11, &["node name `R1` is already used (line 9)"]);
    has(&d, 15, &["role", "switch"]);
    has(&d, 17, &["unknown node `R3`"]);
    has(&d, 19, &["a link joins at least two nodes"]);
    has(&d, 21, &["node `R1` is listed twice"]);
    has(&d, 24, &["unknown key `los`", "did you mean `loss`"]);
    has(&d, 25, &["unknown key `extra` in [topology]"]);
    assert_eq!(d.0.len(), 7, "one message per mistake:\n{d}");
}

#[test]
fn scenario_and_topology_must_agree() {
    let d = errors(
        r#"[[topology.node]]
name = "R1"
[[topology.node]]
name = "R2"
[[topology.link]]
nodes = ["R1", "R2"]
[[topology.link]]
nodes = ["R2", "R1"]
[scenario]
nodes = 3
[[scenario.link_failure]]
link = "R1-R3"
at = "1s"
[[scenario.link_failure]]
link = "R1-R2"
at = "2s"
repair = "1s"
"#,
    );
    has(&d, 17, &["`nodes` = 3 but [topology] declares 2 nodes"]);
    has(&d, 20, &["unknown link `R1-R3`", "did you mean `R1-R2`"]);
    has(&d, 22, &["`repair`", "must come after `at`"]);
    // Parallel links between the same nodes are fine (their default names differ).
    assert!(!d.to_string().contains("R2-R1"), "{d}");
    assert_eq!(d.0.len(), 3, "{d}");

    let d = errors(
        r#"[scenario]
nodes = 2
[[scenario.link_failure]]
link = "x"
at = "1s"
"#,
    );
    has(&d, 12, &["link failures need a [topology]"]);
}

#[test]
fn scenario_groups_are_parsed_and_checked() {
    let d = errors(
        r#"[scenario]
nodes = 2
[[scenario.group]]
node = 1
action = "join"
group = "10.0.0.1"
at = "1s"
[[scenario.group]]
node = 5
action = "stay"
group = "239.1.1.1"
at = "1s"
"#,
    );
    has(
        &d,
        14,
        &["[[scenario.group]] #1", "is not a multicast group"],
    );
    has(&d, 18, &["`action`", "join"]);
    assert_eq!(d.0.len(), 2, "{d}");

    let src = format!(
        "{HEAD}[scenario]\nnodes = 2\n[[scenario.group]]\nnode = 1\naction = \"leave\"\ngroup = \"239.1.1.2\"\nat = \"2s\"\n"
    );
    let f = parse("t.toml", &src, &common::catalog()).unwrap_or_else(|d| panic!("{d}"));
    let g = &f.scenario.unwrap().groups[0];
    assert_eq!(
        (g.node, g.join, g.group, g.at),
        (1, false, 0xef01_0102, Duration::from_secs(2))
    );
}
