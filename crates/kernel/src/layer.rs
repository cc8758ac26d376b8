//! Layers and sessions (seed 001 §3, §3.4, §4).
//!
//! A [`Layer`] is the static description of a micro-protocol: the event types it accepts (Φ),
//! requires (Ψ) and provides (Γ), and a factory for sessions. A [`Session`] is one instance's
//! state; the kernel owns every session in an arena and a session may be bound into several
//! channels at once. Sessions interact with the world only through events and the
//! [`Context`](crate::Context) they are handed: they never touch sockets, threads or clocks.

use std::any::Any;
use std::sync::Arc;

use crate::channel::AutoBind;
use crate::event::{Event, EventType};
use crate::kernel::Context;

/// The static side of a micro-protocol.
pub trait Layer: Send + Sync + 'static {
    /// The layer's name (a stack file's layer name, or the protocol's name).
    fn name(&self) -> &str;

    /// Φ: the event types this layer's sessions are handed (subtypes included).
    fn accepts(&self) -> Vec<EventType>;

    /// Ψ: event types the layer needs some layer of the QoS (or the kernel) to generate.
    fn requires(&self) -> Vec<EventType> {
        Vec::new()
    }

    /// Γ: event types the layer's sessions generate.
    fn provides(&self) -> Vec<EventType> {
        Vec::new()
    }

    /// What the layers above this one may count on, given what the layers below it promise
    /// (`below`): the QoS folds this from the bottom up at composition time, and a session
    /// reads the promise it stands on with [`Context::delivery_below`]. A layer that loses,
    /// duplicates or reorders nothing passes `below` on; a layer that repairs loss and order
    /// (a reliable FIFO protocol) strengthens it; one that may drop or reorder weakens it.
    ///
    /// The default promises nothing: a layer that has not said what it does is not trusted
    /// to keep its neighbours' promises.
    ///
    /// [`Context::delivery_below`]: crate::Context::delivery_below
    fn delivery(&self, _below: Delivery) -> Delivery {
        Delivery::NONE
    }

    /// A new session of this layer.
    fn create_session(&self) -> Box<dyn Session>;
}

/// What a stack below some layer promises about the sendables it hands up: the delivery
/// properties of seed 001 §1 (a QoS is the set of properties its layers compose), as far as the
/// layers above need them to decide what they may discard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Delivery {
    /// Every message sent down to a peer is handed up there exactly once, or its sender's
    /// application is told it was not (or may not have been): nothing is lost silently. A layer
    /// above a reliable one must not discard by time what will still arrive.
    pub reliable: bool,
    /// Messages from one source on one channel are handed up in the order they were sent.
    pub fifo: bool,
}

impl Delivery {
    /// No promise: datagrams may be lost, duplicated, reordered (a device's).
    pub const NONE: Delivery = Delivery {
        reliable: false,
        fifo: false,
    };
    /// Exactly once (or reported) and in order per source: what `reliable-fifo` gives.
    pub const RELIABLE_FIFO: Delivery = Delivery {
        reliable: true,
        fifo: true,
    };

    /// Whether both promises hold: at most one message per source is ever incomplete above,
    /// and nothing that is incomplete will be abandoned without its sender being told.
    pub fn is_reliable_fifo(self) -> bool {
        self.reliable && self.fifo
    }
}

impl std::fmt::Display for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match (self.reliable, self.fifo) {
            (true, true) => "reliable fifo",
            (true, false) => "reliable",
            (false, true) => "fifo",
            (false, false) => "best effort",
        })
    }
}

/// The dynamic side: one instance's state.
pub trait Session: Any + Send {
    /// Handles one event. The session forwards it with `ctx.go(event)`, consumes it by dropping
    /// it, and may create new events in either direction with `ctx.go(Event::new(..))`.
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>);

    /// Automatic binding (seed 001 §4 "Channel definition", step 2): called on every session
    /// already bound to a channel that is starting, so it may fill the channel's empty slots with
    /// sessions it knows. Most sessions do nothing.
    fn auto_bind(&mut self, _request: &mut AutoBind<'_>) {}

    /// Messages this session holds that the application handed down and that are not yet
    /// settled: neither acknowledged by their peer nor reported failed. A driver closing a
    /// node waits for this to reach zero (its linger) before closing the channels. Sessions
    /// that keep nothing for retransmission return 0.
    fn unsettled(&self) -> usize {
        0
    }
}

/// Identifies a session in its kernel's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(pub u32);

impl SessionId {
    /// The kernel itself (as the owner of kernel counters).
    pub const KERNEL: SessionId = SessionId(u32::MAX);
}

/// A shared handle to a layer.
pub type LayerRef = Arc<dyn Layer>;

/// Whether two layer handles are the same layer instance.
pub fn same_layer(a: &LayerRef, b: &LayerRef) -> bool {
    // Compare the data pointers only: vtable pointers of one type may differ across codegen units.
    std::ptr::eq(Arc::as_ptr(a) as *const (), Arc::as_ptr(b) as *const ())
}
