//! Stack-file kind `overlay`: an overlay network (seed 000 §3.1.1; issue 16 §2) — the Delaunay
//! triangulation or the hypercube protocol, with the forwarding engine, over the device below.

use std::sync::Arc;

use viastack_kernel::{Duration, LayerRef, NodeId};
use viastack_overlay::wire::app::DeliveryMode;
use viastack_overlay::{dt, forward, hypercube};
use viastack_protocols::overlay::{Config, Overlay, TopologyKind};

use crate::catalog::{BuildEnv, BuildError, LayerKind, ParamKind, ParamSpec, Params};

const fn duration(name: &'static str, default: &'static str, doc: &'static str) -> ParamSpec {
    ParamSpec {
        name,
        kind: ParamKind::Duration,
        default: Some(default),
        doc,
    }
}

/// `overlay`: the overlay network layer.
pub const OVERLAY: LayerKind = LayerKind {
    name: "overlay",
    doc: "Overlay network (seed 000 §3.1.1, HyperCast): builds a Delaunay triangulation \
          (`topology = \"dt\"`, each node at a point drawn from the seed and its node id) or a \
          compact hypercube (`\"hypercube\"`, Gray-code labels) over the device below, joining \
          through the `buddies`, and carries the upper layers' messages along trees embedded in \
          it: a broadcast is multicast down the tree rooted at the sender (or flooded), a \
          message to one node is unicast up the tree rooted at it (DT only). Duplicates are \
          suppressed; neighbourhood changes go up as `OverlayNeighbourAdded`/`Removed` notices; \
          an `OverlayTreeQuery` from above is answered with `OverlayTree` (this node's parent, \
          children and neighbours in the tree rooted at a node: what `messagestore` reads); \
          closing the channel leaves the overlay with a goodbye. Datagrams are overlay \
          messages (docs/WIRE.md \"Overlay\"). Seed 000 gives no timer values: the defaults are \
          the ones the convergence tests of `viastack-overlay` run with.",
    params: &[
        ParamSpec {
            name: "topology",
            kind: ParamKind::Choice(&["dt", "hypercube"]),
            default: Some("\"dt\""),
            doc: "the overlay topology: Delaunay triangulation or hypercube",
        },
        ParamSpec {
            name: "buddies",
            kind: ParamKind::Str,
            default: Some("\"0\""),
            doc: "rendezvous: comma-separated node ids a lone node asks to join through (and, on \
                  DT, where leaders beacon so partitions merge); on the hypercube the first one \
                  bootstraps the cube",
        },
        ParamSpec {
            name: "broadcast",
            kind: ParamKind::Choice(&["multicast", "flood"]),
            default: Some("\"multicast\""),
            doc: "how a message to every node travels: down the tree rooted at the sender \
                  (each node receives one copy) or flooded (every edge, duplicates suppressed)",
        },
        ParamSpec {
            name: "hop_limit",
            kind: ParamKind::Int { min: 1, max: 255 },
            default: Some("64"),
            doc: "hops a message may travel; a tree path in an N-node overlay is below N hops",
        },
        ParamSpec {
            name: "remember",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("4096"),
            doc: "(source, message id) pairs remembered for duplicate suppression (the oldest \
                  is forgotten first and counted `overlay.forgotten`): the memory bound",
        },
        ParamSpec {
            name: "span",
            kind: ParamKind::Int {
                min: 1,
                max: (1 << 29) - 1,
            },
            default: Some("10000"),
            doc: "DT: coordinates are drawn in 0..span on each axis",
        },
        ParamSpec {
            name: "points_seed",
            kind: ParamKind::Int {
                min: -1,
                max: i64::MAX,
            },
            default: Some("-1"),
            doc: "DT: the seed every node's point is drawn from (with its node id); -1: the \
                  run's seed (the scenario's in a simulation). On real sockets every process \
                  has a seed of its own: give one here so that all draw the same points, or \
                  unicasts to a node and the MessageStore's trees miss",
        },
        duration(
            "fast_heartbeat",
            "\"250ms\"",
            "DT: hello period while the neighbourhood changes or the node is alone",
        ),
        duration(
            "slow_heartbeat",
            "\"2s\"",
            "DT: hello period once the neighbourhood is stable",
        ),
        duration(
            "stable_after",
            "\"2s\"",
            "DT: the neighbourhood counts as stable this long after its last change",
        ),
        duration(
            "neighbour_timeout",
            "\"10s\"",
            "DT: a neighbour not heard from this long is removed (five slow heartbeats)",
        ),
        duration(
            "probe_timeout",
            "\"2s\"",
            "DT: a candidate learned second-hand that does not answer within this is dropped",
        ),
        duration(
            "leader_beacon",
            "\"4s\"",
            "DT: a leader sends NewNode about itself to the buddies this often (partition merge)",
        ),
        duration(
            "hc_ping",
            "\"500ms\"",
            "hypercube: neighbour ping, join retry and neighbour lookup period",
        ),
        duration("hc_beacon", "\"1s\"", "hypercube: HRoot beacon period"),
        duration(
            "hc_neighbour_timeout",
            "\"3s\"",
            "hypercube: a neighbour not heard from this long is missing",
        ),
        duration(
            "hc_root_timeout",
            "\"4s\"",
            "hypercube: knowledge of the HRoot without a beacon this long is stale",
        ),
        duration(
            "hc_bootstrap_after",
            "\"2s\"",
            "hypercube: the first buddy labels itself G(0) after this long without a label",
        ),
    ],
    one_of: &[],
    device: false,
    build: build_overlay,
};

