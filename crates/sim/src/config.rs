//! Scenario configuration: nodes, links, partitions, crashes, and its validation.
//!
//! Part of the deterministic simulator, which realizes DESIGN.md §4.2 "deterministic simulation
//! first": a scenario is plain data plus a seed, so a failing run reproduces exactly from its
//! [`SimConfig`]. [`validate`] checks everything [`crate::Sim::new`] relies on, so the simulator
//! itself never meets an out-of-range probability or node id.
//!
//! # Errors
//! [`validate`] returns the first problem found as a [`SimError`].

use fnv::FnvHashSet;
use viastack_kernel::{Duration, Instant, NodeId};

use crate::error::{LinkRef, SimError};

/// How one directed link treats each datagram.
///
/// For a datagram of `len` bytes sent at `now`, in this order:
/// 1. with probability `loss` it is dropped (and does not occupy the link);
/// 2. it leaves at `max(now, next_free) + len*8/bandwidth`, which becomes the link's new
///    `next_free` (a FIFO queue);
/// 3. with probability `duplicate` a second copy leaves at the same moment;
/// 4. each copy (original first) arrives `latency` + uniform jitter in `[0, jitter]` later, plus
///    `reorder_delay` with probability `reorder`, and has 1–3 distinct bits flipped with
///    probability `corrupt` (unless empty).
///
/// Every random choice comes from the simulator's single seeded generator; a probability of
/// exactly 0 or 1 consumes no random numbers.
///
/// `Default` is a perfect 1 ms link: no loss, duplication, reordering or corruption, no jitter,
/// unlimited bandwidth.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// Fixed propagation delay added to every datagram.
    pub latency: Duration,
    /// Extra delay drawn uniformly from `[0, jitter]` per copy; nonzero jitter reorders
    /// datagrams sent closer together than the jitter.
    pub jitter: Duration,
    /// Serialization rate in bits per second, `None` for unlimited. A datagram of `b` bytes
    /// occupies the link for `ceil(b * 8 / bandwidth)` seconds, one after another (a FIFO
    /// queue of unbounded length). Must not be `Some(0)`.
    pub bandwidth_bps: Option<u64>,
    /// Probability in `0..=1` that a datagram is dropped before entering the link (a lost
    /// datagram does not occupy the link).
    pub loss: f64,
    /// Probability in `0..=1` that a delivered datagram arrives twice. The second copy shares
    /// the first one's serialization slot but draws its own jitter, reordering and corruption.
    pub duplicate: f64,
    /// Probability in `0..=1` that a copy is held back an extra `reorder_delay`, so that it
    /// lands behind datagrams sent after it.
    pub reorder: f64,
    /// The extra delay of a reordered copy.
    pub reorder_delay: Duration,
    /// Probability in `0..=1` that a copy has 1–3 distinct random bits flipped. Empty
    /// datagrams are never corrupted.
    pub corrupt: f64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            latency: Duration::from_millis(1),
            jitter: Duration::ZERO,
            bandwidth_bps: None,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            corrupt: 0.0,
        }
    }
}

impl LinkConfig {
    pub(crate) fn validate(&self, link: LinkRef) -> Result<(), SimError> {
        for (field, value) in [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            // `contains` is false for NaN too.
            if !(0.0..=1.0).contains(&value) {
                return Err(SimError::InvalidProbability { link, field, value });
            }
        }
        if self.bandwidth_bps == Some(0) {
            return Err(SimError::ZeroBandwidth { link });
        }
        Ok(())
    }
}

/// A different [`LinkConfig`] for one directed link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkOverride {
    /// Sending node.
    pub from: NodeId,
    /// Receiving node.
    pub to: NodeId,
    /// The configuration of `from → to` (the reverse direction keeps its own).
    pub config: LinkConfig,
}

/// A network partition, active from `start` (inclusive) until `heal` (exclusive).
///
/// While active, datagrams between nodes of different groups are dropped and counted as
/// `dropped_partition`. Nodes listed in no group form one extra group together. The check is
/// made twice: when a datagram is sent, and again when it arrives — so a datagram in flight when
/// the partition starts is dropped, and one in flight when it heals is delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// When the partition starts.
    pub start: Instant,
    /// When it heals; `None` for never. Must be after `start`.
    pub heal: Option<Instant>,
    /// The isolated groups; a node may appear in at most one.
    pub groups: Vec<Vec<NodeId>>,
}

