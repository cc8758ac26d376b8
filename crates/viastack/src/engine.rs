//! The sans-IO heart of a node (DESIGN.md §4.1): a kernel built from a stack file, its
//! channels by name, and the translation between the application's vocabulary (bytes to a
//! peer on a named channel; [`NodeEvent`]s) and the kernel's (events, transmits, timers).
//!
//! [`NodeCore`] never touches a socket, a thread or the clock: the threaded runtime
//! ([`crate::Node`]) and the simulator harness ([`crate::sim`]) drive the same code, so an
//! application tested in the simulator runs unchanged on real sockets.
//!
//! Call order, as for the kernel: `handle_*` (or [`NodeCore::send`]) with the current time,
//! then drain [`NodeCore::poll_transmit`] and [`NodeCore::poll_event`], then wait until
//! [`NodeCore::poll_timeout`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use viastack_kernel::event::SENDABLE;
use viastack_kernel::{
    ChannelId, Dest, Direction, Event, InjectError, Instant, Kernel, KernelConfig, Message, NodeId,
    Output, Sendable, SessionId, Tag,
};
use viastack_stack::{build_node, BuildEnv, Catalog, Diagnostics, StackFile};

use crate::event::{from_kernel, NodeEvent, Notice};

/// What one channel of a node carried, as the application sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Messages the channel accepted from the application (a message to every node counts
    /// once per addressee).
    pub sent: u64,
    /// Messages the channel refused at once ([`SendError::Refused`]).
    pub refused: u64,
    /// Messages delivered to the application.
    pub received: u64,
    /// Messages reported undelivered in [`Notice::SendFailed`] notices.
    pub failed: u64,
    /// Other notices (`Suspect`, `Alive`, the stack's own).
    pub notices: u64,
}

/// Why a message was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The stack has no channel of that name.
    #[error("no channel `{0}` in the stack")]
    UnknownChannel(String),
    /// The destination is not a node of the deployment.
    #[error("node {0} is not in the deployment ({1} nodes)")]
    UnknownPeer(u32, u32),
    /// The send queue is full (only from `try_send`; `send` waits instead).
    #[error("the send queue is full")]
    Full,
    /// The node is closing or closed.
    #[error("the node is closed")]
    Closed,
    /// The channel refused the message (not open).
    #[error("the channel refused the message: {0}")]
    Refused(String),
}

/// A datagram the core wants sent.
#[derive(Debug)]
pub struct Outgoing {
    /// The device port (which device of the destination receives it).
    pub port: u16,
    /// One node, or every other node.
    pub dest: Dest,
    /// The bytes.
    pub message: Message,
}

/// A node's kernel and channels, driven by a runtime or the simulator.
pub struct NodeCore {
    kernel: Kernel,
    id: NodeId,
    nodes: u32,
    channels: Vec<(Arc<str>, ChannelId)>,
    devices: Vec<(u16, SessionId)>,
    transmits: VecDeque<Outgoing>,
    events: VecDeque<NodeEvent>,
    /// Per channel, indexed like `channels`.
    stats: Vec<ChannelStats>,
}

impl std::fmt::Debug for NodeCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCore")
            .field("id", &self.id)
            .field("nodes", &self.nodes)
            .field("channels", &self.channels)
            .finish_non_exhaustive()
    }
}

