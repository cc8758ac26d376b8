//! The group handle (seed 001 §2.1: an application's membership in a virtual-synchrony
//! group; issue 18 "Use"): join a group from a stack file and a deployment, send to it, receive
//! its messages and views in order, leave.
//!
//! A [`Group`] is a [`Node`] opened from a stack with a channel over a `vsync` layer (normally
//! `vsync` + `total-order`, as `stacks/group.toml`): the *group channel*, the first such channel
//! of the stack. Every node of the deployment that opens the stack is a candidate member: nodes
//! start alone in a view of their own, and the coordinators merge their views as they hear of
//! each other (`docs/GROUP.md`). The handle reports, in the order the stack delivers them:
//!
//! - [`GroupEvent::View`]: a view installed — after the previous view's last message, before
//!   the new view's first (virtual synchrony: members that go from one view to the next
//!   together delivered the same messages in the first);
//! - [`GroupEvent::Message`]: a message of the group, the member's own included (self-delivery),
//!   in one total order at every member when the stack runs `total-order`;
//! - [`GroupEvent::Blocked`] / [`GroupEvent::Unblocked`]: the flush of a view change stopped
//!   sending (messages sent meanwhile wait in the layer's bounded queue), and was given up
//!   (an installed view ends a block as well);
//! - [`GroupEvent::SendFailed`]: messages the group refused (a full buffer held back by a slow
//!   member, named by a [`GroupEvent::SlowMember`]) or could not deliver, by the [`Tag`]
//!   [`Group::send`] returned;
//! - [`GroupEvent::Notice`]: any other notice (the failure detector's `Suspect`/`Alive`).
//!
//! ```no_run
//! use std::time::Duration;
//! use viastack::group::{Group, GroupEvent};
//! use viastack::{Deployment, NodeId};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let deployment = Deployment::from_file("deploy.toml")?.with_id(NodeId(0));
//! let mut group = Group::join("stacks/group.toml", deployment)?;
//! group.send(b"hello, group".to_vec())?;
//! loop {
//!     match group.recv_timeout(Duration::from_secs(5))? {
//!         GroupEvent::View(v) => println!("view {}: {:?}", v.id, v.members),
//!         GroupEvent::Message(m) => println!("{} says {:?}", m.from, m.payload),
//!         other => println!("{other:?}"),
//!     }
//! #   break;
//! }
//! group.leave()?;
//! # Ok(()) }
//! ```
//!
//! A member leaving ([`Group::leave`]) tells the group, which installs a view without it at
//! once; a member that crashes is excluded once the failure detector's suspicion lasted the
//! layer's `confirm` time. Async applications use [`Group::recv_async`] and
//! [`Group::send_async`] on a node opened with [`NodeBuilder::open_on`].

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use viastack_group::vsync::{VsyncSession, BLOCK, SLOW_MEMBER, UNBLOCK};
pub use viastack_group::{Member, ViewId};
use viastack_kernel::event::SENDABLE;
use viastack_kernel::{ChannelId, Dest, Direction, Event, Message, NodeId, Sendable, Tag};

use crate::engine::{NodeCore, SendError};
use crate::event::{FailureKind, NodeEvent, Notice};
use crate::node::{Channel, CloseReport, Node, NodeBuilder, OpenError, RecvError};
use crate::Deployment;

/// Why the handle could not join or send.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The node could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The stack has no channel over a `vsync` layer.
    #[error("the stack has no channel over a `vsync` layer")]
    NoGroup,
    /// The node refused the message (a full send queue for `try_send`) or is closed.
    #[error(transparent)]
    Send(#[from] SendError),
}

/// A view of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// Its id: a counter growing at every view change, and the coordinator that installed it.
    pub id: ViewId,
    /// Its members' nodes, ascending.
    pub members: Vec<NodeId>,
    /// Its members as incarnations (a restarted node is a new member).
    pub incarnations: Vec<Member>,
    /// Whether it may carry traffic (always, unless the stack says `primary = "majority"`).
    pub primary: bool,
}

impl View {
    /// The view's coordinator (also the total order's sequencer): its first member.
    pub fn coordinator(&self) -> Option<NodeId> {
        self.members.first().copied()
    }
}