fn buddies(params: &Params) -> Result<Vec<NodeId>, BuildError> {
    let s = params.get_str("buddies")?;
    let list: Result<Vec<NodeId>, _> = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().map(NodeId))
        .collect();
    match list {
        Ok(l) if !l.is_empty() => Ok(l),
        Ok(_) => Err(BuildError::param(
            "buddies",
            "no node id: name at least one",
        )),
        Err(e) => Err(BuildError::param(
            "buddies",
            format!("`{s}` is not a comma-separated list of node ids: {e}"),
        )),
    }
}

fn build_overlay(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let buddies = buddies(params)?;
    if let Some(b) = buddies.iter().find(|b| b.0 >= env.nodes) {
        return Err(BuildError::param(
            "buddies",
            format!(
                "node {} is not a node of the scenario (0..{})",
                b.0, env.nodes
            ),
        ));
    }
    let topology = match params.get_str("topology")?.as_str() {
        "hypercube" => TopologyKind::Hypercube,
        _ => TopologyKind::Dt,
    };
    let broadcast = match params.get_str("broadcast")?.as_str() {
        "flood" => DeliveryMode::Flood,
        _ => DeliveryMode::Multicast,
    };
    let d = |n: &str| params.get_duration(n);
    let dt = dt::Config {
        buddies: buddies.clone(),
        fast_heartbeat: d("fast_heartbeat")?,
        slow_heartbeat: d("slow_heartbeat")?,
        stable_after: d("stable_after")?,
        neighbour_timeout: d("neighbour_timeout")?,
        probe_timeout: d("probe_timeout")?,
        leader_beacon: d("leader_beacon")?,
        ..dt::Config::default()
    };
    let hypercube = hypercube::Config {
        buddies,
        ping: d("hc_ping")?,
        beacon: d("hc_beacon")?,
        neighbour_timeout: d("hc_neighbour_timeout")?,
        root_timeout: d("hc_root_timeout")?,
        bootstrap_after: d("hc_bootstrap_after")?,
        ..hypercube::Config::default()
    };
    for (p, v) in [
        ("fast_heartbeat", dt.fast_heartbeat),
        ("slow_heartbeat", dt.slow_heartbeat),
        ("leader_beacon", dt.leader_beacon),
        ("hc_ping", hypercube.ping),
        ("hc_beacon", hypercube.beacon),
    ] {
        if v < Duration::from_millis(1) {
            return Err(BuildError::param(p, "must be at least 1ms"));
        }
    }
    if dt.neighbour_timeout <= dt.slow_heartbeat {
        return Err(BuildError::param(
            "neighbour_timeout",
            "must exceed `slow_heartbeat`, or every neighbour times out between two hellos",
        ));
    }
    if hypercube.neighbour_timeout <= hypercube.ping {
        return Err(BuildError::param(
            "hc_neighbour_timeout",
            "must exceed `hc_ping`, or every neighbour times out between two pings",
        ));
    }
    let int = |n: &str| params.get_int(n);
    let config = Config {
        topology,
        dt,
        hypercube,
        forward: forward::Config {
            hop_limit: u8::try_from(int("hop_limit")?).unwrap_or(u8::MAX),
            remember: usize::try_from(int("remember")?).unwrap_or(1),
        },
        broadcast,
        span: u32::try_from(int("span")?).unwrap_or(1),
    };
    let seed = u64::try_from(int("points_seed")?).unwrap_or(env.seed);
    Ok(Arc::new(Overlay::new(name, env.node, seed, config)))
}

