//! Runs a stack file's `[scenario]` in the deterministic simulator (issue 2 §2–§4): every node
//! gets a kernel built from the file, the scenario's workloads run as the application on top,
//! and the run ends with a [`Report`] judging the declared delivery property.
//!
//! - [`payload`]: the self-checking message format of the workloads;
//! - [`recorder`]: sends and deliveries, shared across nodes and restarts;
//! - [`node`]: a kernel + application as a simulator [`viastack_sim::Node`];
//! - [`group`]: the group-communication history checker (`virtual-synchrony`, `total-order`);
//! - [`overlay`]: the overlay properties (`overlay-converged`, `overlay-multicast`);
//! - [`plan`]: `[scenario]` → [`viastack_sim::SimConfig`];
//! - [`report`]: the report and the property check.
//!
//! Same file, same seed ⇒ the same trace hash, bit for bit.
#![deny(unsafe_code)]

pub mod app;
pub mod group;
pub mod mcast_check;
pub mod node;
pub mod overlay;
pub mod payload;
pub mod plan;
pub mod recorder;
pub mod report;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use viastack_kernel::{Duration, Instant, KernelConfig, NodeId};
use viastack_sim::{Sim, SimError};
use viastack_stack::build::{build_node, BuiltNode};
use viastack_stack::catalog::{BuildEnv, Catalog};
use viastack_stack::model::StackFile;
use viastack_stack::Diagnostics;

pub use app::Application;
pub use node::{group_command, memory_of, SimNode};
pub use recorder::Recorder;
pub use report::Report;

/// Why a scenario could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The file has no `[scenario]`.
    #[error("{0}: the stack file has no [scenario] to run")]
    NoScenario(String),
    /// Building a node's stack failed.
    #[error("{0}")]
    Build(Diagnostics),
    /// The simulator refused the configuration or hit its step cap.
    #[error("simulation failed (seed {seed}): {source}")]
    Sim {
        /// The run's seed.
        seed: u64,
        /// What went wrong.
        source: SimError,
    },
}

/// How to run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Overrides the scenario's seed.
    pub seed: Option<u64>,
    /// Overrides the scenario's duration.
    pub duration: Option<Duration>,
}

