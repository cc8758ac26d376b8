//! `fragment`: splits messages larger than `mtu` bytes into fragments and reassembles them at
//! the receiver, with a reassembly timeout and a per-session memory bound.
//!
//! Wire format (network byte order), pushed in front of each fragment's bytes:
//!
//! | bytes | field |
//! | --- | --- |
//! | 4 | message id: per (channel, destination), from a random start, wrapping |
//! | 2 | fragment index, from 0 |
//! | 2 | fragment count, ≥ 1 (1: the message was not split) |
//! | 4 | offset of this fragment's bytes in the message |
//! | 4 | total length of the message |
//!
//! Every message carries the header, split or not, so a receiver never has to guess. The
//! sender cuts the message into `count = ceil(len / mtu)` pieces of `mtu` bytes (the last one
//! shorter); an empty message is one fragment of 0 bytes.
//!
//! Receiving, a fragment is checked before any memory is committed to it, and dropped and
//! counted if it contradicts itself or what is known of its message:
//! `fragment.truncated` (shorter than the header), `fragment.malformed` (count 0, index ≥
//! count, a single fragment whose bytes are not the whole message, or bytes reaching past the
//! total), `fragment.too_large` (a total above `max_reassembly_bytes`: it could never fit),
//! `fragment.inconsistent` (a count or total other than the first fragment of that id said),
//! `fragment.duplicate` (that index was already received). A message of one fragment is
//! forwarded at once without a copy (and without duplicate suppression, which is
//! `reliable-fifo`'s job: this layer keeps no state for whole messages).
//!
//! Reassembly (per channel, source and message id) allocates the whole message once, at its
//! first fragment, and copies each fragment's bytes straight to their offset: every payload
//! byte is copied once. Memory is accounted as the message's total plus a fixed overhead
//! ([`ENTRY_OVERHEAD`]) plus its index bitmap, and never exceeds `max_reassembly_bytes` per
//! session under any input: to admit a new message the oldest incomplete ones are evicted
//! (`fragment.evicted`). An incomplete message older than `reassembly_timeout` is dropped
//! (`fragment.timeout`); the sweep runs on one timer armed for the oldest message's deadline.
//! Dropped messages are counted by message, not by fragment. A completed message counts
//! `fragment.reassembled`.
//!
//! Splitting copies each byte once (into its fragment's own buffer, behind fresh headroom for
//! the lower layers' headers); the first fragment reuses the original buffer, so it is not
//! copied at all.

use std::collections::VecDeque;

use fnv::FnvHashMap;
use viastack_kernel::event::{CHANNEL_CLOSE, SENDABLE, TIMER};
use viastack_kernel::message::DEFAULT_HEADROOM;
use viastack_kernel::{
    Body, ChannelId, Context, Dest, Direction, Duration, Event, EventType, Instant, Layer, Message,
    NodeId, Sendable, Session, TimerId,
};

use crate::peers::draw_epoch;

/// Bytes of the header.
pub const HEADER_LEN: usize = 16;

/// Bytes accounted per message under reassembly besides its payload and bitmap (the map entry,
/// the order queue entry and the allocation's bookkeeping, rounded up).
pub const ENTRY_OVERHEAD: usize = 128;

/// Parameters of [`Fragment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Largest fragment payload, bytes. Default 1400: with this layer's 16 bytes, the
    /// reliable-fifo (21), checksum (4) and device (2) headers and IPv6 + UDP (48) a datagram
    /// stays under Ethernet's 1500-byte MTU (RFC 894), so IP never fragments (RFC 8085 §3.2).
    pub mtu: usize,
    /// How long an incomplete message is kept. Default 2 s: two of RFC 6298's 1 s initial
    /// retransmission timeouts of a reliable layer below, and well under IPv4's 15 s initial
    /// reassembly timer (RFC 791 §3.2), which is meant for a whole internet path.
    pub reassembly_timeout: Duration,
    /// Bytes of reassembly state per session. Default 4 MiB: 64 messages of 64 KiB.
    pub max_reassembly_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: 1400,
            reassembly_timeout: Duration::from_secs(2),
            max_reassembly_bytes: 4 << 20,
        }
    }
}