/// `messagestore`: delivery services run per message above the overlay (issue 16 §3).
pub const MESSAGESTORE: LayerKind = LayerKind {
    name: "messagestore",
    doc: "MessageStore (seed 000 §4.3, issue 16 §3): runs a delivery service written in SCXML \
          (`specs/*.scxml`, seed 000 §5.1.2) above an `overlay` layer, one service instance per \
          (ServiceID, MessageID). An application message becomes a Payload message of the \
          service rooted at its sender; before each message or timer the layer asks the \
          overlay for this node's parent, children and neighbours in the tree rooted at the \
          message's root (`OverlayTreeQuery`/`OverlayTree`) and gives them to the service. \
          The service's sends go one hop to the children (multicast), to the destination \
          (unicast) or to the neighbours (flood); `toApplication` delivers up; its timers are \
          kernel timers. The layer delivers each message to the application at most once \
          (`duplicate_suppressed`), sends a held multicast payload to children a node gains \
          while its instance lives (`repaired`), and with `failure_state` reports an \
          instance's give-up up the tree to the message's sender (`report_sent`, \
          `failure_reported`). Bounded: `capacity` live instances (more are refused, counted \
          `full`), `queue` inputs waiting for their tree (the oldest is evicted, counted \
          `queue_evicted`).",
    params: &[
        ParamSpec {
            name: "service",
            kind: ParamKind::Str,
            default: None,
            doc: "path of the service's SCXML specification (relative to the working \
                  directory), loaded and verified when the stack is built",
        },
        ParamSpec {
            name: "capacity",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 24,
            },
            default: Some("10000"),
            doc: "live service instances at most",
        },
        ParamSpec {
            name: "queue",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("1024"),
            doc: "inputs (messages, timers) waiting for the overlay's tree answer at most",
        },
        ParamSpec {
            name: "stream",
            kind: ParamKind::Bool,
            default: Some("false"),
            doc: "a sender's messages form one stream: one MessageID (one instance per stream), \
                  increasing SequenceNumbers (the ordering service's model)",
        },
        ParamSpec {
            name: "forward",
            kind: ParamKind::Choice(&["service", "store"]),
            default: Some("\"service\""),
            doc: "who forwards a multicast or flooded data message: the service, with its own \
                  primitives (h2hack, e2eack, sync, dupelim), or the layer, one hop on before \
                  the service sees it (ordering)",
        },
        ParamSpec {
            name: "failure_state",
            kind: ParamKind::Str,
            default: Some("\"\""),
            doc: "a state of the service meaning it gave up (h2hack: `reset`): when an \
                  instance enters it, the message's sender gets a `PeerUnreachable` notice \
                  with the message's tag — directly at the sender, or by a failure report \
                  the giving-up node sends up the tree to it (empty: none)",
        },
        ParamSpec {
            name: "broadcast",
            kind: ParamKind::Choice(&["multicast", "flood"]),
            default: Some("\"multicast\""),
            doc: "DeliveryMode of an application broadcast: multicast (1: the service sends to \
                  the children of the tree rooted at the sender) or flood (2: to every \
                  neighbour but the previous hop)",
        },
    ],
    one_of: &[],
    device: false,
    build: build_messagestore,
};

fn build_messagestore(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let path = params.get_str("service")?;
    let src = std::fs::read_to_string(&path)
        .map_err(|e| BuildError::param("service", format!("cannot read `{path}`: {e}")))?;
    let (service, _warnings) = viastack_spec::service::Service::load(&path, &src)
        .map_err(|e| BuildError::param("service", format!("`{path}` does not load:\n{e}")))?;
    let int = |n: &str| params.get_int(n);
    let config = viastack_protocols::messagestore::Config {
        service: Arc::new(service),
        capacity: usize::try_from(int("capacity")?).unwrap_or(1),
        queue: usize::try_from(int("queue")?).unwrap_or(1),
        flood: params.get_str("broadcast")? == "flood",
        failure_state: Some(params.get_str("failure_state")?).filter(|s| !s.is_empty()),
        stream: params.get_bool("stream")?,
        store_forwards: params.get_str("forward")? == "store",
    };
    Ok(Arc::new(
        viastack_protocols::messagestore::MessageStore::new(name, env.node, config),
    ))
}
