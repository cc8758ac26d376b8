//! A node of one kernel for the checksum, fragment and reliable-fifo tests (a second harness
//! beside `common`, which the filter layers' tests use).
//! A node of one kernel: a device and the layers under test, several channels, driven by hand.
#![allow(clippy::unwrap_used, dead_code)]

#[path = "../common/mod.rs"]
mod common;
pub use common::hex;

use std::sync::Arc;

use viastack_kernel::event::{CHANNEL_INIT, SENDABLE};
use viastack_kernel::layers::Device;
use viastack_kernel::{
    ChannelId, Dest, Direction, Event, Instant, Kernel, KernelConfig, LayerRef, Message, NodeId,
    Output, Qos, Sendable, SessionId, Tag,
};
use viastack_protocols::events::send_failure;

pub struct Node {
    pub kernel: Kernel,
    pub channels: Vec<ChannelId>,
    pub device: SessionId,
    pub id: NodeId,
    pub now: Instant,
    /// Sessions of the layers above the device, per channel, bottom first.
    pub sessions: Vec<Vec<SessionId>>,
}

/// What came out of the node.
#[derive(Debug, Default)]
pub struct Out {
    pub delivered: Vec<(ChannelId, NodeId, Vec<u8>)>,
    pub notices: Vec<String>,
    /// `SendFailed` notices: type name, peer, tags.
    pub failures: Vec<(String, NodeId, Vec<Tag>)>,
    pub transmits: Vec<(Dest, Vec<u8>)>,
}

pub fn node(id: u32, layers: Vec<LayerRef>, channels: usize) -> Node {
    let dev: LayerRef = Arc::new(Device::new("device", 0));
    let mut all = vec![dev.clone()];
    all.extend(layers);
    let qos = Qos::new("q", all).unwrap();
    let mut kernel = Kernel::new(KernelConfig {
        node: NodeId(id),
        ..KernelConfig::default()
    });
    let device = kernel.create_session(&dev);
    let mut chans = vec![];
    let mut sessions = vec![];
    for i in 0..channels {
        let ch = kernel.create_channel(format!("c{i}"), &qos);
        kernel.cursor(ch).unwrap().set_session(device).unwrap();
        kernel.start_channel(ch, Instant::ZERO).unwrap();
        chans.push(ch);
        sessions.push(
            kernel.channel_sessions(ch)[1..]
                .iter()
                .map(|s| s.unwrap())
                .collect(),
        );
    }
    Node {
        kernel,
        channels: chans,
        device,
        id: NodeId(id),
        now: Instant::ZERO,
        sessions,
    }
}

impl Node {
    pub fn drain(&mut self) -> Out {
        let mut out = Out::default();
        while let Some(o) = self.kernel.poll_output() {
            match o {
                Output::Deliver(e) => {
                    if let Some(s) = e.sendable_ref() {
                        out.delivered
                            .push((e.channel(), s.source, s.message.as_slice().to_vec()));
                    } else if e.ty() != CHANNEL_INIT.id() {
                        if let Some(f) = send_failure(&e) {
                            out.failures
                                .push((e.ty().name().to_string(), f.peer, f.tags.clone()));
                        }
                        out.notices.push(e.ty().name().to_string());
                    }
                }
                Output::Transmit(t) => out.transmits.push((t.dest, t.message.into_vec())),
            }
        }
        out
    }

    pub fn receive(&mut self, from: u32, bytes: Vec<u8>) -> Out {
        self.kernel.handle_datagram(
            self.now,
            self.device,
            NodeId(from),
            Message::from_wire(bytes),
        );
        self.drain()
    }

    pub fn send(&mut self, channel: usize, dest: Dest, payload: &[u8]) -> Out {
        self.send_tagged(channel, dest, payload, Tag::NONE)
    }

    /// [`Node::send`] with the application's tag for the message.
    pub fn send_tagged(&mut self, channel: usize, dest: Dest, payload: &[u8], tag: Tag) -> Out {
        let ch = self.channels[channel];
        self.kernel
            .inject(
                self.now,
                Event::sendable(
                    SENDABLE.id(),
                    Direction::Down,
                    ch,
                    Sendable::new(self.id, dest, Message::from_payload(payload)).with_tag(tag),
                ),
            )
            .unwrap();
        self.drain()
    }

    /// Moves time to `t` and fires what is due.
    pub fn advance(&mut self, t: Instant) -> Out {
        self.now = self.now.max(t);
        self.kernel.handle_timeout(self.now);
        self.drain()
    }

    pub fn counter(&self, name: &str) -> u64 {
        self.kernel.counters().get(name).copied().unwrap_or(0)
    }
}
