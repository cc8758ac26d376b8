//! A catalog of test layer kinds shared by the integration tests: a device with a port, a kind
//! with one parameter of every type, a kind with a required parameter, a layer that requires an
//! event nobody provides (Ψ ⊄ Γ), one that provides it, and one whose factory fails.
#![allow(clippy::unwrap_used, dead_code)]

use std::sync::Arc;

use viastack_kernel::event::{EventTypeDef, EVENT, SENDABLE};
use viastack_kernel::layers::Ghost;
use viastack_kernel::{Context, Event, EventType, Layer, LayerRef, Session};
use viastack_stack::{BuildEnv, BuildError, Catalog, LayerKind, ParamKind, ParamSpec, Params};

pub static TEST_NEED: EventTypeDef = EventTypeDef::new("TestNeed", Some(&SENDABLE));

struct Needy {
    name: String,
    provides: bool,
}

struct Pass;

impl Session for Pass {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        ctx.go(event);
    }
}

impl Layer for Needy {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![EVENT.id()]
    }
    fn requires(&self) -> Vec<EventType> {
        if self.provides {
            Vec::new()
        } else {
            vec![TEST_NEED.id()]
        }
    }
    fn provides(&self) -> Vec<EventType> {
        if self.provides {
            vec![TEST_NEED.id()]
        } else {
            Vec::new()
        }
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(Pass)
    }
}

fn ghost(name: &str, _: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
    Ok(Arc::new(Ghost::new(name)))
}

fn needy(name: &str, _: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
    Ok(Arc::new(Needy {
        name: name.to_string(),
        provides: false,
    }))
}

fn provider(name: &str, _: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
    Ok(Arc::new(Needy {
        name: name.to_string(),
        provides: true,
    }))
}

fn fragment(name: &str, params: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
    // Reads every parameter through the typed getters, as a real kind would.
    params.get_int("mtu")?;
    params.get_duration("timeout")?;
    params.get_str("mode")?;
    params.get_bytes("window")?;
    params.get_bandwidth("rate")?;
    params.get_float("ratio")?;
    params.get_bool("verbose")?;
    params.get_str("label")?;
    Ok(Arc::new(Ghost::new(name)))
}

fn broken(_: &str, _: &Params, _: &BuildEnv) -> Result<LayerRef, BuildError> {
    Err("no such device".into())
}

pub const SIM_DEVICE: LayerKind = LayerKind {
    name: "sim-device",
    doc: "A test device.",
    params: &[ParamSpec {
        name: "port",
        kind: ParamKind::Int { min: 0, max: 65535 },
        default: Some("0"),
        doc: "device port",
    }],
    one_of: &[],
    device: true,
    build: ghost,
};

pub const FRAGMENT: LayerKind = LayerKind {
    name: "fragment",
    doc: "One parameter of every type.",
    params: &[
        ParamSpec {
            name: "mtu",
            kind: ParamKind::Int {
                min: 64,
                max: 65535,
            },
            default: Some("1500"),
            doc: "RFC 894: Ethernet MTU 1500",
        },
        ParamSpec {
            name: "timeout",
            kind: ParamKind::Duration,
            default: Some("\"10ms\""),
            doc: "reassembly timeout",
        },
        ParamSpec {
            name: "mode",
            kind: ParamKind::Choice(&["fast", "safe"]),
            default: Some("\"fast\""),
            doc: "mode",
        },
        ParamSpec {
            name: "window",
            kind: ParamKind::Bytes,
            default: Some("\"64KiB\""),
            doc: "window",
        },
        ParamSpec {
            name: "rate",
            kind: ParamKind::Bandwidth,
            default: Some("\"100Mbit\""),
            doc: "rate",
        },
        ParamSpec {
            name: "ratio",
            kind: ParamKind::Float { min: 0.0, max: 1.0 },
            default: Some("0.5"),
            doc: "ratio",
        },
        ParamSpec {
            name: "verbose",
            kind: ParamKind::Bool,
            default: Some("false"),
            doc: "verbose",
        },
        ParamSpec {
            name: "label",
            kind: ParamKind::Str,
            default: Some("\"x\""),
            doc: "label",
        },
    ],
    one_of: &[],
    device: false,
    build: fragment,
};

pub const KEYED: LayerKind = LayerKind {
    name: "keyed",
    doc: "A required parameter.",
    params: &[ParamSpec {
        name: "key",
        kind: ParamKind::Str,
        default: None,
        doc: "the key",
    }],
    one_of: &[],
    device: false,
    build: ghost,
};

pub const NEEDY: LayerKind = LayerKind {
    name: "needy",
    doc: "Requires TestNeed.",
    params: &[],
    one_of: &[],
    device: false,
    build: needy,
};

pub const PROVIDER: LayerKind = LayerKind {
    name: "provider",
    doc: "Provides TestNeed.",
    params: &[],
    one_of: &[],
    device: false,
    build: provider,
};

pub const BROKEN: LayerKind = LayerKind {
    name: "broken",
    doc: "Its factory fails.",
    params: &[],
    one_of: &[],
    device: false,
    build: broken,
};

/// The builtin catalog plus the test kinds.
pub fn catalog() -> Catalog {
    let mut c = Catalog::builtin();
    for k in [SIM_DEVICE, FRAGMENT, KEYED, NEEDY, PROVIDER, BROKEN] {
        c.register(k).unwrap();
    }
    c
}

/// The example of docs/STACK_FILES.md, with every scenario key set.
pub const EXAMPLE: &str = r#"# Layers: name -> kind + parameters.
[layers.dev]
kind = "sim-device"
[layers.fd]
kind = "ghost"
[layers.t]
kind = "transparent"

# QoS: ordered layer names, bottom (device) first.
[qos.data]
layers = ["dev", "fd", "t"]

# Channels
[channels.data]
qos = "data"
bind = { fd = "shared-fd" }
[channels.audio]
qos = "data"
bind = { fd = "shared-fd" }

[sessions.shared-fd]
layer = "fd"

[scenario]
nodes = 4
seed = 7
duration = "10s"
expect = "reliable-fifo"
[scenario.link]
latency = "1ms"
jitter = "0ms"
bandwidth = "1Gbit"
loss = 0.0
duplicate = 0.0
reorder = 0.0
reorder_delay = "5ms"
corrupt = 0.0
[[scenario.links]]
from = 0
to = 1
loss = 0.1
[[scenario.partition]]
at = "2s"
heal = "4s"
groups = [[0, 1], [2, 3]]
[[scenario.crash]]
node = 2
at = "3s"
restart = "5s"
[[scenario.workload]]
channel = "data"
messages = 1000
size = 256
interval = "1ms"
start = "0ms"
pattern = "all-to-all"
senders = [0, 1]
"#;
