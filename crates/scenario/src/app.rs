//! The scenario's application, as it runs on every node whatever the driver (simulator or real
//! sockets): it sends each workload's messages at its pace by injecting `Sendable`s down the
//! workload's channel, and records every sendable that leaves the top of a channel as a
//! delivery, and every other event (a suspicion, an unreachable peer) as a notice.
//!
//! Its progress lives in the [`Recorder`] it is given, so a node that crashes and restarts
//! resumes its workload where it stopped (with fresh protocol state, as after a reboot).

use std::cell::RefCell;
use std::rc::Rc;

use viastack_kernel::event::{CHANNEL_CLOSE, CHANNEL_INIT, SENDABLE};
use viastack_kernel::{
    ChannelId, Dest, Direction, Event, Instant, Kernel, Message, NodeId, Sendable, Tag,
};
use viastack_protocols::events::{notice_peer, send_failure};
use viastack_stack::model::{Pattern, Workload};

use viastack_group::state::{StateDigest, STATE_DIGEST};
use viastack_group::view_notice;

use crate::group::Entry;
use crate::payload::{self, Stamp};
use crate::recorder::{Recorder, BROADCAST};

/// One workload as this node's application runs it.
struct Sender {
    index: u16,
    channel: ChannelId,
    pattern: Pattern,
    size: usize,
    messages: u64,
    interval: viastack_kernel::Duration,
    next_at: Instant,
}

/// The application of one node.
pub struct Application {
    id: NodeId,
    nodes: u32,
    /// Channel names by id, for the recorder's notice log.
    channel_names: Vec<(ChannelId, String)>,
    senders: Vec<Sender>,
    recorder: Rc<RefCell<Recorder>>,
}

