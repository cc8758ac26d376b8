//! Stack-file kind `overlay`: an overlay network (seed 000 §3.1.1; issue 16 §2) — the Delaunay
//! triangulation or the hypercube protocol, with the forwarding engine, over the device below.

use std::sync::Arc;

use viastack_kernel::{Duration, LayerRef, NodeId};
use viastack_overlay::rendezvous::ServerConfig;
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
            name: "rendezvous",
            kind: ParamKind::Int {
                min: -1,
                max: u32::MAX as i64,
            },
            default: Some("-1"),
            doc: "node id of the rendezvous server (-1: none): that node runs the server and is \
                  no member of the overlay; every other node asks it who is there while it \
                  has no place in the overlay (the members it names become buddies; a \
                  hypercube node it tells twice that nobody is there founds the cube), and \
                  registers once placed, as a leader when it is the DT leader or the HRoot — \
                  the server introduces leaders to each other, so partitions merge. With a \
                  server `buddies` may be empty (`buddies = \"\"`)",
        },
        duration(
            "rendezvous_every",
            "\"1s\"",
            "how often a node queries (unplaced) or registers (placed) with the rendezvous \
             server",
        ),
        duration(
            "rendezvous_timeout",
            "\"10s\"",
            "the rendezvous server forgets a member not heard from this long (counted \
             `expired`); must exceed `rendezvous_every`, or members are forgotten between \
             two registrations",
        ),
        ParamSpec {
            name: "rendezvous_members",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("4096"),
            doc: "members the rendezvous server remembers, its memory bound: a registration \
                  beyond it forgets the member heard from longest ago (counted `evicted`)",
        },
        ParamSpec {
            name: "broadcast",
            kind: ParamKind::Choice(&["multicast", "flood"]),
            default: Some("\"multicast\""),
            doc: "how a message to every node travels: down the tree rooted at the sender \
                  (each node receives one copy) or flooded (every edge, duplicates suppressed)",
        },
        ParamSpec {
            name: "unicast",
            kind: ParamKind::Choice(&["route", "hop"]),
            default: Some("\"route\""),
            doc: "how a unicast passes through a node that is not its addressee: routed on by \
                  the overlay (up the tree rooted at the addressee), or handed up to the layer \
                  above, which sends it on (a `messagestore`: its service's metaops decide \
                  whether the node processes it, seed 000 §5.1.2.1)",
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

fn buddies(params: &Params, rendezvous: bool) -> Result<Vec<NodeId>, BuildError> {
    let s = params.get_str("buddies")?;
    let list: Result<Vec<NodeId>, _> = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().map(NodeId))
        .collect();
    match list {
        Ok(l) if !l.is_empty() || rendezvous => Ok(l),
        Ok(_) => Err(BuildError::param(
            "buddies",
            "no node id: name at least one (or a `rendezvous` server)",
        )),
        Err(e) => Err(BuildError::param(
            "buddies",
            format!("`{s}` is not a comma-separated list of node ids: {e}"),
        )),
    }
}

fn build_overlay(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let rendezvous = u32::try_from(params.get_int("rendezvous")?)
        .ok()
        .map(NodeId);
    if let Some(r) = rendezvous.filter(|r| r.0 >= env.nodes) {
        return Err(BuildError::param(
            "rendezvous",
            format!(
                "node {} is not a node of the scenario (0..{})",
                r.0, env.nodes
            ),
        ));
    }
    let buddies = buddies(params, rendezvous.is_some())?;
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
            hand_up_unicast: params.get_str("unicast")? == "hop",
        },
        broadcast,
        span: u32::try_from(int("span")?).unwrap_or(1),
        rendezvous,
        rendezvous_every: d("rendezvous_every")?,
        rendezvous_server: ServerConfig {
            member_timeout: d("rendezvous_timeout")?,
            max_members: usize::try_from(int("rendezvous_members")?).unwrap_or(1),
        },
    };
    if config.rendezvous_every < Duration::from_millis(1) {
        return Err(BuildError::param(
            "rendezvous_every",
            "must be at least 1ms",
        ));
    }
    if config.rendezvous_server.member_timeout <= config.rendezvous_every {
        return Err(BuildError::param(
            "rendezvous_timeout",
            "must exceed `rendezvous_every`, or the server forgets members between two \
             registrations",
        ));
    }
    let seed = u64::try_from(int("points_seed")?).unwrap_or(env.seed);
    Ok(Arc::new(Overlay::new(name, env.node, seed, config)))
}

