//! `fifo`: unreliable FIFO delivery — every message that arrives arrives once and in send order
//! per (channel, sender); messages that arrive after a later one, and duplicates, are dropped
//! and counted. Lost messages are not repaired (that is `reliable-fifo`'s job).
//!
//! Wire format (network byte order), pushed in front of the upper layers' bytes:
//!
//! | bytes | field |
//! | --- | --- |
//! | 8 | sequence number, per (channel, destination), from 0 |
//!
//! Counters: `fifo.stale` (dropped: this message or a later one was already delivered),
//! `fifo.gap` (messages skipped over: lost or still in flight), `fifo.truncated` (shorter than
//! the header).
//!
//! Memory: one counter per (channel, peer) in each direction, bounded by the channels times the
//! scenario's nodes.

use std::collections::HashMap;

use viastack_kernel::event::{CHANNEL_CLOSE, SENDABLE};
use viastack_kernel::{
    ChannelId, Context, Dest, Direction, Event, EventType, Layer, NodeId, Session,
};

/// The `fifo` layer.
#[derive(Debug, Clone)]
pub struct Fifo {
    name: String,
}

impl Fifo {
    /// A fifo layer named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Fifo { name: name.into() }
    }
}

impl Layer for Fifo {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_CLOSE.id()]
    }
    /// Meaningless without a layer below that generates sendables (a device).
    fn requires(&self) -> Vec<EventType> {
        vec![SENDABLE.id()]
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(FifoSession::default())
    }
}

/// Session of [`Fifo`]: next sequence number per (channel, destination) and next expected per
/// (channel, source).
#[derive(Debug, Default)]
pub struct FifoSession {
    next_out: HashMap<(ChannelId, Dest), u64>,
    // u128 so that `seq + 1` cannot overflow whatever sequence number arrives.
    next_in: HashMap<(ChannelId, NodeId), u128>,
}

impl Session for FifoSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let channel = event.channel();
        if event.ty() == CHANNEL_CLOSE.id() {
            self.next_out.retain(|(c, _), _| *c != channel);
            self.next_in.retain(|(c, _), _| *c != channel);
            ctx.go(event);
            return;
        }
        let dir = event.dir();
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        match dir {
            Direction::Down => {
                let next = self.next_out.entry((channel, s.dest)).or_insert(0);
                s.message.push_u64(*next);
                *next = next.wrapping_add(1);
            }
            Direction::Up => {
                let Ok(seq) = s.message.pop_u64() else {
                    ctx.count("truncated");
                    return;
                };
                let seq = u128::from(seq);
                let expected = self.next_in.entry((channel, s.source)).or_insert(0);
                if seq < *expected {
                    ctx.count("stale");
                    return;
                }
                if seq > *expected {
                    ctx.count_n("gap", u64::try_from(seq - *expected).unwrap_or(u64::MAX));
                }
                *expected = seq + 1;
            }
        }
        ctx.go(event);
    }
}
