//! Event types the protocol library shares: notices that travel up to the application (and to
//! any layer that accepts them), so that nothing is lost silently (DESIGN.md §4.7).
//!
//! Each carries a [`PeerNotice`] as its custom body.

use viastack_kernel::event::{EventTypeDef, CHANNEL_EVENT};
use viastack_kernel::{Body, ChannelId, Direction, Event, NodeId};

/// A reliable layer gave up on a peer: messages to it that were not acknowledged will not be
/// delivered by this session (retries exhausted, peer crashed or partitioned away).
pub static PEER_UNREACHABLE: EventTypeDef =
    EventTypeDef::new("PeerUnreachable", Some(&CHANNEL_EVENT));
/// A reliable layer refused a message to a peer because its send buffer for that peer is full
/// (the application sends faster than the peer acknowledges): the message will not be
/// delivered. Distinct from [`PEER_UNREACHABLE`]: the peer may be fine, only slow.
pub static SEND_REFUSED: EventTypeDef = EventTypeDef::new("SendRefused", Some(&CHANNEL_EVENT));
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

/// An up-going notice of type `def` about `peer` on `channel`.
pub fn notice(def: &'static EventTypeDef, channel: ChannelId, peer: NodeId) -> Event {
    Event::new(
        def.id(),
        Direction::Up,
        channel,
        Body::Custom(Box::new(PeerNotice { peer })),
    )
}

/// The peer a notice is about, if `event` is one.
pub fn notice_peer(event: &Event) -> Option<NodeId> {
    event.custom::<PeerNotice>().map(|n| n.peer)
}
