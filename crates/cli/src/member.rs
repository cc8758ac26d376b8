//! `viastack node STACK --id N (--deployment FILE | --addr A --peer ID=ADDR …)`: one node of
//! a stack on real sockets, across machines.
//!
//! With a `[scenario]` that has workloads, the node runs its share of them (the same
//! generator as `run --net`) for the scenario's duration and prints what it observed. Without
//! one it is a member: it serves the stack (relaying, answering, acknowledging), prints the
//! messages and notices it receives, and runs until `--duration` passes or it is killed.
//! `--metrics ADDR` serves the node's counters in the Prometheus text format at `/metrics`, in
//! both modes (per channel only for a member: the workload generator keeps its own record).
//!
//! A deployment file that lists `[[interface]]`s was written by `viastack testbed up` for one
//! node of a multi-hop network: the node then binds one socket per interface and talks to the
//! testbed over stdin/stdout (`crate::testbed::node`, docs/TESTBED.md).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use viastack::{Deployment, Metrics, Node, NodeEvent, NodeId};
use viastack_kernel::Instant;
use viastack_stack::Catalog;

/// The command's arguments.
#[derive(clap::Args)]
pub struct NodeArgs {
    /// The stack file.
    pub file: PathBuf,
    /// This node's id (0..N-1, as in the deployment).
    #[arg(long)]
    pub id: Option<u32>,
    /// The deployment file: every node's address (see docs/APPLICATIONS.md).
    #[arg(long)]
    pub deployment: Option<PathBuf>,
    /// This node's address (instead of a deployment file; with --peer).
    #[arg(long)]
    pub addr: Option<SocketAddr>,
    /// Another node, as ID=HOST:PORT (repeat for each).
    #[arg(long = "peer", value_parser = peer_arg)]
    pub peers: Vec<(u32, String)>,
    /// Serve the node's counters in the Prometheus text format at http://ADDR/metrics.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Stop after this long (e.g. "30s"); the scenario's duration when it has workloads.
    #[arg(long, value_parser = crate::duration_arg)]
    pub duration: Option<viastack_kernel::Duration>,
    /// Print each event as one JSON object per line.
    #[arg(long)]
    pub json: bool,
}

fn peer_arg(s: &str) -> Result<(u32, String), String> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: write a peer as ID=HOST:PORT, e.g. 1=10.0.0.2:7000"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("`{id}` is not a node id (0, 1, …)"))?;
    Ok((id, addr.trim().to_string()))
}

/// The deployment the arguments describe.
fn deployment(args: &NodeArgs) -> anyhow::Result<Deployment> {
    let mut d = match (&args.deployment, args.addr) {
        (Some(path), None) => Deployment::from_file(path)?,
        (None, Some(addr)) => {
            let id = args.id.context("--addr needs --id")?;
            Deployment::from_flags("--addr/--peer", NodeId(id), addr, &args.peers)?
        }
        (Some(_), Some(_)) => bail!("give either --deployment or --addr/--peer, not both"),
        (None, None) => bail!("say where the nodes are: --deployment FILE, or --addr and --peer"),
    };
    if let Some(id) = args.id {
        d = d.with_id(NodeId(id));
    }
    if d.id.is_none() {
        bail!("which node is this? give --id (the deployment file has no `node =`)");
    }
    Ok(d)
}