/// The `fragment` layer.
#[derive(Debug, Clone)]
pub struct Fragment {
    name: String,
    config: Config,
}

impl Fragment {
    /// A fragment layer named `name`; an `mtu` of 0 is taken as 1.
    pub fn new(name: impl Into<String>, mut config: Config) -> Self {
        config.mtu = config.mtu.max(1);
        Fragment {
            name: name.into(),
            config,
        }
    }
}

impl Layer for Fragment {
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
        Box::new(FragmentSession::new(self.config))
    }
}

/// The header of one fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Message id.
    pub id: u32,
    /// Fragment index.
    pub index: u16,
    /// Fragment count.
    pub count: u16,
    /// Offset of the fragment's bytes in the message.
    pub offset: u32,
    /// Total length of the message.
    pub total: u32,
}

impl Header {
    /// Pushes the header in front of `m`.
    pub fn emit(&self, m: &mut Message) {
        m.push_u32(self.total);
        m.push_u32(self.offset);
        m.push_u16(self.count);
        m.push_u16(self.index);
        m.push_u32(self.id);
    }

    /// Pops a header from `m`.
    ///
    /// # Errors
    /// [`viastack_kernel::Truncated`] when `m` is shorter than [`HEADER_LEN`] (then `m` may
    /// have lost some bytes: the caller drops it).
    pub fn parse(m: &mut Message) -> Result<Header, viastack_kernel::Truncated> {
        m.peek(HEADER_LEN)?;
        Ok(Header {
            id: m.pop_u32()?,
            index: m.pop_u16()?,
            count: m.pop_u16()?,
            offset: m.pop_u32()?,
            total: m.pop_u32()?,
        })
    }
}

type Key = (ChannelId, NodeId, u32);

/// One message under reassembly.
#[derive(Debug)]
struct Partial {
    gen: u64,
    deadline: Instant,
    count: u16,
    buf: Vec<u8>,
    have: Vec<u64>,
    received: u16,
    cost: usize,
}

/// Session of [`Fragment`].
#[derive(Debug)]
pub struct FragmentSession {
    config: Config,
    next_id: FnvHashMap<(ChannelId, Dest), u32>,
    partial: FnvHashMap<Key, Partial>,
    /// Messages by arrival of their first fragment (oldest first); entries whose generation no
    /// longer matches are stale and skipped.
    order: VecDeque<(Key, u64)>,
    gen: u64,
    /// Bytes accounted to `partial`.
    bytes: usize,
    timer: Option<(TimerId, Instant)>,
}

impl FragmentSession {
    /// A session with `config`.
    pub fn new(config: Config) -> Self {
        FragmentSession {
            config,
            next_id: FnvHashMap::default(),
            partial: FnvHashMap::default(),
            order: VecDeque::new(),
            gen: 0,
            bytes: 0,
            timer: None,
        }
    }

    /// Bytes of reassembly state held now (never above `max_reassembly_bytes`).
    pub fn reassembly_bytes(&self) -> usize {
        self.bytes
    }

    /// Messages under reassembly now.
    pub fn incomplete(&self) -> usize {
        self.partial.len()
    }