impl NodeCore {
    /// Builds node `id` of `nodes` from `file`, with every channel started at `now`.
    ///
    /// # Errors
    /// The stack's [`Diagnostics`] if it does not build.
    pub fn build(
        file: &StackFile,
        catalog: &Catalog,
        id: NodeId,
        nodes: u32,
        seed: u64,
        now: Instant,
    ) -> Result<Self, Diagnostics> {
        let env = BuildEnv {
            node: id,
            nodes,
            seed,
            ..BuildEnv::default()
        };
        let config = KernelConfig {
            node: id,
            seed: seed
                ^ u64::from(id.0)
                    .wrapping_add(1)
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15),
            start: now,
            ..KernelConfig::default()
        };
        let built = build_node(file, catalog, &env, config)?;
        let channels: Vec<(Arc<str>, ChannelId)> = built
            .channels
            .into_iter()
            .map(|(n, c)| (Arc::from(n.as_str()), c))
            .collect();
        let mut core = NodeCore {
            kernel: built.kernel,
            id,
            nodes,
            stats: vec![ChannelStats::default(); channels.len()],
            channels,
            devices: built.devices,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        };
        core.drain();
        Ok(core)
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// How many nodes the deployment has.
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    /// The channels, by name, in file order.
    pub fn channels(&self) -> impl Iterator<Item = (&str, ChannelId)> {
        self.channels.iter().map(|(n, c)| (&**n, *c))
    }

