//! A simulated node: one kernel built from the stack file, the scenario's application on top
//! of it, and the glue to the simulator's [`Node`] contract (datagrams in, transmits out,
//! timeouts).
//!
//! The application sends each workload's messages at its pace by injecting `Sendable`s down
//! the workload's channel, and records every sendable that leaves the top of a channel as a
//! delivery. Its progress lives in the shared [`Recorder`], so a node that crashes and restarts
//! resumes its workload where it stopped (with fresh protocol state, as after a reboot).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use viastack_kernel::event::{CHANNEL_CLOSE, CHANNEL_INIT, SENDABLE};
use viastack_kernel::{
    ChannelId, Dest, Direction, Event, Instant, Kernel, Message, NodeId, Output, Sendable,
    SessionId,
};
use viastack_protocols::events::{notice_peer, PEER_UNREACHABLE};
use viastack_sim::{Node, Transmit};
use viastack_stack::model::{Pattern, Workload};
use viastack_stack::BuiltNode;

use crate::payload::{self, Stamp};
use crate::recorder::Recorder;

/// One workload as this node's application runs it.
struct Sender {
    index: u16,
    channel: ChannelId,
    spec: Workload,
    next_at: Instant,
}

/// A kernel plus the scenario's application, driven by the simulator.
pub struct SimNode {
    id: NodeId,
    nodes: u32,
    kernel: Kernel,
    devices: Vec<(u16, SessionId)>,
    /// Channel names by id, for the recorder.
    channel_names: Vec<(ChannelId, String)>,
    senders: Vec<Sender>,
    recorder: Rc<RefCell<Recorder>>,
    transmits: VecDeque<Transmit>,
}

impl SimNode {
    /// A node over a built kernel; `now` is its boot time.
    pub fn new(
        id: NodeId,
        nodes: u32,
        built: BuiltNode,
        workloads: &[Workload],
        recorder: Rc<RefCell<Recorder>>,
        now: Instant,
    ) -> Self {
        let BuiltNode {
            kernel,
            channels,
            devices,
        } = built;
        let mut senders = Vec::new();
        for (i, w) in workloads.iter().enumerate() {
            let sends = w.senders.as_ref().is_none_or(|s| s.contains(&id.0));
            let channel = channels
                .iter()
                .find(|(n, _)| *n == w.channel)
                .map(|(_, c)| *c);
            let (Some(channel), true, Ok(index)) = (channel, sends, u16::try_from(i)) else {
                continue;
            };
            let done = recorder
                .borrow()
                .progress
                .get(&(index, id))
                .copied()
                .unwrap_or(0);
            let first = Instant::ZERO + w.start + w.interval.saturating_mul(done as u32);
            senders.push(Sender {
                index,
                channel,
                spec: w.clone(),
                next_at: first.max(now),
            });
        }
        let channel_names = channels.iter().map(|(n, c)| (*c, n.clone())).collect();
        let mut node = SimNode {
            id,
            nodes,
            kernel,
            devices,
            channel_names,
            senders,
            recorder,
            transmits: VecDeque::new(),
        };
        node.drain();
        node
    }

    /// The node's kernel (for counters and inspection).
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    fn destination(&self, pattern: Pattern, k: u64) -> NodeId {
        let n = u64::from(self.nodes.max(1));
        let me = u64::from(self.id.0);
        let dst = match pattern {
            Pattern::AllToAll if n > 1 => {
                let j = k % (n - 1);
                if j >= me {
                    j + 1
                } else {
                    j
                }
            }
            Pattern::AllToAll => me,
            Pattern::Ring => (me + 1) % n,
            Pattern::ToFirst => 0,
        };
        NodeId(dst as u32)
    }

    fn send_due(&mut self, now: Instant) {
        for i in 0..self.senders.len() {
            loop {
                let (index, channel, pattern, size, messages, interval, next_at) = {
                    let s = &self.senders[i];
                    (
                        s.index,
                        s.channel,
                        s.spec.pattern,
                        s.spec.size,
                        s.spec.messages,
                        s.spec.interval,
                        s.next_at,
                    )
                };
                let done = {
                    let rec = self.recorder.borrow();
                    rec.progress.get(&(index, self.id)).copied().unwrap_or(0)
                };
                if done >= messages || next_at > now {
                    break;
                }
                let dst = self.destination(pattern, done);
                let seq = {
                    let mut rec = self.recorder.borrow_mut();
                    *rec.progress.entry((index, self.id)).or_insert(0) += 1;
                    rec.next_seq(index, self.id, dst)
                };
                let stamp = Stamp {
                    workload: index,
                    src: self.id,
                    dst,
                    seq,
                    sent_at: now,
                };
                let bytes = payload::encode(&stamp, usize::try_from(size).unwrap_or(usize::MAX));
                let ev = Event::sendable(
                    SENDABLE.id(),
                    Direction::Down,
                    channel,
                    Sendable::new(self.id, Dest::Node(dst), Message::from_payload(&bytes)),
                );
                if let Err(e) = self.kernel.inject(now, ev) {
                    tracing::debug!(node = %self.id, error = %e, "workload message refused");
                }
                self.senders[i].next_at = next_at + interval;
                if interval.is_zero() && done + 1 >= messages {
                    break;
                }
            }
        }
    }

    /// Moves the kernel's outputs to the simulator's queue and the recorder.
    fn drain(&mut self) {
        while let Some(out) = self.kernel.poll_output() {
            match out {
                Output::Transmit(t) => self.transmits.push_back(Transmit {
                    port: t.port,
                    dest: t.dest,
                    bytes: t.message.into_vec(),
                }),
                Output::Deliver(ev) => {
                    let channel = self
                        .channel_names
                        .iter()
                        .find(|(c, _)| *c == ev.channel())
                        .map_or("?", |(_, n)| n.as_str());
                    let now = self.kernel.now();
                    let mut rec = self.recorder.borrow_mut();
                    if let Some(s) = ev.sendable_ref() {
                        let stamp = payload::decode(s.message.as_slice());
                        rec.received_on(self.id, channel);
                        rec.delivered(self.id, stamp, now);
                    } else if ev.ty() != CHANNEL_INIT.id() && ev.ty() != CHANNEL_CLOSE.id() {
                        let peer = notice_peer(&ev);
                        let gave_up = (ev.ty() == PEER_UNREACHABLE.id()).then_some(peer).flatten();
                        rec.notice(self.id, ev.ty().name(), gave_up);
                        rec.log_notice(self.id, now, channel, ev.ty().name(), peer);
                    }
                }
            }
        }
    }
}

impl Node for SimNode {
    fn handle_datagram(&mut self, now: Instant, port: u16, from: NodeId, bytes: Vec<u8>) {
        match self.devices.iter().find(|(p, _)| *p == port) {
            Some(&(_, device)) => {
                self.kernel
                    .handle_datagram(now, device, from, Message::from_wire(bytes));
            }
            None => tracing::debug!(node = %self.id, port, "datagram for a port with no device"),
        }
        self.drain();
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.kernel.handle_timeout(now);
        self.send_due(now);
        self.drain();
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let app = self
            .senders
            .iter()
            .filter(|s| {
                let rec = self.recorder.borrow();
                rec.progress.get(&(s.index, self.id)).copied().unwrap_or(0) < s.spec.messages
            })
            .map(|s| s.next_at)
            .min();
        match (self.kernel.poll_timeout(), app) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }
}
