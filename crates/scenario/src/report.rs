//! The run report: what was sent and delivered, loss, duplication, order, integrity, latency in
//! virtual time, the network's own counts, every layer counter, and whether the scenario's
//! declared delivery property held (issue 2 §4 `viastack run`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use viastack_kernel::NodeId;
use viastack_sim::NetStats;
use viastack_stack::model::Expect;

use crate::recorder::Recorder;

/// Latency percentiles, µs of virtual time.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

/// The network's counts (datagrams).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Network {
    /// Handed to the network.
    pub sent: u64,
    /// Delivered to a node.
    pub delivered: u64,
    /// Lost on a link.
    pub lost: u64,
    /// Extra copies made by links.
    pub duplicated: u64,
    /// Copies with flipped bits.
    pub corrupted: u64,
    /// Dropped by a partition.
    pub dropped_partition: u64,
    /// Dropped because the receiver was down.
    pub dropped_down: u64,
    /// With a `[topology]`: dropped because their link was down.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_link_down: u64,
    /// With a `[topology]`: sent on a port that is no interface, or to a node off the link.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_no_route: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One neighbour of a node's neighbour table (global memory).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NeighborRow {
    /// The interface it was heard on.
    pub iface: u16,
    /// Its address.
    pub addr: String,
    /// Whether it lists this node (two-way adjacency).
    pub two_way: bool,
}

/// One route of a node's routing table (global memory).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RouteRow {
    /// The source network.
    pub prefix: String,
    /// Its metric (32: unreachable, held down).
    pub metric: u8,
    /// The interface towards it.
    pub iface: u16,
    /// The upstream neighbour, for learned routes.
    pub upstream: Option<String>,
    /// Downstream neighbours that depend on this node for it.
    pub dependents: usize,
}

/// One source network of a node's source tree (global memory).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TreeRow {
    /// The source network.
    pub source: String,
    /// The interface towards it.
    pub upstream_iface: u16,
    /// The upstream neighbour (none when the network is attached).
    pub upstream: Option<String>,
    /// Child interfaces (this node is their designated forwarder) and their dependent
    /// downstream neighbours (none: a leaf).
    pub children: BTreeMap<u16, Vec<String>>,
}

/// One (source network, group) of a node's prune table (global memory).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PruneRow {
    /// The source network.
    pub source: String,
    /// The group.
    pub group: String,
    /// Towards the upstream: `forwarding`, `pruned` or `grafting`.
    pub upstream: String,
    /// Neighbours whose prune is in force, as `interface/address`.
    pub pruned_by: Vec<String>,
}

/// One membership of a node's group table (global memory).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GroupRow {
    /// The interface.
    pub iface: u16,
    /// The group.
    pub group: String,
    /// The host that reported last.
    pub last_reporter: String,
}

/// The global memory objects of one node at the end of the run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct NodeMemory {
    /// The neighbour table.
    pub neighbors: Vec<NeighborRow>,
    /// The routing table.
    pub routes: Vec<RouteRow>,
    /// The source tree.
    pub tree: Vec<TreeRow>,
    /// The prune table.
    pub prunes: Vec<PruneRow>,
    /// The group table.
    pub groups: Vec<GroupRow>,
}

impl From<&NetStats> for Network {
    fn from(s: &NetStats) -> Self {
        Network {
            sent: s.sent,
            delivered: s.delivered,
            lost: s.lost,
            duplicated: s.duplicated,
            corrupted: s.corrupted,
            dropped_partition: s.dropped_partition,
            dropped_down: s.dropped_down,
            dropped_link_down: s.dropped_link_down,
            dropped_no_route: s.dropped_no_route,
        }
    }
}

/// Whether the declared property held.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Verdict {
    /// The property the scenario declared.
    pub expect: String,
    /// Whether it held.
    pub holds: bool,
    /// Why not, if it did not.
    pub violations: Vec<String>,
}

