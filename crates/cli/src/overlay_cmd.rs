//! `viastack overlay join|status` (issue 16 §5; seed 000 chapters 3–4, the overlay socket):
//! one overlay node on real UDP through [`viastack::overlay::OverlaySocket`], several
//! processes forming one overlay, and a status line each second.
//!
//! - `overlay join STACK --id N (--deployment FILE | --nodes N [--base-port P])` joins the
//!   overlay of STACK (a stack whose channels run the `overlay` layer, such as
//!   `stacks/overlay-app.toml`) as node N. With `--nodes`, node `i` is at
//!   `127.0.0.1:(P + i)` (loopback, for trying several processes on one machine). Each second
//!   it prints one JSON status line on stdout — node, logical address, neighbours, leader,
//!   stable, each service's live instances and loaded ServiceIDs, the `deploy` counters of
//!   services fetched at run time, messages received — and writes the same object to
//!   `--status-file` (replaced atomically) when given. `--send-every D` multicasts a small
//!   message every D (on the lane of `--service ID`, else the plain lane), so that services
//!   have instances to show. It leaves (goodbyes) after `--duration`, or runs until killed.
//! - `overlay status FILE` prints the status a running `join` writes to its status file.
//! - `overlay rendezvous --listen ADDR` runs the rendezvous server on UDP
//!   ([`viastack_overlay::rendezvous::Server`], wire `docs/WIRE.md` "Rendezvous"): members
//!   register, joining nodes ask who is there, leaders are introduced to each other. It
//!   prints `rendezvous on udp ADDR` first, then one line per change of its member table.
//! - `overlay rendezvous STACK --id N (--deployment FILE | --nodes N)` runs node N of a stack
//!   whose `overlay` layer names it as its server (`rendezvous = N`, e.g.
//!   `stacks/overlay-rendezvous.toml`): the server the stack's other nodes, started with
//!   `overlay join` and no buddy list, ask (through the stack's device and checksum, like
//!   every datagram of the stack). Its status lines carry `rendezvous_members`.

#![allow(clippy::disallowed_methods)] // a driver: the status ticks are wall-clock time

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use viastack::overlay::{Delivery, OverlayEvent, OverlaySocket, Status};
use viastack::{Deployment, Node, NodeId, RecvError};

/// `viastack overlay …`.
#[derive(Subcommand)]
pub enum OverlayCommand {
    /// Join an overlay as one node on real UDP; print a status line each second.
    Join(JoinArgs),
    /// Run the rendezvous server on UDP: joining nodes ask it for members, partition leaders
    /// meet through it.
    Rendezvous {
        /// A stack whose `overlay` layer names this node as its `rendezvous` server (e.g.
        /// stacks/overlay-rendezvous.toml): run that node — the server the other nodes of the
        /// deployment (`overlay join`) ask — instead of a bare server on --listen.
        #[arg(required_unless_present = "listen", conflicts_with = "listen")]
        stack: Option<PathBuf>,
        /// With a stack: this node's id (the layer's `rendezvous`).
        #[arg(long, requires = "stack")]
        id: Option<u32>,
        /// With a stack: loopback deployment of N nodes, node i at 127.0.0.1:(base-port + i).
        #[arg(long, requires = "stack")]
        nodes: Option<u32>,
        /// With a stack: first port of the loopback deployment.
        #[arg(long, default_value_t = 47000)]
        base_port: u16,
        /// With a stack: the deployment file.
        #[arg(long, requires = "stack", conflicts_with = "nodes")]
        deployment: Option<PathBuf>,
        /// With a stack: write the status (JSON) to this file each second.
        #[arg(long, requires = "stack")]
        status_file: Option<PathBuf>,
        /// With a stack: stop after this long.
        #[arg(long, value_parser = crate::duration_arg, requires = "stack")]
        duration: Option<viastack_kernel::Duration>,
        /// Where to listen for a bare server (e.g. 127.0.0.1:47999; port 0 picks one).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Forget a member not heard from this long.
        #[arg(long, value_parser = crate::duration_arg, default_value = "10s")]
        member_timeout: viastack_kernel::Duration,
        /// Remember at most this many members.
        #[arg(long, default_value_t = 4096)]
        max_members: usize,
    },
    /// Show the status a running `overlay join --status-file FILE` writes.
    Status {
        /// The status file.
        file: PathBuf,
        /// Print the JSON object as written.
        #[arg(long)]
        json: bool,
    },
}

