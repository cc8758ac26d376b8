//! `state-transfer`: a joining (or merging) member takes the group's state — seed 001 §2.1's
//! group services, stacked above `total-order` (it needs one delivery order at every member).
//!
//! # The state
//!
//! Here the application state is what the member has delivered: a count and an FNV-1a hash
//! chained over the payloads in delivery order ([`StateDigest`]) — a replicated log's digest,
//! which is what a replicated application's state is a function of.
//!
//! # Protocol
//!
//! At each view `W` every member multicasts, ordered with `W`'s messages, a `State` packet:
//! `W`, the view it came from, and its digest as of `W`'s start. The *provider* is the sender
//! of the first `State` packet of `W` in the delivery order — the same at every member (total
//! order), and one exists at every member that goes on to the next view with others (each
//! one's own packet is in the flush cut), so a provider crashing at once is replaced.
//! Every member remembers its own digest as of `W`'s start and the payload hashes delivered
//! in `W` so far (at most `capacity`). When the `State` packet is delivered, a member that
//! came from another view than the provider (a joiner, or the other side of a merge) *adopts*
//! it: its digest becomes the provider's, with `W`'s messages folded in again, and a
//! `StateTransferred` notice goes up. Members that came with the provider keep theirs (equal
//! by virtual synchrony and total order). Before every [`VIEW`] notice the layer sends a
//! [`STATE_DIGEST`] notice up with its digest, so a checker can compare members.
//!
//! Counters: `state.sent`, `state.adopted`, `state.kept`, `state.stale` (a `State` packet of
//! another view, or after the view's first), `state.malformed`, `state.untracked`
//! (more than `capacity` messages before the `State` packet: the digest can no longer be
//! refolded, and is kept).

use viastack_kernel::event::{EventTypeDef, CHANNEL_EVENT, SENDABLE};
use viastack_kernel::{
    Body, Context, Delivery, Dest, Direction, Event, EventType, Layer, Message, NodeId, Sendable,
    Session,
};

use crate::vsync::{view_notice, VIEW};
use crate::wire::{StatePdu, ViewId};

/// A `State` packet this layer sends (a `Sendable` subtype).
pub static STATE_PACKET: EventTypeDef = EventTypeDef::new("StatePacket", Some(&SENDABLE));
/// The member's digest at the end of a view, sent up just before the next [`VIEW`] notice.
/// Body: [`StateDigest`].
pub static STATE_DIGEST: EventTypeDef = EventTypeDef::new("StateDigest", Some(&CHANNEL_EVENT));
/// The member adopted the provider's state. Body: [`StateDigest`] (the state adopted).
pub static STATE_TRANSFERRED: EventTypeDef =
    EventTypeDef::new("StateTransferred", Some(&CHANNEL_EVENT));

/// What a member has delivered: a count and a hash chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateDigest {
    /// Messages delivered.
    pub count: u64,
    /// FNV-1a over the payloads' hashes, in delivery order.
    pub hash: u64,
}

impl Default for StateDigest {
    fn default() -> Self {
        StateDigest {
            count: 0,
            hash: FNV_OFFSET,
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

impl StateDigest {
    fn fold(&mut self, payload_hash: u64) {
        self.count += 1;
        self.hash = fnv(self.hash, &payload_hash.to_be_bytes());
    }
}

/// The `state-transfer` layer.
#[derive(Debug, Clone)]
pub struct StateTransfer {
    name: String,
    node: NodeId,
    capacity: usize,
}

impl StateTransfer {
    /// A layer named `name` on node `node`, refolding at most `capacity` messages.
    pub fn new(name: impl Into<String>, node: NodeId, capacity: usize) -> Self {
        StateTransfer {
            name: name.into(),
            node,
            capacity: capacity.max(1),
        }
    }
}

impl Layer for StateTransfer {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), VIEW.id()]
    }
    /// A group below that announces views (`vsync`), and one delivery order (`total-order`).
    fn requires(&self) -> Vec<EventType> {
        vec![VIEW.id(), crate::total::ORDER.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![STATE_PACKET.id(), STATE_DIGEST.id(), STATE_TRANSFERRED.id()]
    }
    fn delivery(&self, below: Delivery) -> Delivery {
        below
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(StateSession {
            node: self.node,
            capacity: self.capacity,
            digest: StateDigest::default(),
            view: None,
            previous: None,
            at_view: StateDigest::default(),
            settled: true,
            in_view: Vec::new(),
        })
    }
}

/// Session of [`StateTransfer`].
#[derive(Debug)]
pub struct StateSession {
    node: NodeId,
    capacity: usize,
    digest: StateDigest,
    view: Option<ViewId>,
    /// The view this member came from into `view`.
    previous: Option<ViewId>,
    /// The digest when `view` began.
    at_view: StateDigest,
    /// Whether the view's `State` packet was delivered (or cannot be used any more).
    settled: bool,
    /// Payload hashes delivered in `view` before its `State` packet.
    in_view: Vec<u64>,
}

impl StateSession {
    /// This member's digest.
    pub fn digest(&self) -> StateDigest {
        self.digest
    }