/// Everything `viastack run` reports.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// The stack file.
    pub file: String,
    /// What ran the nodes: `simulator`, `udp-threads` or `udp-processes`.
    pub driver: String,
    /// The seed of the run (rerun with `--seed` to reproduce it exactly).
    pub seed: u64,
    /// Nodes simulated.
    pub nodes: u32,
    /// Virtual time simulated, seconds.
    pub duration_s: f64,
    /// Application messages sent.
    pub sent: u64,
    /// Distinct messages delivered intact to their addressee.
    pub delivered: u64,
    /// Messages never delivered, and never reported to their sender: lost silently.
    pub lost: u64,
    /// Messages never delivered that a crash excuses: sent by an incarnation of a node that
    /// crashed afterwards (its stack's state died with it, nobody is left to tell), or, on a
    /// channel that does not promise reliable delivery, addressed to a node that crashed.
    pub lost_crashed: u64,
    /// Messages never delivered whose sender was told so, by their tags, in a `SendFailed`
    /// notice (`PeerUnreachable`, `SendRefused`, `PeerRestarted`): a reported failure, not a
    /// silent loss.
    pub lost_reported: u64,
    /// Extra deliveries of a message already delivered.
    pub duplicated: u64,
    /// First deliveries of a message after a later one of the same stream.
    pub out_of_order: u64,
    /// Deliveries whose payload failed its integrity check.
    pub corrupted: u64,
    /// Intact payloads delivered to a node other than their addressee.
    pub misdelivered: u64,
    /// Latency of first deliveries.
    pub latency: Latency,
    /// The network's counts.
    pub network: Network,
    /// Notices that reached the applications (suspicions, unreachable peers), by type.
    pub notices: BTreeMap<String, u64>,
    /// Every layer counter, summed over the nodes up at the end.
    pub counters: BTreeMap<String, u64>,
    /// Events the simulator processed.
    pub steps: u64,
    /// FNV-1a hash of the full event trace: equal hashes mean bit-identical runs.
    pub trace_hash: String,
    /// What looks wrong with the stack itself, whatever the property: events that fell off
    /// the bottom of a stack (no layer below took them to a network), payloads the
    /// application could not read.
    pub warnings: Vec<String>,
    /// The declared property and whether it held.
    pub verdict: Verdict,
    /// Global memory (seed 004) of the nodes up at the end that have any, by node name
    /// (`[topology]` name, else `n<index>`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub memory: BTreeMap<String, NodeMemory>,
    /// The group checker's verdict per property (`held`, `violated`, `not checked: why`), for
    /// `virtual-synchrony` and `total-order` runs.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// Builds the delivery part of a report from the recorder.
struct Tally {
    sent: u64,
    delivered: u64,
    lost: u64,
    lost_crashed: u64,
    lost_reported: u64,
    duplicated: u64,
    out_of_order: u64,
    latency: Latency,
}

fn tally(rec: &Recorder, o: &Observed<'_>) -> Tally {
    let mut t = Tally {
        sent: 0,
        delivered: 0,
        lost: 0,
        lost_crashed: 0,
        lost_reported: 0,
        duplicated: 0,
        out_of_order: 0,
        latency: Latency {
            p50_us: rec.latency.value_at_quantile(0.5) as f64 / 1e3,
            p99_us: rec.latency.value_at_quantile(0.99) as f64 / 1e3,
            max_us: rec.latency.max() as f64 / 1e3,
        },
    };
    if rec.latency.is_empty() {
        t.latency = Latency {
            p50_us: 0.0,
            p99_us: 0.0,
            max_us: 0.0,
        };
    }
    for ((workload, src, dst), s) in &rec.streams {
        t.sent += s.sent;
        t.out_of_order += s.out_of_order;
        let best_effort = !o.reliable_workloads.contains(workload);
        let down = o.down_at_end.contains(src) || (best_effort && o.crashed.contains(dst));
        for (seq, &n) in (0u64..).zip(s.deliveries.iter().take(s.sent as usize)) {
            match n {
                0 if s.reported.contains(&seq) => t.lost_reported += 1,
                0 if down || seq < s.sender_crashed_below => t.lost_crashed += 1,
                0 => t.lost += 1,
                n => {
                    t.delivered += 1;
                    t.duplicated += u64::from(n - 1);
                }
            }
        }
    }
    t
}

/// What a driver observed during a run, to be turned into a [`Report`].
pub struct Observed<'a> {
    /// Sends, deliveries and notices of every node (merged).
    pub recorder: &'a Recorder,
    /// Nodes that crashed at some point: on a channel that promises no reliability, what was
    /// sent to them is not held against the run.
    pub crashed: BTreeSet<NodeId>,
    /// Nodes down at the end of the run (crashed, not restarted): what they sent and was not
    /// delivered died with them. (A node that restarted is known to the recorder: what its
    /// earlier incarnations sent is [`crate::recorder::Stream::sender_crashed_below`].)
    pub down_at_end: BTreeSet<NodeId>,
    /// Workloads whose channel promises reliable delivery: every message is delivered or
    /// reported to its sender, whatever crashes.
    pub reliable_workloads: BTreeSet<u16>,
    /// The network's counts.
    pub network: Network,
    /// Layer counters summed over the nodes.
    pub counters: BTreeMap<String, u64>,
    /// Events the driver processed (simulator steps; 0 for real sockets).
    pub steps: u64,
    /// Hash of the event trace ("-" where runs are not reproducible: real sockets).
    pub trace_hash: String,
}

/// Where and how a run happened.
pub struct RunInfo<'a> {
    /// The stack file's path.
    pub file: &'a str,
    /// What ran the nodes (see [`Report::driver`]).
    pub driver: &'a str,
    /// The seed.
    pub seed: u64,
    /// Nodes.
    pub nodes: u32,
    /// Duration of the run.
    pub duration: viastack_kernel::Duration,
    /// The declared property.
    pub expect: Expect,
}

