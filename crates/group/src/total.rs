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
//! # Wire
//!
//! [`crate::wire::TotalPdu`], docs/WIRE.md. Counters: `total.ordered` (entries the sequencer
//! sent), `total.delivered`, `total.flushed_unordered` (delivered at a view change without an
//! `Order`), `total.stale_order`, `total.malformed`, `total.held_over` (refused: the pending
//! buffer is full).

use std::collections::{BTreeMap, VecDeque};

use viastack_kernel::event::{EventTypeDef, CHANNEL_INIT, SENDABLE};
use viastack_kernel::{
    Context, Delivery, Dest, Direction, Event, EventType, Layer, Message, NodeId, Sendable, Session,
};

use crate::vsync::{view_notice, VIEW};
use crate::wire::{TotalPdu, ViewId};

/// An `Order` this layer generates (a `Sendable` subtype).
pub static ORDER: EventTypeDef = EventTypeDef::new("TotalOrder", Some(&SENDABLE));

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
        vec![SENDABLE.id(), VIEW.id(), CHANNEL_INIT.id()]
    }
    /// A group below that announces views (`vsync`).
    fn requires(&self) -> Vec<EventType> {
        vec![VIEW.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![ORDER.id()]
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
}

impl TotalSession {
    fn deliver_ordered(&mut self, ctx: &mut Context<'_>) {
        while let Some(key) = self.order.front() {
            let Some(ev) = self.pending.remove(key) else {
                break;
            };
            self.order.pop_front();
            ctx.count("delivered");
            ctx.go(ev);
        }
    }

    fn on_view(&mut self, event: Event, ctx: &mut Context<'_>) {
        let Some(v) = view_notice(&event) else {
            ctx.go(event);
            return;
        };
        let (id, first) = (v.id, v.members.first().map(|m| m.node));
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
                if self.pending.len() >= self.capacity {
                    ctx.count("held_over");
                    return;
                }
                self.pending.insert(key, event);
                if self.sequencer {
                    if let Some(view) = self.view {
                        let pdu = TotalPdu::Order {
                            view,
                            entries: vec![key],
                        };
                        let m = Message::with_headroom(96, &pdu.emit());
                        ctx.count("ordered");
                        ctx.go(Event::sendable(
                            ORDER.id(),
                            Direction::Down,
                            ctx.channel(),
                            Sendable::new(self.node, Dest::Broadcast, m),
                        ));
                    }
                }
            }
            TotalPdu::Order { view, entries } => {
                if Some(view) != self.view {
                    ctx.count("stale_order");
                    return;
                }
                if self.order.len() + entries.len() > self.capacity * 2 {
                    ctx.count("held_over");
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
