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

    /// A new session of this layer.
    fn create_session(&self) -> Box<dyn Session>;
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