/// The report of a run.
pub fn build(info: &RunInfo<'_>, observed: Observed<'_>) -> Report {
    let t = tally(observed.recorder, &observed);
    let rec = observed.recorder;
    let mut report = Report {
        file: info.file.to_string(),
        driver: info.driver.to_string(),
        seed: info.seed,
        nodes: info.nodes,
        duration_s: info.duration.as_secs_f64(),
        sent: t.sent,
        delivered: t.delivered,
        lost: t.lost,
        lost_crashed: t.lost_crashed,
        lost_reported: t.lost_reported,
        duplicated: t.duplicated,
        out_of_order: t.out_of_order,
        corrupted: rec.corrupted,
        misdelivered: rec.misdelivered,
        latency: t.latency,
        notices: rec.notices.clone(),
        network: observed.network,
        counters: observed.counters,
        steps: observed.steps,
        trace_hash: observed.trace_hash,
        warnings: Vec::new(),
        verdict: Verdict {
            expect: String::new(),
            holds: true,
            violations: Vec::new(),
        },
        memory: BTreeMap::new(),
        properties: BTreeMap::new(),
    };
    report.warnings = warnings(&report);
    report.verdict = judge(info.expect, &report);
    report
}

/// What the counts say about the stack itself (issue 13 §2: a stack that loses everything
/// must say so, whatever property it declared).
fn warnings(r: &Report) -> Vec<String> {
    let mut w = Vec::new();
    let fell = r
        .counters
        .get("kernel.fell_off_bottom")
        .copied()
        .unwrap_or(0);
    if fell > 0 {
        w.push(format!(
            "{fell} events fell off the bottom of the stack: no layer below them took them to a \
             network (is the transport missing, or not the bottom layer?)"
        ));
    }
    if r.corrupted > 0 {
        w.push(format!(
            "{} payloads reached the application that it could not read (corrupted, or protocol \
             messages that fell off the top of the stack: is a layer missing above?)",
            r.corrupted
        ));
    }
    w
}

