//! The device layer: a stack's bottom, handing datagrams to the driver (seed 001 §4 "a protocol
//! that interfaces an UDP socket", in sans-IO form).
//!
//! Going down, a device session prefixes each sendable with a 2-byte channel tag (the channel's
//! id, which agrees across nodes built from the same stack file) and asks the driver to transmit
//! it ([`Context::transmit`]). Coming up, the driver hands it a `Datagram`
//! ([`Kernel::handle_datagram`](crate::Kernel::handle_datagram)); the session pops the tag and
//! launches a `Sendable` up the tagged channel. One device session per node is normally shared
//! by every channel using the layer (one socket per node); the tag keeps their traffic apart.
//!
//! Wire format (network byte order): `channel: u16` followed by the upper layers' bytes.
//! Datagrams too short for the tag, or naming a channel this session is not bound to, are
//! dropped and counted (`device.truncated`, `device.unknown_channel`).

use crate::event::{
    Body, ChannelId, Direction, Event, EventType, Sendable, DATAGRAM, INBOUND, SENDABLE,
};
use crate::kernel::Context;
use crate::layer::{Layer, Session};

/// A device on port `port` of its node.
#[derive(Debug, Clone)]
pub struct Device {
    name: String,
    port: u16,
}

impl Device {
    /// A device layer named `name` on `port`.
    pub fn new(name: impl Into<String>, port: u16) -> Self {
        Device {
            name: name.into(),
            port,
        }
    }
}

impl Layer for Device {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id()]
    }
    /// Every message received from the network goes up as an `Inbound`: a device is a
    /// transport, and must be its QoS's bottom layer.
    fn provides(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(DeviceSession {
            port: self.port,
            sent: 0,
            received: 0,
        })
    }
}

/// Session of [`Device`].
#[derive(Debug)]
pub struct DeviceSession {
    port: u16,
    /// Datagrams handed to the driver.
    pub sent: u64,
    /// Datagrams launched up a channel.
    pub received: u64,
}

impl Session for DeviceSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if event.ty() == DATAGRAM.id() {
            let Body::Sendable(mut s) = event.body else {
                return;
            };
            let Ok(tag) = s.message.pop_u16() else {
                ctx.count("truncated");
                return;
            };
            let channel = ChannelId(u32::from(tag));
            if !ctx.is_bound(channel) {
                ctx.count("unknown_channel");
                return;
            }
            self.received += 1;
            ctx.go(Event::new(
                INBOUND.id(),
                Direction::Up,
                channel,
                Body::Sendable(s),
            ));
            return;
        }
        match event.dir() {
            Direction::Down => {
                let channel = event.channel();
                let Ok(tag) = u16::try_from(channel.0) else {
                    ctx.count("channel_id_too_large");
                    return;
                };
                let Body::Sendable(s) = event.body else {
                    return;
                };
                let Sendable {
                    dest, mut message, ..
                } = *s;
                message.push_u16(tag);
                self.sent += 1;
                ctx.transmit(self.port, dest, message);
            }
            // A sendable injected from below (a test harness): pass it on.
            Direction::Up => ctx.go(event),
        }
    }
}