/// The seed of node `node`'s kernel in a run seeded with `seed`.
fn kernel_seed(seed: u64, node: NodeId) -> u64 {
    // SplitMix64 finaliser: distinct, well-mixed seeds per node.
    let mut z = seed ^ (u64::from(node.0).wrapping_add(1)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The workloads whose channel promises reliable delivery ([`viastack_kernel::Delivery`]):
/// their messages must be delivered or reported, whatever crashes.
fn reliable_workloads(
    node: &BuiltNode,
    workloads: &[viastack_stack::model::Workload],
) -> BTreeSet<u16> {
    (0u16..)
        .zip(workloads)
        .filter(|(_, w)| {
            node.channels
                .iter()
                .find(|(name, _)| *name == w.channel)
                .and_then(|(_, ch)| node.kernel.channel_delivery(*ch))
                .is_some_and(|d| d.reliable)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The `[[scenario.group]]` commands a node booting at `now` plays (seed 004's group
/// management, RFC 2236 §3 "when a host joins a multicast group, it should immediately
/// transmit an unsolicited Membership Report"): at its first boot (`now` = 0) the file's
/// commands as written; after a restart, first a join at `now` for every group it was a member
/// of when it went down (its application joins again on boot, so its IGMP reports the
/// membership again and delivery resumes without waiting for a query), then the commands still
/// ahead. In time order.
pub fn group_schedule(
    groups: &[viastack_stack::model::GroupEventSpec],
    node: u32,
    now: Instant,
) -> Vec<(Instant, bool, u32)> {
    let mine = || groups.iter().filter(move |g| g.node == node);
    // Membership before `now`: the last command per group, in file order for equal times.
    let mut member: std::collections::BTreeMap<u32, (Duration, bool)> =
        std::collections::BTreeMap::new();
    for g in mine().filter(|g| Instant::ZERO + g.at < now) {
        if member.get(&g.group).is_none_or(|(at, _)| *at <= g.at) {
            member.insert(g.group, (g.at, g.join));
        }
    }
    let mut out: Vec<(Instant, bool, u32)> = member
        .into_iter()
        .filter(|(_, (_, joined))| *joined)
        .map(|(group, _)| (now, true, group))
        .collect();
    out.extend(
        mine()
            .filter(|g| Instant::ZERO + g.at >= now)
            .map(|g| (Instant::ZERO + g.at, g.join, g.group)),
    );
    out.sort_by_key(|e| e.0);
    out
}

/// Nodes down when a run of `duration` ends: their last crash came with no restart, or with
/// one after the end.
pub fn down_at_end(
    crashes: &[viastack_stack::model::CrashSpec],
    duration: Duration,
) -> BTreeSet<NodeId> {
    let mut last: std::collections::BTreeMap<u32, &viastack_stack::model::CrashSpec> =
        std::collections::BTreeMap::new();
    for c in crashes {
        if c.at <= duration && last.get(&c.node).is_none_or(|l| l.at <= c.at) {
            last.insert(c.node, c);
        }
    }
    last.into_values()
        .filter(|c| c.restart.is_none_or(|r| r > duration))
        .map(|c| NodeId(c.node))
        .collect()
}

/// The group checker over a finished run's history ([`group::check`]).
fn group_check(
    scenario: &viastack_stack::model::Scenario,
    duration: Duration,
    rec: &Recorder,
) -> std::collections::BTreeMap<&'static str, group::Outcome> {
    let end = Instant::ZERO + duration;
    let down = down_at_end(&scenario.crashes, duration);
    let left: BTreeSet<NodeId> = scenario
        .leaves
        .iter()
        .filter(|l| l.at <= duration)
        .map(|l| NodeId(l.node))
        .collect();
    let live = (0..scenario.nodes)
        .map(NodeId)
        .filter(|n| !down.contains(n) && !left.contains(n) && rec.booted.contains(n))
        .collect();
    let mut last = Duration::ZERO;
    for c in &scenario.crashes {
        last = last.max(c.at.min(duration));
        if let Some(r) = c.restart {
            last = last.max(r.min(duration));
        }
    }
    for p in &scenario.partitions {
        last = last.max(p.heal.unwrap_or(duration).min(duration));
    }
    for l in &scenario.leaves {
        last = last.max(l.at.min(duration));
    }
    for m in &scenario.moves {
        last = last.max(m.at.min(duration));
    }
    for l in &scenario.link_failures {
        last = last.max(l.repair.unwrap_or(duration).min(duration));
    }
    let mut reported = BTreeSet::new();
    // A workload has one pattern, so a `multicast` workload's reports (whatever peer the
    // layer named: the group has no single addressee) are about its multicast messages.
    let multicast: BTreeSet<u16> = rec
        .streams
        .keys()
        .filter(|(_, _, dst)| *dst == recorder::BROADCAST)
        .map(|(w, _, _)| *w)
        .collect();
    for ((w, src, _), s) in &rec.streams {
        if multicast.contains(w) {
            reported.extend(s.reported.iter().map(|&q| (*w, *src, q)));
        }
    }
    let facts = group::Facts {
        total_order: matches!(
            scenario.expect,
            viastack_stack::model::Expect::TotalOrder
                | viastack_stack::model::Expect::CrossChannelOrder
        ),
        causal_order: scenario.expect == viastack_stack::model::Expect::CausalOrder,
        live,
        last_fault: Instant::ZERO + last,
        end,
        reported,
    };
    let cross = scenario.expect == viastack_stack::model::Expect::CrossChannelOrder;
    group::check_channels(&rec.group_channels, &rec.group, &facts, cross)
}

/// Runs the scenario of `file`, calling `progress` with the fraction of virtual time done
/// (1/100 steps).
///
/// # Errors
/// [`RunError`] when there is no scenario, a node's stack cannot be built, or the simulator
/// fails (invalid configuration, livelock).
pub fn run(
    file: &StackFile,
    catalog: &Catalog,
    options: &RunOptions,
    progress: impl FnMut(f64),
) -> Result<Report, RunError> {
    run_recorded(file, catalog, options, progress).map(|(report, _)| report)
}

/// [`run`], also returning everything the applications observed (per-stream latency ranges,
/// each node's notices with their positions), for tests that check more than the report.
///
/// # Errors
/// As [`run`].
pub fn run_recorded(
    file: &StackFile,
    catalog: &Catalog,
    options: &RunOptions,
    mut progress: impl FnMut(f64),
) -> Result<(Report, Recorder), RunError> {
    run_observed(file, catalog, options, 100, |i, _, _| {
        progress(f64::from(i) / 100.0);
    })
}

/// [`run_recorded`] in `slices` equal steps of virtual time, calling `observe` after each
/// with the step's number (1-based), its end and the simulator, whose nodes' kernels (their
/// counters) can be read there: what `bench multicast` times join and leave latency with.
///
/// # Errors
/// As [`run`].
pub fn run_observed(
    file: &StackFile,
    catalog: &Catalog,
    options: &RunOptions,
    slices: u32,
    observe: impl FnMut(u32, Instant, &Sim<SimNode>),
) -> Result<(Report, Recorder), RunError> {
    run_prepared(file, catalog, options, slices, |_| {}, observe)
}

/// [`run_observed`], with `prepare` given the simulator before the run starts: to schedule
/// what a stack file cannot say, such as [`Sim::pause`] (a node stopped and resumed, the
/// group tests of issue 18).
///
/// # Errors
/// As [`run`].
pub fn run_prepared(
    file: &StackFile,
    catalog: &Catalog,
    options: &RunOptions,
    slices: u32,
    prepare: impl FnOnce(&mut Sim<SimNode>),
    mut observe: impl FnMut(u32, Instant, &Sim<SimNode>),
) -> Result<(Report, Recorder), RunError> {
    let scenario = file
        .scenario
        .clone()
        .ok_or_else(|| RunError::NoScenario(file.path.clone()))?;
    let seed = options.seed.unwrap_or(scenario.seed);
    let duration = options.duration.unwrap_or(scenario.duration);
    let nodes = scenario.nodes;

    // Build node 0 once up front so that a bad stack is reported before the run starts.
    let env0 = BuildEnv {
        node: NodeId(0),
        nodes,
        seed,
        topology: scenario.topology.as_ref().map(|t| t.node_view(0)),
    };
    let node0 =
        build_node(file, catalog, &env0, KernelConfig::default()).map_err(RunError::Build)?;
    let reliable_workloads = reliable_workloads(&node0, &scenario.workloads);

    let recorder = Rc::new(RefCell::new(Recorder::default()));
    let factory = {
        let file = file.clone();
        let catalog = catalog.clone();
        let recorder = Rc::clone(&recorder);
        let workloads = scenario.workloads.clone();
        let leaves = scenario.leaves.clone();
        let moves = scenario.moves.clone();
        let groups = scenario.groups.clone();
        let topology = scenario.topology.clone();
        move |id: NodeId, now: Instant| {
            let env = BuildEnv {
                node: id,
                nodes,
                seed,
                topology: topology.as_ref().map(|t| t.node_view(id.0)),
            };
            let config = KernelConfig {
                node: id,
                seed: kernel_seed(seed, id),
                // A restarted node boots at its restart time, not at the epoch.
                start: now,
                ..KernelConfig::default()
            };
            match build_node(&file, &catalog, &env, config.clone()) {
                Ok(built) => {
                    let mut node =
                        SimNode::new(id, nodes, built, &workloads, Rc::clone(&recorder), now);
                    if let Some(l) = leaves.iter().filter(|l| l.node == id.0).map(|l| l.at).min() {
                        node.leave_at((Instant::ZERO + l).max(now));
                    }
                    // Light-group moves still ahead (a restarted node does not redo past ones).
                    for m in moves.iter().filter(|m| m.node == id.0) {
                        let at = Instant::ZERO + m.at;
                        if at >= now {
                            node.move_at(at, &m.channel, &m.to);
                        }
                    }
                    // Group commands still ahead; a restarted host first joins again the
                    // groups it was a member of.
                    for (at, join, group) in group_schedule(&groups, id.0, now) {
                        node.group_at(at, join, group);
                    }
                    node
                }
                Err(e) => {
                    // Unreachable in practice: node 0 built above and building is deterministic.
                    tracing::error!(node = %id, error = %e, "stack failed to build; node runs empty");
                    let empty = BuiltNode {
                        kernel: viastack_kernel::Kernel::new(config),
                        channels: Vec::new(),
                        devices: Vec::new(),
                        sessions: Vec::new(),
                    };
                    SimNode::new(id, nodes, empty, &[], Rc::clone(&recorder), now)
                }
            }
        }
    };
    let sim_err = |source| RunError::Sim { seed, source };
    let mut sim = Sim::new(plan::sim_config(&scenario, seed), factory).map_err(sim_err)?;
    prepare(&mut sim);
    let slices = slices.max(1);
    for i in 1..=slices {
        let t = Instant::ZERO + duration.mul_f64(f64::from(i) / f64::from(slices));
        sim.run_until(t).map_err(sim_err)?;
        observe(i, t, &sim);
    }

    let crashed: BTreeSet<NodeId> = scenario.crashes.iter().map(|c| NodeId(c.node)).collect();
    let down_at_end = down_at_end(&scenario.crashes, duration);
    let mut counters = std::collections::BTreeMap::new();
    for n in 0..nodes {
        if let Some(node) = sim.node(NodeId(n)) {
            for (k, v) in node.kernel().counters() {
                let c = counters.entry(k).or_insert(0u64);
                *c = c.saturating_add(v);
            }
        }
    }
    let overlay_violations = {
        let rec = recorder.borrow();
        overlay::check(
            scenario.expect,
            &scenario,
            (0..nodes).map(|n| (NodeId(n), sim.node(NodeId(n)))),
            &rec,
        )
    };
    let group_outcomes = matches!(
        scenario.expect,
        viastack_stack::model::Expect::VirtualSynchrony
            | viastack_stack::model::Expect::TotalOrder
            | viastack_stack::model::Expect::CausalOrder
            | viastack_stack::model::Expect::CrossChannelOrder
    )
    .then(|| {
        let rec = recorder.borrow();
        group_check(&scenario, duration, &rec)
    });
    let mut memory = std::collections::BTreeMap::new();
    for n in 0..nodes {
        if let Some(m) = sim.node(NodeId(n)).and_then(SimNode::memory) {
            let name = scenario
                .topology
                .as_ref()
                .and_then(|t| t.nodes.get(n as usize))
                .map_or_else(|| format!("n{n}"), |d| d.name.clone());
            memory.insert(name, m);
        }
    }
    let network = sim.stats().into();
    let (steps, trace_hash) = (sim.steps(), format!("{:016x}", sim.trace_hash()));
    drop(sim); // releases the factory's handle on the recorder
    let recorder = Rc::try_unwrap(recorder)
        .map(RefCell::into_inner)
        .unwrap_or_else(|shared| shared.borrow().clone());
    let info = report::RunInfo {
        file: &file.path,
        driver: "simulator",
        seed,
        nodes,
        duration,
        expect: scenario.expect,
    };
    let observed = report::Observed {
        recorder: &recorder,
        crashed,
        down_at_end,
        reliable_workloads,
        network,
        counters,
        steps,
        trace_hash,
    };
    let mut report = report::build(&info, observed);
    report.memory = memory;
    if let Some(outcomes) = group_outcomes {
        for (name, o) in outcomes {
            let text = match o {
                group::Outcome::Held => "held".to_string(),
                group::Outcome::NotChecked(why) => format!("not checked: {why}"),
                group::Outcome::Violated(why) => {
                    report.verdict.holds = false;
                    report
                        .verdict
                        .violations
                        .push(format!("seed {seed}: {name} violated: {why}"));
                    format!("violated: {why}")
                }
            };
            report.properties.insert(name.to_string(), text);
        }
    }
    if !overlay_violations.is_empty() {
        report.verdict.holds = false;
        report.verdict.violations.extend(overlay_violations);
    }
    if let viastack_stack::model::Expect::ReliableMulticast
    | viastack_stack::model::Expect::ReliableOrderedMulticast = scenario.expect
    {
        let ordered = scenario.expect == viastack_stack::model::Expect::ReliableOrderedMulticast;
        let v = mcast_check::check(&scenario, &recorder, ordered);
        if !v.is_empty() {
            report.verdict.holds = false;
            report
                .verdict
                .violations
                .extend(v.into_iter().map(|x| format!("seed {seed}: {x}")));
        }
    }
    Ok((report, recorder))
}