/// Judges the declared property against the report's counts. A property of deliveries over a
/// run that delivered nothing is vacuous: it fails, since it shows nothing.
fn judge(expect: Expect, r: &Report) -> Verdict {
    let mut v = Vec::new();
    if !matches!(expect, Expect::None | Expect::OverlayConverged) && r.delivered == 0 {
        v.push(format!(
            "vacuous: no message was delivered ({} sent), so the run shows nothing about {}",
            r.sent,
            expect.name()
        ));
    }
    let ordered = matches!(expect, Expect::Fifo | Expect::ReliableFifo);
    let reliable = matches!(expect, Expect::Reliable | Expect::ReliableFifo);
    if expect != Expect::None {
        if r.corrupted > 0 {
            v.push(format!("{} corrupted payloads were delivered", r.corrupted));
        }
        if r.misdelivered > 0 {
            v.push(format!(
                "{} messages reached the wrong node",
                r.misdelivered
            ));
        }
        if r.duplicated > 0 {
            v.push(format!("{} duplicate deliveries", r.duplicated));
        }
    }
    if ordered && r.out_of_order > 0 {
        v.push(format!(
            "{} messages delivered out of order",
            r.out_of_order
        ));
    }
    if reliable && r.lost > 0 {
        v.push(format!(
            "{} of {} messages were never delivered",
            r.lost, r.sent
        ));
    }
    Verdict {
        expect: expect.name().to_string(),
        holds: v.is_empty(),
        violations: v,
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let simulated = self.driver == "simulator";
        if simulated {
            writeln!(
                f,
                "{}: {} nodes, {:.3} s simulated, seed {}",
                self.file, self.nodes, self.duration_s, self.seed
            )?;
        } else {
            writeln!(
                f,
                "{}: {} nodes, {:.3} s on loopback sockets ({}), seed {}",
                self.file, self.nodes, self.duration_s, self.driver, self.seed
            )?;
        }
        writeln!(
            f,
            "  messages   sent {:>9}   delivered {:>9}   lost {:>7}   duplicated {:>6}   out of order {:>6}",
            self.sent, self.delivered, self.lost, self.duplicated, self.out_of_order
        )?;
        if self.lost_crashed > 0
            || self.lost_reported > 0
            || self.corrupted > 0
            || self.misdelivered > 0
        {
            writeln!(
                f,
                "             lost with a crashed sender {}   lost but reported {}   corrupted {}   misdelivered {}",
                self.lost_crashed, self.lost_reported, self.corrupted, self.misdelivered
            )?;
        }
        writeln!(
            f,
            "  latency    p50 {:.1} µs   p99 {:.1} µs   max {:.1} µs ({})",
            self.latency.p50_us,
            self.latency.p99_us,
            self.latency.max_us,
            if simulated {
                "virtual time"
            } else {
                "real time"
            }
        )?;
        let n = &self.network;
        if simulated {
            writeln!(
                f,
                "  network    datagrams {}   delivered {}   lost {}   duplicated {}   corrupted {}   partitioned {}   to a down node {}",
                n.sent, n.delivered, n.lost, n.duplicated, n.corrupted, n.dropped_partition, n.dropped_down
            )?;
            if n.dropped_link_down + n.dropped_no_route > 0 {
                writeln!(
                    f,
                    "  links      dropped on a failed link {}   sent where no link leads {}",
                    n.dropped_link_down, n.dropped_no_route
                )?;
            }
            for (node, m) in &self.memory {
                let reachable = m.routes.iter().filter(|r| r.metric < 32).count();
                let adjacent = m.neighbors.iter().filter(|x| x.two_way).count();
                writeln!(
                    f,
                    "  memory     {node}: {adjacent} two-way neighbours, {reachable} reachable \
                     networks of {} routes, {} group memberships, {} prune entries",
                    m.routes.len(),
                    m.groups.len(),
                    m.prunes.len()
                )?;
            }
        } else {
            writeln!(
                f,
                "  sockets    datagrams sent {}   received {}   refused by the socket {}",
                n.sent, n.delivered, n.lost
            )?;
        }
        if !self.notices.is_empty() {
            let shown: Vec<String> = self
                .notices
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            writeln!(f, "  notices    {}", shown.join("  "))?;
        }
        if !self.counters.is_empty() {
            let shown: Vec<String> = self
                .counters
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            writeln!(f, "  counters   {}", shown.join("  "))?;
        }
        if simulated {
            writeln!(f, "  trace      {} ({} steps)", self.trace_hash, self.steps)?;
        }
        if !self.properties.is_empty() {
            let shown: Vec<String> = self
                .properties
                .iter()
                .map(|(k, v)| format!("{k} {}", v.split(':').next().unwrap_or(v)))
                .collect();
            writeln!(f, "  group      {}", shown.join("   "))?;
        }
        for w in &self.warnings {
            writeln!(f, "  warning    {w}")?;
        }
        if self.verdict.holds {
            write!(f, "  property   {}: holds", self.verdict.expect)
        } else {
            write!(
                f,
                "  property   {}: VIOLATED — {}",
                self.verdict.expect,
                self.verdict.violations.join("; ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(sent: u64, delivered: u64, counters: &[(&str, u64)]) -> Report {
        Report {
            file: "t.toml".into(),
            driver: "simulator".into(),
            seed: 1,
            nodes: 2,
            duration_s: 1.0,
            sent,
            delivered,
            lost: sent - delivered,
            lost_crashed: 0,
            lost_reported: 0,
            duplicated: 0,
            out_of_order: 0,
            corrupted: 0,
            misdelivered: 0,
            latency: Latency {
                p50_us: 0.0,
                p99_us: 0.0,
                max_us: 0.0,
            },
            network: Network::from(&NetStats::default()),
            notices: BTreeMap::new(),
            counters: counters.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            steps: 0,
            trace_hash: String::new(),
            warnings: Vec::new(),
            verdict: Verdict {
                expect: String::new(),
                holds: true,
                violations: Vec::new(),
            },
            memory: BTreeMap::new(),
            properties: BTreeMap::new(),
        }
    }

    #[test]
    fn a_delivery_property_over_a_run_that_delivered_nothing_is_vacuous_and_fails() {
        // The case: fifo "held" over 20 sent, 0 delivered.
        let r = report(20, 0, &[("kernel.fell_off_bottom", 42)]);
        for expect in [Expect::Fifo, Expect::Reliable, Expect::ReliableFifo] {
            let v = judge(expect, &r);
            assert!(!v.holds, "{expect:?}");
            assert!(v.violations[0].starts_with("vacuous"), "{:?}", v.violations);
        }
        // Nothing declared, nothing claimed.
        assert!(judge(Expect::None, &r).holds);
        // One delivery is enough to make a lossy fifo run meaningful.
        assert!(judge(Expect::Fifo, &report(20, 1, &[])).holds);
    }

    #[test]
    fn events_falling_off_the_bottom_are_reported_and_shown() {
        let mut r = report(20, 0, &[("kernel.fell_off_bottom", 42)]);
        r.warnings = warnings(&r);
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(r.warnings[0].starts_with("42 events fell off the bottom"));
        assert!(r
            .to_string()
            .contains("  warning    42 events fell off the bottom"));
        let clean = report(20, 20, &[("kernel.fell_off_bottom", 0)]);
        assert!(warnings(&clean).is_empty());
    }
}