/// `messagestore`: delivery services run per message above the overlay (issue 16 §3).
pub const MESSAGESTORE: LayerKind = LayerKind {
    name: "messagestore",
    doc: "MessageStore (seed 000 §4.3): runs a delivery service written in SCXML \
          (`specs/*.scxml`, seed 000 §5.1.2) above an `overlay` layer, one service instance per \
          (ServiceID, MessageID). An application message becomes a Payload message of the \
          service rooted at its sender; before each message or timer the layer asks the \
          overlay for this node's parent, children and neighbours in the tree rooted at the \
          message's root (`OverlayTreeQuery`/`OverlayTree`) and gives them to the service. \
          The service's sends go one hop to the children (multicast), to the destination \
          (unicast) or to the neighbours (flood); `toApplication` delivers up; its timers are \
          kernel timers. The layer delivers each message to the application at most once \
          (`duplicate_suppressed`), sends a held multicast payload to children a node gains \
          while its instance lives (`repaired`) as a repair the child acknowledges, sent \
          again with back-off until answered (`repair_acked`) or given up after 8 sends \
          (`repair_given_up`, reported as the message's failure), and with `failure_state` \
          reports an instance's give-up up the tree to the message's sender (`report_sent`, \
          `failure_reported`). Bounded: `capacity` live instances (more are refused, counted \
          `full`), `queue` data messages and `queue` control inputs waiting for their tree \
          (the seed's DataBuffer and ControlBuffer: a flood of one cannot push out the other; \
          the oldest is evicted, counted `data_queue_evicted` / `control_queue_evicted`). Several services may run side by side, keyed by ServiceID (the \
          application's messages use the first). Services are deployed at run time (seed \
          000 §4.3.2): a node getting a message for a ServiceID it lacks holds it (at most \
          `fetch_queue` messages, the oldest dropped) and asks the message's previous hop, \
          its source, its neighbours and the `server` for the spec (`spec_request_sent`); the \
          spec bundle (text, SHA-256, optional Ed25519 signature from `FILE.sig`) is verified \
          — hash, a signature by one of `trusted_keys` when set, the spec layer's load and \
          checks, the ServiceID — before it runs (`spec_accepted`, else `spec_refused`); after \
          `fetch_tries` unanswered requests the held messages are dropped \
          (`unknown_service_dropped`).",
    params: &[
        ParamSpec {
            name: "service",
            kind: ParamKind::Paths,
            default: Some("\"\""),
            doc: "paths of the services' SCXML specifications, comma-separated (relative to \
                  the stack file), loaded and verified when the stack is built; a `FILE.sig` \
                  next to one (`viastack services sign`) is its signature (empty: the node \
                  starts with no spec and fetches its `service_id`'s)",
        },
        ParamSpec {
            name: "service_id",
            kind: ParamKind::Int {
                min: -1,
                max: u32::MAX as i64,
            },
            default: Some("-1"),
            doc: "ServiceID of the application's messages (-1: the first `service`'s); with no \
                  `service` the node has no spec at start and fetches it from the nodes that \
                  have it and the `server` (`viastack services serve DIR --stack`)",
        },
        ParamSpec {
            name: "known_at",
            kind: ParamKind::Str,
            default: Some("\"\""),
            doc: "node ids (comma-separated) that start with the services; the others fetch \
                  them from the nodes that have them as their messages arrive (empty: every \
                  node starts with them)",
        },
        ParamSpec {
            name: "trusted_keys",
            kind: ParamKind::Str,
            default: Some("\"\""),
            doc: "Ed25519 public keys (64 hex digits each, comma-separated; `viastack services \
                  pubkey`): a fetched spec must be signed by one of them (empty: any spec whose \
                  SHA-256 checks is accepted)",
        },
        ParamSpec {
            name: "server",
            kind: ParamKind::Int {
                min: -1,
                max: u32::MAX as i64,
            },
            default: Some("-1"),
            doc: "node id of a services server, asked for a missing spec after the \
                  neighbours (-1: none)",
        },
        ParamSpec {
            name: "fetch_tries",
            kind: ParamKind::Int { min: 1, max: 1000 },
            default: Some("10"),
            doc: "requests for a missing spec before the messages waiting for it are dropped",
        },
        duration(
            "fetch_every",
            "\"500ms\"",
            "interval between requests for a missing spec",
        ),
        duration(
            "batch_window",
            "\"0ms\"",
            "how long a small message (an acknowledgement, a control message) may wait for \
             others to the same next hop to share its datagram beyond the end of the kernel \
             batch that made it (a delayed ACK; 0: sent at the end of each batch). Keep it far \
             below the service's timers (h2hack's Timeout_ACK: 1 s)",
        ),
        ParamSpec {
            name: "fetch_queue",
            kind: ParamKind::Int {
                min: 1,
                max: 1 << 20,
            },
            default: Some("256"),
            doc: "messages waiting for a missing service at most (the oldest is dropped, \
                  counted `unknown_service_dropped`)",
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
            doc: "data messages, and separately control inputs (control messages, timers), waiting for the overlay's tree answer at most",
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
    use viastack_protocols::messagestore::{Deploy, LocalService};
    use viastack_protocols::specbundle::{self, Signature};
    let paths = params.get_paths("service")?;
    let service_id = u32::try_from(params.get_int("service_id")?).ok();
    if paths.is_empty() && service_id.is_none() {
        return Err(BuildError::param(
            "service",
            "no service given: name specs in `service`, or a `service_id` to fetch",
        ));
    }
    let mut services: Vec<LocalService> = Vec::new();
    for path in &paths {
        let shown = path.display().to_string();
        let src = std::fs::read_to_string(path)
            .map_err(|e| BuildError::param("service", format!("cannot read `{shown}`: {e}")))?;
        let mut sig_path = path.clone().into_os_string();
        sig_path.push(".sig");
        let signature = match std::fs::read_to_string(&sig_path) {
            Ok(line) => Some(
                Signature::parse(&line)
                    .map_err(|e| BuildError::param("service", format!("`{shown}.sig`: {e}")))?,
            ),
            Err(_) => None,
        };
        let local = LocalService::load(&shown, &src, signature)
            .map_err(|e| BuildError::param("service", format!("`{shown}` does not load:\n{e}")))?;
        if services
            .iter()
            .any(|l| l.service.id() == local.service.id())
        {
            return Err(BuildError::param(
                "service",
                format!(
                    "`{shown}`: ServiceID {} is already used by another service",
                    local.service.id()
                ),
            ));
        }
        services.push(local);
    }
    let default_service =
        service_id.unwrap_or_else(|| services.first().map_or(0, |l| l.service.id()));
    let known_at = params.get_str("known_at")?;
    let mut known = Vec::new();
    for part in known_at.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n: u32 = part
            .parse()
            .map_err(|_| BuildError::param("known_at", format!("`{part}` is not a node id")))?;
        known.push(NodeId(n));
    }
    if !known.is_empty() && !known.contains(&env.node) {
        services.clear();
    }
    let mut trusted_keys = Vec::new();
    for part in params
        .get_str("trusted_keys")?
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        trusted_keys.push(
            specbundle::parse_hex::<32>(part)
                .map_err(|e| BuildError::param("trusted_keys", format!("`{part}`: {e}")))?,
        );
    }
    let int = |n: &str| params.get_int(n);
    let deploy = Deploy {
        trusted_keys,
        server: u32::try_from(int("server")?).ok().map(NodeId),
        tries: u32::try_from(int("fetch_tries")?).unwrap_or(1),
        every: params.get_duration("fetch_every")?,
        queue: usize::try_from(int("fetch_queue")?).unwrap_or(1),
        ..Deploy::default()
    };
    let config = viastack_protocols::messagestore::Config {
        services,
        default_service,
        deploy,
        capacity: usize::try_from(int("capacity")?).unwrap_or(1),
        queue: usize::try_from(int("queue")?).unwrap_or(1),
        flood: params.get_str("broadcast")? == "flood",
        failure_state: Some(params.get_str("failure_state")?).filter(|s| !s.is_empty()),
        stream: params.get_bool("stream")?,
        store_forwards: params.get_str("forward")? == "store",
        batch_window: params.get_duration("batch_window")?,
    };
    Ok(Arc::new(
        viastack_protocols::messagestore::MessageStore::new(name, env.node, config),
    ))
}
