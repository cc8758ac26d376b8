//! `total-order`: total order by a sequencer, stacked above `vsync` (or left out) — the
//! ordering micro-protocol of seed 001 §1/§2.1 ("channels that must keep total order").
//!
//! # Protocol
//!
//! Each application message goes down with a `Data` header (the sender's own count, `local`).
//! The *sequencer* of a view is its first member (the lowest node, as `vsync` orders members).
//! When `vsync` hands the sequencer a message, the sequencer multicasts an `Order` naming it
//! (sender node, `local`), through `vsync` like any message; every member delivers messages
//! in the order of the `Order`s it receives (FIFO from the sequencer), holding a message until
//! its `Order` has come, and an `Order` until its message has come.
//!
//! # Sequencer failover at a view change
//!
//! `vsync` hands up the [`VIEW`](crate::vsync::VIEW) notice after the last message of the old
//! view, and members that go on together have received the same messages *and* the same
//! `Order`s in it (virtual synchrony). At the notice, each member delivers the ordered
//! messages it still holds in `Order` order, then the messages never ordered in ascending
//! (sender node, `local`) — the same at every such member — and the new view's first member
//! becomes the sequencer. An `Order` carries its view's id; one from another view (queued by
//! `vsync` across the change) is dropped (`total.stale_order`).
//!
//! # Batched `Order`s that are never lost (issue 18)
//!
//! The sequencer does not send one `Order` per message: it collects the (sender, `local`)
//! assignments of everything `vsync` handed it and sends them in one `Order` (at most
//! [`MAX_BATCH`] entries) when the kernel's input batch is done (its `Flush`), so a burst of
//! messages costs one ordering multicast, not one each. One `Order` is in flight at a time:
//! `vsync` either delivers it back to the sequencer (self-delivery, within the same kernel
//! run) or refuses it with a `SendRefused` notice naming [`ORDER_TAG`] (its buffer of
//! unstable messages is full). A refused `Order`'s entries go back to the head of the
//! sequencer's queue, the notice is swallowed (it concerns no application message), and the
//! `Order` is sent again at the next activity or after [`RETRY`] (a timer), so total order
//! resumes as soon as stability frees room instead of stalling until the next view change.
//! The queue is bounded: each entry is a message held in `pending` (at most `capacity`).
//! Because one `Order` is in flight at a time, `Order`s keep the sequencer's FIFO order.
//!
//! # A slow member is excluded (issue 18)
//!
//! `pending` (messages waiting for their `Order`) and `order` (entries waiting for their
//! message) are bounded by `capacity` (and twice that). A member whose `Order`s lag far behind
//! the messages (a slow link from the sequencer, a slow member) fills them; what does not fit
//! is dropped, so that member can no longer deliver the view's total order. It does not stay
//! and diverge: it tells the application (an [`ORDER_OVERFLOW`] notice naming the peer),
//! delivers nothing more of the view, and asks `vsync` to exclude it ([`REJOIN`]: it leaves
//! the view and starts again alone as a new member, which the group merges back). The others
//! go on without waiting for it. Its own messages are never dropped (`vsync` bounds them), so
//! it delivers them, and what it held, at the view it installs alone — bound to no one.
//!
//! # Wire
//!
//! [`crate::wire::TotalPdu`], docs/WIRE.md. Counters: `total.ordered` (entries the sequencer
//! sent, counted when `vsync` accepted their `Order`), `total.order_pdus` (`Order`s sent),
//! `total.order_refused` (`Order`s `vsync` refused, re-sent later), `total.delivered`,
//! `total.flushed_unordered` (delivered at a view change without an `Order`),
//! `total.stale_order`, `total.malformed`, `total.held_over` (refused: the pending buffer is
//! full; the application is told by an [`ORDER_OVERFLOW`] notice naming the peer),
//! `total.excluded` (this member excluded itself after an overflow), `total.view_skipped` (a
//! view installed before the exclusion reached `vsync`, left at once: not shown above).

use std::collections::{BTreeMap, VecDeque};

use viastack_kernel::event::{EventTypeDef, CHANNEL_INIT, FLUSH, SENDABLE, TIMER};
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Dest, Direction, Duration, Event, EventType, Layer,
    Message, NodeId, Sendable, Session, Tag,
};
use viastack_protocols::events::{self, SendFailure, SEND_REFUSED};

use crate::vsync::{view_notice, REJOIN, VIEW};
use crate::wire::{TotalPdu, ViewId};

/// An `Order` this layer generates (a `Sendable` subtype).
pub static ORDER: EventTypeDef = EventTypeDef::new("TotalOrder", Some(&SENDABLE));
/// Up to the application: a message of the peer it names (or an `Order` it sent) was refused
/// because the pending or order buffer was full, so this member can no longer deliver the
/// group's total order in this view — never a silent drop (also counted `total.held_over`).
pub static ORDER_OVERFLOW: EventTypeDef = EventTypeDef::new(
    "OrderOverflow",
    Some(&viastack_kernel::event::CHANNEL_EVENT),
);

