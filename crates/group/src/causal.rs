//! `causal-order`: causal order by vector clocks (Birman, Schiper and Stephenson's causal
//! broadcast), stacked above `vsync` — the second ordering micro-protocol of seed 001 §1, a
//! layer that can be stacked or left out like `total-order`.
//!
//! # Protocol
//!
//! Within a view, each member keeps `delivered[k]`: how many messages of the view's k-th
//! member it has delivered. A message from member `j` carries the view id and a vector clock
//! `vc` — the sender's `delivered` when it sent, with `vc[j]` its own number for the message.
//! A receiver delivers it once `vc[j] = delivered[j] + 1` and `vc[k] ≤ delivered[k]` for
//! every other `k`: everything the sender had delivered before sending is delivered first.
//!
//! # View changes
//!
//! `vsync` raises [`BLOCK`](crate::vsync::BLOCK) when it accepts a flush: from then on this
//! layer holds the application's messages (a bounded queue) until the next view — stamped in
//! that view — or until `vsync` gives the flush up ([`UNBLOCK`](crate::vsync::UNBLOCK)).
//! At the [`VIEW`] notice, members that go on together hold the same messages (virtual
//! synchrony); what is still undeliverable depends on a message no survivor has, and is
//! dropped by every one of them alike (`causal.orphaned`). Clocks restart in the new view.
//! A message of this member's that `vsync` had queued when the view changed (sent between
//! the view notice and `Block`) would travel in the new view with the old stamp and be
//! dropped everywhere as stale; this layer keeps its own messages until they come back to it
//! and sends those that did not, stamped anew, in the new view (`causal.resent`).
//!
//! # Wire
//!
//! [`crate::wire::CausalPdu`], docs/WIRE.md. Counters: `causal.delivered`, `causal.orphaned`,
//! `causal.stale` (a message of another view), `causal.malformed`, `causal.held_over` (the
//! pending buffer is full), `causal.blocked` (sends held during a flush).

use std::collections::VecDeque;

use viastack_kernel::event::{CHANNEL_INIT, SENDABLE};
use viastack_kernel::{
    Context, Delivery, Direction, Event, EventType, Layer, NodeId, Sendable, Session, Tag,
};
use viastack_protocols::events::{self, SEND_REFUSED};

use crate::vsync::{view_notice, BLOCK, UNBLOCK, VIEW};
use crate::wire::{CausalPdu, ViewId};

/// The `causal-order` layer.
#[derive(Debug, Clone)]
pub struct CausalOrder {
    name: String,
    node: NodeId,
    capacity: usize,
}

impl CausalOrder {
    /// A layer named `name` on node `node`, holding at most `capacity` messages waiting.
    pub fn new(name: impl Into<String>, node: NodeId, capacity: usize) -> Self {
        CausalOrder {
            name: name.into(),
            node,
            capacity: capacity.max(1),
        }
    }
}

impl Layer for CausalOrder {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![
            SENDABLE.id(),
            VIEW.id(),
            BLOCK.id(),
            UNBLOCK.id(),
            CHANNEL_INIT.id(),
        ]
    }
    /// A group below that announces views and flushes (`vsync`).
    fn requires(&self) -> Vec<EventType> {
        vec![VIEW.id(), BLOCK.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![SEND_REFUSED.id()]
    }
    fn delivery(&self, below: Delivery) -> Delivery {
        below
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(CausalSession {
            node: self.node,
            capacity: self.capacity,
            view: None,
            me: None,
            delivered: Vec::new(),
            sent: 0,
            blocked: false,
            pending: Vec::new(),
            held: VecDeque::new(),
            outstanding: VecDeque::new(),
        })
    }
}

/// A message waiting for its causal predecessors.
#[derive(Debug)]
struct Waiting {
    sender: usize,
    vc: Vec<u64>,
    event: Event,
}

/// Session of [`CausalOrder`].
#[derive(Debug)]
pub struct CausalSession {
    node: NodeId,
    capacity: usize,
    view: Option<(ViewId, Vec<NodeId>)>,
    me: Option<usize>,
    delivered: Vec<u64>,
    sent: u64,
    blocked: bool,
    pending: Vec<Waiting>,
    /// Application messages held while `vsync` flushes.
    held: VecDeque<Event>,
    /// This member's messages of the current view not yet delivered back to it, by number:
    /// one still in `vsync`'s queue at a view change travels in the next view with a stale
    /// stamp (dropped everywhere), so it is stamped and sent again there.
    outstanding: VecDeque<(u64, Sendable)>,
}

