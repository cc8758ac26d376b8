//! The simulator, handed to applications: N instances of an [`Application`] over a simulated
//! network, in virtual time, with the simulator's loss, duplication, reordering, corruption,
//! partitions and crashes, all from one seed (DESIGN.md §4.2). A failing seed replays exactly.
//!
//! ```no_run
//! # use viastack::{sim::Harness, Application, AppNode, NodeEvent};
//! # struct Echo;
//! # impl Application for Echo { fn handle(&mut self, _: NodeEvent, _: &mut AppNode<'_>) {} }
//! let stack = std::fs::read_to_string("stacks/reliable.toml").unwrap();
//! let mut config = viastack::sim::SimConfig::new(7, 3); // seed 7, 3 nodes
//! config.link.loss = 0.1;
//! let mut h = Harness::new("reliable.toml", &stack, config, |_id| Echo).unwrap();
//! h.run_for(viastack::Duration::from_secs(10)).unwrap();
//! let app: &Echo = h.app(viastack::NodeId(0)).unwrap();
//! ```
//!
//! Crashed nodes lose their application with their stack; a restart builds both anew (a new
//! incarnation: its kernel seed includes the restart time).

use std::collections::VecDeque;

use viastack_kernel::{Duration, Instant, NodeId, Tag};
pub use viastack_sim::{CrashPlan, LinkConfig, NetStats, Partition, SimConfig, SimError};
use viastack_sim::{Node as SimNode, Sim, Transmit};
use viastack_stack::{standard_catalog, Catalog, Diagnostics, StackFile};

use crate::app::{AppNode, Application};
use crate::engine::{NodeCore, SendError};
use crate::event::NodeEvent;

/// Why a harness could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The stack has problems.
    #[error("{0}")]
    Stack(Diagnostics),
    /// The simulator refused the configuration or exceeded its step cap.
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// One simulated node: its core and its application.
pub struct Simulated<A> {
    core: NodeCore,
    app: A,
    next_tag: u64,
    wake: Option<Instant>,
    stopped: bool,
    out: VecDeque<Transmit>,
    /// Every event the node delivered, in order (also handed to the application).
    log: Vec<NodeEvent>,
}

impl<A: Application> Simulated<A> {
    fn with_ctx(&mut self, now: Instant, f: impl FnOnce(&mut A, &mut AppNode<'_>)) {
        if self.stopped {
            return;
        }
        let mut n = AppNode::simulated(
            &mut self.core,
            &mut self.next_tag,
            now,
            &mut self.wake,
            &mut self.stopped,
        );
        f(&mut self.app, &mut n);
    }

    /// Hands the core's events to the application (which may cause more) and queues transmits.
    fn settle(&mut self, now: Instant) {
        while let Some(e) = self.core.poll_event() {
            self.log.push(e.clone());
            self.with_ctx(now, |app, n| app.handle(e, n));
        }
        while let Some(t) = self.core.poll_transmit() {
            self.out.push_back(Transmit {
                port: t.port,
                dest: t.dest,
                bytes: t.message.into_vec(),
            });
        }
    }

    /// The application.
    pub fn app(&self) -> &A {
        &self.app
    }

    /// Every event this node delivered to its application, in order.
    pub fn events(&self) -> &[NodeEvent] {
        &self.log
    }
}

impl<A: Application> SimNode for Simulated<A> {
    fn handle_datagram(&mut self, now: Instant, port: u16, from: NodeId, bytes: Vec<u8>) {
        self.core.handle_datagram(now, port, from, bytes);
        self.settle(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.core.handle_timeout(now);
        self.settle(now);
        if self.wake.is_some_and(|w| w <= now) {
            self.wake = None;
            self.with_ctx(now, |app, n| app.wake(n));
            self.settle(now);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let app = if self.stopped { None } else { self.wake };
        match (self.core.poll_timeout(), app) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }
}

/// N instances of an application over the simulated network.
pub struct Harness<A: Application + 'static> {
    sim: Sim<Simulated<A>>,
}

impl<A: Application + 'static> Harness<A> {
    /// Parses `stack` (named `name` in diagnostics) with the standard catalog and starts
    /// `config.nodes` nodes, each with the application `app(id)`.
    ///
    /// # Errors
    /// [`HarnessError`].
    pub fn new(
        name: &str,
        stack: &str,
        config: SimConfig,
        app: impl FnMut(NodeId) -> A + 'static,
    ) -> Result<Self, HarnessError> {
        let catalog = standard_catalog();
        let file = viastack_stack::parse(name, stack, &catalog).map_err(HarnessError::Stack)?;
        Self::with_catalog(file, catalog, config, app)
    }

