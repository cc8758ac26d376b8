//! The overlay socket (issue 16 §5; seed 000 chapters 3–4, "the overlay socket": an
//! application joins an overlay, sends with a delivery mode and a delivery service, receives
//! with the source, and hears of neighbourhood changes).
//!
//! An [`OverlaySocket`] is a [`Node`] opened from a stack whose channels run the `overlay`
//! layer (`docs/LAYERS.md`), optionally with a `messagestore` above it running a delivery
//! service (h2hack, e2eack, dupelim, …). Each such channel is a *lane* of the socket: the lane
//! without a service carries plain overlay messages in any delivery mode; a lane with a
//! MessageStore carries the messages of its service (its ServiceID). Every lane runs its own
//! overlay over the node's one socket (the device keeps their datagrams apart); the socket's
//! neighbourhood, leader and stability are those of its *primary* lane (the first lane without
//! a service, else the first lane).
//!
//! ```no_run
//! use std::time::Duration;
//! use viastack::overlay::{Delivery, OverlayEvent, OverlaySocket};
//! use viastack::{Deployment, NodeId};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let deployment = Deployment::from_file("deploy.toml")?.with_id(NodeId(0));
//! let mut socket = OverlaySocket::join("stacks/overlay-app.toml", deployment)?;
//! socket.send(Delivery::Multicast, None, b"hello, everyone".to_vec())?;
//! match socket.recv_timeout(Duration::from_secs(5))? {
//!     OverlayEvent::Message(m) => println!("{} says {:?}", m.from, m.payload),
//!     OverlayEvent::NeighbourAdded(n) => println!("new neighbour {n}"),
//!     OverlayEvent::Stable => println!("stable: {:?}", socket.status()?.neighbours),
//!     other => println!("{other:?}"),
//! }
//! socket.leave()?;
//! # Ok(()) }
//! ```
//!
//! # Stability
//! The socket is *stable* once its primary overlay's neighbourhood has not changed for the
//! settle time ([`OverlaySocket::set_settle`], default 3 s: longer than the DT's fast
//! heartbeats, so a forming triangulation is not called stable between two changes).
//! [`OverlayEvent::Stable`] is reported when it becomes so, [`OverlayEvent::Unstable`] at the
//! first change after. Like every event, they are produced while the application receives.
//!
//! # Delivery modes and services
//! - On the lane without a service: [`Delivery::Multicast`] (down the tree rooted at this
//!   node: every node once), [`Delivery::Flood`] (every edge, duplicates suppressed),
//!   [`Delivery::Unicast`] to a node (up the tree rooted at its point),
//!   [`Delivery::UnicastLogical`] to a DT point.
//! - On a service lane the service decides how the message travels; the MessageStore starts
//!   a multicast instance for [`Delivery::Multicast`] and a unicast one for
//!   [`Delivery::Unicast`] — which a multicast-only service such as h2hack still sends down
//!   the tree to every node. Flooding is the layer's `broadcast = "flood"` setting, so a
//!   per-message flood or a logical unicast on a service lane is refused
//!   ([`OverlayError::Unsupported`]).

#![allow(clippy::disallowed_methods)] // a driver: the settle time is wall-clock time

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use viastack_kernel::event::SENDABLE;
use viastack_kernel::{Body, Dest, Direction, Event, Message, NodeId, Sendable, Tag};
use viastack_overlay::wire::app::DeliveryMode;
pub use viastack_overlay::DtAddr;
use viastack_protocols::messagestore::MessageStoreSession;
use viastack_protocols::overlay::{
    OverlaySend, OverlaySession, OverlayTarget, NEIGHBOUR_ADDED, NEIGHBOUR_REMOVED, OVERLAY_SEND,
};

use crate::engine::{NodeCore, SendError};
use crate::event::{NodeEvent, Notice};
use crate::node::{Channel, CloseReport, Node, NodeBuilder, OpenError, RecvError};
use crate::Deployment;

/// How a message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Down the tree rooted at this node: every other node receives it once.
    Multicast,
    /// Along every edge, duplicates suppressed.
    Flood,
    /// To one node of the deployment.
    Unicast(NodeId),
    /// To the node at a DT point.
    UnicastLogical(DtAddr),
}

