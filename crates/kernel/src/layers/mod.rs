//! Layers every stack can use: the reference layers of seed 001 §5.2 (Table 3), used by tests,
//! examples and `viastack bench kernel`, and the generic [`Device`].
//!
//! - [`Transparent`] accepts no event: it sits in the QoS but is on no route, so it costs
//!   nothing at run time.
//! - [`Ghost`] accepts every event and forwards it unchanged: the cost of one hop.
//! - [`Device`] connects a stack's bottom to whatever network the driver provides.

mod device;
pub use device::{Device, DeviceSession};

use crate::event::{Event, EventType, EVENT};
use crate::kernel::Context;
use crate::layer::{Delivery, Layer, Session};

/// A layer that accepts nothing.
#[derive(Debug, Clone)]
pub struct Transparent {
    name: String,
}

impl Transparent {
    /// A transparent layer named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Transparent { name: name.into() }
    }
}

impl Layer for Transparent {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        Vec::new()
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(TransparentSession)
    }
}

/// Session of [`Transparent`]; never called.
#[derive(Debug, Default)]
pub struct TransparentSession;

impl Session for TransparentSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        ctx.go(event);
    }
}

/// A layer that accepts every event and forwards it.
#[derive(Debug, Clone)]
pub struct Ghost {
    name: String,
    /// The delivery it claims to provide, instead of passing on the one below.
    promise: Option<Delivery>,
}

impl Ghost {
    /// A ghost layer named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Ghost {
            name: name.into(),
            promise: None,
        }
    }

    /// A ghost that claims `delivery` to the layers above: it stands in for a transport in
    /// tests and fuzz targets that drive an upper layer's behaviour over such a path.
    pub fn promising(name: impl Into<String>, delivery: Delivery) -> Self {
        Ghost {
            name: name.into(),
            promise: Some(delivery),
        }
    }
}

impl Layer for Ghost {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![EVENT.id()]
    }
    /// It forwards everything untouched: the delivery below, unless it promises another.
    fn delivery(&self, below: Delivery) -> Delivery {
        self.promise.unwrap_or(below)
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(GhostSession::default())
    }
}

/// Session of [`Ghost`]: counts and forwards.
#[derive(Debug, Default)]
pub struct GhostSession {
    /// Events seen.
    pub seen: u64,
}

impl Session for GhostSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        self.seen += 1;
        ctx.go(event);
    }
}