/// Options of `overlay join`.
#[derive(Args)]
pub struct JoinArgs {
    /// The stack file (channels over an `overlay` layer, e.g. stacks/overlay-app.toml).
    pub file: PathBuf,
    /// This node's id.
    #[arg(long)]
    pub id: Option<u32>,
    /// The deployment file: every node's address.
    #[arg(long, conflicts_with = "nodes")]
    pub deployment: Option<PathBuf>,
    /// Loopback deployment of N nodes: node i at 127.0.0.1:(base-port + i).
    #[arg(long)]
    pub nodes: Option<u32>,
    /// First port of the loopback deployment.
    #[arg(long, default_value_t = 47000)]
    pub base_port: u16,
    /// Write the status (JSON) to this file each second.
    #[arg(long)]
    pub status_file: Option<PathBuf>,
    /// Multicast a small message this often (e.g. "500ms").
    #[arg(long, value_parser = crate::duration_arg)]
    pub send_every: Option<viastack_kernel::Duration>,
    /// With --send-every: the service to send with (its ServiceID); default: no service.
    #[arg(long)]
    pub service: Option<u32>,
    /// Leave after this long (e.g. "30s"); default: run until killed.
    #[arg(long, value_parser = crate::duration_arg)]
    pub duration: Option<viastack_kernel::Duration>,
    /// Neighbourhood unchanged this long counts as stable.
    #[arg(long, value_parser = crate::duration_arg, default_value = "3s")]
    pub settle: viastack_kernel::Duration,
}