/// Why the socket could not join or send.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// The node could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The stack has no channel over an `overlay` layer.
    #[error("the stack has no channel over an `overlay` layer")]
    NoOverlay,
    /// No lane runs that service.
    #[error("no channel of the stack runs service {0:?} (None: the lane without a service)")]
    NoService(Option<u32>),
    /// The delivery mode is not available on that lane.
    #[error("{0}")]
    Unsupported(&'static str),
    /// The node refused the message or is closed.
    #[error(transparent)]
    Send(#[from] SendError),
}

/// A message for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayMessage {
    /// The node that sent it.
    pub from: NodeId,
    /// The service that carried it (`None`: a plain overlay message).
    pub service: Option<u32>,
    /// Its bytes.
    pub payload: Vec<u8>,
}

/// What the socket reports, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverlayEvent {
    /// A message.
    Message(OverlayMessage),
    /// A node joined the neighbourhood.
    NeighbourAdded(NodeId),
    /// A node left the neighbourhood.
    NeighbourRemoved(NodeId),
    /// No neighbourhood change for the settle time.
    Stable,
    /// The neighbourhood changed after it was stable.
    Unstable,
    /// Any other notice of the stack (a service's failure report: `SendFailed`).
    Notice(Notice),
}

/// A lane's service in a [`Status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStatus {
    /// The channel.
    pub channel: String,
    /// Its ServiceID.
    pub service_id: u32,
    /// Live service instances (one per message in flight).
    pub instances: usize,
    /// The ServiceIDs whose specs the lane's MessageStore runs now: configured, and fetched
    /// at run time (issue 16 §4).
    pub loaded: Vec<u32>,
}

/// A snapshot of the socket ([`OverlaySocket::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// This node.
    pub node: NodeId,
    /// `"dt"` or `"hypercube"`.
    pub topology: &'static str,
    /// The logical address (a DT point, a hypercube label), once it has one.
    pub logical: Option<String>,
    /// The primary overlay's neighbours, sorted.
    pub neighbours: Vec<NodeId>,
    /// Whether this node is the primary overlay's leader.
    pub leader: bool,
    /// Whether the neighbourhood has been stable for the settle time.
    pub stable: bool,
    /// The services of the lanes, with their live instances.
    pub services: Vec<ServiceStatus>,
    /// On the rendezvous server's node (the `overlay` layer's `rendezvous`): how many members
    /// its primary overlay's server remembers.
    pub rendezvous_members: Option<usize>,
}

/// One channel over an overlay.
#[derive(Debug)]
struct Lane {
    name: Arc<str>,
    channel: Channel,
    service: Option<u32>,
}

/// An application's membership in an overlay (see the module documentation).
#[derive(Debug)]
pub struct OverlaySocket {
    node: Node,
    lanes: Vec<Lane>,
    primary: usize,
    neighbours: BTreeSet<NodeId>,
    stable: bool,
    last_change: Instant,
    settle: Duration,
    pending: VecDeque<OverlayEvent>,
}

/// What the loop reports of one channel: its name, whether it runs an overlay, its service.
type LaneInfo = (String, bool, Option<u32>);

fn lanes_of(core: &NodeCore) -> Vec<LaneInfo> {
    let k = core.kernel();
    core.channels()
        .map(|(name, ch)| {
            let mut overlay = false;
            let mut service = None;
            for s in k.channel_sessions(ch).into_iter().flatten() {
                overlay |= k.session::<OverlaySession>(s).is_some();
                if let Some(m) = k.session::<MessageStoreSession>(s) {
                    service = Some(m.service_id());
                }
            }
            (name.to_string(), overlay, service)
        })
        .collect()
}

impl OverlaySocket {
    /// Joins the overlay of `stack_file` as the node `deployment` names (on UDP or TCP as the
    /// deployment says).
    ///
    /// # Errors
    /// [`OverlayError::Open`], [`OverlayError::NoOverlay`].
    pub fn join(
        stack_file: impl Into<PathBuf>,
        deployment: Deployment,
    ) -> Result<Self, OverlayError> {
        Self::join_with(
            Node::builder()
                .stack_file(stack_file)
                .deployment(deployment),
        )
    }

