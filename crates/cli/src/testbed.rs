//! `viastack testbed up|down FILE`: the real multi-hop testbed (issue 17 §3 "Real multi-hop").
//!
//! Orchestration only — the protocol code stays sans-IO and runs unchanged in each node:
//! from a stack file's `[topology]` it builds one Linux network namespace per node, a veth pair
//! per point-to-point link and a bridge (in a helper namespace) per LAN segment, gives every
//! interface the address of its link's network (`10.x.y.0/24` for link `x·256+y`, the prefix
//! the routing layer announces; the k-th node of a link is `.k+1`), applies the links'
//! conditions, writes each node's deployment file and starts one `viastack node` process per
//! namespace on the same stack file. The stack's `interface` layer on port k is the node's
//! interface k (`ethk` in its namespace): a UDP socket on port [`PORT`] bound to that device,
//! link-local broadcast to the link's broadcast address. It then plays the scenario (link
//! failures as `ip link set down|up`, crashes as killing and restarting the node's process),
//! collects every node's observations and builds the same report as `run` (routing tables
//! under `memory`), and tears everything down — on success, on failure, on a panic (a guard)
//! and on Ctrl-C or SIGTERM (a signal flag the loops watch). `testbed down FILE` removes what a
//! killed run left, by the file's name prefix. See docs/TESTBED.md.
//!
//! Link conditions: bandwidth with `tc tbf` on each sender's interface; loss with an nftables
//! rule at each receiver's interface (`numgen random`, so every copy of a broadcast draws its
//! own); latency and jitter with `tc netem` when the kernel has it, otherwise emulated by the
//! sending node (its driver holds each datagram for the link's delay, `viastack_net::multihop`);
//! duplication, reordering and corruption with netem only — without it they are listed as not
//! applied (stderr and the JSON report), never silently dropped.
//!
//! The node side (`viastack node FILE --deployment D` with a testbed deployment) talks to the
//! orchestrator over its stdin and stdout, one line each way: `READY` once its sockets are
//! bound, `START <time zero, ns since 1970> <incarnation>`, and `RESULT <json>` at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};
use viastack_kernel::{Duration, Instant, KernelConfig, NodeId};
use viastack_net::{InterfaceSpec, LinkPeer};
use viastack_scenario::recorder::RecorderSnapshot;
use viastack_scenario::report::{self, Network, NodeMemory, Observed, RunInfo};
use viastack_scenario::Recorder;
use viastack_stack::model::LinkSpec;
use viastack_stack::{Catalog, StackFile, TopologyDecl};

/// The UDP port of every interface socket.
pub const PORT: u16 = 5600;

/// Exit code when the testbed cannot run here (not root, tools missing): nothing was set up.
pub const EXIT_NEEDS_ROOT: u8 = 77;

/// Exit code after an interruption (Ctrl-C, SIGTERM), everything torn down.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Lead time between START and time zero.
const START_LEAD: std::time::Duration = std::time::Duration::from_millis(500);

/// How long a node may take to bind its sockets and say READY.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long after the scenario's end the nodes may take to report.
const RESULT_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// `viastack testbed …`.
#[derive(clap::Subcommand)]
pub enum TestbedCommand {
    /// Build the stack file's topology from network namespaces, run its scenario with one
    /// `viastack node` per namespace, report as `run` does, and tear everything down (root).
    Up(UpArgs),
    /// Remove what runs of this file left behind (namespaces with its name prefix, their
    /// processes).
    Down {
        /// The stack file.
        file: PathBuf,
    },
}

/// `testbed up`'s arguments.
#[derive(clap::Args)]
pub struct UpArgs {
    /// The stack file: its `[topology]` and `[scenario]`.
    pub file: PathBuf,
    /// Leave the namespaces in place after the run (remove them with `testbed down FILE`).
    #[arg(long)]
    pub keep: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Override the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override the scenario's duration (e.g. "30s").
    #[arg(long, value_parser = crate::duration_arg)]
    pub duration: Option<Duration>,
    /// The binary each namespace runs as `viastack node` (default: this one).
    #[arg(long, hide = true)]
    pub node_exe: Option<PathBuf>,
    /// Times from time zero (e.g. "3500ms,6s") at which every node reads its interfaces' byte
    /// and packet counters (`/sys/class/net/ethK/statistics`); listed per node under
    /// `testbed.per_node` in `--json` (`bench multicast --testbed` measures link use with it).
    #[arg(long, value_delimiter = ',', value_parser = crate::duration_arg)]
    pub sample_counters: Vec<Duration>,
}

