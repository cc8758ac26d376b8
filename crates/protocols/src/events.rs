//! Event types the protocol library shares: notices that travel up to the application (and to
//! any layer that accepts them), so that nothing is lost silently (DESIGN.md §4.7).
//!
//! Two kinds of body:
//! - [`PeerNotice`]: something about a peer (`Suspect`, `Alive`);
//! - [`SendFailure`]: messages to a peer that will not be delivered, or may not have been, named
//!   by the [`Tag`]s their application gave them. Its types share the parent [`SEND_FAILED`]:
//!   [`PEER_UNREACHABLE`] (a reliable layer gave up), [`SEND_REFUSED`] (a bound was reached)
//!   [`PEER_RESTARTED`] (the peer came back as a new incarnation: what its previous one had
//!   not acknowledged may or may not have been delivered, as with a TCP reset) and
//!   [`SEND_ABORTED`] (the channel closed with messages still unacknowledged). An application
//!   that accepts `SendFailed` learns the fate of every message it sent: each one is delivered
//!   exactly once, or its tag comes back in one of these.

use viastack_kernel::event::{EventTypeDef, CHANNEL_EVENT};
use viastack_kernel::{Body, ChannelId, Direction, Event, NodeId, Tag};

/// Messages to a peer will not be delivered, or may not have been (the parent of the three
/// failure notices; its body is a [`SendFailure`]).
pub static SEND_FAILED: EventTypeDef = EventTypeDef::new("SendFailed", Some(&CHANNEL_EVENT));
/// A reliable layer gave up on a peer: messages to it that were not acknowledged will not be
/// delivered by this session (retries exhausted, peer crashed or partitioned away).
pub static PEER_UNREACHABLE: EventTypeDef =
    EventTypeDef::new("PeerUnreachable", Some(&SEND_FAILED));
/// A layer refused a message to a peer because a bound was reached (a full send buffer: the
/// application sends faster than the peer acknowledges; a full reassembly buffer at the
/// receiver): the message will not be delivered. Distinct from [`PEER_UNREACHABLE`]: the peer
/// may be fine, only slow.
pub static SEND_REFUSED: EventTypeDef = EventTypeDef::new("SendRefused", Some(&SEND_FAILED));
/// The peer restarted (a new incarnation answered): messages its previous incarnation had not
/// acknowledged may or may not have been delivered, and are not sent again.
pub static PEER_RESTARTED: EventTypeDef = EventTypeDef::new("PeerRestarted", Some(&SEND_FAILED));
/// The sending channel closed before the peer acknowledged these messages: they may or may
/// not have been delivered, and are not sent again (a node closing after its linger).
pub static SEND_ABORTED: EventTypeDef = EventTypeDef::new("SendAborted", Some(&SEND_FAILED));
/// A failure detector suspects a peer.
pub static SUSPECT: EventTypeDef = EventTypeDef::new("Suspect", Some(&CHANNEL_EVENT));
/// A failure detector hears again from a peer it suspected.
pub static ALIVE: EventTypeDef = EventTypeDef::new("Alive", Some(&CHANNEL_EVENT));

/// Which peer a notice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerNotice {
    /// The peer.
    pub peer: NodeId,
}

/// Messages to `peer` that will not be delivered (or may not have been).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendFailure {
    /// The addressee.
    pub peer: NodeId,
    /// The messages, by the tags their application gave them, in send order (untagged
    /// messages are not listed).
    pub tags: Vec<Tag>,
}

/// An up-going notice of type `def` about `peer` on `channel`.
pub fn notice(def: &'static EventTypeDef, channel: ChannelId, peer: NodeId) -> Event {
    Event::new(
        def.id(),
        Direction::Up,
        channel,
        Body::Custom(Box::new(PeerNotice { peer })),
    )
}

/// An up-going failure notice of type `def` (a subtype of [`SEND_FAILED`]) about messages to
/// `peer` on `channel`. A tag repeated in a row (the fragments of one message) is listed once.
pub fn failure(
    def: &'static EventTypeDef,
    channel: ChannelId,
    peer: NodeId,
    tags: impl IntoIterator<Item = Tag>,
) -> Event {
    let mut list: Vec<Tag> = Vec::new();
    for t in tags {
        if t != Tag::NONE && list.last() != Some(&t) {
            list.push(t);
        }
    }
    Event::new(
        def.id(),
        Direction::Up,
        channel,
        Body::Custom(Box::new(SendFailure { peer, tags: list })),
    )
}

/// The peer a notice is about, if `event` is one (a [`PeerNotice`] or a [`SendFailure`]).
pub fn notice_peer(event: &Event) -> Option<NodeId> {
    event
        .custom::<PeerNotice>()
        .map(|n| n.peer)
        .or_else(|| event.custom::<SendFailure>().map(|f| f.peer))
}

/// The failure an event reports, if it is a [`SEND_FAILED`] notice.
pub fn send_failure(event: &Event) -> Option<&SendFailure> {
    if event.ty().is_a(SEND_FAILED.id()) {
        event.custom::<SendFailure>()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_list_each_tag_once_and_keep_their_peer() {
        let ev = failure(
            &PEER_UNREACHABLE,
            ChannelId(0),
            NodeId(4),
            [Tag(7), Tag(7), Tag::NONE, Tag(9), Tag(9)],
        );
        let f = send_failure(&ev).unwrap_or_else(|| unreachable!("a failure"));
        assert_eq!(f.tags, vec![Tag(7), Tag(9)]);
        assert_eq!(notice_peer(&ev), Some(NodeId(4)));
        for def in [
            &PEER_UNREACHABLE,
            &SEND_REFUSED,
            &PEER_RESTARTED,
            &SEND_ABORTED,
        ] {
            assert!(def.id().is_a(SEND_FAILED.id()));
        }
        assert!(send_failure(&notice(&SUSPECT, ChannelId(0), NodeId(1))).is_none());
    }
}