    /// Joins with a node built by `builder` (queues, linger, seed, application layers).
    ///
    /// # Errors
    /// [`OverlayError::Open`], [`OverlayError::NoOverlay`].
    pub fn join_with(builder: NodeBuilder) -> Result<Self, OverlayError> {
        let node = builder.open()?;
        let infos = node.inspect(lanes_of)?;
        let mut lanes = Vec::new();
        for (name, overlay, service) in infos {
            if overlay {
                let channel = node.channel(&name)?;
                lanes.push(Lane {
                    name: Arc::from(name.as_str()),
                    channel,
                    service,
                });
            }
        }
        if lanes.is_empty() {
            return Err(OverlayError::NoOverlay);
        }
        let primary = lanes.iter().position(|l| l.service.is_none()).unwrap_or(0);
        Ok(OverlaySocket {
            node,
            lanes,
            primary,
            neighbours: BTreeSet::new(),
            stable: false,
            last_change: Instant::now(),
            settle: Duration::from_secs(3),
            pending: VecDeque::new(),
        })
    }

    /// How long the neighbourhood must stay unchanged to be stable (default 3 s).
    pub fn set_settle(&mut self, settle: Duration) {
        self.settle = settle;
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.node.id()
    }

    /// The node underneath (metrics, local address).
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The services the socket's lanes run (`None`: the lane without a service).
    pub fn services(&self) -> Vec<Option<u32>> {
        self.lanes.iter().map(|l| l.service).collect()
    }

    /// The neighbours as the received notices tell them (see [`OverlaySocket::status`] for
    /// the overlay's own view).
    pub fn neighbours(&self) -> &BTreeSet<NodeId> {
        &self.neighbours
    }

    /// Sends `payload` as `delivery` with the service `service` (`None`: no service). Waits
    /// while the send queue is full. Returns the tag that names the message in failure
    /// notices.
    ///
    /// # Errors
    /// [`OverlayError::NoService`], [`OverlayError::Unsupported`], [`OverlayError::Send`].
    pub fn send(
        &self,
        delivery: Delivery,
        service: Option<u32>,
        payload: Vec<u8>,
    ) -> Result<Tag, OverlayError> {
        let lane = self
            .lanes
            .iter()
            .find(|l| l.service == service)
            .ok_or(OverlayError::NoService(service))?;
        if lane.service.is_some() {
            return match delivery {
                Delivery::Unicast(n) => Ok(lane.channel.send(n, payload)?),
                Delivery::Multicast => {
                    let me = self.node.id();
                    Ok(lane.channel.send_event(Dest::Broadcast, move |ch, tag| {
                        let s = Sendable::new(me, Dest::Broadcast, Message::from_payload(&payload))
                            .with_tag(tag);
                        Event::sendable(SENDABLE.id(), Direction::Down, ch, s)
                    })?)
                }
                Delivery::Flood => Err(OverlayError::Unsupported(
                    "a service lane floods with the layer's broadcast = \"flood\", not per message",
                )),
                Delivery::UnicastLogical(_) => Err(OverlayError::Unsupported(
                    "a service lane addresses nodes, not logical addresses",
                )),
            };
        }
        let (mode, to, dest) = match delivery {
            Delivery::Multicast => (DeliveryMode::Multicast, None, Dest::Broadcast),
            Delivery::Flood => (DeliveryMode::Flood, None, Dest::Broadcast),
            Delivery::Unicast(n) => {
                if n.0 >= self.node.nodes() {
                    return Err(SendError::UnknownPeer(n.0, self.node.nodes()).into());
                }
                (
                    DeliveryMode::Unicast,
                    Some(OverlayTarget::Node(n)),
                    Dest::Node(n),
                )
            }
            Delivery::UnicastLogical(a) => (
                DeliveryMode::Unicast,
                Some(OverlayTarget::Logical(a)),
                Dest::Broadcast,
            ),
        };
        Ok(lane.channel.send_event(dest, move |ch, _tag| {
            let body = OverlaySend { mode, to, payload };
            Event::new(
                OVERLAY_SEND.id(),
                Direction::Down,
                ch,
                Body::Custom(Box::new(body)),
            )
        })?)
    }

