//! What a node hands its application: messages with their source, and the stack's notices as
//! typed values (DESIGN.md §4.7: a reliable service delivers exactly once or tells the sender).
//!
//! Notices come from the layers of the protocol library (`viastack_protocols::events`): a
//! failure detector's `Suspect`/`Alive`, and the failure notices of reliable layers, which name
//! the messages concerned by the [`Tag`] their [`send`](crate::Channel::send) returned.

use std::sync::Arc;

use viastack_group::{view_notice, Member, ViewId};
use viastack_kernel::event::{CHANNEL_CLOSE, CHANNEL_INIT};
use viastack_kernel::{Body, Event as KernelEvent, NodeId, Tag};
use viastack_protocols::events::{
    notice_peer, send_failure, ALIVE, PEER_RESTARTED, SEND_ABORTED, SEND_REFUSED, SUSPECT,
};

/// Something that happened on a node, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// A message for the application.
    Message(Received),
    /// A notice from the stack.
    Notice(Notice),
}

/// A message delivered to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The channel it arrived on.
    pub channel: Arc<str>,
    /// The node that sent it.
    pub from: NodeId,
    /// Its bytes, as the sender passed them.
    pub payload: Vec<u8>,
}

/// Why messages to a peer will not be delivered (or may not have been).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// A reliable layer gave up: retries exhausted, the peer crashed or is partitioned away.
    PeerUnreachable,
    /// A bound was reached (a full send buffer, a full reassembly buffer at the receiver): the
    /// peer may be fine, only slower than the sender.
    SendRefused,
    /// The peer restarted: its previous incarnation may or may not have delivered them.
    PeerRestarted,
    /// The channel closed before the peer acknowledged them (a close past its linger).
    SendAborted,
}

/// A notice from the stack about a peer or about messages sent to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A failure detector suspects `peer`.
    Suspect {
        /// The channel the detector serves.
        channel: Arc<str>,
        /// The suspected node.
        peer: NodeId,
    },
    /// A failure detector hears again from a `peer` it suspected.
    Alive {
        /// The channel the detector serves.
        channel: Arc<str>,
        /// The node.
        peer: NodeId,
    },
    /// Messages to `peer` that will not be delivered, or may not have been.
    SendFailed {
        /// Why.
        kind: FailureKind,
        /// The channel they were sent on.
        channel: Arc<str>,
        /// The addressee.
        peer: NodeId,
        /// The messages, by the tags `send` returned, in send order.
        tags: Vec<Tag>,
    },
    /// A group layer (`vsync`) installed a view: it comes after the previous view's last
    /// message and before the new view's first (see [`crate::group`]).
    View {
        /// The channel of the group.
        channel: Arc<str>,
        /// The view's id (a counter growing at every view change, and its coordinator).
        id: ViewId,
        /// Its members, ascending by node.
        members: Vec<Member>,
        /// Whether the view may carry traffic (always, unless `primary = "majority"`).
        primary: bool,
    },
    /// Any other event a stack sends to the application (a layer of the application's own,
    /// a later protocol's notice), by its event type's name.
    Other {
        /// The channel.
        channel: Arc<str>,
        /// The event type's name.
        kind: &'static str,
        /// The peer it concerns, if it says.
        peer: Option<NodeId>,
    },
}

impl Notice {
    /// The channel the notice arrived on.
    pub fn channel(&self) -> &str {
        match self {
            Notice::Suspect { channel, .. }
            | Notice::Alive { channel, .. }
            | Notice::SendFailed { channel, .. }
            | Notice::View { channel, .. }
            | Notice::Other { channel, .. } => channel,
        }
    }
}

/// The application's view of an up-going kernel event on `channel`; `None` for the kernel's
/// own channel events (`ChannelInit`, `ChannelClose`).
pub(crate) fn from_kernel(event: KernelEvent, channel: Arc<str>) -> Option<NodeEvent> {
    let ty = event.ty();
    if ty == CHANNEL_INIT.id() || ty == CHANNEL_CLOSE.id() {
        return None;
    }
    if let Some(f) = send_failure(&event) {
        let kind = if ty == SEND_REFUSED.id() {
            FailureKind::SendRefused
        } else if ty == PEER_RESTARTED.id() {
            FailureKind::PeerRestarted
        } else if ty == SEND_ABORTED.id() {
            FailureKind::SendAborted
        } else {
            // `PeerUnreachable`, and any other failure a layer of the application reports.
            FailureKind::PeerUnreachable
        };
        return Some(NodeEvent::Notice(Notice::SendFailed {
            kind,
            channel,
            peer: f.peer,
            tags: f.tags.clone(),
        }));
    }
    if ty == SUSPECT.id() || ty == ALIVE.id() {
        if let Some(peer) = notice_peer(&event) {
            return Some(NodeEvent::Notice(if ty == SUSPECT.id() {
                Notice::Suspect { channel, peer }
            } else {
                Notice::Alive { channel, peer }
            }));
        }
    }
    if let Some(v) = view_notice(&event) {
        return Some(NodeEvent::Notice(Notice::View {
            channel,
            id: v.id,
            members: v.members.clone(),
            primary: v.primary,
        }));
    }
    let peer = notice_peer(&event);
    let name = ty.name();
    match event.body {
        Body::Sendable(s) => Some(NodeEvent::Message(Received {
            channel,
            from: s.source,
            payload: s.message.into_vec(),
        })),
        _ => Some(NodeEvent::Notice(Notice::Other {
            channel,
            kind: name,
            peer,
        })),
    }
}