    fn notice(&self, def: &'static EventTypeDef, d: StateDigest, ctx: &mut Context<'_>) {
        ctx.go(Event::new(
            def.id(),
            Direction::Up,
            ctx.channel(),
            Body::Custom(Box::new(d)),
        ));
    }

    fn on_view(&mut self, event: Event, ctx: &mut Context<'_>) {
        let Some(v) = view_notice(&event) else {
            ctx.go(event);
            return;
        };
        let id = v.id;
        if self.view.is_some() {
            self.notice(&STATE_DIGEST, self.digest, ctx);
        }
        self.previous = self.view.replace(id);
        self.at_view = self.digest;
        self.settled = false;
        self.in_view.clear();
        ctx.go(event);
        {
            let pdu = StatePdu::State {
                view: id,
                from: self.previous,
                count: self.at_view.count,
                hash: self.at_view.hash,
            };
            ctx.count("sent");
            let m = Message::with_headroom(96, &pdu.emit());
            ctx.go(Event::sendable(
                STATE_PACKET.id(),
                Direction::Down,
                ctx.channel(),
                Sendable::new(self.node, Dest::Broadcast, m),
            ));
        }
    }

    fn on_up(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        let (pdu, len) = match StatePdu::parse(s.message.as_slice()) {
            Ok(x) => x,
            Err(_) => {
                ctx.count("malformed");
                return;
            }
        };
        if s.message.pop(len).is_err() {
            ctx.count("malformed");
            return;
        }
        match pdu {
            StatePdu::Data => {
                let h = fnv(FNV_OFFSET, s.message.as_slice());
                self.digest.fold(h);
                if !self.settled {
                    if self.in_view.len() < self.capacity {
                        self.in_view.push(h);
                    } else {
                        ctx.count("untracked");
                        self.settled = true;
                        self.in_view.clear();
                    }
                }
                ctx.go(event);
            }
            StatePdu::State {
                view,
                from,
                count,
                hash,
            } => {
                // The first `State` of the view in the delivery order wins: every member sends
                // one, so a provider that crashes at once is replaced by the next.
                if Some(view) != self.view || self.settled {
                    ctx.count("stale");
                    return;
                }
                self.settled = true;
                if from == self.previous {
                    ctx.count("kept");
                } else {
                    let adopted = StateDigest { count, hash };
                    let mut d = adopted;
                    for &h in &self.in_view {
                        d.fold(h);
                    }
                    self.digest = d;
                    ctx.count("adopted");
                    self.notice(&STATE_TRANSFERRED, adopted, ctx);
                }
                self.in_view.clear();
            }
        }
    }
}

impl Session for StateSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        if event.ty() == VIEW.id() {
            self.on_view(event, ctx);
            return;
        }
        match (event.dir(), event.sendable_mut()) {
            (Direction::Down, Some(s)) => {
                s.message.push(&StatePdu::Data.emit());
                ctx.go(event);
            }
            (Direction::Up, Some(_)) => self.on_up(event, ctx),
            _ => ctx.go(event),
        }
    }
}