    /// Waits at most `timeout` for the next event (messages, neighbourhood changes,
    /// stability).
    ///
    /// # Errors
    /// [`RecvError::Timeout`]; [`RecvError::Closed`] once the node has closed.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<OverlayEvent, RecvError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Ok(e);
            }
            let now = Instant::now();
            let settles = self.last_change + self.settle;
            if !self.stable && now >= settles {
                self.stable = true;
                return Ok(OverlayEvent::Stable);
            }
            if now >= deadline {
                // Out of time: still take what is already waiting (`try_recv`).
                match self.node.try_recv() {
                    Some(e) => {
                        self.translate(e);
                        continue;
                    }
                    None => return Err(RecvError::Timeout),
                }
            }
            let mut wait = deadline - now;
            if !self.stable {
                wait = wait.min(settles - now);
            }
            match self.node.recv_timeout(wait) {
                Ok(e) => self.translate(e),
                Err(RecvError::Timeout) => {}
                Err(RecvError::Closed) => return Err(RecvError::Closed),
            }
        }
    }

    /// The next event if one is ready now.
    pub fn try_recv(&mut self) -> Option<OverlayEvent> {
        self.recv_timeout(Duration::ZERO).ok()
    }

    fn translate(&mut self, e: NodeEvent) {
        match e {
            NodeEvent::Message(m) => {
                let service = self
                    .lanes
                    .iter()
                    .find(|l| *l.name == *m.channel)
                    .and_then(|l| l.service);
                self.pending
                    .push_back(OverlayEvent::Message(OverlayMessage {
                        from: m.from,
                        service,
                        payload: m.payload,
                    }));
            }
            NodeEvent::Notice(Notice::Other {
                channel,
                kind,
                peer: Some(peer),
            }) if kind == NEIGHBOUR_ADDED.id().name() || kind == NEIGHBOUR_REMOVED.id().name() => {
                if *channel != *self.lanes[self.primary].name {
                    return; // the other lanes' overlays mirror the primary's
                }
                let added = kind == NEIGHBOUR_ADDED.id().name();
                let changed = if added {
                    self.neighbours.insert(peer)
                } else {
                    self.neighbours.remove(&peer)
                };
                if !changed {
                    return;
                }
                if self.stable {
                    self.stable = false;
                    self.pending.push_back(OverlayEvent::Unstable);
                }
                self.last_change = Instant::now();
                self.pending.push_back(if added {
                    OverlayEvent::NeighbourAdded(peer)
                } else {
                    OverlayEvent::NeighbourRemoved(peer)
                });
            }
            NodeEvent::Notice(n) => self.pending.push_back(OverlayEvent::Notice(n)),
        }
    }

    /// A snapshot: logical address, neighbours and leadership of the primary overlay, and
    /// every service lane's live instances.
    ///
    /// # Errors
    /// [`SendError::Closed`] once the node has closed.
    pub fn status(&self) -> Result<Status, SendError> {
        let lanes: Vec<(String, Option<u32>)> = self
            .lanes
            .iter()
            .map(|l| (l.name.to_string(), l.service))
            .collect();
        let primary = lanes[self.primary].0.clone();
        let me = self.node.id();
        let stable = self.stable;
        self.node.inspect(move |core| {
            let k = core.kernel();
            let mut st = Status {
                node: me,
                topology: "dt",
                logical: None,
                neighbours: Vec::new(),
                leader: false,
                stable,
                services: Vec::new(),
                rendezvous_members: None,
            };
            for (name, _) in &lanes {
                let Some(ch) = core.channel(name) else {
                    continue;
                };
                for s in k.channel_sessions(ch).into_iter().flatten() {
                    if let Some(o) = k.session::<OverlaySession>(s) {
                        if *name == primary {
                            let os = o.status();
                            st.topology = os.topology;
                            st.logical = os.logical;
                            st.neighbours = os.neighbours;
                            st.leader = os.leader;
                            st.rendezvous_members = o.rendezvous_stats().map(|(_, m)| m);
                        }
                    }
                    if let Some(m) = k.session::<MessageStoreSession>(s) {
                        st.services.push(ServiceStatus {
                            channel: name.clone(),
                            service_id: m.service_id(),
                            instances: m.live(),
                            loaded: m.services(),
                        });
                    }
                }
            }
            st
        })
    }

    /// Leaves the overlay: the overlays say goodbye to their neighbours, the node closes.
    ///
    /// # Errors
    /// Socket errors of the node's loop.
    pub fn leave(self) -> Result<CloseReport, std::io::Error> {
        self.node.close()
    }
}