impl CausalSession {
    fn deliverable(&self, w: &Waiting) -> bool {
        w.vc.len() == self.delivered.len()
            && w.vc.iter().enumerate().all(|(k, &c)| {
                if k == w.sender {
                    c == self.delivered[k] + 1
                } else {
                    c <= self.delivered[k]
                }
            })
    }

    fn deliver_ready(&mut self, ctx: &mut Context<'_>) {
        while let Some(i) = self.pending.iter().position(|w| self.deliverable(w)) {
            let w = self.pending.swap_remove(i);
            self.delivered[w.sender] += 1;
            if Some(w.sender) == self.me {
                let n = self.delivered[w.sender];
                while self.outstanding.front().is_some_and(|(k, _)| *k <= n) {
                    self.outstanding.pop_front();
                }
            }
            ctx.count("delivered");
            ctx.go(w.event);
        }
    }

    /// Stamps and sends an application message in the current view.
    fn send(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let (Some((view, _)), Some(me)) = (self.view.as_ref(), self.me) else {
            let tag = event.sendable_ref().map_or(Tag::NONE, |s| s.tag);
            ctx.count("refused");
            ctx.go(events::failure(
                &SEND_REFUSED,
                ctx.channel(),
                self.node,
                [tag],
            ));
            return;
        };
        let mut vc = self.delivered.clone();
        self.sent += 1;
        vc[me] = self.sent;
        let header = CausalPdu {
            view: *view,
            sender: me as u16,
            vc,
        }
        .emit();
        if let Some(s) = event.sendable_mut() {
            if self.outstanding.len() < self.capacity {
                self.outstanding.push_back((self.sent, s.clone()));
            }
            s.message.push(&header);
        }
        ctx.go(event);
    }

    fn release_held(&mut self, ctx: &mut Context<'_>) {
        while let Some(ev) = self.held.pop_front() {
            self.send(ev, ctx);
        }
    }

    fn on_view(&mut self, event: Event, ctx: &mut Context<'_>) {
        let Some(v) = view_notice(&event) else {
            ctx.go(event);
            return;
        };
        self.deliver_ready(ctx);
        if !self.pending.is_empty() {
            ctx.count_n("orphaned", self.pending.len() as u64);
            self.pending.clear();
        }
        let members: Vec<NodeId> = v.members.iter().map(|m| m.node).collect();
        self.me = members.iter().position(|&n| n == self.node);
        self.delivered = vec![0; members.len()];
        self.sent = 0;
        self.view = Some((v.id, members));
        self.blocked = false;
        let channel = event.channel();
        ctx.go(event);
        // Own messages that never came back in the old view: in the new view, stamped anew.
        for (_, s) in std::mem::take(&mut self.outstanding) {
            ctx.count("resent");
            self.send(
                Event::sendable(SENDABLE.id(), Direction::Down, channel, s),
                ctx,
            );
        }
        self.release_held(ctx);
    }

    fn on_up(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        let (pdu, len) = match CausalPdu::parse(s.message.as_slice()) {
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
        let Some((view, members)) = &self.view else {
            ctx.count("stale");
            return;
        };
        let sender = usize::from(pdu.sender);
        if pdu.view != *view || pdu.vc.len() != members.len() || sender >= members.len() {
            ctx.count("stale");
            return;
        }
        if pdu.vc[sender] <= self.delivered[sender] {
            ctx.count("stale");
            return;
        }
        if self.pending.len() >= self.capacity {
            ctx.count("held_over");
            return;
        }
        self.pending.push(Waiting {
            sender,
            vc: pdu.vc,
            event,
        });
        self.deliver_ready(ctx);
    }
}

impl Session for CausalSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == VIEW.id() {
            self.on_view(event, ctx);
            return;
        }
        if ty == BLOCK.id() {
            self.blocked = true;
            ctx.go(event);
            return;
        }
        if ty == UNBLOCK.id() {
            self.blocked = false;
            ctx.go(event);
            self.release_held(ctx);
            return;
        }
        match (event.dir(), event.sendable_ref().is_some()) {
            (Direction::Down, true) => {
                if self.blocked {
                    if self.held.len() >= self.capacity {
                        let tag = event.sendable_ref().map_or(Tag::NONE, |s| s.tag);
                        ctx.count("refused");
                        ctx.go(events::failure(
                            &SEND_REFUSED,
                            ctx.channel(),
                            self.node,
                            [tag],
                        ));
                    } else {
                        ctx.count("blocked");
                        self.held.push_back(event);
                    }
                } else {
                    self.send(event, ctx);
                }
            }
            (Direction::Up, true) => self.on_up(event, ctx),
            _ => ctx.go(event),
        }
    }
}