/// Most (sender, `local`) entries one `Order` carries (the wire's list bound).
pub const MAX_BATCH: usize = crate::wire::MAX_MEMBERS;

/// The tag of the sequencer's `Order`s, so that `vsync`'s `SendRefused` about one is known
/// (applications must not use it for their own messages).
pub const ORDER_TAG: Tag = Tag(u64::MAX);

/// How long after a refused `Order` the sequencer tries again if nothing else happened.
pub const RETRY: Duration = Duration::from_millis(5);

/// The `total-order` layer.
#[derive(Debug, Clone)]
pub struct TotalOrder {
    name: String,
    node: NodeId,
    capacity: usize,
}

impl TotalOrder {
    /// A layer named `name` on node `node`, holding at most `capacity` unordered messages.
    pub fn new(name: impl Into<String>, node: NodeId, capacity: usize) -> Self {
        TotalOrder {
            name: name.into(),
            node,
            capacity: capacity.max(1),
        }
    }
}

impl Layer for TotalOrder {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            VIEW.id(),
            CHANNEL_INIT.id(),
            SEND_REFUSED.id(),
        ]
    }
    /// A group below that announces views (`vsync`).
    fn requires(&self) -> Vec<EventType> {
        vec![VIEW.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![ORDER.id(), ORDER_OVERFLOW.id(), REJOIN.id()]
    }
    fn delivery(&self, below: Delivery) -> Delivery {
        below
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(TotalSession {
            node: self.node,
            capacity: self.capacity,
            view: None,
            sequencer: false,
            local: 0,
            pending: BTreeMap::new(),
            order: VecDeque::new(),
            unsent: VecDeque::new(),
            inflight: None,
            retry_armed: false,
            excluded: false,
        })
    }
}

/// Session of [`TotalOrder`].
#[derive(Debug)]
pub struct TotalSession {
    node: NodeId,
    capacity: usize,
    view: Option<ViewId>,
    sequencer: bool,
    local: u64,
    /// Messages received, not yet delivered, by (sender, local).
    pending: BTreeMap<(NodeId, u64), Event>,
    /// Ordered, not yet delivered.
    order: VecDeque<(NodeId, u64)>,
    /// Sequencer: entries not yet handed to `vsync` in an `Order` (refused ones at the head).
    unsent: VecDeque<(NodeId, u64)>,
    /// Sequencer: the `Order` handed to `vsync` and not yet back (delivered) nor refused.
    inflight: Option<Vec<(NodeId, u64)>>,
    /// Sequencer: a retry timer is pending.
    retry_armed: bool,
    /// A buffer overflowed in this view: this member excluded itself (asked `vsync` to
    /// [`REJOIN`]) and delivers nothing more of the view until the next `View`.
    excluded: bool,
}

impl TotalSession {
    fn deliver_ordered(&mut self, ctx: &mut Context<'_>) {
        let mut delivered = 0;
        if self.excluded {
            return;
        }
        while let Some(key) = self.order.front() {
            let Some(ev) = self.pending.remove(key) else {
                break;
            };
            self.order.pop_front();
            delivered += 1;
            ctx.go(ev);
        }
        if delivered > 0 {
            ctx.count_n("delivered", delivered);
        }
    }

    /// Sends the next `Order` if none is in flight (at the end of an input batch).
    fn send_order(&mut self, ctx: &mut Context<'_>) {
        if !self.sequencer || self.inflight.is_some() || self.unsent.is_empty() {
            return;
        }
        let Some(view) = self.view else {
            return;
        };
        let n = self.unsent.len().min(MAX_BATCH);
        let entries: Vec<(NodeId, u64)> = self.unsent.drain(..n).collect();
        let pdu = TotalPdu::Order {
            view,
            entries: entries.clone(),
        };
        self.inflight = Some(entries);
        let m = Message::with_headroom(96, &pdu.emit());
        ctx.count("order_pdus");
        ctx.go(Event::sendable(
            ORDER.id(),
            Direction::Down,
            ctx.channel(),
            Sendable::new(self.node, Dest::Broadcast, m).with_tag(ORDER_TAG),
        ));
    }

    /// `vsync` refused something: if it was our `Order`, keep its entries for a retry.
    fn on_refused(&mut self, event: Event, ctx: &mut Context<'_>) {
        let Some(f) = event.custom::<SendFailure>() else {
            ctx.go(event);
            return;
        };
        let ours = f.tags.contains(&ORDER_TAG);
        if !ours {
            ctx.go(event);
            return;
        }
        let (peer, rest): (NodeId, Vec<Tag>) = (
            f.peer,
            f.tags.iter().copied().filter(|&t| t != ORDER_TAG).collect(),
        );
        {
            ctx.count("order_refused");
            if let Some(entries) = self.inflight.take() {
                for e in entries.into_iter().rev() {
                    self.unsent.push_front(e);
                }
            }
            if !self.retry_armed {
                self.retry_armed = true;
                ctx.set_timer(RETRY, 0);
            }
        }
        if !rest.is_empty() {
            ctx.go(events::failure(&SEND_REFUSED, event.channel(), peer, rest));
        }
    }