    fn split(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let channel = event.channel();
        let ty = event.ty();
        let mtu = self.config.mtu;
        let Some(s) = event.sendable_mut() else {
            return;
        };
        let len = s.message.len();
        let (Ok(total), Ok(count)) = (u32::try_from(len), u16::try_from(len.div_ceil(mtu).max(1)))
        else {
            ctx.count("too_large_to_send");
            return;
        };
        // A random first id (seeded generator mixed with the time): a restarted sender does
        // not reuse the ids of its previous incarnation, whose partials a receiver may hold.
        let next = self
            .next_id
            .entry((channel, s.dest))
            .or_insert_with(|| draw_epoch(ctx));
        let id = *next;
        *next = next.wrapping_add(1);
        let mut header = Header {
            id,
            index: 0,
            count,
            offset: 0,
            total,
        };
        if count > 1 {
            ctx.count_n("fragments", u64::from(count));
        }
        let (source, dest) = (s.source, s.dest);
        // Fragments 1.. are copied out; the first keeps the original buffer (truncated, its
        // headroom intact), so a message just over the MTU copies only its tail.
        let mut rest = Vec::with_capacity(usize::from(count) - 1);
        for index in 1..count {
            let at = usize::from(index) * mtu;
            let end = (at + mtu).min(len);
            let mut m = Message::with_headroom(DEFAULT_HEADROOM, &s.message.as_slice()[at..end]);
            header.index = index;
            header.offset = at as u32; // < total, which fits in u32
            header.emit(&mut m);
            rest.push(m);
        }
        s.message.truncate(mtu.min(len));
        header.index = 0;
        header.offset = 0;
        header.emit(&mut s.message);
        ctx.go(event);
        for m in rest {
            ctx.go(Event::sendable(
                ty,
                Direction::Down,
                channel,
                Sendable::new(source, dest, m),
            ));
        }
    }

    fn receive(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let channel = event.channel();
        let Some(s) = event.sendable_mut() else {
            return;
        };
        let Ok(h) = Header::parse(&mut s.message) else {
            ctx.count("truncated");
            return;
        };
        let len = s.message.len();
        let total = h.total as usize;
        let offset = h.offset as usize;
        if h.count == 0
            || h.index >= h.count
            || offset.checked_add(len).is_none_or(|end| end > total)
            || (h.count == 1 && (offset != 0 || len != total))
        {
            ctx.count("malformed");
            return;
        }
        if h.count == 1 {
            ctx.go(event);
            return;
        }
        let key = (channel, s.source, h.id);
        let now = ctx.now();
        if let Some(p) = self.partial.get(&key) {
            if p.count != h.count || p.buf.len() != total {
                ctx.count("inconsistent");
                return;
            }
        } else {
            let cost = total + (usize::from(h.count)).div_ceil(64) * 8 + ENTRY_OVERHEAD;
            if cost > self.config.max_reassembly_bytes {
                ctx.count("too_large");
                return;
            }
            while self.bytes + cost > self.config.max_reassembly_bytes {
                if !self.evict_oldest() {
                    break;
                }
                ctx.count("evicted");
            }
            self.gen += 1;
            let deadline = now + self.config.reassembly_timeout;
            self.partial.insert(
                key,
                Partial {
                    gen: self.gen,
                    deadline,
                    count: h.count,
                    buf: vec![0; total],
                    have: vec![0; usize::from(h.count).div_ceil(64)],
                    received: 0,
                    cost,
                },
            );
            self.bytes += cost;
            self.order.push_back((key, self.gen));
            self.compact_order();
            // The oldest message's deadline (the timer may have been lost with a closed channel).
            let first = self
                .order
                .front()
                .and_then(|(k, _)| self.partial.get(k))
                .map_or(deadline, |p| p.deadline);
            self.arm(first, ctx);
        }
        let Some(p) = self.partial.get_mut(&key) else {
            return;
        };
        let (word, bit) = (usize::from(h.index) / 64, 1u64 << (h.index % 64));
        let Some(w) = p.have.get_mut(word) else {
            return;
        };
        if *w & bit != 0 {
            ctx.count("duplicate");
            return;
        }
        *w |= bit;
        p.received += 1;
        if let Some(dst) = p.buf.get_mut(offset..offset + len) {
            dst.copy_from_slice(s.message.as_slice());
        }
        if p.received < p.count {
            return;
        }
        let Some(p) = self.partial.remove(&key) else {
            return;
        };
        self.bytes -= p.cost;
        self.compact_order();
        ctx.count("reassembled");
        s.message = Message::from_wire(p.buf);
        ctx.go(event);
    }

