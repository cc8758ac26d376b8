//! One process per node (`viastack run --net`): the parent starts a child per node, gives them
//! the peer table and a common time zero, and merges what they observed into one report.
//!
//! The conversation, one line each way over the child's stdin and stdout:
//! 1. child → parent: `READY <its socket address>` once its stack is built and its socket bound;
//! 2. parent → child: `START <time zero, ns since 1970> <address of node 0> <node 1> …`;
//! 3. child → parent: `RESULT <json>` (a [`ChildResult`]) when the run ends.
//!
//! A child that dies or says anything else fails the run with its node number; the parent kills
//! every child it started if it gives up.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde::{Deserialize, Serialize};
use viastack_kernel::{Duration, Instant, KernelConfig, NodeId};
use viastack_scenario::recorder::RecorderSnapshot;
use viastack_scenario::report::{self, Network, Observed, RunInfo};
use viastack_scenario::{Recorder, Report, RunOptions};
use viastack_stack::{build_node, BuildEnv, Catalog, StackFile};

use crate::{bind_transport, kernel_seed, transport_kind, Clock, NetError, NetNode};

/// What a child reports at the end of its run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildResult {
    /// Its application's observations.
    pub recorder: RecorderSnapshot,
    /// Its kernel's counters.
    pub counters: std::collections::BTreeMap<String, u64>,
    /// Datagrams sent, refused by the socket, received.
    pub udp: (u64, u64, u64),
}

/// Lead time between the parent's START and time zero, so every child starts together.
const START_LEAD: Duration = Duration::from_millis(200);

fn protocol(node: u32, message: impl Into<String>) -> NetError {
    NetError::NodeFailed {
        node,
        message: message.into(),
    }
}

/// The child side: builds node `node`, reports READY, waits for START, runs, reports RESULT.
///
/// # Errors
/// [`NetError`] on build or socket failures and on a malformed START line.
pub fn run_child(
    file: &StackFile,
    catalog: &Catalog,
    node: u32,
    seed: u64,
    duration: Duration,
    input: &mut impl BufRead,
    output: &mut impl Write,
) -> Result<(), NetError> {
    let scenario = file
        .scenario
        .clone()
        .ok_or_else(|| NetError::NoScenario(file.path.clone()))?;
    let id = NodeId(node);
    let env = BuildEnv {
        node: id,
        nodes: scenario.nodes,
        seed,
        ..BuildEnv::default()
    };
    let config = KernelConfig {
        node: id,
        seed: kernel_seed(seed, id),
        ..KernelConfig::default()
    };
    let built = build_node(file, catalog, &env, config).map_err(NetError::Build)?;
    let mut transport = bind_transport(transport_kind(file), id)?;
    writeln!(output, "READY {}", transport.local_addr()?)?;
    output.flush()?;

    let mut line = String::new();
    input.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (Some("START"), Some(epoch)) = (words.next(), words.next()) else {
        return Err(protocol(node, format!("expected START, got {line:?}")));
    };
    let epoch: u64 = epoch
        .parse()
        .map_err(|_| protocol(node, format!("bad time zero {epoch:?}")))?;
    let addrs = words
        .map(str::parse::<SocketAddr>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| protocol(node, format!("bad peer address: {e}")))?;
    if addrs.len() != scenario.nodes as usize {
        return Err(protocol(node, "peer table of the wrong size"));
    }
    transport.set_peers(addrs);
    let clock = Clock::from_unix_epoch(epoch);
    let mut net = NetNode::new(
        id,
        scenario.nodes,
        built,
        &scenario.workloads,
        transport,
        clock,
    )?;
    net.run_until(Instant::ZERO + duration)?;
    let outcome = net.finish();
    let result = ChildResult {
        recorder: outcome.recorder.snapshot(),
        counters: outcome.counters,
        udp: (
            outcome.transport.sent,
            outcome.transport.send_failed,
            outcome.transport.received,
        ),
    };
    let json = serde_json::to_string(&result).map_err(|e| protocol(node, e.to_string()))?;
    writeln!(output, "RESULT {json}")?;
    output.flush()?;
    Ok(())
}