impl Application {
    /// The application of node `id` (of `nodes`), sending the workloads it takes part in on the
    /// named channels; `now` is the node's boot time.
    pub fn new(
        id: NodeId,
        nodes: u32,
        channels: &[(String, ChannelId)],
        workloads: &[Workload],
        recorder: Rc<RefCell<Recorder>>,
        now: Instant,
    ) -> Self {
        recorder.borrow_mut().boot(id);
        recorder.borrow_mut().group.boot(id, now);
        for (name, _) in channels {
            recorder
                .borrow_mut()
                .group_channels
                .entry(name.clone())
                .or_default()
                .boot(id, now);
        }
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
            let done = recorder.borrow().progress(index, id);
            let first = Instant::ZERO
                + w.start
                + w.interval
                    .saturating_mul(u32::try_from(done).unwrap_or(u32::MAX));
            senders.push(Sender {
                index,
                channel,
                pattern: w.pattern,
                size: usize::try_from(w.size).unwrap_or(usize::MAX),
                messages: w.messages,
                interval: w.interval,
                next_at: first.max(now),
            });
        }
        Application {
            id,
            nodes,
            channel_names: channels.iter().map(|(n, c)| (*c, n.clone())).collect(),
            senders,
            recorder,
        }
    }

    /// The addressee of this node's `k`-th message under `pattern`.
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
            Pattern::Multicast => return BROADCAST,
        };
        NodeId(dst as u32)
    }

    /// Sends every message due at `now`.
    pub fn send_due(&mut self, kernel: &mut Kernel, now: Instant) {
        for i in 0..self.senders.len() {
            loop {
                let s = &self.senders[i];
                let (index, channel, pattern, size, interval, next_at) =
                    (s.index, s.channel, s.pattern, s.size, s.interval, s.next_at);
                let done = self.recorder.borrow().progress(index, self.id);
                if done >= s.messages || next_at > now {
                    break;
                }
                let dst = self.destination(pattern, done);
                let seq = self.recorder.borrow_mut().next_seq(index, self.id, dst);
                if dst == BROADCAST {
                    let name = self.channel_name(channel).to_string();
                    push_group(
                        &mut self.recorder.borrow_mut(),
                        self.id,
                        &name,
                        Entry::Sent((index, self.id, seq)),
                    );
                }
                let stamp = Stamp {
                    workload: index,
                    src: self.id,
                    dst,
                    seq,
                    sent_at: now,
                };
                let bytes = payload::encode(&stamp, size);
                let ev = Event::sendable(
                    SENDABLE.id(),
                    Direction::Down,
                    channel,
                    Sendable::new(
                        self.id,
                        if dst == BROADCAST {
                            Dest::Broadcast
                        } else {
                            Dest::Node(dst)
                        },
                        Message::from_payload(&bytes),
                    )
                    .with_tag(tag_of(index, seq)),
                );
                if let Err(e) = kernel.inject(now, ev) {
                    tracing::debug!(node = %self.id, error = %e, "workload message refused");
                }
                self.senders[i].next_at = next_at + interval;
            }
        }
    }

    /// When the next message is due, if any remains to send.
    pub fn next_send(&self) -> Option<Instant> {
        let rec = self.recorder.borrow();
        self.senders
            .iter()
            .filter(|s| rec.progress(s.index, self.id) < s.messages)
            .map(|s| s.next_at)
            .min()
    }

    /// The name of channel `channel` (`?` if unknown).
    fn channel_name(&self, channel: ChannelId) -> &str {
        self.channel_names
            .iter()
            .find(|(c, _)| *c == channel)
            .map_or("?", |(_, n)| n.as_str())
    }

    /// Records an event that left the top of a channel at `now`.
    pub fn on_deliver(&mut self, ev: &Event, now: Instant) {
        let channel = self.channel_name(ev.channel());
        let mut rec = self.recorder.borrow_mut();
        if let Some(s) = ev.sendable_ref() {
            let stamp = payload::decode(s.message.as_slice());
            if let Some(st) = stamp.as_ref().filter(|st| st.dst == BROADCAST) {
                push_group(
                    &mut rec,
                    self.id,
                    channel,
                    Entry::Delivered((st.workload, st.src, st.seq)),
                );
            }
            rec.received_on(self.id, channel);
            rec.delivered(self.id, stamp, now);
        } else if let Some(d) = ev
            .custom::<StateDigest>()
            .filter(|_| ev.ty() == STATE_DIGEST.id())
        {
            push_group(&mut rec, self.id, channel, Entry::State(d.count, d.hash));
        } else if let Some(v) = view_notice(ev) {
            push_group(
                &mut rec,
                self.id,
                channel,
                Entry::View {
                    at: now,
                    id: (v.id.counter, v.id.coord.node.0, v.id.coord.epoch),
                    members: v.members.iter().map(|m| (m.node.0, m.epoch)).collect(),
                    primary: v.primary,
                },
            );
            rec.notice(ev.ty().name());
        } else if ev.ty() != CHANNEL_INIT.id() && ev.ty() != CHANNEL_CLOSE.id() {
            let peer = notice_peer(ev);
            if let Some(f) = send_failure(ev) {
                for &tag in &f.tags {
                    if let Some((workload, seq)) = untag(tag) {
                        rec.reported(workload, self.id, f.peer, seq);
                    }
                }
            }
            rec.notice(ev.ty().name());
            rec.log_notice(self.id, now, channel, ev.ty().name(), peer);
        }
    }
}

/// Appends a group entry to the node's history, all channels together and the channel's own.
fn push_group(rec: &mut Recorder, node: NodeId, channel: &str, entry: Entry) {
    if let Some(h) = rec.group_channels.get_mut(channel) {
        h.push(node, entry.clone());
    }
    rec.group.push(node, entry);
}

/// The tag of message `seq` of workload `workload` (the stream's source and destination are
/// the notice's node and peer): never [`Tag::NONE`].
fn tag_of(workload: u16, seq: u64) -> Tag {
    Tag((u64::from(workload) + 1) << 48 | (seq & ((1 << 48) - 1)))
}

/// The (workload, sequence number) a tag of [`tag_of`] names.
fn untag(tag: Tag) -> Option<(u16, u64)> {
    let workload = u16::try_from((tag.0 >> 48).checked_sub(1)?).ok()?;
    Some((workload, tag.0 & ((1 << 48) - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_name_their_message() {
        for (w, seq) in [(0u16, 0u64), (3, 77), (u16::MAX - 1, (1 << 48) - 1)] {
            assert_ne!(tag_of(w, seq), Tag::NONE);
            assert_eq!(untag(tag_of(w, seq)), Some((w, seq)));
        }
        assert_eq!(untag(Tag::NONE), None);
    }
}
