//! viastack's network driver (issue 3 §1): the stacks that run in the simulator run unchanged
//! on real sockets, with the real clock fed to the kernel.
//!
//! - [`clock`]: the one place that reads the machine's clock;
//! - [`udp`]: a UDP endpoint with batched IO: one blocking `recvmmsg(MSG_WAITFORONE)` per wake-up;
//! - [`node`]: a kernel + the scenario's application + an endpoint, and its event loop;
//! - [`run_threads`]: a scenario's nodes as threads of one process on loopback, ending with the
//!   same [`Report`] as a simulated run;
//! - [`procs`]: the same with one process per node ([`run_processes`], [`run_child`]).
//!
//! - [`multihop`]: a node of a `[topology]` with one socket per interface (a datagram travels
//!   one link): on loopback ([`run_threads_topology`], what `run --net` runs for such a file)
//!   and in the network namespaces of `viastack testbed up` (issue 17 §3).
//!
//! Link conditions, partitions and crashes of a `[scenario]` are simulator features: on real
//! sockets faults come from fault-injection layers in the stack (or, for a `[topology]`, from
//! the netns testbed's tc/nftables rules), and the run says which scenario settings it ignored.
#![deny(unsafe_code)]

pub mod clock;
pub mod multihop;
pub mod node;
pub mod procs;
pub mod tcp;
pub mod transport;
pub mod udp;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use viastack_kernel::{Instant, KernelConfig, NodeId};
use viastack_scenario::report::{self, Network, Observed, RunInfo};
use viastack_scenario::{Recorder, Report, RunOptions};
use viastack_stack::{build_node, BuildEnv, Catalog, Diagnostics, StackFile};

pub use clock::Clock;
pub use multihop::{
    bind_interface, run_threads_topology, InterfaceSpec, LinkPeer, MultiNode, MultiOutcome,
};
pub use node::{NetNode, NodeOutcome, Snapshot, SnapshotReader};
pub use procs::{run_child, run_processes};
pub use tcp::TcpTransport;
pub use transport::{Transport, TransportStats, Waker};
pub use udp::{UdpEndpoint, UdpStats, UdpTransport};

/// Why a run on real sockets failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The file has no `[scenario]`.
    #[error("{0}: the stack file has no [scenario] to run")]
    NoScenario(String),
    /// A node's stack could not be built.
    #[error("{0}")]
    Build(Diagnostics),
    /// The net driver needs exactly one device per node.
    #[error("the network driver needs exactly one device layer per node; the stack has {0}")]
    Devices(usize),
    /// A socket failed.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// A node's thread panicked (a bug; the message says where).
    #[error("node {node} failed: {message}")]
    NodeFailed {
        /// The node.
        node: u32,
        /// What happened.
        message: String,
    },
}

/// Scenario settings a real-socket run cannot honour (to tell the user).
pub fn ignored_settings(file: &StackFile) -> Vec<String> {
    let Some(s) = &file.scenario else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if s.topology.is_some() {
        // Each interface is a socket of its own, so datagrams travel one link; the sending
        // node emulates each link's latency and jitter (`multihop`).
        out.push(
            "[topology] links' loss, duplication, reordering, corruption and bandwidth, and link \
             failures (latency and jitter are emulated by the senders; `viastack testbed up` \
             applies the rest on network namespaces)"
                .to_string(),
        );
        out.extend(
            [
                (!s.partitions.is_empty(), "partitions"),
                (!s.crashes.is_empty(), "crashes"),
                (!s.leaves.is_empty(), "leaves"),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, what)| what.to_string()),
        );
        return out;
    }
    let l = &s.link;
    if l.loss > 0.0 || l.duplicate > 0.0 || l.reorder > 0.0 || l.corrupt > 0.0 {
        out.push("link faults (use fault-injection layers or the netem testbed)".to_string());
    }
    if !l.jitter.is_zero() || l.bandwidth.is_some() || !s.links.is_empty() {
        out.push("link latency, jitter, bandwidth and per-link overrides".to_string());
    }
    if !s.partitions.is_empty() {
        out.push("partitions".to_string());
    }
    if !s.crashes.is_empty() {
        out.push("crashes".to_string());
    }
    if !s.leaves.is_empty() {
        out.push("leaves".to_string());
    }
    out
}

/// Which transport carries a stack's device traffic on real sockets: the `transport` parameter
/// of its device layer (`udp` unless it says `tcp`).
pub fn transport_kind(file: &StackFile) -> &'static str {
    let tcp = file.layers.values().any(|l| {
        l.kind == "device"
            && matches!(l.params.get("transport"), Some(viastack_stack::ParamValue::Str(t)) if t == "tcp")
    });
    if tcp {
        "tcp"
    } else {
        "udp"
    }
}