/// The parent's handle on one child; killed if dropped before it finished.
struct ChildNode {
    node: u32,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    done: bool,
}

impl ChildNode {
    fn read_line(&mut self, prefix: &str) -> Result<String, NetError> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line)?;
        if n == 0 {
            return Err(protocol(
                self.node,
                "the process ended early (see its stderr above)",
            ));
        }
        match line.trim_end().strip_prefix(prefix) {
            Some(rest) => Ok(rest.trim().to_string()),
            None => Err(protocol(
                self.node,
                format!("expected {prefix}, got {line:?}"),
            )),
        }
    }
}

impl Drop for ChildNode {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `file`'s scenario with every node a process of `exe` (the `viastack` binary, which
/// must accept `node --node N --seed S --duration-ns D FILE`).
///
/// # Errors
/// [`NetError`] when a child cannot start, fails, or breaks the conversation.
pub fn run_processes(
    file: &StackFile,
    options: &RunOptions,
    exe: &Path,
) -> Result<Report, NetError> {
    let scenario = file
        .scenario
        .clone()
        .ok_or_else(|| NetError::NoScenario(file.path.clone()))?;
    let seed = options.seed.unwrap_or(scenario.seed);
    let duration = options.duration.unwrap_or(scenario.duration);
    let mut children = Vec::new();
    for n in 0..scenario.nodes {
        let mut child = Command::new(exe)
            .args([
                "net-child",
                "--node",
                &n.to_string(),
                "--seed",
                &seed.to_string(),
            ])
            .args([
                "--duration-ns",
                &duration.as_nanos().to_string(),
                &file.path,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(protocol(n, "no pipes to the process"));
        };
        children.push(ChildNode {
            node: n,
            child,
            stdin,
            stdout: BufReader::new(stdout),
            done: false,
        });
    }
    let mut addrs = Vec::new();
    for c in &mut children {
        let addr = c.read_line("READY ")?;
        addrs.push(addr);
    }
    let epoch = Clock::unix_now_nanos() + START_LEAD.as_nanos() as u64;
    let start = format!("START {epoch} {}\n", addrs.join(" "));
    for c in &mut children {
        c.stdin.write_all(start.as_bytes())?;
        c.stdin.flush()?;
    }
    let mut recorder = Recorder::default();
    let mut counters = std::collections::BTreeMap::new();
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
    for c in &mut children {
        let json = c.read_line("RESULT ")?;
        let result: ChildResult = serde_json::from_str(&json)
            .map_err(|e| protocol(c.node, format!("bad RESULT: {e}")))?;
        let status = c.child.wait()?;
        c.done = true;
        if !status.success() {
            return Err(protocol(c.node, format!("exited with {status}")));
        }
        recorder.merge(Recorder::from_snapshot(result.recorder));
        for (k, v) in result.counters {
            let e = counters.entry(k).or_insert(0u64);
            *e = e.saturating_add(v);
        }
        network.sent += result.udp.0;
        network.lost += result.udp.1;
        network.delivered += result.udp.2;
    }
    let info = RunInfo {
        file: &file.path,
        driver: if transport_kind(file) == "tcp" {
            "tcp-processes"
        } else {
            "udp-processes"
        },
        seed,
        nodes: scenario.nodes,
        duration,
        expect: scenario.expect,
    };
    let observed = Observed {
        recorder: &recorder,
        crashed: std::collections::BTreeSet::new(),
        // No crashes on real sockets.
        down_at_end: std::collections::BTreeSet::new(),
        reliable_workloads: std::collections::BTreeSet::new(),
        network,
        counters,
        steps: 0,
        trace_hash: "-".to_string(),
    };
    Ok(report::build(&info, observed))
}