/// A message of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMessage {
    /// The member that sent it.
    pub from: NodeId,
    /// Its bytes.
    pub payload: Vec<u8>,
}

/// What the group reports, in the order the stack delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupEvent {
    /// A view was installed.
    View(View),
    /// A message (this member's own included).
    Message(GroupMessage),
    /// A flush began: sends wait until the next view (or [`GroupEvent::Unblocked`]).
    Blocked,
    /// The flush was given up: the current view goes on.
    Unblocked,
    /// A member holds this member's send buffer back (its acknowledgements lag by the
    /// layer's `capacity`): sends are refused until it catches up or is excluded.
    SlowMember(NodeId),
    /// Messages that were refused or will not be delivered, by their tags.
    SendFailed {
        /// Why.
        kind: FailureKind,
        /// The tags [`Group::send`] returned, in send order.
        tags: Vec<Tag>,
    },
    /// Any other notice of the stack (`Suspect`, `Alive`, …).
    Notice(Notice),
}

/// One application message to the whole group: a single event the group layer multicasts
/// (not one copy per node, as [`Channel::send_to_all`] makes for point-to-point channels).
fn multicast(me: NodeId, ch: ChannelId, tag: Tag, payload: &[u8]) -> Event {
    let s = Sendable::new(me, Dest::Broadcast, Message::from_payload(payload)).with_tag(tag);
    Event::sendable(SENDABLE.id(), Direction::Down, ch, s)
}

/// The group channel of a node: the first channel with a `vsync` session.
fn group_channel(core: &NodeCore) -> Option<String> {
    let k = core.kernel();
    core.channels()
        .find(|(_, ch)| {
            k.channel_sessions(*ch)
                .into_iter()
                .flatten()
                .any(|s| k.session::<VsyncSession>(s).is_some())
        })
        .map(|(name, _)| name.to_string())
}

/// An application's membership in a group (see the module documentation).
#[derive(Debug)]
pub struct Group {
    node: Node,
    channel: Channel,
    name: Arc<str>,
    view: Option<View>,
    blocked: bool,
    pending: VecDeque<GroupEvent>,
}

impl Group {
    /// Joins the group of `stack_file` as the node `deployment` names.
    ///
    /// # Errors
    /// [`GroupError::Open`], [`GroupError::NoGroup`].
    pub fn join(
        stack_file: impl Into<PathBuf>,
        deployment: Deployment,
    ) -> Result<Self, GroupError> {
        Self::join_with(
            Node::builder()
                .stack_file(stack_file)
                .deployment(deployment),
        )
    }

    /// Joins with a node built by `builder` (stack text, queues, linger, seed, a runtime).
    ///
    /// # Errors
    /// [`GroupError::Open`], [`GroupError::NoGroup`].
    pub fn join_with(builder: NodeBuilder) -> Result<Self, GroupError> {
        Self::from_node(builder.open()?)
    }

    /// The group handle of an open node.
    ///
    /// # Errors
    /// [`GroupError::NoGroup`]; [`GroupError::Send`] if the node has closed.
    pub fn from_node(node: Node) -> Result<Self, GroupError> {
        let name = node.inspect(group_channel)?.ok_or(GroupError::NoGroup)?;
        let channel = node.channel(&name)?;
        Ok(Group {
            node,
            channel,
            name: Arc::from(name.as_str()),
            view: None,
            blocked: false,
            pending: VecDeque::new(),
        })
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.node.id()
    }

    /// The node underneath (metrics, local address).
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The group channel's name.
    pub fn channel_name(&self) -> &str {
        &self.name
    }

    /// The last view received (`None` before the first [`GroupEvent::View`] was received).
    pub fn view(&self) -> Option<&View> {
        self.view.as_ref()
    }

    /// Whether a flush holds sends back (between [`GroupEvent::Blocked`] and the next view).
    pub fn blocked(&self) -> bool {
        self.blocked
    }

    /// Sends `payload` to the group, waiting while the node's send queue is full. Returns the
    /// tag that names the message in [`GroupEvent::SendFailed`].
    ///
    /// # Errors
    /// [`GroupError::Send`] once the node has closed.
    pub fn send(&self, payload: impl Into<Vec<u8>>) -> Result<Tag, GroupError> {
        let me = self.node.id();
        let payload = payload.into();
        Ok(self.channel.send_event(Dest::Broadcast, move |ch, tag| {
            multicast(me, ch, tag, &payload)
        })?)
    }

