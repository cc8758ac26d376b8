//! Typed errors of the simulator.
//!
//! Part of the deterministic simulator, which realizes DESIGN.md §4.2 "deterministic simulation
//! first". A bad scenario is reported by [`crate::Sim::new`] as a [`SimError`] naming the field
//! at fault (principle §4.6: bad input never crashes anything); a run that exceeds its step cap
//! reports the seed, so the livelock reproduces exactly.

use std::fmt;

use viastack_kernel::NodeId;

/// Which link configuration an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkRef {
    /// `SimConfig::link`, the default of every directed link.
    Default,
    /// The `LinkOverride` of the directed link `from → to`.
    Override {
        /// Sending node.
        from: NodeId,
        /// Receiving node.
        to: NodeId,
    },
    /// Link `index` of the [`crate::Topology`].
    Topology {
        /// Position in `Topology::links`.
        index: usize,
    },
}

impl fmt::Display for LinkRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkRef::Default => f.write_str("default link"),
            LinkRef::Override { from, to } => write!(f, "link {from}->{to}"),
            LinkRef::Topology { index } => write!(f, "topology link #{index}"),
        }
    }
}

/// Everything that can go wrong when building or running a simulation.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SimError {
    /// A probability of a [`crate::LinkConfig`] is not a number in `0..=1`.
    #[error("{link}: {field} must be a probability in 0..=1, got {value}")]
    InvalidProbability {
        /// The link whose configuration is wrong.
        link: LinkRef,
        /// The field name (`loss`, `duplicate`, `reorder`, `corrupt`).
        field: &'static str,
        /// The offending value.
        value: f64,
    },
    /// `bandwidth_bps` is `Some(0)`: nothing could ever be sent. Use `None` for "unlimited".
    #[error("{link}: bandwidth_bps must be positive (use None for unlimited)")]
    ZeroBandwidth {
        /// The link whose configuration is wrong.
        link: LinkRef,
    },
    /// A link override, partition or crash plan names a node that does not exist.
    #[error("{what} names {node}, but the scenario has only {nodes} nodes")]
    UnknownNode {
        /// Which part of the configuration (`link override`, `partition`, `crash plan`).
        what: &'static str,
        /// The node named.
        node: NodeId,
        /// `SimConfig::nodes`.
        nodes: u32,
    },
    /// Two link overrides configure the same directed link.
    #[error("link {from}->{to} is overridden twice")]
    DuplicateLinkOverride {
        /// Sending node.
        from: NodeId,
        /// Receiving node.
        to: NodeId,
    },
    /// A partition is malformed (heal not after start, or a node in two groups).
    #[error("partition #{index}: {reason}")]
    InvalidPartition {
        /// Position in `SimConfig::partitions`.
        index: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A crash plan restarts its node before crashing it.
    #[error("crash plan #{index}: {reason}")]
    InvalidCrashPlan {
        /// Position in `SimConfig::crashes`.
        index: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A topology link is malformed (fewer than two nodes, a node listed twice).
    #[error("topology link #{index}: {reason}")]
    InvalidLink {
        /// Position in `Topology::links`.
        index: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// A link event names a link that does not exist.
    #[error("link event #{index}: {reason}")]
    InvalidLinkEvent {
        /// Position in `Topology::events`.
        index: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// More events were processed than `SimConfig::step_cap` allows: probably a livelock
    /// (a node that keeps waking itself, or two nodes ping-ponging forever).
    #[error("step cap exceeded after {steps} events (seed {seed})")]
    StepCapExceeded {
        /// Events processed so far (equal to the cap).
        steps: u64,
        /// The seed of the run, to reproduce it.
        seed: u64,
    },
}
