//! An application written once and run two ways: on real sockets ([`run`], over a [`Node`])
//! and in the simulator with virtual time and fault injection ([`crate::sim::Harness`]).
//!
//! An [`Application`] is sans-IO like the protocols below it: it reacts to the node's events
//! and to its own wake-ups, and acts through an [`AppNode`] (send, wake me at, stop). It never
//! reads the clock or sleeps: [`AppNode::now`] is real time on sockets and virtual time in the
//! simulator, which is what makes a simulated run of it a function of its seed.

use std::time::Duration as StdDuration;

use viastack_kernel::{ChannelId, Dest, Duration, Instant, NodeId, Tag};

use crate::engine::{NodeCore, SendError};
use crate::event::NodeEvent;
use crate::node::{Channel, Node, RecvError};

/// Application logic a node drives.
pub trait Application {
    /// Called once when the node starts (and again after a simulated restart, on a fresh
    /// instance).
    fn start(&mut self, _node: &mut AppNode<'_>) {}

    /// A message or notice arrived.
    fn handle(&mut self, event: NodeEvent, node: &mut AppNode<'_>);

    /// The time asked for with [`AppNode::wake_at`] has come.
    fn wake(&mut self, _node: &mut AppNode<'_>) {}
}

/// What an application acts through.
pub struct AppNode<'a> {
    inner: Inner<'a>,
    now: Instant,
    wake: &'a mut Option<Instant>,
    stop: &'a mut bool,
}

enum Inner<'a> {
    Core {
        core: &'a mut NodeCore,
        next_tag: &'a mut u64,
    },
    Real {
        node: &'a Node,
        channels: &'a [Channel],
    },
}

impl<'a> AppNode<'a> {
    pub(crate) fn simulated(
        core: &'a mut NodeCore,
        next_tag: &'a mut u64,
        now: Instant,
        wake: &'a mut Option<Instant>,
        stop: &'a mut bool,
    ) -> Self {
        AppNode {
            inner: Inner::Core { core, next_tag },
            now,
            wake,
            stop,
        }
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        match &self.inner {
            Inner::Core { core, .. } => core.id(),
            Inner::Real { node, .. } => node.id(),
        }
    }

    /// How many nodes the deployment has.
    pub fn nodes(&self) -> u32 {
        match &self.inner {
            Inner::Core { core, .. } => core.nodes(),
            Inner::Real { node, .. } => node.nodes(),
        }
    }

    /// The current time (virtual in the simulator).
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Asks for [`Application::wake`] at `at` (replacing an earlier request).
    pub fn wake_at(&mut self, at: Instant) {
        *self.wake = Some(at);
    }

    /// Asks for [`Application::wake`] after `d`.
    pub fn wake_after(&mut self, d: Duration) {
        *self.wake = Some(self.now + d);
    }

    /// Ends the application (the runner returns; the harness stops driving it).
    pub fn stop(&mut self) {
        *self.stop = true;
    }

    fn send_to(&mut self, channel: &str, dest: Dest, payload: &[u8]) -> Result<Tag, SendError> {
        match &mut self.inner {
            Inner::Core { core, next_tag } => {
                let id: ChannelId = core
                    .channel(channel)
                    .ok_or_else(|| SendError::UnknownChannel(channel.to_string()))?;
                let tag = Tag(**next_tag);
                **next_tag += 1;
                core.send(self.now, id, dest, payload, tag)?;
                Ok(tag)
            }
            Inner::Real { channels, .. } => {
                let c = channels
                    .iter()
                    .find(|c| c.name() == channel)
                    .ok_or_else(|| SendError::UnknownChannel(channel.to_string()))?;
                match dest {
                    Dest::Node(n) => c.send(n, payload),
                    Dest::Broadcast => c.send_to_all(payload),
                }
            }
        }
    }

    /// Sends `payload` on `channel` to `to`; the tag names it in failure notices.
    ///
    /// # Errors
    /// [`SendError`].
    pub fn send(&mut self, channel: &str, to: NodeId, payload: &[u8]) -> Result<Tag, SendError> {
        self.send_to(channel, Dest::Node(to), payload)
    }

    /// Sends `payload` on `channel` to every other node.
    ///
    /// # Errors
    /// [`SendError`].
    pub fn send_to_all(&mut self, channel: &str, payload: &[u8]) -> Result<Tag, SendError> {
        self.send_to(channel, Dest::Broadcast, payload)
    }
}

/// Runs `app` on a real node until it calls [`AppNode::stop`] or the node closes.
pub fn run(node: &Node, app: &mut dyn Application) {
    let channels: Vec<Channel> = node
        .channel_names()
        .filter_map(|n| node.channel(n).ok())
        .collect();
    let clock = viastack_net::Clock::start();
    let mut wake = None;
    let mut stop = false;
    let ctx = |wake: &mut Option<Instant>, stop: &mut bool, f: &mut dyn FnMut(&mut AppNode<'_>)| {
        let mut n = AppNode {
            inner: Inner::Real {
                node,
                channels: &channels,
            },
            now: clock.now(),
            wake,
            stop,
        };
        f(&mut n);
    };
    ctx(&mut wake, &mut stop, &mut |n| app.start(n));
    while !stop {
        let timeout = wake.map_or(StdDuration::from_millis(500), |w| clock.until(w));
        match node.recv_timeout(timeout) {
            Ok(event) => {
                let mut event = Some(event);
                ctx(&mut wake, &mut stop, &mut |n| {
                    if let Some(e) = event.take() {
                        app.handle(e, n);
                    }
                });
            }
            Err(RecvError::Closed) => return,
            Err(RecvError::Timeout) => {}
        }
        if wake.is_some_and(|w| w <= clock.now()) && !stop {
            wake = None;
            ctx(&mut wake, &mut stop, &mut |n| app.wake(n));
        }
    }
}