    /// The channel named `name`.
    pub fn channel(&self, name: &str) -> Option<ChannelId> {
        self.channels
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, c)| *c)
    }

    /// The device sessions by port.
    pub fn devices(&self) -> &[(u16, SessionId)] {
        &self.devices
    }

    /// Sends `payload` on `channel` to `dest`, naming it `tag` in any failure notice. A
    /// message to every node ([`Dest::Broadcast`]) leaves as one copy per other node, so a
    /// reliable channel (point to point) carries it as well as a best-effort one.
    ///
    /// # Errors
    /// [`SendError::UnknownPeer`]; [`SendError::Refused`] if the channel is not open.
    pub fn send(
        &mut self,
        now: Instant,
        channel: ChannelId,
        dest: Dest,
        payload: &[u8],
        tag: Tag,
    ) -> Result<(), SendError> {
        let result = match dest {
            Dest::Node(n) if n.0 >= self.nodes => Err(SendError::UnknownPeer(n.0, self.nodes)),
            Dest::Node(n) => self.inject(now, channel, n, payload, tag),
            Dest::Broadcast => {
                let me = self.id.0;
                (0..self.nodes)
                    .filter(|&n| n != me)
                    .try_for_each(|n| self.inject(now, channel, NodeId(n), payload, tag))
            }
        };
        self.drain();
        result
    }

    fn inject(
        &mut self,
        now: Instant,
        channel: ChannelId,
        to: NodeId,
        payload: &[u8],
        tag: Tag,
    ) -> Result<(), SendError> {
        let ev = Event::sendable(
            SENDABLE.id(),
            Direction::Down,
            channel,
            Sendable::new(self.id, Dest::Node(to), Message::from_payload(payload)).with_tag(tag),
        );
        let result = self
            .kernel
            .inject(now, ev)
            .map_err(|e: InjectError| SendError::Refused(e.to_string()));
        if let Some(stats) = self.stats_mut(channel) {
            match result {
                Ok(()) => stats.sent += 1,
                Err(_) => stats.refused += 1,
            }
        }
        result
    }

    /// Injects `event` as it is (a down event enters its channel at the top): an event of a
    /// layer's own vocabulary, such as an overlay send with its delivery mode
    /// (`viastack::overlay`). Counted as one message sent on the channel.
    ///
    /// # Errors
    /// [`SendError::Refused`] if the channel is not open.
    pub fn inject_event(&mut self, now: Instant, event: Event) -> Result<(), SendError> {
        let channel = event.channel();
        let result = self
            .kernel
            .inject(now, event)
            .map_err(|e: InjectError| SendError::Refused(e.to_string()));
        if let Some(stats) = self.stats_mut(channel) {
            match result {
                Ok(()) => stats.sent += 1,
                Err(_) => stats.refused += 1,
            }
        }
        self.drain();
        result
    }

    /// The kernel, for inspection (a layer's session state: [`Kernel::channel_sessions`],
    /// [`Kernel::session`]).
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    fn stats_mut(&mut self, channel: ChannelId) -> Option<&mut ChannelStats> {
        let i = self.channels.iter().position(|(_, c)| *c == channel)?;
        self.stats.get_mut(i)
    }

    /// Reports to the application that message `tag`, which the runtime could not hand to
    /// the stack (refused, or still queued at close), will not be delivered.
    pub fn report_undelivered(
        &mut self,
        channel: ChannelId,
        dest: Dest,
        tag: Tag,
        kind: crate::FailureKind,
    ) {
        let Some(i) = self.channels.iter().position(|(_, c)| *c == channel) else {
            return;
        };
        let peer = match dest {
            Dest::Node(n) => n,
            Dest::Broadcast => self.id,
        };
        self.stats[i].failed += 1;
        self.events.push_back(NodeEvent::Notice(Notice::SendFailed {
            kind,
            channel: Arc::clone(&self.channels[i].0),
            peer,
            tags: vec![tag],
        }));
    }

    /// What each channel carried, by name, in file order.
    pub fn channel_stats(&self) -> impl Iterator<Item = (&str, ChannelStats)> {
        self.channels
            .iter()
            .zip(&self.stats)
            .map(|((n, _), s)| (&**n, *s))
    }

    /// Starts a batch: what the calls until [`NodeCore::end_batch`] cause leaves together (a
    /// `bundle` layer packs it).
    pub fn begin_batch(&mut self) {
        self.kernel.begin_batch();
    }

    /// Ends a batch.
    pub fn end_batch(&mut self, now: Instant) {
        self.kernel.end_batch(now);
        self.drain();
    }

    /// A datagram from `from` for the device on `port`.
    pub fn handle_datagram(&mut self, now: Instant, port: u16, from: NodeId, bytes: Vec<u8>) {
        match self.devices.iter().find(|(p, _)| *p == port) {
            Some(&(_, device)) => {
                self.kernel
                    .handle_datagram(now, device, from, Message::from_wire(bytes));
                self.drain();
            }
            None => tracing::debug!(node = %self.id, port, "datagram for a port with no device"),
        }
    }

    /// Fires due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.kernel.handle_timeout(now);
        self.drain();
    }

    /// When the core next needs [`NodeCore::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.kernel.poll_timeout()
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.transmits.pop_front()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<NodeEvent> {
        self.events.pop_front()
    }

    /// Messages the stack still holds unsettled (neither acknowledged nor reported).
    pub fn unsettled(&self) -> usize {
        self.kernel.unsettled()
    }

    /// Closes every channel: reliable layers report what is still unacknowledged
    /// ([`crate::FailureKind::SendAborted`]).
    pub fn close(&mut self, now: Instant) {
        for (name, channel) in self.channels.clone() {
            if let Err(e) = self.kernel.close_channel(channel, now) {
                tracing::debug!(node = %self.id, channel = %name, error = %e, "close");
            }
        }
        self.drain();
    }

    /// The kernel's counters (`layer.counter` → value).
    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.kernel.counters()
    }

    fn drain(&mut self) {
        while let Some(out) = self.kernel.poll_output() {
            match out {
                Output::Transmit(t) => self.transmits.push_back(Outgoing {
                    port: t.port,
                    dest: t.dest,
                    message: t.message,
                }),
                Output::Deliver(ev) => {
                    let channel = ev.channel();
                    let name = self
                        .channels
                        .iter()
                        .find(|(_, c)| *c == channel)
                        .map_or_else(|| Arc::from("?"), |(n, _)| Arc::clone(n));
                    if let Some(e) = from_kernel(ev, name) {
                        if let Some(stats) = self.stats_mut(channel) {
                            match &e {
                                NodeEvent::Message(_) => stats.received += 1,
                                NodeEvent::Notice(Notice::SendFailed { tags, .. }) => {
                                    stats.failed += tags.len() as u64
                                }
                                NodeEvent::Notice(_) => stats.notices += 1,
                            }
                        }
                        self.events.push_back(e);
                    }
                }
            }
        }
    }
}