/// Runs `viastack overlay …`.
pub fn run(cmd: OverlayCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        OverlayCommand::Join(args) => join(&args),
        OverlayCommand::Rendezvous {
            stack: Some(file),
            id,
            nodes,
            base_port,
            deployment,
            status_file,
            duration,
            ..
        } => {
            let args = JoinArgs {
                file,
                id,
                deployment,
                nodes,
                base_port,
                status_file,
                send_every: None,
                service: None,
                duration,
                settle: viastack_kernel::Duration::from_secs(3),
            };
            join_as(&args, Role::Rendezvous)
        }
        OverlayCommand::Rendezvous {
            listen,
            member_timeout,
            max_members,
            ..
        } => match listen {
            Some(listen) => rendezvous(listen, member_timeout, max_members),
            None => bail!("give a stack file or --listen ADDR"),
        },
        OverlayCommand::Status { file, json } => {
            let text = std::fs::read_to_string(&file).with_context(|| {
                format!(
                    "{}: cannot read (is `overlay join --status-file` running?)",
                    file.display()
                )
            })?;
            let v: Value = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a status file", file.display()))?;
            if json {
                outln!("{v}")?;
            } else {
                outln!("{}", human(&v))?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The rendezvous server's loop: one datagram at a time; every answer goes back to the
/// datagram's sender (the server only ever answers the node that registers or asks).
fn rendezvous(
    listen: SocketAddr,
    member_timeout: viastack_kernel::Duration,
    max_members: usize,
) -> anyhow::Result<ExitCode> {
    use viastack_overlay::rendezvous::{Server, ServerConfig};
    use viastack_overlay::wire::{rdv, SubstrateRepr};
    let sock =
        std::net::UdpSocket::bind(listen).with_context(|| format!("cannot bind {listen}"))?;
    outln!("rendezvous on udp {}", sock.local_addr()?)?;
    let mut server: Server<SubstrateRepr> = Server::new(ServerConfig {
        member_timeout,
        max_members: max_members.max(1),
    });
    let start = Instant::now();
    let mut buf = vec![0u8; 65_536];
    let mut members = 0usize;
    let mut malformed = 0u64;
    loop {
        let (n, peer) = sock.recv_from(&mut buf)?;
        let now = viastack_kernel::Instant::from_nanos(
            u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
        );
        let Some(msg) = rdv::Repr::parse_bytes(&buf[..n])
            .ok()
            .and_then(|r| r.to_message::<SubstrateRepr>())
        else {
            malformed += 1;
            eprintln!("{peer}: not a rendezvous message ({malformed} so far)");
            continue;
        };
        server.handle_message(now, msg);
        while let Some((_, answer)) = server.poll_transmit() {
            let mut out = Vec::new();
            rdv::Repr::from_message(&answer).emit_into(&mut out)?;
            if let Err(e) = sock.send_to(&out, peer) {
                eprintln!("{peer}: {e}");
            }
        }
        let now_members = server.members().count();
        if now_members != members {
            members = now_members;
            let leaders = server.members().filter(|(_, l)| *l).count();
            // The server keeps serving if nobody reads its output any more.
            let _ = outln!("members {members} leaders {leaders}");
        }
    }
}

fn deployment(args: &JoinArgs) -> anyhow::Result<Deployment> {
    let d = match (&args.deployment, args.nodes) {
        (Some(path), None) => Deployment::from_file(path)?,
        (None, Some(n)) => {
            if n == 0 {
                bail!("--nodes must be at least 1");
            }
            let addrs = (0..n)
                .map(|i| {
                    let port = u32::from(args.base_port) + i;
                    let port =
                        u16::try_from(port).context("--base-port + --nodes exceeds 65535")?;
                    Ok(SocketAddr::from(([127, 0, 0, 1], port)))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Deployment::new(addrs)
        }
        _ => bail!("say where the nodes are: --deployment FILE, or --nodes N (loopback)"),
    };
    let d = match args.id {
        Some(id) => d.with_id(NodeId(id)),
        None => d,
    };
    if d.id.is_none() {
        bail!("which node is this? give --id");
    }
    Ok(d)
}

/// The status as one JSON object.
pub fn status_json(st: &Status, received: u64, sent: u64) -> Value {
    let services: Vec<Value> = st
        .services
        .iter()
        .map(
            |s| json!({"channel": s.channel, "service_id": s.service_id, "instances": s.instances, "loaded": s.loaded}),
        )
        .collect();
    json!({
        "node": st.node.0,
        "topology": st.topology,
        "logical": st.logical,
        "neighbours": st.neighbours.iter().map(|n| n.0).collect::<Vec<_>>(),
        "leader": st.leader,
        "stable": st.stable,
        "services": services,
        "received": received,
        "sent": sent,
        "rendezvous_members": st.rendezvous_members,
    })
}

fn human(v: &Value) -> String {
    let services: Vec<String> = v["services"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    format!(
                        "{} (service {}): {} instances",
                        s["channel"].as_str().unwrap_or("?"),
                        s["service_id"],
                        s["instances"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "node {} at {} ({})\n  neighbours: {}\n  leader: {}\n  stable: {}\n  services: {}\n  received {}, sent {}",
        v["node"],
        v["logical"].as_str().unwrap_or("-"),
        v["topology"].as_str().unwrap_or("?"),
        v["neighbours"],
        v["leader"],
        v["stable"],
        if services.is_empty() { "none".to_string() } else { services.join("; ") },
        v["received"],
        v["sent"],
    )
}

/// The deployment counters of the node's `messagestore` layers (issue 16 §4), summed over
/// the layers: specs fetched and accepted, refused (hash, signature or load), served to other
/// nodes, requests sent, and messages dropped because their service never came.
pub fn deploy_json(m: &viastack::Metrics) -> Value {
    let mut out = serde_json::Map::new();
    for what in [
        "spec_request_sent",
        "spec_accepted",
        "spec_refused",
        "spec_served",
        "spec_fetch_failed",
        "unknown_service_dropped",
    ] {
        let n: u64 = m
            .counters
            .iter()
            .filter(|(k, _)| k.rsplit_once('.').is_some_and(|(_, c)| c == what))
            .map(|(_, v)| *v)
            .sum();
        out.insert(what.to_string(), json!(n));
    }
    Value::Object(out)
}

fn join(args: &JoinArgs) -> anyhow::Result<ExitCode> {
    join_as(args, Role::Member)
}

/// What the node started by [`join_as`] is.
pub enum Role {
    /// An overlay member (`overlay join`).
    Member,
    /// The stack's rendezvous server (`overlay rendezvous STACK`).
    Rendezvous,
    /// The stack's services server (`services serve DIR --stack STACK`): a member whose
    /// `messagestore` starts with the specs of a directory; the stack is given as text (the
    /// stack file with the directory's specs put in).
    SpecServer(String),
}

/// Runs one node of the stack as `role`.
pub fn join_as(args: &JoinArgs, role: Role) -> anyhow::Result<ExitCode> {
    let deployment = deployment(args)?;
    let builder = match &role {
        Role::SpecServer(text) => {
            Node::builder().stack_text(args.file.display().to_string(), text.clone())
        }
        _ => Node::builder().stack_file(&args.file),
    };
    let mut socket = OverlaySocket::join_with(
        builder
            .deployment(deployment)
            .linger(Duration::from_millis(500)),
    )?;
    socket.set_settle(args.settle);
    if matches!(role, Role::Rendezvous) && socket.status()?.rendezvous_members.is_none() {
        bail!(
            "{}: node {} is not the rendezvous server of its `overlay` layer (`rendezvous = N`)",
            args.file.display(),
            socket.id()
        );
    }
    let start = Instant::now();
    let end = args.duration.map(|d| start + d);
    let mut next_tick = start + Duration::from_secs(1);
    let mut next_send = args.send_every.map(|d| start + d);
    let (mut received, mut sent) = (0u64, 0u64);
    loop {
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        if now >= next_tick {
            next_tick += Duration::from_secs(1);
            let st = socket.status()?;
            let mut v = status_json(&st, received, sent);
            v["deploy"] = deploy_json(&socket.node().metrics()?);
            outln!("{v}")?;
            if let Some(path) = &args.status_file {
                let tmp = path.with_extension("tmp");
                std::fs::write(&tmp, v.to_string())
                    .and_then(|()| std::fs::rename(&tmp, path))
                    .with_context(|| format!("{}: cannot write", path.display()))?;
            }
        }
        if let (Some(at), Some(every)) = (next_send, args.send_every) {
            if now >= at {
                next_send = Some(at + every);
                let msg = format!("from {} #{sent}", socket.id()).into_bytes();
                socket.send(Delivery::Multicast, args.service, msg)?;
                sent += 1;
            }
        }
        let mut wake = next_tick;
        if let Some(e) = end {
            wake = wake.min(e);
        }
        if let Some(s) = next_send {
            wake = wake.min(s);
        }
        match socket.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok(OverlayEvent::Message(_)) => received += 1,
            Ok(OverlayEvent::Notice(n)) => eprintln!("notice: {n:?}"),
            Ok(_) | Err(RecvError::Timeout) => {}
            Err(RecvError::Closed) => bail!("the node closed"),
        }
    }
    socket.leave()?;
    Ok(ExitCode::SUCCESS)
}
