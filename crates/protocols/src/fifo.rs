//! `fifo`: unreliable FIFO delivery — every message that arrives arrives once and in send order
//! per (channel, sender); messages that arrive after a later one, and duplicates, are dropped
//! and counted. Lost messages are not repaired (that is `reliable-fifo`'s job).
//!
//! Wire format (network byte order), pushed in front of the upper layers' bytes:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | stream: 0 = to one node, 1 = broadcast (numbered apart: a receiver sees both) |
//! | 4 | epoch: the sending session's incarnation, random and non-zero, drawn at its first send |
//! | 8 | sequence number, per (channel, destination), from 0 |
//!
//! The epoch lets a receiver tell a restarted sender (numbering from 0 again) from a sender
//! whose old messages arrive late: a new epoch from a source resets that source's expected
//! sequence number (counted `fifo.peer_restarted`); the last [`RETIRED_EPOCHS`] epochs of each
//! source are remembered, and their late messages are dropped (`fifo.stale_epoch`).
//!
//! Counters: `fifo.stale` (dropped: this message or a later one was already delivered),
//! `fifo.gap` (messages skipped over: lost or still in flight), `fifo.truncated` (shorter than
//! the header), `fifo.bad_stream` (a stream byte other than 0 or 1), `fifo.peer_restarted`,
//! `fifo.stale_epoch`.
//!
//! Memory: one entry per (channel, peer) in each direction, bounded by the channels times the
//! scenario's nodes.

use std::collections::HashMap;

use rand::RngCore;

use viastack_kernel::event::{CHANNEL_CLOSE, INBOUND, SENDABLE};
use viastack_kernel::{
    ChannelId, Context, Delivery, Dest, Direction, Event, EventType, Layer, NodeId, Session,
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
    /// A path to the network: a transport below (a device), which provides `Inbound`.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// In order per source; over a path that reorders, a late message is dropped, so only a
    /// FIFO path keeps its reliability through this layer.
    fn delivery(&self, below: Delivery) -> Delivery {
        Delivery {
            reliable: below.reliable && below.fifo,
            fifo: true,
        }
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(FifoSession::default())
    }
}

/// Epochs of a source remembered after it restarted, so its late messages are recognised.
pub const RETIRED_EPOCHS: usize = 4;

/// Stream byte of messages sent to one node.
pub const UNICAST: u8 = 0;
/// Stream byte of broadcast messages.
pub const BROADCAST: u8 = 1;

/// What a receiver knows of one (channel, source, stream).
#[derive(Debug, Default)]
struct Peer {
    epoch: u32,
    // u128 so that `seq + 1` cannot overflow whatever sequence number arrives.
    expected: u128,
    retired: [u32; RETIRED_EPOCHS],
}

/// Session of [`Fifo`]: next sequence number per (channel, destination) and what is expected
/// of each (channel, source, stream).
#[derive(Debug, Default)]
pub struct FifoSession {
    epoch: u32,
    next_out: HashMap<(ChannelId, Dest), u64>,
    peers: HashMap<(ChannelId, NodeId, u8), Peer>,
}

impl FifoSession {
    /// This session's epoch, drawn on first use from the kernel's seeded generator and the
    /// time (so a restarted node, whose generator starts over, still draws a new one).
    fn epoch(&mut self, ctx: &mut Context<'_>) -> u32 {
        while self.epoch == 0 {
            let x = ctx.rng().next_u64() ^ ctx.now().as_nanos().wrapping_mul(0x9e37_79b9_7f4a_7c15);
            self.epoch = (x ^ (x >> 32)) as u32;
        }
        self.epoch
    }
}

impl Session for FifoSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let channel = event.channel();
        if event.ty() == CHANNEL_CLOSE.id() {
            self.next_out.retain(|(c, _), _| *c != channel);
            self.peers.retain(|(c, _, _), _| *c != channel);
            ctx.go(event);
            return;
        }
        let dir = event.dir();
        if event.sendable_ref().is_none() {
            ctx.go(event);
            return;
        }
        let epoch = match dir {
            Direction::Down => self.epoch(ctx),
            Direction::Up => 0,
        };
        let Some(s) = event.sendable_mut() else {
            return;
        };
        match dir {
            Direction::Down => {
                let next = self.next_out.entry((channel, s.dest)).or_insert(0);
                s.message.push_u64(*next);
                s.message.push_u32(epoch);
                s.message.push_u8(match s.dest {
                    Dest::Node(_) => UNICAST,
                    Dest::Broadcast => BROADCAST,
                });
                *next = next.wrapping_add(1);
            }
            Direction::Up => {
                let header = s.message.pop_u8().and_then(|stream| {
                    let epoch = s.message.pop_u32()?;
                    Ok((stream, epoch, s.message.pop_u64()?))
                });
                let Ok((stream, epoch, seq)) = header else {
                    ctx.count("truncated");
                    return;
                };
                if stream != UNICAST && stream != BROADCAST {
                    ctx.count("bad_stream");
                    return;
                }
                let peer = self.peers.entry((channel, s.source, stream)).or_default();
                if epoch != peer.epoch {
                    if peer.retired.contains(&epoch) {
                        ctx.count("stale_epoch");
                        return;
                    }
                    if peer.epoch != 0 {
                        ctx.count("peer_restarted");
                    }
                    peer.retired.rotate_right(1);
                    peer.retired[0] = peer.epoch;
                    peer.epoch = epoch;
                    peer.expected = 0;
                }
                let seq = u128::from(seq);
                if seq < peer.expected {
                    ctx.count("stale");
                    return;
                }
                if seq > peer.expected {
                    ctx.count_n(
                        "gap",
                        u64::try_from(seq - peer.expected).unwrap_or(u64::MAX),
                    );
                }
                peer.expected = seq + 1;
            }
        }
        ctx.go(event);
    }
}
