//! `dedup`: duplicate elimination by (source, message id) with bounded memory. Every message
//! gets an id going down; going up, a message whose id was already delivered is dropped. Order
//! is not restored and loss is not repaired: only copies are removed (a network or a
//! `duplicate` fault layer below may make them).
//!
//! Wire format (network byte order), pushed in front of the upper layers' bytes:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | stream: 0 = addressed to one node, 1 = broadcast (numbered apart, see below) |
//! | 4 | epoch: the sending session's incarnation, random and non-zero, drawn at its first send |
//! | 8 | id, per (channel, destination), from 0 |
//!
//! A sender numbers each (channel, destination) from 0, so a receiver sees a dense run of ids
//! per (channel, source, stream); the stream byte keeps a sender's broadcasts and its messages
//! to this node apart (both would otherwise use the same ids).
//!
//! Receiving, per (channel, source, stream): a new epoch means the source restarted (counted
//! `dedup.peer_restarted`): its window starts over and the old epoch is remembered among the
//! last [`RETIRED_EPOCHS`], whose late copies are dropped (`dedup.stale_epoch`). Then the id is
//! looked up in a sliding window of `window` ids behind the highest id seen ([`SeqWindow`]):
//! seen → dropped, `dedup.duplicate`; older than the window → dropped, `dedup.too_old`.
//!
//! **The trade-off of the window.** The window costs `window / 8` bytes per tracked stream
//! and remembers exactly the last `window` ids. A message that arrives after `window` later
//! ids of its stream cannot be told from a duplicate any more; it is dropped and counted
//! (`dedup.too_old`): deep reordering turns into loss, never into a duplicate delivery. A
//! larger window tolerates deeper reordering at more memory per source.
//!
//! **Bounded sources.** At most `max_sources` streams are tracked; a new one evicts the least
//! recently used (`dedup.evicted`). An evicted stream that comes back starts with an empty
//! window, so copies of its old messages still in flight would be delivered again: size
//! `max_sources` above the number of live senders (the default is generous for a scenario).
//! Other counters: `dedup.truncated` (shorter than the header), `dedup.bad_stream` (stream byte
//! neither 0 nor 1).
//!
//! Memory: receiving, at most `max_sources × (window / 8 + ~40)` bytes; sending, one counter
//! per (channel, destination), bounded by channels × nodes.

use std::collections::HashMap;

use viastack_kernel::event::{CHANNEL_CLOSE, INBOUND, SENDABLE};
use viastack_kernel::{
    ChannelId, Context, Delivery, Dest, Direction, Event, EventType, Layer, NodeId, Session,
};

use crate::peers::{draw_epoch, LruMap, Seen, SeqWindow};

/// Epochs of a source remembered after it restarted, so its late copies are recognised.
pub const RETIRED_EPOCHS: usize = 4;

/// Bytes of the dedup header.
pub const HEADER_LEN: usize = 13;

/// Parameters of a [`Dedup`] layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Ids remembered behind the highest one, per stream (rounded up to a multiple of 64).
    pub window: usize,
    /// Streams tracked at most.
    pub max_sources: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            // Issue 3 §2 brief: 1024 ids, 128 bytes per stream; RFC 6479 §1 argues for
            // windows of this order for high-rate traffic.
            window: 1024,
            max_sources: 1024,
        }
    }
}

/// The `dedup` layer.
#[derive(Debug, Clone)]
pub struct Dedup {
    name: String,
    config: Config,
}

impl Dedup {
    /// A dedup layer named `name`.
    pub fn new(name: impl Into<String>, config: Config) -> Self {
        Dedup {
            name: name.into(),
            config,
        }
    }
}

impl Layer for Dedup {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_CLOSE.id()]
    }
    /// A path to the network: a transport below (a device), which provides `Inbound`.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// Over a FIFO path no copy and no late message comes, so nothing is dropped; over one
    /// that reorders, a message later than the window is dropped (`too_old`).
    fn delivery(&self, below: Delivery) -> Delivery {
        Delivery {
            reliable: below.reliable && below.fifo,
            fifo: below.fifo,
        }
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(DedupSession::new(self.config))
    }
}

