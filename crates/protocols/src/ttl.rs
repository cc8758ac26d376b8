//! `ttl`: a hop limit (seed 004's TTL component; the IP time-to-live of RFC 791 §3.1). Going
//! down, the layer pushes the hop budget; going up it takes one hop off, and a message that
//! arrives with no hop left is dropped and counted.
//!
//! Wire format:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | ttl: hops the message may still take, set to the layer's `ttl` by the sender |
//!
//! Receiving: an empty message → dropped, `ttl.truncated`; `ttl` = 0 → dropped, `ttl.expired`;
//! otherwise the message is delivered with `ttl - 1` hops left.
//!
//! **One hop per traversal.** Until overlays forward messages between nodes, every message
//! crosses exactly one hop (sender to receiver), so the count is decremented once, on arrival,
//! and the decremented value is not sent anywhere. A forwarding layer will re-push
//! [`remaining`]'s value when it relays a message; the wire format does not change. A sender
//! configured with `ttl = 1` reaches its direct peers and nothing beyond; `ttl = 0` would
//! expire everything and is refused by the stack-file parameter (range 1..=255).
//!
//! No per-peer state: memory is constant.

use viastack_kernel::event::{INBOUND, SENDABLE};
use viastack_kernel::{Context, Delivery, Direction, Event, EventType, Layer, Message, Session};

/// The default hop limit: 64, the IP default TTL (RFC 1700 "IP Parameters", RFC 1122
/// §3.2.1.7 asks for at least that much).
pub const DEFAULT_TTL: u8 = 64;

/// The `ttl` layer.
#[derive(Debug, Clone)]
pub struct Ttl {
    name: String,
    ttl: u8,
}

impl Ttl {
    /// A ttl layer named `name` that sends messages with `ttl` hops.
    pub fn new(name: impl Into<String>, ttl: u8) -> Self {
        Ttl {
            name: name.into(),
            ttl,
        }
    }
}

impl Layer for Ttl {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id()]
    }
    /// A path to the network: a transport below (a device), which provides `Inbound`.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// One hop per traversal and a budget of at least one: nothing it passes expires.
    fn delivery(&self, below: Delivery) -> Delivery {
        below
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(TtlSession { ttl: self.ttl })
    }
}

/// The hops left after one more: `None` when the message has expired (decodes the header).
///
/// # Errors
/// [`viastack_kernel::message::Truncated`] when the message is empty.
pub fn remaining(message: &mut Message) -> Result<Option<u8>, viastack_kernel::Truncated> {
    Ok(message.pop_u8()?.checked_sub(1))
}

/// Session of [`Ttl`].
#[derive(Debug)]
pub struct TtlSession {
    ttl: u8,
}

impl Session for TtlSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let dir = event.dir();
        if let Some(s) = event.sendable_mut() {
            match dir {
                Direction::Down => s.message.push_u8(self.ttl),
                Direction::Up => match remaining(&mut s.message) {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        ctx.count("expired");
                        return;
                    }
                    Err(_) => {
                        ctx.count("truncated");
                        return;
                    }
                },
            }
        }
        ctx.go(event);
    }
}