    /// As [`Harness::new`], for a parsed stack and a catalog holding the application's own
    /// layer kinds.
    ///
    /// # Errors
    /// [`HarnessError`].
    pub fn with_catalog(
        file: StackFile,
        catalog: Catalog,
        config: SimConfig,
        mut app: impl FnMut(NodeId) -> A + 'static,
    ) -> Result<Self, HarnessError> {
        let nodes = config.nodes;
        let seed = config.seed;
        // Build node 0 once up front so a stack that does not build is an error here, not a
        // panic in the factory.
        NodeCore::build(&file, &catalog, NodeId(0), nodes, seed, Instant::ZERO)
            .map_err(HarnessError::Stack)?;
        let sim = Sim::new(config, move |id, now| {
            // A restart is a new incarnation: the time enters the seed.
            let node_seed = seed ^ now.as_nanos().rotate_left(17);
            let core = match NodeCore::build(&file, &catalog, id, nodes, node_seed, now) {
                Ok(c) => c,
                // Built once above with the same inputs but the seed: layers do not fail on it.
                Err(d) => unreachable!("the stack built at start but not for node {id}: {d}"),
            };
            let mut node = Simulated {
                core,
                app: app(id),
                next_tag: 1,
                wake: None,
                stopped: false,
                out: VecDeque::new(),
                log: Vec::new(),
            };
            node.settle(now);
            node.with_ctx(now, |a, n| a.start(n));
            node.settle(now);
            node
        })?;
        Ok(Harness { sim })
    }

    /// Runs for `d` of virtual time.
    ///
    /// # Errors
    /// [`SimError::StepCapExceeded`] (a livelock), with the seed in the configuration.
    pub fn run_for(&mut self, d: Duration) -> Result<(), HarnessError> {
        self.sim.run_for(d)?;
        Ok(())
    }

    /// Runs until nothing is scheduled (every node idle).
    ///
    /// # Errors
    /// [`SimError::StepCapExceeded`].
    pub fn run_until_idle(&mut self) -> Result<(), HarnessError> {
        self.sim.run_until_idle()?;
        Ok(())
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.sim.now()
    }

    /// Node `id`'s application, if the node is up.
    pub fn app(&self, id: NodeId) -> Option<&A> {
        self.sim.node(id).map(Simulated::app)
    }

    /// Node `id`, if up: its application and the events it delivered.
    pub fn node(&self, id: NodeId) -> Option<&Simulated<A>> {
        self.sim.node(id)
    }

    /// Sends from test code, as node `from`'s application would.
    ///
    /// # Errors
    /// [`SendError`]; [`SendError::Closed`] if the node is down.
    pub fn send(
        &mut self,
        from: NodeId,
        channel: &str,
        to: NodeId,
        payload: &[u8],
    ) -> Result<Tag, SendError> {
        let now = self.sim.now();
        let node = self.sim.node_mut(from).ok_or(SendError::Closed)?;
        let mut result = Err(SendError::Closed);
        node.with_ctx(now, |_, n| result = n.send(channel, to, payload));
        node.settle(now);
        result
    }

    /// The network's counters.
    pub fn net_stats(&self) -> &NetStats {
        self.sim.stats()
    }

    /// The seed (print it with a failure).
    pub fn seed(&self) -> u64 {
        self.sim.seed()
    }
}
