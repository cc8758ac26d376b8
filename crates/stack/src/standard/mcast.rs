//! Stack-file kind `dvmrp`: DVMRP routing of seed 004's multicast service (issue 17 §1), over
//! one channel per interface.

use std::sync::Arc;

use viastack_kernel::LayerRef;
use viastack_protocols::dvmrp::{DvmrpConfig, DvmrpLayer};
use viastack_protocols::iface::Interface;
use viastack_protocols::mcast::{IgmpLayer, McastConfig, McastForwardLayer};
use viastack_protocols::mcast_reliable::{McastOrderLayer, McastReliableLayer, ReliableConfig};

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
          hold-down 120 s) times `time_scale`. Hosts (`role = \"host\"`) stay silent. Also \
          runs pruning (lifetime 2 h, retransmission from 3 s with back-off) and grafting \
          (acknowledged, retransmission from 5 s with back-off). Declares — header: a DVMRP \
          message (4-byte header; probe, report, prune, graft, graft ack); per-session state: \
          generation id, timers, flash set, prune/graft sequence counter; per-packet scratch: \
          none; global memory: writes the neighbour table, routing table, source tree and \
          prune table, reads the group table.",
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

/// `igmp`: IGMPv2 group management.
pub const IGMP: LayerKind = LayerKind {
    name: "igmp",
    doc: "IGMPv2 group management (seed 004's group-management composite protocol; RFC 2236). \
          On a router: querier election (lowest address), general queries (startup 2 × 31.25 s \
          apart, then every 125 s), group-specific last-member queries after a leave (2 × 1 s), \
          membership timers of 260 s — writing the node's group table (global memory). On a \
          host: the application's join and leave (McastGroup events, `[[scenario.group]]`), \
          reports at once and after a random delay, answers to queries after a random delay \
          with suppression, a leave when it reported last; passes multicast data up only for \
          joined groups. Timers are RFC 2236's times `time_scale`; bind one session into \
          every interface channel, above `dvmrp`. Declares — header: an IGMPv2 message (8 \
          bytes); per-session state: querier role and last-member queries per interface \
          (router), joined groups with their report timers and a seeded generator (host); \
          per-packet scratch: none; global memory: writes the group table (router).",
    params: &[ParamSpec {
        name: "time_scale",
        kind: ParamKind::Float {
            min: 0.0001,
            max: 1000.0,
        },
        default: Some("1.0"),
        doc: "multiplies every protocol timer (use the same value as `dvmrp`)",
    }],
    one_of: &[],
    device: false,
    build: build_igmp,
};

fn mcast_config(env: &BuildEnv) -> McastConfig {
    McastConfig {
        router: env.topology.as_ref().is_none_or(|t| t.role == Role::Router),
        links: env.topology.as_ref().map(|t| t.links.clone()),
        ..McastConfig::default()
    }
}

fn build_igmp(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let config = McastConfig {
        time_scale: params.get_float("time_scale")?,
        ..mcast_config(env)
    };
    Ok(Arc::new(IgmpLayer::new(name, config)))
}

/// `mcast-forward`: multicast forwarding.
pub const MCAST_FORWARD: LayerKind = LayerKind {
    name: "mcast-forward",
    doc: "Multicast forwarding (seed 004's Multicast Forward component): on a router, the \
          reverse-path check against the source tree, TTL, and replication onto the child \
          interfaces with members (group table) or dependents that have not pruned (prune \
          table); data nobody wants makes `dvmrp` prune. On a host: the application's messages \
          become multicast data for `group`, received data's payload is delivered. Bind one \
          session into every interface channel, at the top. Declares — header: multicast \
          data (16 bytes: type, TTL, source, group, sequence number); per-session state: \
          counters, the host's sequence counter; per-packet scratch: the verdict (child \
          interfaces, TTL − 1, unwanted); global memory: reads the source tree, group table \
          and prune table.",
    params: &[ParamSpec {
        name: "group",
        kind: ParamKind::Str,
        default: Some("\"239.1.1.1\""),
        doc: "the group a host's application sends to (a class D address)",
    }],
    one_of: &[],
    device: false,
    build: build_forward,
};