/// A node crash, optionally followed by a restart.
///
/// At `at` the node's state is dropped; datagrams arriving while it is down are dropped and
/// counted as `dropped_down`, and its pending timeout is forgotten. At `restart` the factory
/// builds it anew, as after a reboot. Crashing a down node or restarting an up node is a no-op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashPlan {
    /// The node that crashes.
    pub node: NodeId,
    /// When it crashes.
    pub at: Instant,
    /// When it comes back, if ever; must not be before `at`.
    pub restart: Option<Instant>,
}

/// A complete scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Seeds the simulator's single random number generator.
    pub seed: u64,
    /// Number of nodes; they are `NodeId(0)` to `NodeId(nodes - 1)`.
    pub nodes: u32,
    /// The configuration of every directed link not overridden in `links`.
    pub link: LinkConfig,
    /// Per directed link exceptions to `link`; at most one per `(from, to)`.
    pub links: Vec<LinkOverride>,
    /// Network partitions; they may overlap in time (a datagram is dropped if any active
    /// partition separates its ends).
    pub partitions: Vec<Partition>,
    /// Crashes and restarts.
    pub crashes: Vec<CrashPlan>,
    /// A multi-hop network: with `Some`, datagrams travel only over its links (`link` and
    /// `links` are then unused); with `None`, every node reaches every other directly (full
    /// mesh). See [`crate::Topology`].
    pub topology: Option<crate::Topology>,
    /// Maximum number of events a run may process before failing with
    /// [`SimError::StepCapExceeded`] (livelock guard, as in quinn-proto's test harness).
    pub step_cap: u64,
}

impl SimConfig {
    /// Default step cap: several seconds of work at a few million events per second, far
    /// above what a unit-test scenario needs; raise it for long runs.
    pub const DEFAULT_STEP_CAP: u64 = 10_000_000;

    /// A scenario of `nodes` nodes on perfect 1 ms links, with no partitions or crashes.
    pub fn new(seed: u64, nodes: u32) -> Self {
        SimConfig {
            seed,
            nodes,
            link: LinkConfig::default(),
            links: Vec::new(),
            partitions: Vec::new(),
            crashes: Vec::new(),
            topology: None,
            step_cap: Self::DEFAULT_STEP_CAP,
        }
    }
}

impl Default for SimConfig {
    /// Two nodes, seed 0, perfect 1 ms links.
    fn default() -> Self {
        SimConfig::new(0, 2)
    }
}