/// Runs the command.
pub fn run(cmd: &TestbedCommand, catalog: &Catalog) -> anyhow::Result<ExitCode> {
    match cmd {
        TestbedCommand::Up(args) => up(args, catalog),
        TestbedCommand::Down { file } => {
            if let Some(why) = cannot_run(false) {
                eprintln!("testbed down: {why}");
                return Ok(ExitCode::from(EXIT_NEEDS_ROOT));
            }
            let family = family_prefix(file);
            let removed = remove_namespaces(&family);
            // The deployment files of runs kept with --keep.
            if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
                let dirs = format!("viastack-testbed-{family}");
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with(&dirs) {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
            eprintln!(
                "testbed down: removed {} namespace(s) named {family}*",
                removed.len()
            );
            for ns in removed {
                outln!("{ns}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The deployment file of one node and the node side of the conversation.

/// A testbed node's deployment file (TOML, written by `testbed up`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestbedDeployment {
    /// The node's index.
    pub node: u32,
    /// Its name in `[topology]`.
    pub name: String,
    /// Its network namespace.
    pub namespace: String,
    /// The run's seed.
    pub seed: u64,
    /// How long the run lasts from time zero, in nanoseconds.
    pub duration_ns: u64,
    /// Its interfaces, by port.
    pub interface: Vec<InterfaceSpec>,
    /// When to read its interfaces' counters, in nanoseconds from time zero (ascending).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample_ns: Vec<u64>,
}

/// Whether a deployment file's text is a testbed deployment (it lists `[[interface]]`s).
pub fn is_testbed_deployment(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("interface"))
}

/// What a node reports at the end of its run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeResult {
    /// Its application's observations.
    pub recorder: RecorderSnapshot,
    /// Its kernel's and driver's counters.
    pub counters: BTreeMap<String, u64>,
    /// Datagrams sent, refused by the socket (or the link down), received.
    pub udp: (u64, u64, u64),
    /// Its global memory (routing tables), if it routes.
    pub memory: Option<NodeMemory>,
    /// Its interfaces' counters read at the deployment's `sample_ns` times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<IfaceSample>,
}

/// One interface's kernel counters at one instant (`/sys/class/net/DEV/statistics`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IfaceSample {
    /// When, in nanoseconds from time zero (the clock's reading, not the planned time).
    pub at_ns: u64,
    /// The interface (port) number.
    pub port: u16,
    /// Bytes received and sent (link layer: what `tc tbf` meters).
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
}

/// Reads device `dev`'s counters in this process's network namespace (`ip netns exec` mounts
/// the namespace's own sysfs); a counter it cannot read is 0.
fn read_iface(dev: &str) -> [u64; 4] {
    ["rx_bytes", "tx_bytes", "rx_packets", "tx_packets"].map(|c| {
        std::fs::read_to_string(format!("/sys/class/net/{dev}/statistics/{c}"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    })
}

/// The node side: `viastack node FILE --deployment D` with a testbed deployment.
pub fn node(file_path: &Path, deployment_path: &Path, catalog: &Catalog) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(deployment_path)
        .with_context(|| format!("{}: cannot read", deployment_path.display()))?;
    let d: TestbedDeployment =
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", deployment_path.display()))?;
    let src = std::fs::read_to_string(file_path)
        .with_context(|| format!("{}: cannot read", file_path.display()))?;
    let file = viastack_stack::parse(&file_path.display().to_string(), &src, catalog)
        .map_err(|diags| anyhow::anyhow!("{diags}"))?;
    let scenario = file
        .scenario
        .as_ref()
        .context("the stack has no [scenario]")?;
    let id = NodeId(d.node);
    let mut bound = Vec::new();
    for spec in &d.interface {
        let endpoint = viastack_net::bind_interface(spec).with_context(|| {
            format!(
                "binding interface {} ({})",
                spec.port,
                spec.device.as_deref().unwrap_or("-")
            )
        })?;
        bound.push((spec.clone(), endpoint));
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY")?;
    out.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (Some("START"), Some(epoch), Some(incarnation)) =
        (words.next(), words.next(), words.next())
    else {
        bail!("expected START <epoch> <incarnation>, got {line:?}");
    };
    let epoch: u64 = epoch.parse().context("bad time zero")?;
    let incarnation: u64 = incarnation.parse().context("bad incarnation")?;
    let clock = viastack_net::Clock::from_unix_epoch(epoch);
    let env = viastack_stack::BuildEnv {
        node: id,
        nodes: scenario.nodes,
        seed: d.seed,
        topology: scenario.topology.as_ref().map(|t| t.node_view(d.node)),
    };
    let config = KernelConfig {
        node: id,
        // A restarted node is a new incarnation: new random choices (DVMRP generation id).
        seed: viastack_net::kernel_seed(d.seed, id) ^ incarnation.wrapping_mul(0x9e37_79b9),
        start: clock.now(),
        ..KernelConfig::default()
    };
    let built = viastack_stack::build_node(&file, catalog, &env, config)
        .map_err(|diags| anyhow::anyhow!("{diags}"))?;
    let mut net =
        viastack_net::MultiNode::new(id, scenario.nodes, built, &scenario.workloads, bound, clock)?;
    // Group joins and leaves still ahead; a restarted host first joins again the groups it was
    // a member of.
    let now = clock.now();
    for (at, join, group) in viastack_scenario::group_schedule(&scenario.groups, d.node, now) {
        net.group_at(at, join, group);
    }
    let end = Instant::ZERO + Duration::from_nanos(d.duration_ns);
    let mut samples = Vec::new();
    for &t in &d.sample_ns {
        let at = Instant::ZERO + Duration::from_nanos(t);
        if at > end {
            break;
        }
        net.run_until(at)?;
        let at_ns = clock
            .now()
            .saturating_duration_since(Instant::ZERO)
            .as_nanos() as u64;
        for spec in &d.interface {
            let dev = spec
                .device
                .clone()
                .unwrap_or_else(|| format!("eth{}", spec.port));
            let [rx_bytes, tx_bytes, rx_packets, tx_packets] = read_iface(&dev);
            samples.push(IfaceSample {
                at_ns,
                port: spec.port,
                rx_bytes,
                tx_bytes,
                rx_packets,
                tx_packets,
            });
        }
    }
    net.run_until(end)?;
    let o = net.finish();
    let result = NodeResult {
        recorder: o.recorder.snapshot(),
        counters: o.counters,
        udp: (
            o.transport.sent,
            o.transport.send_failed,
            o.transport.received,
        ),
        memory: o.memory,
        samples,
    };
    writeln!(out, "RESULT {}", serde_json::to_string(&result)?)?;
    out.flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Names, privileges, commands.

/// The name prefix of every run of `file`: `vtb` and a hash of its path.
fn family_prefix(file: &Path) -> String {
    let path = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    let mut h: u32 = 0x811c_9dc5;
    for b in path.display().to_string().bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("vtb{:05x}-", h & 0xf_ffff)
}

/// Why the testbed cannot run here (`None`: it can). `need_tc`, `need_nft`: tools the
/// conditions need beyond `ip`.
fn cannot_run(need_nft: bool) -> Option<String> {
    let euid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .and_then(|u| u.parse::<u32>().ok());
    if euid != Some(0) {
        return Some(
            "needs root: it creates network namespaces, veth links and bridges (run it with \
             sudo); nothing was set up"
                .to_string(),
        );
    }
    let runs = |t: &str, arg: &str| {
        Command::new(t)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !runs("ip", "-V") {
        return Some("needs `ip` (iproute2): scripts/setup.sh installs it".to_string());
    }
    if !runs("tc", "-V") {
        return Some("needs `tc` (iproute2): scripts/setup.sh installs it".to_string());
    }
    if need_nft && !runs("nft", "-v") {
        return Some(
            "needs `nft` (nftables) for the links' loss: scripts/setup.sh installs it".to_string(),
        );
    }
    None
}

/// Runs a command; its stderr in the error.
fn sh(cmd: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The namespaces whose name starts with `prefix`.
fn namespaces_with(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output();
    let Ok(out) = out else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// Kills the processes in each namespace named `prefix*` and deletes the namespaces; returns
/// those removed.
fn remove_namespaces(prefix: &str) -> Vec<String> {
    let names = namespaces_with(prefix);
    for ns in &names {
        delete_namespace(ns);
    }
    names
}

/// Kills what runs in `ns` and deletes it (its veths, bridges, qdiscs and nftables go with it).
fn delete_namespace(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if pid.parse::<u32>().is_ok() {
                let _ = Command::new("kill").args(["-KILL", pid]).output();
            }
        }
    }
    if let Err(e) = sh("ip", &["netns", "del", ns]) {
        eprintln!("testbed: teardown: {e}");
    }
}

// ---------------------------------------------------------------------------------------------
// The plan: namespaces, links, addresses, conditions.

/// One node's interface in the plan.
#[derive(Debug, Clone)]
struct PlannedIface {
    node: u32,
    port: u16,
    addr: Ipv4Addr,
}

/// One link in the plan.
#[derive(Debug, Clone)]
struct PlannedLink {
    name: String,
    members: Vec<PlannedIface>,
    broadcast: Ipv4Addr,
    cond: LinkSpec,
}

impl PlannedLink {
    fn lan(&self) -> bool {
        self.members.len() > 2
    }
}

fn link_net(k: usize) -> [u8; 2] {
    let k = u16::try_from(k).unwrap_or(u16::MAX);
    k.to_be_bytes()
}

fn plan(file: &StackFile, topo: &TopologyDecl) -> anyhow::Result<Vec<PlannedLink>> {
    let scenario = file.scenario.as_ref().context("no [scenario]")?;
    let mut next_port = vec![0u16; topo.nodes.len()];
    let mut links = Vec::new();
    for (k, l) in topo.links.iter().enumerate() {
        if k > usize::from(u16::MAX) {
            bail!("the testbed addresses at most 65,536 links");
        }
        if l.nodes.len() > 253 {
            bail!(
                "link {}: the testbed gives a link at most 253 nodes",
                l.name
            );
        }
        let [x, y] = link_net(k);
        let mut members = Vec::new();
        for (j, &n) in l.nodes.iter().enumerate() {
            let port = next_port
                .get_mut(n as usize)
                .with_context(|| format!("link {}: no node {n}", l.name))?;
            members.push(PlannedIface {
                node: n,
                port: *port,
                addr: Ipv4Addr::new(10, x, y, u8::try_from(j + 1).unwrap_or(254)),
            });
            *port += 1;
        }
        links.push(PlannedLink {
            name: l.name.clone(),
            members,
            broadcast: Ipv4Addr::new(10, x, y, 255),
            cond: l.conditions.apply(&scenario.link),
        });
    }
    Ok(links)
}

/// One node's own figures in the `--json` report (`testbed.per_node`): the report proper sums
/// the nodes.
#[derive(Debug, Clone, Serialize)]
pub struct PerNode {
    /// Its kernel's and driver's counters.
    counters: BTreeMap<String, u64>,
    /// Datagrams sent, refused, received.
    udp: (u64, u64, u64),
    /// Its interfaces' counters at the `--sample-counters` times.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    samples: Vec<IfaceSample>,
}

/// What the testbed did about the links' conditions (for the report).
#[derive(Debug, Clone, Serialize, Default)]
struct Applied {
    /// Whether the kernel has `sch_netem`.
    netem: bool,
    /// Per link: how each condition is applied.
    links: BTreeMap<String, Vec<String>>,
    /// Conditions that could not be applied here.
    not_applied: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// The testbed: what was built, torn down when dropped.

/// Everything a run built; dropping it tears it down (unless `keep`).
struct Testbed {
    /// This run's prefix (`vtbXXXXX-PID-`).
    prefix: String,
    namespaces: Vec<String>,
    dir: PathBuf,
    children: Vec<Option<NodeProc>>,
    keep: bool,
}

impl Testbed {
    fn ns(&self, node: u32) -> String {
        format!("{}n{node}", self.prefix)
    }

    fn lan_ns(&self) -> String {
        format!("{}lan", self.prefix)
    }

    fn add_namespace(&mut self, ns: String) -> anyhow::Result<()> {
        sh("ip", &["netns", "add", &ns])?;
        self.namespaces.push(ns.clone());
        sh("ip", &["-n", &ns, "link", "set", "lo", "up"])
    }

    fn kill_children(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
        self.children.clear();
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.kill_children();
        if self.keep {
            eprintln!(
                "testbed: kept {} namespace(s) {}* (remove them with `viastack testbed down FILE`)",
                self.namespaces.len(),
                self.prefix
            );
            return;
        }
        for ns in self.namespaces.drain(..).rev() {
            delete_namespace(&ns);
        }
        // Anything of this run that a failed step left unrecorded.
        remove_namespaces(&self.prefix);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running node process.
struct NodeProc {
    child: Child,
    stdin: ChildStdin,
    incarnation: u64,
}

/// A line from a node process (or its end: `None`).
struct NodeLine {
    node: u32,
    incarnation: u64,
    line: Option<String>,
}

fn interrupted(flag: &AtomicBool) -> anyhow::Result<()> {
    if flag.load(Ordering::Relaxed) {
        bail!(Interrupted);
    }
    Ok(())
}

/// The run was interrupted by a signal.
#[derive(Debug)]
struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

fn up(args: &UpArgs, catalog: &Catalog) -> anyhow::Result<ExitCode> {
    let src = std::fs::read_to_string(&args.file)
        .with_context(|| format!("{}: cannot read", args.file.display()))?;
    let file = viastack_stack::parse(&args.file.display().to_string(), &src, catalog)
        .map_err(|d| anyhow::anyhow!("{d}"))?;
    let scenario = file
        .scenario
        .clone()
        .with_context(|| format!("{}: the stack file has no [scenario] to run", file.path))?;
    let topo = scenario.topology.clone().with_context(|| {
        format!(
            "{}: the testbed builds a [topology]; this file has none (use `run --net`)",
            file.path
        )
    })?;
    let links = plan(&file, &topo)?;
    let need_nft = links.iter().any(|l| l.cond.loss > 0.0);
    if let Some(why) = cannot_run(need_nft) {
        eprintln!("testbed up: {why}");
        return Ok(ExitCode::from(EXIT_NEEDS_ROOT));
    }
    let mut ignored = Vec::new();
    if !scenario.partitions.is_empty() {
        ignored.push("partitions (use [[scenario.link_failure]])".to_string());
    }
    if !scenario.leaves.is_empty() {
        ignored.push("leaves".to_string());
    }
    for i in &ignored {
        eprintln!("testbed: not applied: the scenario's {i}");
    }
    let seed = args.seed.unwrap_or(scenario.seed);
    let duration = args.duration.unwrap_or(scenario.duration);
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        // A second signal while the first is being handled ends the process at once (then
        // `testbed down FILE` removes what is left).
        signal_hook::flag::register_conditional_shutdown(
            sig,
            i32::from(EXIT_INTERRUPTED),
            Arc::clone(&flag),
        )?;
        signal_hook::flag::register(sig, Arc::clone(&flag))?;
    }
    let family = family_prefix(&args.file);
    let prefix = format!("{family}{}-", std::process::id());
    let dir =
        std::env::temp_dir().join(format!("viastack-testbed-{}", prefix.trim_end_matches('-')));
    std::fs::create_dir_all(&dir)?;
    let mut tb = Testbed {
        prefix,
        namespaces: Vec::new(),
        dir,
        children: Vec::new(),
        keep: args.keep,
    };
    match up_inner(args, &file, &topo, &links, &mut tb, &flag, seed, duration) {
        Ok((report, applied, per_node)) => {
            tb.kill_children();
            drop(tb);
            let mut not_applied = applied.not_applied.clone();
            not_applied.extend(ignored.iter().map(|i| format!("scenario: {i}")));
            if args.json {
                let mut v = serde_json::to_value(&report)?;
                if let Some(o) = v.as_object_mut() {
                    o.insert(
                        "testbed".into(),
                        serde_json::json!({
                            "netem": applied.netem,
                            "links": applied.links,
                            "not_applied": not_applied,
                            "per_node": per_node,
                        }),
                    );
                }
                outln!("{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                outln!("{report}")?;
            }
            Ok(if report.verdict.holds {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "{}: property `{}` violated on the testbed (seed {seed})",
                    file.path, report.verdict.expect
                );
                ExitCode::from(2)
            })
        }
        // A Ctrl-C in a terminal reaches the nodes too: one of them ending first is still an
        // interruption.
        Err(e) if e.is::<Interrupted>() || flag.load(Ordering::Relaxed) => {
            drop(tb);
            eprintln!("testbed: interrupted; everything torn down");
            Ok(ExitCode::from(EXIT_INTERRUPTED))
        }
        Err(e) => {
            drop(tb);
            Err(e.context("testbed failed (everything it built is torn down)"))
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn up_inner(
    args: &UpArgs,
    file: &StackFile,
    topo: &TopologyDecl,
    links: &[PlannedLink],
    tb: &mut Testbed,
    flag: &AtomicBool,
    seed: u64,
    duration: Duration,
) -> anyhow::Result<(report::Report, Applied, BTreeMap<String, PerNode>)> {
    let scenario = file.scenario.as_ref().context("no [scenario]")?;
    let n = topo.nodes.len() as u32;
    // Namespaces.
    for i in 0..n {
        interrupted(flag)?;
        tb.add_namespace(tb.ns(i))?;
    }
    if links.iter().any(PlannedLink::lan) {
        tb.add_namespace(tb.lan_ns())?;
    }
    let netem = n > 0
        && sh(
            "tc",
            &[
                "-n",
                &tb.ns(0),
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "netem",
                "delay",
                "0ms",
            ],
        )
        .is_ok();
    if netem {
        let _ = sh(
            "tc",
            &["-n", &tb.ns(0), "qdisc", "del", "dev", "lo", "root"],
        );
    }
    let mut applied = Applied {
        netem,
        ..Applied::default()
    };
    // Links, addresses, conditions.
    let mut nft_ready = BTreeSet::new();
    let mut delays: BTreeMap<(u32, u16), (u64, u64)> = BTreeMap::new();
    for (k, l) in links.iter().enumerate() {
        interrupted(flag)?;
        let dev = |m: &PlannedIface| format!("eth{}", m.port);
        if l.lan() {
            let br = format!("br{k}");
            let lan = tb.lan_ns();
            sh("ip", &["-n", &lan, "link", "add", &br, "type", "bridge"])?;
            sh("ip", &["-n", &lan, "link", "set", &br, "up"])?;
            for (j, m) in l.members.iter().enumerate() {
                let side = format!("l{k}m{j}");
                sh(
                    "ip",
                    &[
                        "-n",
                        &tb.ns(m.node),
                        "link",
                        "add",
                        &dev(m),
                        "type",
                        "veth",
                        "peer",
                        "name",
                        &side,
                        "netns",
                        &lan,
                    ],
                )?;
                sh("ip", &["-n", &lan, "link", "set", &side, "master", &br])?;
                sh("ip", &["-n", &lan, "link", "set", &side, "up"])?;
            }
        } else if let [a, b] = &l.members[..] {
            sh(
                "ip",
                &[
                    "-n",
                    &tb.ns(a.node),
                    "link",
                    "add",
                    &dev(a),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    &dev(b),
                    "netns",
                    &tb.ns(b.node),
                ],
            )?;
        }
        for m in &l.members {
            let ns = tb.ns(m.node);
            let addr = format!("{}/24", m.addr);
            sh(
                "ip",
                &[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &addr,
                    "broadcast",
                    &l.broadcast.to_string(),
                    "dev",
                    &dev(m),
                ],
            )?;
            sh("ip", &["-n", &ns, "link", "set", &dev(m), "up"])?;
        }
        let how = apply_conditions(tb, l, netem, &mut nft_ready, &mut delays, &mut applied)?;
        applied.links.insert(l.name.clone(), how);
    }
    // Deployment files.
    let exe = match &args.node_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding the viastack binary")?,
    };
    let file_path = std::fs::canonicalize(&args.file).unwrap_or_else(|_| args.file.clone());
    let mut deployments = Vec::new();
    for i in 0..n {
        let mut interface = Vec::new();
        for l in links {
            let Some(me) = l.members.iter().find(|m| m.node == i) else {
                continue;
            };
            let (delay_ns, jitter_ns) = delays.get(&(i, me.port)).copied().unwrap_or((0, 0));
            interface.push(InterfaceSpec {
                port: me.port,
                device: Some(format!("eth{}", me.port)),
                bind: SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT)),
                addr: SocketAddr::from((me.addr, PORT)),
                broadcast: Some(SocketAddr::from((l.broadcast, PORT))),
                delay_ns,
                jitter_ns,
                peers: l
                    .members
                    .iter()
                    .filter(|m| m.node != i)
                    .map(|m| LinkPeer {
                        node: m.node,
                        addr: SocketAddr::from((m.addr, PORT)),
                    })
                    .collect(),
            });
        }
        let name = topo
            .nodes
            .get(i as usize)
            .map_or_else(|| format!("n{i}"), |d| d.name.clone());
        let d = TestbedDeployment {
            node: i,
            name: name.clone(),
            namespace: tb.ns(i),
            seed,
            duration_ns: duration.as_nanos() as u64,
            interface,
            sample_ns: {
                let mut v: Vec<u64> = args
                    .sample_counters
                    .iter()
                    .map(|d| d.as_nanos() as u64)
                    .collect();
                v.sort_unstable();
                v
            },
        };
        let path = tb.dir.join(format!("{i}-{}.toml", sanitize(&name)));
        let text = format!(
            "# viastack testbed: node {name} of {}, in namespace {}\n{}",
            file.path,
            tb.ns(i),
            toml::to_string(&d)?
        );
        std::fs::write(&path, text)?;
        deployments.push(path);
    }
    eprintln!(
        "testbed: {} namespaces up ({}*), {} links; netem: {}",
        tb.namespaces.len(),
        tb.prefix,
        links.len(),
        if netem {
            "yes"
        } else {
            "no (latency emulated by the nodes)"
        }
    );
    for na in &applied.not_applied {
        eprintln!("testbed: not applied: {na}");
    }

    // Start the nodes.
    let (tx, rx) = mpsc::channel::<NodeLine>();
    let spawn = |tb: &mut Testbed, i: u32, incarnation: u64| -> anyhow::Result<()> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &tb.ns(i)])
            .arg(&exe)
            .arg("node")
            .arg(&file_path)
            .arg("--deployment")
            .arg(&deployments[i as usize])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting a node")?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("node {i}: no pipes");
        };
        let tx = tx.clone();
        std::thread::Builder::new()
            .name(format!("testbed-node-{i}"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx
                        .send(NodeLine {
                            node: i,
                            incarnation,
                            line: Some(line),
                        })
                        .is_err()
                    {
                        return;
                    }
                }
                let _ = tx.send(NodeLine {
                    node: i,
                    incarnation,
                    line: None,
                });
            })?;
        if tb.children.len() <= i as usize {
            tb.children.resize_with(i as usize + 1, || None);
        }
        tb.children[i as usize] = Some(NodeProc {
            child,
            stdin,
            incarnation,
        });
        Ok(())
    };
    for i in 0..n {
        spawn(tb, i, 0)?;
    }
    let mut ready = BTreeSet::new();
    let since_spawn = viastack_net::Clock::start();
    let deadline = Instant::ZERO + Duration::from_nanos(READY_TIMEOUT.as_nanos() as u64);
    while ready.len() < n as usize {
        interrupted(flag)?;
        let left = since_spawn.until(deadline);
        if left.is_zero() {
            bail!(
                "nodes {:?} did not get ready in time",
                (0..n).filter(|i| !ready.contains(i)).collect::<Vec<_>>()
            );
        }
        match rx.recv_timeout(left.min(std::time::Duration::from_millis(100))) {
            Ok(NodeLine {
                node,
                line: Some(l),
                ..
            }) if l == "READY" => {
                ready.insert(node);
            }
            Ok(NodeLine {
                node,
                line: Some(l),
                ..
            }) => {
                bail!("node {node}: expected READY, got {l:?}")
            }
            Ok(NodeLine {
                node, line: None, ..
            }) => {
                bail!(
                    "node {} ({}) ended before it was ready (see its stderr above)",
                    node,
                    topo.nodes
                        .get(node as usize)
                        .map_or("?", |d| d.name.as_str())
                )
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("lost the nodes"),
        }
    }
    let epoch = viastack_net::Clock::unix_now_nanos() + START_LEAD.as_nanos() as u64;
    let clock = viastack_net::Clock::from_unix_epoch(epoch);
    for c in tb.children.iter_mut().flatten() {
        writeln!(c.stdin, "START {epoch} {}", c.incarnation)?;
        c.stdin.flush()?;
    }

    // The scenario's timeline.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum Step {
        LinkDown(usize),
        LinkUp(usize),
        Crash(u32),
        Restart(u32),
    }
    let mut timeline: Vec<(Duration, Step)> = Vec::new();
    for f in &scenario.link_failures {
        timeline.push((f.at, Step::LinkDown(f.link)));
        if let Some(r) = f.repair {
            timeline.push((r, Step::LinkUp(f.link)));
        }
    }
    for c in &scenario.crashes {
        if c.node >= n {
            continue;
        }
        timeline.push((c.at, Step::Crash(c.node)));
        if let Some(r) = c.restart {
            timeline.push((r, Step::Restart(c.node)));
        }
    }
    timeline.retain(|(t, _)| *t < duration);
    timeline.sort();
    let mut timeline = std::collections::VecDeque::from(timeline);

    let mut results: BTreeMap<u32, NodeResult> = BTreeMap::new();
    let mut down: BTreeSet<u32> = BTreeSet::new();
    let give_up = Instant::ZERO + duration + Duration::from_nanos(RESULT_GRACE.as_nanos() as u64);
    loop {
        interrupted(flag)?;
        // Due steps.
        while let Some(&(t, step)) = timeline.front() {
            if !clock.until(Instant::ZERO + t).is_zero() {
                break;
            }
            timeline.pop_front();
            match step {
                Step::LinkDown(k) | Step::LinkUp(k) => {
                    let state = if matches!(step, Step::LinkDown(_)) {
                        "down"
                    } else {
                        "up"
                    };
                    if let Some(l) = links.get(k) {
                        for m in &l.members {
                            sh(
                                "ip",
                                &[
                                    "-n",
                                    &tb.ns(m.node),
                                    "link",
                                    "set",
                                    &format!("eth{}", m.port),
                                    state,
                                ],
                            )?;
                        }
                        eprintln!("testbed: {:.1} s: link {} {state}", t.as_secs_f64(), l.name);
                    }
                }
                Step::Crash(i) => {
                    if let Some(Some(c)) = tb.children.get_mut(i as usize) {
                        let _ = c.child.kill();
                        let _ = c.child.wait();
                    }
                    if let Some(slot) = tb.children.get_mut(i as usize) {
                        *slot = None;
                    }
                    down.insert(i);
                    eprintln!(
                        "testbed: {:.1} s: node {i} crashed (process killed)",
                        t.as_secs_f64()
                    );
                }
                Step::Restart(i) => {
                    let inc = 1 + scenario
                        .crashes
                        .iter()
                        .filter(|c| c.node == i && c.at <= t)
                        .count() as u64;
                    spawn(tb, i, inc)?;
                    down.remove(&i);
                    eprintln!("testbed: {:.1} s: node {i} restarts", t.as_secs_f64());
                }
            }
        }
        // Done when every live node has reported.
        let live: Vec<u32> = (0..n).filter(|i| !down.contains(i)).collect();
        if timeline.is_empty() && live.iter().all(|i| results.contains_key(i)) {
            break;
        }
        if clock.until(give_up).is_zero() {
            bail!(
                "nodes {:?} did not report by the end of the run",
                live.iter()
                    .filter(|i| !results.contains_key(i))
                    .collect::<Vec<_>>()
            );
        }
        let next_step = timeline
            .front()
            .map_or(std::time::Duration::from_millis(100), |&(t, _)| {
                clock.until(Instant::ZERO + t)
            });
        let wait = next_step.clamp(
            std::time::Duration::from_millis(1),
            std::time::Duration::from_millis(100),
        );
        match rx.recv_timeout(wait) {
            Ok(NodeLine {
                node,
                incarnation,
                line,
            }) => {
                let current = tb
                    .children
                    .get(node as usize)
                    .and_then(Option::as_ref)
                    .is_some_and(|c| c.incarnation == incarnation);
                if !current {
                    continue; // a killed incarnation's last words
                }
                match line.as_deref() {
                    Some("READY") => {
                        if let Some(Some(c)) = tb.children.get_mut(node as usize) {
                            writeln!(c.stdin, "START {epoch} {incarnation}")?;
                            c.stdin.flush()?;
                        }
                    }
                    Some(l) if l.starts_with("RESULT ") => {
                        let r: NodeResult = serde_json::from_str(&l["RESULT ".len()..])
                            .with_context(|| format!("node {node}: bad RESULT"))?;
                        results.insert(node, r);
                    }
                    Some(l) => eprintln!("node {node}: {l}"),
                    None => {
                        if !results.contains_key(&node) {
                            bail!(
                                "node {node} ({}) ended before reporting (see its stderr above)",
                                topo.nodes
                                    .get(node as usize)
                                    .map_or("?", |d| d.name.as_str())
                            );
                        }
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("lost the nodes"),
        }
    }

    // The report, as `run` builds it.
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
    let mut memory = BTreeMap::new();
    let mut per_node = BTreeMap::new();
    for (i, r) in results {
        let name = topo
            .nodes
            .get(i as usize)
            .map_or_else(|| format!("n{i}"), |d| d.name.clone());
        per_node.insert(
            name,
            PerNode {
                counters: r.counters.clone(),
                udp: r.udp,
                samples: r.samples.clone(),
            },
        );
        recorder.merge(Recorder::from_snapshot(r.recorder));
        for (k, v) in r.counters {
            let e = counters.entry(k).or_insert(0u64);
            *e = e.saturating_add(v);
        }
        network.sent += r.udp.0;
        network.lost += r.udp.1;
        network.delivered += r.udp.2;
        if let Some(m) = r.memory {
            let name = topo
                .nodes
                .get(i as usize)
                .map_or_else(|| format!("n{i}"), |d| d.name.clone());
            memory.insert(name, m);
        }
    }
    let info = RunInfo {
        file: &file.path,
        driver: "testbed",
        seed,
        nodes: n,
        duration,
        expect: scenario.expect,
    };
    let observed = Observed {
        recorder: &recorder,
        crashed: scenario.crashes.iter().map(|c| NodeId(c.node)).collect(),
        down_at_end: viastack_scenario::down_at_end(&scenario.crashes, duration),
        reliable_workloads: BTreeSet::new(),
        network,
        counters,
        steps: 0,
        trace_hash: "-".to_string(),
    };
    let mut report = report::build(&info, observed);
    report.memory = memory;
    Ok((report, applied, per_node))
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Applies link `l`'s conditions; returns how, one phrase per condition.
fn apply_conditions(
    tb: &Testbed,
    l: &PlannedLink,
    netem: bool,
    nft_ready: &mut BTreeSet<u32>,
    delays: &mut BTreeMap<(u32, u16), (u64, u64)>,
    applied: &mut Applied,
) -> anyhow::Result<Vec<String>> {
    let c = &l.cond;
    let mut how = Vec::new();
    let latency_ns = c.latency.as_nanos() as u64;
    let jitter_ns = c.jitter.as_nanos() as u64;
    let fancy = c.duplicate > 0.0 || c.reorder > 0.0 || c.corrupt > 0.0;
    for m in &l.members {
        let ns = tb.ns(m.node);
        let dev = format!("eth{}", m.port);
        let mut parent = vec!["root".to_string()];
        if netem && (latency_ns > 0 || jitter_ns > 0 || fancy) {
            let mut a: Vec<String> = [
                "-n", &ns, "qdisc", "add", "dev", &dev, "root", "handle", "1:", "netem",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            // tc reads times in microseconds at best.
            a.extend([
                "delay".into(),
                format!("{}us", latency_ns / 1000),
                format!("{}us", jitter_ns / 1000),
            ]);
            if c.duplicate > 0.0 {
                a.extend(["duplicate".into(), format!("{}%", c.duplicate * 100.0)]);
            }
            if c.reorder > 0.0 {
                a.extend(["reorder".into(), format!("{}%", c.reorder * 100.0)]);
            }
            if c.corrupt > 0.0 {
                a.extend(["corrupt".into(), format!("{}%", c.corrupt * 100.0)]);
            }
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            sh("tc", &a)?;
            parent = vec!["parent".into(), "1:1".into()];
        }
        if let Some(bps) = c.bandwidth {
            let burst = (bps / 8 / 250).max(16_384);
            let mut a: Vec<String> = ["-n", &ns, "qdisc", "add", "dev", &dev]
                .iter()
                .map(|s| s.to_string())
                .collect();
            a.extend(parent.iter().cloned());
            a.extend([
                "handle".into(),
                "10:".into(),
                "tbf".into(),
                "rate".into(),
                format!("{bps}bit"),
            ]);
            a.extend([
                "burst".into(),
                burst.to_string(),
                "latency".into(),
                "100ms".into(),
            ]);
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            sh("tc", &a)?;
        }
        if !netem && (latency_ns > 0 || jitter_ns > 0) {
            delays.insert((m.node, m.port), (latency_ns, jitter_ns));
        }
        if c.loss > 0.0 {
            if nft_ready.insert(m.node) {
                sh(
                    "ip",
                    &[
                        "netns", "exec", &ns, "nft", "add", "table", "inet", "viastack",
                    ],
                )?;
                sh(
                    "ip",
                    &[
                        "netns", "exec", &ns, "nft", "add", "chain", "inet", "viastack", "input",
                        "{", "type", "filter", "hook", "input", "priority", "0", ";", "}",
                    ],
                )?;
            }
            let per_million = ((c.loss * 1e6).round() as u64).min(1_000_000).to_string();
            sh(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "nft",
                    "add",
                    "rule",
                    "inet",
                    "viastack",
                    "input",
                    "iifname",
                    &dev,
                    "udp",
                    "dport",
                    &PORT.to_string(),
                    "numgen",
                    "random",
                    "mod",
                    "1000000",
                    "lt",
                    &per_million,
                    "drop",
                ],
            )?;
        }
    }
    if let Some(bps) = c.bandwidth {
        how.push(format!(
            "bandwidth {bps} bit/s: tc tbf on each sender's interface"
        ));
    }
    if latency_ns > 0 || jitter_ns > 0 {
        how.push(if netem {
            format!("latency {latency_ns} ns, jitter {jitter_ns} ns: tc netem on each sender's interface")
        } else {
            format!(
                "latency {latency_ns} ns, jitter {jitter_ns} ns: emulated by each sending node \
                 (no sch_netem in this kernel)"
            )
        });
    }
    if c.loss > 0.0 {
        how.push(format!(
            "loss {}: nftables numgen rule at each receiver's interface",
            c.loss
        ));
    }
    if fancy {
        if netem {
            how.push("duplication, reordering, corruption: tc netem".to_string());
        } else {
            applied.not_applied.push(format!(
                "link {}: duplication {}, reordering {}, corruption {} (need sch_netem)",
                l.name, c.duplicate, c.reorder, c.corrupt
            ));
        }
    }
    Ok(how)
}