/// What a receiver knows of one (channel, source, stream).
#[derive(Debug)]
struct Stream {
    epoch: u32,
    retired: [u32; RETIRED_EPOCHS],
    window: SeqWindow,
}

/// Session of [`Dedup`].
#[derive(Debug)]
pub struct DedupSession {
    config: Config,
    epoch: u32,
    next_out: HashMap<(ChannelId, Dest), u64>,
    streams: LruMap<(ChannelId, NodeId, u8), Stream>,
}

impl DedupSession {
    /// A session with `config`.
    pub fn new(config: Config) -> Self {
        DedupSession {
            config,
            epoch: 0,
            next_out: HashMap::new(),
            streams: LruMap::new(config.max_sources),
        }
    }

    /// Streams currently tracked.
    pub fn tracked(&self) -> usize {
        self.streams.len()
    }

    fn send(&mut self, event: &mut Event, ctx: &mut Context<'_>) {
        if self.epoch == 0 {
            self.epoch = draw_epoch(ctx);
        }
        let channel = event.channel();
        let Some(s) = event.sendable_mut() else {
            return;
        };
        let next = self.next_out.entry((channel, s.dest)).or_insert(0);
        s.message.push_u64(*next);
        s.message.push_u32(self.epoch);
        s.message.push_u8(u8::from(s.dest == Dest::Broadcast));
        *next = next.wrapping_add(1);
    }

    /// Pops the header; whether the message is new.
    fn receive(&mut self, event: &mut Event, ctx: &mut Context<'_>) -> bool {
        let channel = event.channel();
        let Some(s) = event.sendable_mut() else {
            return false;
        };
        let header = s.message.pop_u8().and_then(|stream| {
            let epoch = s.message.pop_u32()?;
            Ok((stream, epoch, s.message.pop_u64()?))
        });
        let Ok((stream, epoch, id)) = header else {
            ctx.count("truncated");
            return false;
        };
        if stream > 1 {
            ctx.count("bad_stream");
            return false;
        }
        let key = (channel, s.source, stream);
        let entry = match self.streams.get_mut(&key) {
            Some(entry) => entry,
            None => {
                let fresh = Stream {
                    epoch,
                    retired: [0; RETIRED_EPOCHS],
                    window: SeqWindow::new(self.config.window),
                };
                if self.streams.insert(key, fresh).is_some() {
                    ctx.count("evicted");
                }
                match self.streams.get_mut(&key) {
                    Some(entry) => entry,
                    None => return false,
                }
            }
        };
        if epoch != entry.epoch {
            if entry.retired.contains(&epoch) {
                ctx.count("stale_epoch");
                return false;
            }
            ctx.count("peer_restarted");
            entry.retired.rotate_right(1);
            entry.retired[0] = entry.epoch;
            entry.epoch = epoch;
            entry.window = SeqWindow::new(self.config.window);
        }
        match entry.window.insert(id) {
            Seen::Fresh => true,
            Seen::Duplicate => {
                ctx.count("duplicate");
                false
            }
            Seen::TooOld => {
                ctx.count("too_old");
                false
            }
        }
    }
}

impl Session for DedupSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        if event.ty() == CHANNEL_CLOSE.id() {
            let channel = event.channel();
            self.next_out.retain(|(c, _), _| *c != channel);
            self.streams.retain(|(c, _, _)| *c != channel);
            ctx.go(event);
            return;
        }
        if event.sendable_ref().is_some() {
            match event.dir() {
                Direction::Down => self.send(&mut event, ctx),
                Direction::Up => {
                    if !self.receive(&mut event, ctx) {
                        return;
                    }
                }
            }
        }
        ctx.go(event);
    }
}