/// Check a scenario: probabilities in `0..=1`, positive bandwidths, node ids in range, one
/// override per link, partitions that heal after they start with each node in at most one
/// group, restarts not before their crash.
///
/// # Errors
/// The first problem found.
pub fn validate(config: &SimConfig) -> Result<(), SimError> {
    let nodes = config.nodes;
    let check_node = |what: &'static str, node: NodeId| {
        if node.0 < nodes {
            Ok(())
        } else {
            Err(SimError::UnknownNode { what, node, nodes })
        }
    };

    config.link.validate(LinkRef::Default)?;
    let mut seen = FnvHashSet::default();
    for o in &config.links {
        check_node("link override", o.from)?;
        check_node("link override", o.to)?;
        o.config.validate(LinkRef::Override {
            from: o.from,
            to: o.to,
        })?;
        if !seen.insert((o.from, o.to)) {
            return Err(SimError::DuplicateLinkOverride {
                from: o.from,
                to: o.to,
            });
        }
    }

    for (index, p) in config.partitions.iter().enumerate() {
        if p.heal.is_some_and(|heal| heal <= p.start) {
            return Err(SimError::InvalidPartition {
                index,
                reason: "heal must be after start",
            });
        }
        let mut members = FnvHashSet::default();
        for &node in p.groups.iter().flatten() {
            check_node("partition", node)?;
            if !members.insert(node) {
                return Err(SimError::InvalidPartition {
                    index,
                    reason: "a node appears more than once in its groups",
                });
            }
        }
    }

    if let Some(t) = &config.topology {
        crate::topology::validate(t, nodes)?;
    }

    for (index, c) in config.crashes.iter().enumerate() {
        check_node("crash plan", c.node)?;
        if c.restart.is_some_and(|r| r < c.at) {
            return Err(SimError::InvalidCrashPlan {
                index,
                reason: "restart must not be before the crash",
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_link(link: LinkConfig) -> SimConfig {
        SimConfig {
            link,
            ..SimConfig::new(1, 3)
        }
    }

    #[test]
    fn default_is_a_perfect_millisecond_link() {
        let l = LinkConfig::default();
        assert_eq!(l.latency, Duration::from_millis(1));
        assert_eq!(
            (l.loss, l.duplicate, l.reorder, l.corrupt),
            (0.0, 0.0, 0.0, 0.0)
        );
        assert_eq!(l.jitter, Duration::ZERO);
        assert_eq!(l.bandwidth_bps, None);
        assert_eq!(validate(&SimConfig::default()), Ok(()));
    }

    #[test]
    fn probabilities_outside_unit_interval_are_rejected() {
        let bad = [-0.1, 1.5, f64::NAN, f64::INFINITY];
        for value in bad {
            for field in ["loss", "duplicate", "reorder", "corrupt"] {
                let mut link = LinkConfig::default();
                match field {
                    "loss" => link.loss = value,
                    "duplicate" => link.duplicate = value,
                    "reorder" => link.reorder = value,
                    _ => link.corrupt = value,
                }
                match validate(&with_link(link)) {
                    Err(SimError::InvalidProbability {
                        link: LinkRef::Default,
                        field: f,
                        ..
                    }) => assert_eq!(f, field),
                    other => panic!("{field}={value}: expected InvalidProbability, got {other:?}"),
                }
            }
        }
        // The bounds themselves are fine.
        let edge = LinkConfig {
            loss: 1.0,
            duplicate: 0.0,
            reorder: 1.0,
            corrupt: 1.0,
            ..LinkConfig::default()
        };
        assert_eq!(validate(&with_link(edge)), Ok(()));
    }

    #[test]
    fn override_errors_name_the_link() {
        let mut c = SimConfig::new(1, 3);
        c.links.push(LinkOverride {
            from: NodeId(0),
            to: NodeId(2),
            config: LinkConfig {
                duplicate: 2.0,
                ..LinkConfig::default()
            },
        });
        let err = validate(&c).unwrap_err();
        assert_eq!(
            err,
            SimError::InvalidProbability {
                link: LinkRef::Override {
                    from: NodeId(0),
                    to: NodeId(2)
                },
                field: "duplicate",
                value: 2.0
            }
        );
        assert_eq!(
            err.to_string(),
            "link n0->n2: duplicate must be a probability in 0..=1, got 2"
        );
    }

    #[test]
    fn structural_errors() {
        let zero_bw = with_link(LinkConfig {
            bandwidth_bps: Some(0),
            ..LinkConfig::default()
        });
        assert!(matches!(
            validate(&zero_bw),
            Err(SimError::ZeroBandwidth { .. })
        ));

        let mut c = SimConfig::new(1, 3);
        let o = LinkOverride {
            from: NodeId(0),
            to: NodeId(1),
            config: LinkConfig::default(),
        };
        c.links = vec![o.clone(), o];
        assert!(matches!(
            validate(&c),
            Err(SimError::DuplicateLinkOverride { .. })
        ));

        let mut c = SimConfig::new(1, 3);
        c.links.push(LinkOverride {
            from: NodeId(0),
            to: NodeId(3),
            config: LinkConfig::default(),
        });
        assert!(matches!(
            validate(&c),
            Err(SimError::UnknownNode {
                node: NodeId(3),
                ..
            })
        ));

        let part = |heal, groups| Partition {
            start: Instant::from_millis(10),
            heal,
            groups,
        };
        let mut c = SimConfig::new(1, 3);
        c.partitions = vec![part(Some(Instant::from_millis(10)), vec![vec![NodeId(0)]])];
        assert!(matches!(
            validate(&c),
            Err(SimError::InvalidPartition { index: 0, .. })
        ));
        c.partitions = vec![part(
            None,
            vec![vec![NodeId(0)], vec![NodeId(0), NodeId(1)]],
        )];
        assert!(matches!(
            validate(&c),
            Err(SimError::InvalidPartition { .. })
        ));
        c.partitions = vec![part(None, vec![vec![NodeId(5)]])];
        assert!(matches!(validate(&c), Err(SimError::UnknownNode { .. })));

        let mut c = SimConfig::new(1, 3);
        c.crashes.push(CrashPlan {
            node: NodeId(1),
            at: Instant::from_millis(5),
            restart: Some(Instant::from_millis(4)),
        });
        assert!(matches!(
            validate(&c),
            Err(SimError::InvalidCrashPlan { index: 0, .. })
        ));
        c.crashes[0].node = NodeId(9);
        assert!(matches!(validate(&c), Err(SimError::UnknownNode { .. })));
    }
}