/// Binds node `me`'s transport of kind `kind` on loopback.
///
/// # Errors
/// Socket errors.
pub fn bind_transport(kind: &str, me: NodeId) -> std::io::Result<Box<dyn Transport>> {
    let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
    Ok(match kind {
        "tcp" => Box::new(TcpTransport::bind(me, loopback)?),
        _ => Box::new(UdpTransport::bind(loopback)?),
    })
}

/// The seed of node `node`'s kernel in a run seeded with `seed`.
pub fn kernel_seed(seed: u64, node: NodeId) -> u64 {
    seed ^ u64::from(node.0)
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Runs `file`'s scenario with every node as a thread of this process, on loopback UDP
/// sockets, for the scenario's duration in real time.
///
/// # Errors
/// [`NetError`]: no scenario, a stack that does not build, socket errors.
pub fn run_threads(
    file: &StackFile,
    catalog: &Catalog,
    options: &RunOptions,
) -> Result<Report, NetError> {
    let scenario = file
        .scenario
        .clone()
        .ok_or_else(|| NetError::NoScenario(file.path.clone()))?;
    if scenario.topology.is_some() {
        return run_threads_topology(file, catalog, options);
    }
    let seed = options.seed.unwrap_or(scenario.seed);
    let duration = options.duration.unwrap_or(scenario.duration);
    let nodes = scenario.nodes;

    // Bind every socket first: the peer table must be complete before any node starts.
    let kind = transport_kind(file);
    let mut transports = Vec::new();
    for n in 0..nodes {
        transports.push(bind_transport(kind, NodeId(n))?);
    }
    let addrs = transports
        .iter()
        .map(|t| t.local_addr())
        .collect::<Result<Vec<_>, _>>()?;
    for t in &mut transports {
        t.set_peers(addrs.clone());
    }
    // Build every node before starting the clock, so slow builds do not eat the run.
    let mut built = Vec::new();
    for n in 0..nodes {
        let env = BuildEnv {
            node: NodeId(n),
            nodes,
            seed,
            ..BuildEnv::default()
        };
        let config = KernelConfig {
            node: NodeId(n),
            seed: kernel_seed(seed, NodeId(n)),
            ..KernelConfig::default()
        };
        built.push(build_node(file, catalog, &env, config).map_err(NetError::Build)?);
    }
    let clock = Clock::start();
    let end = Instant::ZERO + duration;
    let outcomes: Vec<Result<NodeOutcome, NetError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = built
            .into_iter()
            .zip(transports)
            .enumerate()
            .map(|(n, (b, transport))| {
                let workloads = scenario.workloads.clone();
                let id = NodeId(n as u32);
                std::thread::Builder::new()
                    .name(format!("node-{n}"))
                    .spawn_scoped(scope, move || {
                        let mut node = NetNode::new(id, nodes, b, &workloads, transport, clock)?;
                        node.run_until(end)?;
                        Ok(node.finish())
                    })
            })
            .collect();
        join_nodes(handles)
    });
    let mut recorder = Recorder::default();
    let mut counters = BTreeMap::new();
    let mut network = Network {
        sent: 0,
        delivered: 0,
        lost: 0,
        duplicated: 0,
        corrupted: 0,
        dropped_partition: 0,
        dropped_down: 0,
        dropped_link_down: 0,
        dropped_no_route: 0,
    };
    for outcome in outcomes {
        let o = outcome?;
        recorder.merge(o.recorder);
        for (k, v) in o.counters {
            let c = counters.entry(k).or_insert(0u64);
            *c = c.saturating_add(v);
        }
        network.sent += o.transport.sent;
        network.delivered += o.transport.received;
        network.lost += o.transport.send_failed;
    }
    let info = RunInfo {
        file: &file.path,
        driver: if kind == "tcp" {
            "tcp-threads"
        } else {
            "udp-threads"
        },
        seed,
        nodes,
        duration,
        expect: scenario.expect,
    };
    let observed = Observed {
        recorder: &recorder,
        crashed: BTreeSet::new(),
        // No crashes on real sockets.
        down_at_end: BTreeSet::new(),
        reliable_workloads: BTreeSet::new(),
        network,
        counters,
        steps: 0,
        trace_hash: "-".to_string(),
    };
    Ok(report::build(&info, observed))
}

/// The outcome of each node's thread, in node order: a thread that could not start or that
/// panicked becomes that node's error (shared by `run --net` and multi-homed nodes).
pub(crate) fn join_nodes<T>(
    handles: Vec<std::io::Result<std::thread::ScopedJoinHandle<'_, Result<T, NetError>>>>,
) -> Vec<Result<T, NetError>> {
    handles
        .into_iter()
        .enumerate()
        .map(|(n, h)| match h {
            Ok(h) => h.join().unwrap_or_else(|_| {
                Err(NetError::NodeFailed {
                    node: n as u32,
                    message: "its thread panicked".into(),
                })
            }),
            Err(e) => Err(NetError::Io(e)),
        })
        .collect()
}
