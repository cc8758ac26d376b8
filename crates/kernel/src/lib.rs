//! viastack's protocol kernel: the Appia model (seed 001 §3–§4), sans-IO and deterministic.
//!
//! - [`event`]: the open event hierarchy and the kernel's event types;
//! - [`layer`]: [`Layer`] (Φ accepts, Ψ requires, Γ provides, session factory) and [`Session`];
//! - [`qos`]: [`Qos`], the Ψ ⊆ Γ check and per-event routes computed once;
//! - [`channel`]: slots, the three binding modes, shared sessions;
//! - [`kernel`]: the [`Kernel`] scheduler, [`Context`], timers and the driver interface;
//! - [`message`]: zero-copy [`Message`] with headroom;
//! - [`layers`]: reference layers (`transparent`, `ghost`) used by tests and benchmarks.
//!
//! Nothing here reads a clock, opens a socket or spawns a thread: drivers pass time in and
//! take outputs out (DESIGN.md §4.1).
#![deny(unsafe_code)]

pub mod addr;
pub mod channel;
pub mod event;
pub mod kernel;
pub mod layer;
pub mod layers;
pub mod message;
pub mod qos;
pub mod time;
mod timer;

pub use addr::{Dest, NodeId};
pub use channel::{AutoBind, BindError, BindMode, ChannelState};
pub use event::{
    Body, ChannelId, Direction, Event, EventType, EventTypeDef, Sendable, Tag, TimerFired, TimerId,
};
pub use kernel::{
    ChannelCursor, ChannelError, Context, InjectError, Injector, Kernel, KernelConfig, Output,
    Transmit,
};
pub use layer::{Delivery, Layer, LayerRef, Session, SessionId};
pub use message::{Message, Truncated};
pub use qos::{Qos, QosError};
pub use time::{Duration, Instant};