    /// Sends `payload` if the send queue has room.
    ///
    /// # Errors
    /// [`GroupError::Send`] with [`SendError::Full`] or [`SendError::Closed`].
    pub fn try_send(&self, payload: impl Into<Vec<u8>>) -> Result<Tag, GroupError> {
        let me = self.node.id();
        let payload = payload.into();
        Ok(self
            .channel
            .try_send_event(Dest::Broadcast, move |ch, tag| {
                multicast(me, ch, tag, &payload)
            })?)
    }

    /// Sends `payload`, awaiting room in the send queue.
    ///
    /// # Errors
    /// [`GroupError::Send`] once the node has closed.
    pub async fn send_async(&self, payload: impl Into<Vec<u8>>) -> Result<Tag, GroupError> {
        let me = self.node.id();
        let payload = payload.into();
        Ok(self
            .channel
            .send_event_async(Dest::Broadcast, move |ch, tag| {
                multicast(me, ch, tag, &payload)
            })
            .await?)
    }

    /// Waits for the next event; `None` once the node has closed and every event was read.
    pub fn recv(&mut self) -> Option<GroupEvent> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            let e = self.node.recv()?;
            self.translate(e);
        }
    }

    /// Waits at most `timeout` for the next event.
    ///
    /// # Errors
    /// [`RecvError::Timeout`], [`RecvError::Closed`].
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<GroupEvent, RecvError> {
        #[allow(clippy::disallowed_methods)] // a driver-side wait: wall-clock time
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Ok(e);
            }
            #[allow(clippy::disallowed_methods)]
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let e = self.node.recv_timeout(left)?;
            self.translate(e);
        }
    }

    /// The next event if one is ready now.
    pub fn try_recv(&mut self) -> Option<GroupEvent> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            let e = self.node.try_recv()?;
            self.translate(e);
        }
    }

    /// Awaits the next event; `None` once the node has closed and every event was read.
    pub async fn recv_async(&mut self) -> Option<GroupEvent> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(e);
            }
            let e = self.node.recv_async().await?;
            self.translate(e);
        }
    }

    fn translate(&mut self, e: NodeEvent) {
        let ours = |ch: &str| *ch == *self.name;
        let out = match e {
            NodeEvent::Message(m) if ours(&m.channel) => GroupEvent::Message(GroupMessage {
                from: m.from,
                payload: m.payload,
            }),
            NodeEvent::Message(_) => return, // another channel of the stack
            NodeEvent::Notice(Notice::View {
                channel,
                id,
                members,
                primary,
            }) if ours(&channel) => {
                let v = View {
                    id,
                    members: members.iter().map(|m| m.node).collect(),
                    incarnations: members,
                    primary,
                };
                self.blocked = false;
                self.view = Some(v.clone());
                GroupEvent::View(v)
            }
            NodeEvent::Notice(Notice::SendFailed {
                kind,
                channel,
                tags,
                ..
            }) if ours(&channel) => GroupEvent::SendFailed { kind, tags },
            NodeEvent::Notice(Notice::Other {
                channel,
                kind,
                peer,
            }) if ours(&channel) => {
                if kind == BLOCK.id().name() {
                    self.blocked = true;
                    GroupEvent::Blocked
                } else if kind == UNBLOCK.id().name() {
                    self.blocked = false;
                    GroupEvent::Unblocked
                } else if let (true, Some(p)) = (kind == SLOW_MEMBER.id().name(), peer) {
                    GroupEvent::SlowMember(p)
                } else {
                    GroupEvent::Notice(Notice::Other {
                        channel,
                        kind,
                        peer,
                    })
                }
            }
            NodeEvent::Notice(n) => GroupEvent::Notice(n),
        };
        self.pending.push_back(out);
    }

    /// Leaves the group: the member tells the others (who install a view without it at once)
    /// and the node closes.
    ///
    /// # Errors
    /// Socket errors of the node's loop.
    pub fn leave(self) -> Result<CloseReport, std::io::Error> {
        self.node.close()
    }
}