    /// A message or `Order` of `source` was refused because a buffer is full: this member can
    /// no longer deliver the view's total order. The first time in a view it tells the
    /// application ([`ORDER_OVERFLOW`] naming `source`) and excludes itself as a slow member:
    /// it delivers nothing more of the view and asks `vsync` to leave it and join again as a
    /// new member ([`REJOIN`]), so it never goes on to a next view with members that delivered
    /// more (virtual synchrony), and the group goes on without waiting for it.
    fn overflow(&mut self, source: NodeId, channel: ChannelId, ctx: &mut Context<'_>) {
        if self.excluded {
            return;
        }
        self.excluded = true;
        ctx.count("excluded");
        ctx.go(events::notice(&ORDER_OVERFLOW, channel, source));
        ctx.go(Event::new(
            REJOIN.id(),
            Direction::Down,
            channel,
            Body::Empty,
        ));
    }

    fn on_view(&mut self, event: Event, ctx: &mut Context<'_>) {
        let Some(v) = view_notice(&event) else {
            ctx.go(event);
            return;
        };
        let (id, first) = (v.id, v.members.first().map(|m| m.node));
        if self.excluded && v.members.len() > 1 {
            // A view `vsync` installed before it got this member's `Rejoin` (already on its
            // way down): this member leaves it at once, having delivered less than the
            // others of the old view, so it must not be seen to go on with them.
            ctx.count("view_skipped");
            return;
        }
        // A member that excluded itself goes to this view alone: what it still holds of the
        // old view (its own messages among them) is delivered below, bound to no one else.
        self.excluded = false;
        // The old view's ordered messages, then the unordered ones in (sender, local) order.
        while let Some(key) = self.order.pop_front() {
            if let Some(ev) = self.pending.remove(&key) {
                ctx.count("delivered");
                ctx.go(ev);
            }
        }
        for (_, ev) in std::mem::take(&mut self.pending) {
            ctx.count("delivered");
            ctx.count("flushed_unordered");
            ctx.go(ev);
        }
        // Entries of the old view not yet ordered were just delivered unordered.
        self.unsent.clear();
        self.inflight = None;
        self.view = Some(id);
        self.sequencer = first == Some(self.node);
        ctx.go(event);
    }

    fn on_up(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        let source = s.source;
        let (pdu, len) = match TotalPdu::parse(s.message.as_slice()) {
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
            TotalPdu::Data { local } => {
                let key = (source, local);
                // This member's own messages are always kept (`vsync` bounds them: its
                // per-sender capacity), so they are delivered to it even after an overflow.
                if source != self.node && (self.excluded || self.pending.len() >= self.capacity) {
                    ctx.count("held_over");
                    self.overflow(source, event.channel(), ctx);
                    return;
                }
                self.pending.insert(key, event);
                if self.sequencer && self.view.is_some() {
                    self.unsent.push_back(key);
                    if self.unsent.len() >= MAX_BATCH {
                        self.send_order(ctx);
                    }
                    ctx.request_flush();
                }
            }
            TotalPdu::Order { view, entries } => {
                if Some(view) != self.view {
                    ctx.count("stale_order");
                    return;
                }
                if source == self.node && self.sequencer {
                    // Our own `Order`, accepted by `vsync`: the next one may go.
                    if self.inflight.take().is_some() {
                        ctx.count_n("ordered", entries.len() as u64);
                    }
                    if !self.unsent.is_empty() {
                        ctx.request_flush();
                    }
                }
                if self.excluded || self.order.len() + entries.len() > self.capacity * 2 {
                    ctx.count("held_over");
                    self.overflow(source, event.channel(), ctx);
                    return;
                }
                self.order.extend(entries);
            }
        }
        self.deliver_ordered(ctx);
    }
}

impl Session for TotalSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == VIEW.id() {
            self.on_view(event, ctx);
            return;
        }
        if ty == FLUSH.id() {
            self.send_order(ctx);
            return;
        }
        if ty == TIMER.id() {
            self.retry_armed = false;
            self.send_order(ctx);
            return;
        }
        if ty == SEND_REFUSED.id() {
            self.on_refused(event, ctx);
            return;
        }
        match (event.dir(), event.sendable_mut()) {
            (Direction::Down, Some(s)) => {
                s.message.push(&TotalPdu::Data { local: self.local }.emit());
                self.local += 1;
                ctx.go(event);
            }
            (Direction::Up, Some(_)) => self.on_up(event, ctx),
            _ => ctx.go(event),
        }
    }
}