    /// Drops the oldest incomplete message; false if there is none.
    fn evict_oldest(&mut self) -> bool {
        while let Some((key, gen)) = self.order.pop_front() {
            if self.partial.get(&key).is_some_and(|p| p.gen == gen) {
                if let Some(p) = self.partial.remove(&key) {
                    self.bytes -= p.cost;
                }
                return true;
            }
        }
        false
    }

    /// Drops stale entries at the front of the order queue, and all of them when stale ones
    /// elsewhere make it much longer than the map (so it stays within a constant factor).
    fn compact_order(&mut self) {
        while let Some((key, gen)) = self.order.front() {
            if self.partial.get(key).is_some_and(|p| p.gen == *gen) {
                break;
            }
            self.order.pop_front();
        }
        if self.order.len() > 2 * self.partial.len() + 16 {
            let partial = &self.partial;
            self.order
                .retain(|(k, g)| partial.get(k).is_some_and(|p| p.gen == *g));
        }
    }

    fn arm(&mut self, at: Instant, ctx: &mut Context<'_>) {
        match self.timer {
            Some((_, t)) if t <= at => {}
            _ => {
                if let Some((id, _)) = self.timer.take() {
                    ctx.cancel_timer(id);
                }
                self.timer = Some((ctx.set_timer_at(at, 0), at));
            }
        }
    }

    fn sweep(&mut self, fired: TimerId, ctx: &mut Context<'_>) {
        if self.timer.is_some_and(|(id, _)| id == fired) {
            self.timer = None;
        }
        let now = ctx.now();
        while let Some((key, gen)) = self.order.front().copied() {
            let Some(p) = self.partial.get(&key).filter(|p| p.gen == gen) else {
                self.order.pop_front();
                continue;
            };
            if p.deadline > now {
                let at = p.deadline;
                self.arm(at, ctx);
                break;
            }
            self.order.pop_front();
            if let Some(p) = self.partial.remove(&key) {
                self.bytes -= p.cost;
            }
            ctx.count("timeout");
        }
    }
}

impl Session for FragmentSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        if event.ty() == TIMER.id() {
            if let Body::Timer(t) = event.body {
                self.sweep(t.id, ctx);
            }
            return;
        }
        if event.ty() == CHANNEL_CLOSE.id() {
            let channel = event.channel();
            self.next_id.retain(|(c, _), _| *c != channel);
            let before = self.partial.len();
            self.partial.retain(|(c, _, _), _| *c != channel);
            self.bytes = self.partial.values().map(|p| p.cost).sum();
            ctx.count_n("closed", (before - self.partial.len()) as u64);
            self.compact_order();
            // The sweep timer may have been the closed channel's (the kernel drops those): it
            // is armed anew, for the oldest message, when the next message starts.
            if let Some((id, _)) = self.timer.take() {
                ctx.cancel_timer(id);
            }
            ctx.go(event);
            return;
        }
        if event.sendable_ref().is_none() {
            ctx.go(event);
            return;
        }
        match event.dir() {
            Direction::Down => self.split(event, ctx),
            Direction::Up => self.receive(event, ctx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        let h = Header {
            id: 0x0102_0304,
            index: 5,
            count: 9,
            offset: 7000,
            total: 12_345,
        };
        let mut m = Message::from_payload(b"xy");
        h.emit(&mut m);
        assert_eq!(
            m.as_slice()[..HEADER_LEN],
            [1, 2, 3, 4, 0, 5, 0, 9, 0, 0, 0x1b, 0x58, 0, 0, 0x30, 0x39]
        );
        assert_eq!(Header::parse(&mut m), Ok(h));
        assert_eq!(m.as_slice(), b"xy");
        let mut short = Message::from_wire(vec![0; HEADER_LEN - 1]);
        assert!(Header::parse(&mut short).is_err());
    }
}