/// Parses a dotted IPv4 multicast address.
pub fn parse_group(s: &str) -> Result<viastack_mcast::Addr, String> {
    let parts: Vec<&str> = s.split('.').collect();
    let octets: Option<Vec<u8>> = parts.iter().map(|p| p.parse::<u8>().ok()).collect();
    match octets.as_deref() {
        Some(&[a, b, c, d]) => {
            let addr = viastack_mcast::Addr(u32::from_be_bytes([a, b, c, d]));
            if addr.is_multicast() {
                Ok(addr)
            } else {
                Err(format!(
                    "`{s}` is not a multicast group (224.0.0.0–239.255.255.255)"
                ))
            }
        }
        _ => Err(format!("`{s}` is not a dotted IPv4 address")),
    }
}

fn build_forward(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let group = params.get_str("group")?;
    let group = parse_group(&group).map_err(|e| BuildError::param("group", e))?;
    let config = McastConfig {
        group,
        ..mcast_config(env)
    };
    Ok(Arc::new(McastForwardLayer::new(name, config)))
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

/// `mcast-reliable`: reliable multicast.
pub const MCAST_RELIABLE: LayerKind = LayerKind {
    name: "mcast-reliable",
    doc: "Reliable multicast (seed 004's Reliable Multicast component): \
          receiver-initiated NACKs after a random back-off (≤ 50 ms), suppressed when another \
          receiver on the link asked, repeated every 200 ms until repaired; repair from the \
          nearest upstream holder — every router on the tree keeps a bounded repair cache of \
          the data from its upstream, answers its children's NACKs from it and NACKs upstream \
          itself (once per repeat interval) only for what it lacks; bounded buffers — the \
          source's send buffer refuses a send when full (a `SendRefused` notice naming the \
          message), the cache evicts its oldest; stability-based garbage collection — \
          receivers report the lowest packet they lack every 1 s and as soon as they moved \
          `report_progress` packets on, routers aggregate the \
          minimum upstream (every 1 s and as soon as it moved `report_progress` packets on), \
          the source frees what every receiver holds; a receiver that can \
          no longer be repaired gets a `McastUnrecoverable` notice. The source's session \
          heartbeat (500 ms while data is unstable) reveals lost tails. Timers are OpenPGM's \
          defaults times `time_scale`. Place between `igmp` and `mcast-forward`, one session \
          per node bound into every interface channel. Declares — header: the 8-byte \
          reliable data header (type 0x31, trail) inside the data payload; NACK (0x32), \
          stability report (0x33) and session (0x34) messages; per-session state: send \
          buffer, reporters (source); repair cache, NACK and repair suppression, reporters \
          (router); per-stream position, held set, NACK deadlines (receiver); per-packet \
          scratch: the parsed header; global memory: reads the source tree, prune table and \
          group table. Sequence numbers compare serially (RFC 1982): a stream runs on past \
          2^32 − 1.",
    params: &[
        ParamSpec {
            name: "time_scale",
            kind: ParamKind::Float {
                min: 0.0001,
                max: 1000.0,
            },
            default: Some("1.0"),
            doc: "multiplies every timer (NACK back-off and repeat, session heartbeat, \
                  stability reports)",
        },
        ParamSpec {
            name: "retain",
            kind: ParamKind::Duration,
            default: Some("\"0s\""),
            doc: "the source keeps a stable packet at least this long, for receivers cut off \
                  while routing repairs the tree (not scaled; a full buffer frees stable \
                  packets regardless)",
        },
        ParamSpec {
            name: "send_capacity",
            kind: ParamKind::Int {
                min: 1,
                max: 1_000_000,
            },
            default: Some("1024"),
            doc: "packets the source's send buffer holds; a send beyond is refused",
        },
        ParamSpec {
            name: "cache_capacity",
            kind: ParamKind::Int {
                min: 0,
                max: 1_000_000,
            },
            default: Some("1024"),
            doc: "packets a router's repair cache holds (the oldest is evicted)",
        },
        ParamSpec {
            name: "window",
            kind: ParamKind::Int {
                min: 1,
                max: 1_000_000,
            },
            default: Some("1024"),
            doc: "packets a receiver holds above its lowest missing one",
        },
        ParamSpec {
            name: "report_progress",
            kind: ParamKind::Int {
                min: 0,
                max: 1_000_000,
            },
            default: Some("64"),
            doc: "a receiver also reports stability as soon as its stream moved this many \
                  packets past its last report, and a router as soon as its children's \
                  aggregate moved this many past its last report upstream (0: only \
                  periodically)",
        },
        ParamSpec {
            name: "first_seq",
            kind: ParamKind::Int {
                min: 0,
                max: 4_294_967_295,
            },
            default: Some("0"),
            doc: "the source's first sequence number; every comparison is serial (RFC 1982), \
                  so a stream runs on past 2^32 − 1 (tests start near it to cross the wrap)",
        },
        ParamSpec {
            name: "no_repair",
            kind: ParamKind::Bool,
            default: Some("false"),
            doc: "fault injection for checker tests: NACKs are never answered",
        },
    ],
    one_of: &[],
    device: false,
    build: build_reliable,
};

fn build_reliable(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let cap = |n: &str| -> Result<usize, BuildError> {
        let v = params.get_int(n)?;
        usize::try_from(v).map_err(|_| BuildError::param(n, format!("{v} is negative")))
    };
    let window = u32::try_from(cap("window")?).unwrap_or(u32::MAX);
    let rel = viastack_mcast::reliable::Config {
        send_capacity: cap("send_capacity")?,
        cache_capacity: cap("cache_capacity")?,
        window,
        report_progress: u32::try_from(cap("report_progress")?).unwrap_or(u32::MAX),
        first_seq: u32::try_from(params.get_int("first_seq")?).unwrap_or(0),
        ..viastack_mcast::reliable::Config::defaults()
    }
    .scaled(params.get_float("time_scale")?);
    let rel = viastack_mcast::reliable::Config {
        retain: params.get_duration("retain")?,
        ..rel
    };
    let config = ReliableConfig {
        mcast: mcast_config(env),
        rel,
        no_repair: params.get_bool("no_repair")?,
    };
    Ok(Arc::new(McastReliableLayer::new(name, config)))
}

/// `mcast-order`: in-order delivery per source.
pub const MCAST_ORDER: LayerKind = LayerKind {
    name: "mcast-order",
    doc: "In-order multicast delivery (seed 004's In-order Multicast component): on a host, \
          holds each (source, group) stream's packets until those before them have been \
          delivered; starts where `mcast-reliable` says and moves past what it reports \
          unrecoverable. Optional: leave it out for delivery on arrival. Place between \
          `mcast-reliable` and `mcast-forward`. Declares — header: none; per-session state: \
          per stream the next position and the packets held (at most `capacity`; beyond, a \
          packet goes up out of order and `order_overflow` counts it); per-packet scratch: \
          the data header; global memory: none.",
    params: &[ParamSpec {
        name: "capacity",
        kind: ParamKind::Int {
            min: 1,
            max: 1_000_000,
        },
        default: Some("1024"),
        doc: "packets held per stream (use at least `mcast-reliable`'s `window`)",
    }],
    one_of: &[],
    device: false,
    build: build_order,
};

fn build_order(name: &str, params: &Params, env: &BuildEnv) -> Result<LayerRef, BuildError> {
    let v = params.get_int("capacity")?;
    let capacity =
        usize::try_from(v).map_err(|_| BuildError::param("capacity", format!("{v} < 1")))?;
    let router = mcast_config(env).router;
    Ok(Arc::new(McastOrderLayer::new(name, router, capacity)))
}
