//! From a stack file's `[scenario]` to the simulator's configuration: links, overrides,
//! partitions and crashes, in virtual time; with a `[topology]`, its links and link failures.

use std::collections::BTreeSet;

use viastack_kernel::{Instant, NodeId};
use viastack_sim::{
    CrashPlan, LinkChange, LinkConfig, LinkEvent, LinkOverride, Partition, SimConfig, TopoLink,
    Topology,
};
use viastack_stack::model::{LinkSpec, Scenario, TopologyDecl};

fn link_config(l: &LinkSpec) -> LinkConfig {
    LinkConfig {
        latency: l.latency,
        jitter: l.jitter,
        bandwidth_bps: l.bandwidth,
        loss: l.loss,
        duplicate: l.duplicate,
        reorder: l.reorder,
        reorder_delay: l.reorder_delay,
        corrupt: l.corrupt,
    }
}

fn at(d: viastack_kernel::Duration) -> Instant {
    Instant::ZERO + d
}

/// The simulator configuration for `scenario` run with `seed`.
pub fn sim_config(scenario: &Scenario, seed: u64) -> SimConfig {
    let mut config = SimConfig::new(seed, scenario.nodes);
    config.link = link_config(&scenario.link);
    let pairs: BTreeSet<(u32, u32)> = scenario.links.iter().map(|o| (o.from, o.to)).collect();
    config.links = pairs
        .into_iter()
        .map(|(from, to)| LinkOverride {
            from: NodeId(from),
            to: NodeId(to),
            config: link_config(&scenario.link_between(from, to)),
        })
        .collect();
    config.partitions = scenario
        .partitions
        .iter()
        .map(|p| {
            // In a stack file a node in no group is isolated; the simulator puts every unlisted
            // node in one extra group, so list the isolated nodes as groups of their own.
            let listed: BTreeSet<u32> = p.groups.iter().flatten().copied().collect();
            let mut groups: Vec<Vec<NodeId>> = p
                .groups
                .iter()
                .map(|g| g.iter().map(|&n| NodeId(n)).collect())
                .collect();
            groups.extend(
                (0..scenario.nodes)
                    .filter(|n| !listed.contains(n))
                    .map(|n| vec![NodeId(n)]),
            );
            Partition {
                start: at(p.at),
                heal: p.heal.map(at),
                groups,
            }
        })
        .collect();
    config.crashes = scenario
        .crashes
        .iter()
        .map(|c| CrashPlan {
            node: NodeId(c.node),
            at: at(c.at),
            restart: c.restart.map(at),
        })
        .collect();
    if let Some(topo) = &scenario.topology {
        config.topology = Some(topology(scenario, topo));
    }
    let messages: u64 = scenario
        .workloads
        .iter()
        .map(|w| w.messages.saturating_mul(u64::from(scenario.nodes)))
        .sum();
    // A livelock guard, not a budget: generous for any run that makes progress.
    config.step_cap = 100_000_000u64.saturating_add(messages.saturating_mul(200));
    config
}

/// The simulator's topology for a `[topology]`: its links with their conditions (unset fields
/// from `[scenario.link]`) and the scenario's link failures as down/up events.
fn topology(scenario: &Scenario, topo: &TopologyDecl) -> Topology {
    let links = topo
        .links
        .iter()
        .map(|l| TopoLink {
            nodes: l.nodes.iter().map(|&n| NodeId(n)).collect(),
            config: link_config(&l.conditions.apply(&scenario.link)),
        })
        .collect();
    let mut events = Vec::new();
    for f in &scenario.link_failures {
        events.push(LinkEvent {
            at: at(f.at),
            link: f.link,
            change: LinkChange::Down,
        });
        if let Some(r) = f.repair {
            events.push(LinkEvent {
                at: at(r),
                link: f.link,
                change: LinkChange::Up,
            });
        }
    }
    Topology { links, events }
}
