//! `interface`: one network interface of a multi-homed node (issue 17 §3: routers with several
//! links). Like the kernel's `device` it is a stack's bottom and hands datagrams to the driver
//! on its port, but it carries **exactly one channel** and so needs no channel tag: what
//! arrives on the port goes up that channel, whichever channel the sender used. This is what
//! lets a router's interface k (channel `ifk`) talk to a neighbour's interface j.
//!
//! Wire format: the upper layers' bytes, nothing added. Arriving datagrams before the channel
//! started are dropped and counted (`no_channel`); a second channel bound to one interface is
//! refused at start (`extra_channel`, its traffic is dropped).

use viastack_kernel::event::{DATAGRAM, INBOUND, SENDABLE};
use viastack_kernel::{
    Body, ChannelId, Context, Direction, Event, EventType, Layer, Sendable, Session,
};

/// An interface on port `port` of its node.
#[derive(Debug, Clone)]
pub struct Interface {
    name: String,
    port: u16,
}

impl Interface {
    /// An interface layer named `name` on `port`.
    pub fn new(name: impl Into<String>, port: u16) -> Self {
        Interface {
            name: name.into(),
            port,
        }
    }
}

impl Layer for Interface {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id()]
    }
    fn provides(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(InterfaceSession {
            port: self.port,
            channel: None,
        })
    }
}

/// Session of [`Interface`].
#[derive(Debug)]
pub struct InterfaceSession {
    port: u16,
    /// The one channel of the interface (the lowest bound), once known.
    channel: Option<ChannelId>,
}

impl InterfaceSession {
    fn channel(&mut self, ctx: &Context<'_>) -> Option<ChannelId> {
        if self.channel.is_none() {
            self.channel = ctx.my_channels().into_iter().min();
        }
        self.channel
    }
}

impl Session for InterfaceSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if event.ty() == DATAGRAM.id() {
            let Body::Sendable(s) = event.body else {
                return;
            };
            let Some(channel) = self.channel(ctx) else {
                ctx.count("no_channel");
                return;
            };
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
                if self.channel(ctx) != Some(event.channel()) {
                    ctx.count("extra_channel");
                    return;
                }
                let Body::Sendable(s) = event.body else {
                    return;
                };
                let Sendable { dest, message, .. } = *s;
                ctx.transmit(self.port, dest, message);
            }
            Direction::Up => ctx.go(event),
        }
    }
}
