//! Building nodes from stack files: shared named sessions, one device session per node,
//! default sessions elsewhere, file-ordered channels, and route tables (issue 2 §3).
#![allow(clippy::unwrap_used)]

mod common;

use viastack_kernel::{ChannelState, KernelConfig, NodeId};
use viastack_stack::{build_node, parse, route_tables, BuildEnv, StackFile};

/// The diamond of seed 001 Figure 1: two channels share a named `ghost` session; a third
/// channel of the same QoS gets its own. Channels are declared in non-alphabetical order.
const DIAMOND: &str = r#"[layers.dev]
kind = "sim-device"
port = 9
[layers.fd]
kind = "ghost"
[layers.t]
kind = "transparent"
[layers.u]
kind = "ghost"

[qos.data]
layers = ["dev", "fd", "t"]
[qos.audio]
layers = ["dev", "fd", "u"]

[channels.zeta]
qos = "data"
bind = { fd = "shared-fd" }
[channels.alpha]
qos = "audio"
bind = { fd = "shared-fd" }
[channels.mid]
qos = "data"

[scenario]
nodes = 3
"#;

fn file(src: &str) -> StackFile {
    parse("diamond.toml", src, &common::catalog()).unwrap()
}

fn env(node: u32) -> BuildEnv {
    BuildEnv {
        node: NodeId(node),
        nodes: 3,
        seed: 1,
        ..BuildEnv::default()
    }
}

fn config(node: u32) -> KernelConfig {
    KernelConfig {
        node: NodeId(node),
        ..KernelConfig::default()
    }
}

#[test]
fn diamond_shares_the_named_session_and_the_device() {
    let f = file(DIAMOND);
    let built = build_node(&f, &common::catalog(), &env(0), config(0)).unwrap();
    let names: Vec<&str> = built.channels.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["zeta", "alpha", "mid"], "file order");
    let k = &built.kernel;
    let zeta = k.channel_sessions(built.channels[0].1);
    let alpha = k.channel_sessions(built.channels[1].1);
    let mid = k.channel_sessions(built.channels[2].1);
    assert!(zeta.iter().chain(&alpha).chain(&mid).all(Option::is_some));
    // The shared slot (fd, position 1): one session in both channels that bind it.
    assert_eq!(zeta[1], alpha[1]);
    assert_ne!(
        mid[1], zeta[1],
        "an unbound channel gets its own fd session"
    );
    // The device: one session per node in every channel.
    assert_eq!(zeta[0], alpha[0]);
    assert_eq!(zeta[0], mid[0]);
    assert_eq!(built.devices, vec![(9, zeta[0].unwrap())]);
    // Default sessions elsewhere: distinct per channel.
    assert_ne!(zeta[2], mid[2], "t has a session per channel");
    assert_ne!(zeta[2], alpha[2]);
    for (_, ch) in &built.channels {
        assert_eq!(k.channel_state(*ch), Some(ChannelState::Open));
    }
    // The sessions' layers are the file's layers.
    assert_eq!(k.session_layer(zeta[1].unwrap()).unwrap().name(), "fd");
    assert_eq!(k.session_layer(alpha[2].unwrap()).unwrap().name(), "u");
}

#[test]
fn every_node_gets_the_same_channel_and_session_ids() {
    let f = file(DIAMOND);
    let catalog = common::catalog();
    let a = build_node(&f, &catalog, &env(0), config(0)).unwrap();
    let b = build_node(&f, &catalog, &env(2), config(2)).unwrap();
    assert_eq!(a.channels, b.channels);
    assert_eq!(a.devices, b.devices);
    assert_eq!(b.kernel.node(), NodeId(2));
    for ((_, ca), (_, cb)) in a.channels.iter().zip(&b.channels) {
        assert_eq!(
            a.kernel.channel_sessions(*ca),
            b.kernel.channel_sessions(*cb)
        );
    }
}

#[test]
fn two_devices_on_one_port_are_refused_when_building_a_hand_made_file() {
    let src = "[layers.a]\nkind = \"sim-device\"\nport = 1\n[layers.b]\nkind = \"sim-device\"\nport = 2\n";
    let mut f = file(src);
    let b = f.layers.get_mut("b").unwrap();
    b.params.insert("port", viastack_stack::ParamValue::Int(1));
    let err = build_node(&f, &common::catalog(), &env(0), config(0)).unwrap_err();
    assert!(err.mentions("both use port 1"), "{err}");
    assert_eq!(err.0[0].line, 4);
}

#[test]
fn route_tables_show_ghost_and_never_transparent() {
    let src = r#"[layers.g]
kind = "ghost"
[layers.t]
kind = "transparent"
[qos.q]
layers = ["g", "t"]
"#;
    let f = file(src);
    let tables = route_tables(&f, &common::catalog()).unwrap();
    assert_eq!(tables.len(), 1);
    let (name, rows) = &tables[0];
    assert_eq!(name, "q");
    assert!(!rows.is_empty());
    assert!(rows.iter().any(|(ty, _)| ty == "ChannelInit"), "{rows:?}");
    for (ty, layers) in rows {
        assert_eq!(layers, &vec!["g".to_string()], "route of {ty}");
        assert!(!layers.iter().any(|l| l == "t"));
    }
}

#[test]
fn route_tables_of_the_diamond_list_every_qos_by_name() {
    let tables = route_tables(&file(DIAMOND), &common::catalog()).unwrap();
    let names: Vec<&str> = tables.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["audio", "data"]);
    let audio = &tables[0].1;
    let init = audio.iter().find(|(ty, _)| ty == "ChannelInit").unwrap();
    assert_eq!(init.1, vec!["dev", "fd", "u"]);
}

#[test]
fn the_kernel_device_kind_builds_one_device_session_per_port() {
    let mut catalog = common::catalog();
    catalog.register(viastack_stack::catalog::DEVICE).unwrap();
    let src = r#"[layers.udp]
kind = "device"
port = 5
[layers.ctl]
kind = "device"
[layers.g]
kind = "ghost"
[qos.data]
layers = ["udp", "g"]
[qos.control]
layers = ["ctl", "g"]
[channels.a]
qos = "data"
[channels.b]
qos = "control"
[channels.c]
qos = "data"
"#;
    let f = parse("dev.toml", src, &catalog).unwrap();
    let built = build_node(&f, &catalog, &env(1), config(1)).unwrap();
    let ports: Vec<u16> = built.devices.iter().map(|(p, _)| *p).collect();
    assert_eq!(ports, vec![0, 5]);
    let k = &built.kernel;
    let a = k.channel_sessions(built.channels[0].1);
    let c = k.channel_sessions(built.channels[2].1);
    assert_eq!(
        a[0], c[0],
        "one device session shared by both data channels"
    );
    assert_eq!(built.devices[1].1, a[0].unwrap());
    assert_ne!(a[1], c[1], "ghost: one default session per channel");
}
