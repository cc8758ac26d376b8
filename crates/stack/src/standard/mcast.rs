//! Stack-file kind `dvmrp`: DVMRP routing of seed 004's multicast service (issue 17 §1), over
//! one channel per interface.

use std::sync::Arc;

use viastack_kernel::LayerRef;
use viastack_protocols::dvmrp::{DvmrpConfig, DvmrpLayer};
use viastack_protocols::iface::Interface;

use crate::catalog::{BuildEnv, BuildError, LayerKind, ParamKind, ParamSpec, Params};
use crate::model::Role;

/// `dvmrp`: neighbour discovery and route exchange.
pub const DVMRP: LayerKind = LayerKind {
    name: "dvmrp",
    doc: "DVMRP routing (seed 004's routing composite protocol; draft-ietf-idmr-dvmrp-v3): \
          neighbour discovery by probes with generation ids and two-way adjacency, and route \
          exchange — a distance vector per source network with split horizon and poison \
          reverse, infinity 32, route expiry and hold-down, flash updates. One session per \
          node, bound into one channel per interface (the k-th channel's device on port k); \
          writes the node's neighbour and routing tables (global memory). Timers are the \
          draft's (probe 10 s, neighbour timeout 35 s, report 60 s, flash ≥ 5 s, expiry 140 s, \
          hold-down 120 s) times `time_scale`. Hosts (`role = \"host\"`) stay silent.",
    params: &[
        ParamSpec {
            name: "time_scale",
            kind: ParamKind::Float {
                min: 0.0001,
                max: 1000.0,
            },
            default: Some("1.0"),
            doc: "multiplies every protocol timer (0.01 for fast simulation)",
        },
        ParamSpec {
            name: "metric",
            kind: ParamKind::Int { min: 1, max: 31 },
            default: Some("1"),
            doc: "the metric of every interface (1: hop count)",
        },
    ],
    one_of: &[],
    device: false,
    build: build_dvmrp,
};

fn build_dvmrp(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let metric = params.get_int("metric")?;
    let metric =
        u8::try_from(metric).map_err(|_| format!("`metric` = {metric} is not in 1..=31"))?;
    let config = DvmrpConfig {
        time_scale: params.get_float("time_scale")?,
        metric,
        links: env.topology.as_ref().map(|t| t.links.clone()),
        router: env.topology.as_ref().is_none_or(|t| t.role == Role::Router),
    };
    Ok(Arc::new(DvmrpLayer::new(name, config)))
}

/// `interface`: one interface of a multi-homed node.
pub const INTERFACE: LayerKind = LayerKind {
    name: "interface",
    doc: "One network interface of a router or host with several links: the bottom of one \
          channel, handing its datagrams to the driver on `port` (with a [topology], the \
          node's `port`-th link). Unlike `device` it carries a single channel and adds no \
          channel tag, so a router's interface channels talk to whichever interface channel \
          of the neighbour is on the same link.",
    params: &[ParamSpec {
        name: "port",
        kind: ParamKind::Int { min: 0, max: 65535 },
        default: Some("0"),
        doc: "the interface number (with a [topology]: the node's links in file order)",
    }],
    one_of: &[],
    device: true,
    build: build_interface,
};

fn build_interface(name: &str, params: &Params, _env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let port = params.get_int("port")?;
    let port = u16::try_from(port).map_err(|_| format!("`port` = {port} is not in 0..=65535"))?;
    Ok(Arc::new(Interface::new(name, port)))
}