/// Runs the command.
pub fn run(args: &NodeArgs, catalog: &Catalog) -> anyhow::Result<ExitCode> {
    // A node of `viastack testbed up`: its deployment lists its interfaces.
    if let Some(path) = &args.deployment {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        if crate::testbed::is_testbed_deployment(&text) {
            crate::testbed::node(&args.file, path, catalog)?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    let deployment = deployment(args)?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("{}: cannot read", args.file.display()))?;
    let name = args.file.display().to_string();
    let file = viastack_stack::parse(&name, &text, catalog).map_err(|d| anyhow::anyhow!("{d}"))?;
    let workloads = file
        .scenario
        .as_ref()
        .is_some_and(|s| !s.workloads.is_empty());
    if workloads {
        return workload(&args.file, &file, catalog, &deployment, args);
    }
    member(&args.file, &text, deployment, args)
}

/// A member: serves the stack and prints what reaches the application.
fn member(
    path: &Path,
    text: &str,
    deployment: Deployment,
    args: &NodeArgs,
) -> anyhow::Result<ExitCode> {
    let node = Node::builder()
        .stack_text(path.display().to_string(), text)
        .deployment(deployment)
        .open()?;
    eprintln!(
        "viastack node {} of {} on {} (channels: {})",
        node.id(),
        node.nodes(),
        node.local_addr(),
        node.channel_names().collect::<Vec<_>>().join(", ")
    );
    if let Some(addr) = args.metrics {
        serve_metrics(addr, Arc::new(node.metrics_reader()))?;
        eprintln!("metrics at http://{addr}/metrics");
    }
    let clock = viastack_net::Clock::start();
    let end = args.duration.map(|d| Instant::ZERO + d);
    loop {
        let wait = end.map_or(std::time::Duration::from_secs(1), |e| clock.until(e));
        if end.is_some() && wait.is_zero() {
            break;
        }
        match node.recv_timeout(wait) {
            Ok(event) => print_event(&event, args.json)?,
            Err(viastack::RecvError::Timeout) => {}
            Err(viastack::RecvError::Closed) => break,
        }
    }
    let report = node.close()?;
    eprintln!(
        "closed: {} message(s) unsettled at close; {} datagrams sent, {} received",
        report.aborted, report.metrics.transport.sent, report.metrics.transport.received
    );
    Ok(ExitCode::SUCCESS)
}

fn print_event(event: &NodeEvent, json: bool) -> anyhow::Result<()> {
    match (event, json) {
        (NodeEvent::Message(m), false) => outln!(
            "{} from {}: {}",
            m.channel,
            m.from,
            String::from_utf8_lossy(&m.payload)
        )?,
        (NodeEvent::Message(m), true) => outln!(
            "{}",
            serde_json::json!({"message": {"channel": &*m.channel, "from": m.from.0, "bytes": m.payload.len()}})
        )?,
        (NodeEvent::Notice(n), false) => outln!("notice on {}: {n:?}", n.channel())?,
        (NodeEvent::Notice(n), true) => outln!(
            "{}",
            serde_json::json!({"notice": {"channel": n.channel(), "what": format!("{n:?}")}})
        )?,
    }
    Ok(())
}

/// Serves `GET /metrics` on `addr` from a thread of its own.
pub fn serve_metrics(
    addr: SocketAddr,
    read: Arc<dyn Fn() -> Option<Metrics> + Send + Sync>,
) -> anyhow::Result<()> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
    std::thread::Builder::new()
        .name("viastack-metrics".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let response = if request.url() != "/metrics" {
                    tiny_http::Response::from_string("not found: the counters are at /metrics\n")
                        .with_status_code(404)
                } else if let Some(m) = read() {
                    let header = tiny_http::Header::from_bytes(
                        "Content-Type",
                        "text/plain; version=0.0.4; charset=utf-8",
                    );
                    let r = tiny_http::Response::from_string(m.to_prometheus());
                    match header {
                        Ok(h) => r.with_header(h),
                        Err(()) => r,
                    }
                } else {
                    tiny_http::Response::from_string("the node has closed\n").with_status_code(503)
                };
                if let Err(e) = request.respond(response) {
                    tracing::debug!(error = %e, "metrics response");
                }
            }
        })?;
    Ok(())
}

/// A node with the scenario's workloads: the `run --net` node loop on the deployment's sockets.
fn workload(
    path: &Path,
    file: &viastack_stack::StackFile,
    catalog: &Catalog,
    deployment: &Deployment,
    args: &NodeArgs,
) -> anyhow::Result<ExitCode> {
    let Some(scenario) = &file.scenario else {
        bail!("no scenario");
    };
    let id = deployment.id.context("no node id")?;
    let nodes = deployment.nodes.len() as u32;
    if nodes != scenario.nodes {
        bail!(
            "{}: the scenario has {} nodes but the deployment lists {nodes}",
            path.display(),
            scenario.nodes
        );
    }
    let addr = deployment
        .bind_addr(id)
        .context("node not in the deployment")?;
    let mut transport: Box<dyn viastack_net::Transport> = match viastack_net::transport_kind(file) {
        "tcp" => Box::new(viastack_net::TcpTransport::bind(id, addr)?),
        _ => Box::new(viastack_net::UdpTransport::bind(addr)?),
    };
    transport.set_peers(deployment.nodes.clone());
    let env = viastack_stack::BuildEnv {
        node: id,
        nodes,
        seed: scenario.seed,
        ..viastack_stack::BuildEnv::default()
    };
    let config = viastack_kernel::KernelConfig {
        node: id,
        seed: scenario.seed ^ viastack_net::Clock::unix_now_nanos(),
        ..viastack_kernel::KernelConfig::default()
    };
    let built = viastack_stack::build_node(file, catalog, &env, config)
        .map_err(|d| anyhow::anyhow!("{d}"))?;
    let clock = viastack_net::Clock::start();
    let mut net =
        viastack_net::NetNode::new(id, nodes, built, &scenario.workloads, transport, clock)?;
    if let Some(addr) = args.metrics {
        let read = net.snapshot_reader()?;
        serve_metrics(
            addr,
            Arc::new(move || {
                read().map(|s| Metrics {
                    node: id,
                    counters: s.counters,
                    channels: Default::default(),
                    transport: s.transport,
                    unsettled: s.unsettled as u64,
                    events_waiting: 0,
                    sends_waiting: 0,
                })
            }),
        )?;
        eprintln!("metrics at http://{addr}/metrics");
    }
    let duration = args.duration.unwrap_or(scenario.duration);
    eprintln!("viastack node {id} of {nodes} on {addr}: running the scenario's workloads for {duration:?}");
    net.run_until(Instant::ZERO + duration)?;
    let outcome = net.finish();
    let summary = serde_json::json!({
        "node": id.0,
        "recorder": outcome.recorder.snapshot(),
        "counters": outcome.counters,
        "transport": {
            "sent": outcome.transport.sent,
            "send_failed": outcome.transport.send_failed,
            "received": outcome.transport.received,
            "bad_frames": outcome.transport.bad_frames,
        },
    });
    outln!("{}", serde_json::to_string_pretty(&summary)?)?;
    Ok(ExitCode::SUCCESS)
}
