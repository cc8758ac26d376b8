//! `fragment`: splits messages larger than `mtu` bytes into fragments and reassembles them at
//! the receiver, within a per-session memory bound; what it cannot reassemble it reports.
//!
//! # Wire format (network byte order)
//!
//! Every fragment starts with a type byte: version (high nibble, 1) and kind (low nibble).
//!
//! FRAGMENT (`0x11`), 17 bytes, followed by the fragment's bytes:
//!
//! | offset | bytes | field |
//! | --- | --- | --- |
//! | 0 | 1 | type `0x11` |
//! | 1 | 4 | message id: per (channel, destination), from a random start, wrapping |
//! | 5 | 2 | fragment index, from 0 |
//! | 7 | 2 | fragment count, ≥ 1 (1: the message was not split) |
//! | 9 | 4 | offset of this fragment's bytes in the message |
//! | 13 | 4 | total length of the message |
//!
//! REFUSED (`0x12`), 5 bytes, nothing after: the receiver will not reassemble message `id`
//! (bytes 1–4) of the channel from this node; it goes back to the sender, whose session
//! reports the message's tag up in a `SendRefused` notice.
//!
//! Every message carries the header, split or not, so a receiver never has to guess. The
//! sender cuts the message into `count = ceil(len / mtu)` pieces of `mtu` bytes (the last one
//! shorter); an empty message is one fragment of 0 bytes.
//!
//! # Receiving
//!
//! A fragment is checked before any memory is committed to it, and dropped and counted if it
//! contradicts itself or what is known of its message: `fragment.truncated` (shorter than its
//! header), `fragment.unknown_type`, `fragment.malformed` (count 0, index ≥ count, a single
//! fragment whose bytes are not the whole message, or bytes reaching past the total),
//! `fragment.inconsistent` (a count or total other than the first fragment of that id said),
//! `fragment.duplicate` (that index was already received). A message of one fragment is
//! forwarded at once without a copy (and without duplicate suppression, which is
//! `reliable-fifo`'s job: this layer keeps no state for whole messages).
//!
//! Reassembly (per channel, source and message id) allocates the whole message once, at its
//! first fragment, and copies each fragment's bytes straight to their offset: every payload
//! byte is copied once. Memory is accounted as the message's total plus a fixed overhead
//! ([`ENTRY_OVERHEAD`]) plus its index bitmap, and never exceeds `max_reassembly_bytes` per
//! session under any input. A completed message counts `fragment.reassembled`. What happens to
//! a message that cannot be completed depends on what the layers below promise
//! ([`Context::delivery_below`]):
//!
//! - **Over a best-effort path** (a device, a fault injector) a missing fragment may never
//!   come: an incomplete message older than `reassembly_timeout` is dropped
//!   (`fragment.timeout`; one timer armed for the oldest message's deadline), and to admit a
//!   new message the oldest incomplete ones are evicted (`fragment.evicted`). Dropped messages
//!   are counted by message, not by fragment.
//! - **Over a reliable FIFO path** (`reliable-fifo`, `sp`) every fragment will come unless its
//!   sender is told it will not, and the fragments of one message arrive together and in
//!   order. Nothing is dropped by time (a partition may last longer than any timer here while
//!   the reliable layer below still repairs it); at most one message per (channel, source) is
//!   incomplete, and a fragment of the next message means its sender abandoned the previous
//!   one (its reliable layer gave up on it and reported it: `fragment.abandoned`). When a new
//!   message does not fit the bound (after evicting best-effort partials), it is refused: its
//!   fragments are dropped (`fragment.refused`) and a REFUSED segment tells the sender, whose
//!   application gets the message's tag back in a `SendRefused` notice. Nothing the sender was
//!   not told of is lost.
//!
//! The sender remembers the tags of its last [`REMEMBERED_TAGS`] split messages per (channel,
//! destination) to name a refused one; a REFUSED for a message it no longer remembers is still
//! reported, without a tag (`fragment.refused_unknown`).
//!
//! Splitting copies each byte once (into its fragment's own buffer, behind fresh headroom for
//! the lower layers' headers); the first fragment reuses the original buffer, so it is not
//! copied at all. Every fragment carries the message's [`Tag`].

use std::collections::VecDeque;

use fnv::FnvHashMap;
use viastack_kernel::event::{CHANNEL_CLOSE, INBOUND, SENDABLE, TIMER};
use viastack_kernel::message::DEFAULT_HEADROOM;
use viastack_kernel::{
    Body, ChannelId, Context, Delivery, Dest, Direction, Duration, Event, EventType, Instant,
    Layer, Message, NodeId, Sendable, Session, Tag, TimerId,
};

use crate::events::{failure, SEND_REFUSED};
use crate::peers::draw_epoch;

/// Version of the format (the high nibble of the type byte).
pub const VERSION: u8 = 1;
/// Type byte of a FRAGMENT.
pub const TYPE_FRAGMENT: u8 = VERSION << 4 | 1;
/// Type byte of a REFUSED.
pub const TYPE_REFUSED: u8 = VERSION << 4 | 2;

/// Bytes of a FRAGMENT header.
pub const HEADER_LEN: usize = 17;

/// Bytes of a REFUSED segment.
pub const REFUSED_LEN: usize = 5;

/// Bytes accounted per message under reassembly besides its payload and bitmap (the map entry,
/// the order queue entry and the allocation's bookkeeping, rounded up).
pub const ENTRY_OVERHEAD: usize = 128;

/// Split messages per (channel, destination) whose tags a sender remembers, to name one its
/// receiver refuses. A receiver over a reliable FIFO path refuses a message when its first
/// fragment arrives, so the sender is at most its reliable layer's send buffer ahead (1,024
/// segments by default, so at most 512 split messages): four times that.
pub const REMEMBERED_TAGS: usize = 4096;

/// Parameters of [`Fragment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Largest fragment payload, bytes. Default 1400: with this layer's 17 bytes, the
    /// reliable-fifo (25), checksum (4) and device (2) headers and IPv6 + UDP (48) a datagram
    /// stays under Ethernet's 1500-byte MTU (RFC 894), so IP never fragments (RFC 8085 §3.2).
    pub mtu: usize,
    /// How long an incomplete message is kept over a best-effort path (over a reliable one,
    /// messages are never dropped by time). Default 2 s: well under IPv4's 15 s initial
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
    /// A path to the network: a transport below (a device), which provides `Inbound`.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// REFUSED segments, and the notice naming a refused message.
    fn provides(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), SEND_REFUSED.id()]
    }
    /// Over a best-effort path it may drop incomplete messages (which were not promised);
    /// over a reliable one it drops nothing it does not report.
    fn delivery(&self, below: Delivery) -> Delivery {
        below
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

/// A parsed segment of this layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// A fragment; its bytes stay in the message.
    Fragment(Header),
    /// The receiver refused message `id`.
    Refused(u32),
}

/// Why a segment was refused by the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Shorter than its header.
    #[error("truncated")]
    Truncated,
    /// A type byte of another version or an unknown kind.
    #[error("unknown type byte {0:#04x}")]
    UnknownType(u8),
    /// A REFUSED with bytes after its id.
    #[error("trailing bytes after a REFUSED")]
    Trailing,
}

impl Error {
    /// The counter a drop for this reason is counted under.
    pub fn counter(&self) -> &'static str {
        match self {
            Error::Truncated => "truncated",
            Error::UnknownType(_) => "unknown_type",
            Error::Trailing => "malformed",
        }
    }
}

impl From<viastack_kernel::Truncated> for Error {
    fn from(_: viastack_kernel::Truncated) -> Self {
        Error::Truncated
    }
}

impl Header {
    /// Pushes the header (with its type byte) in front of `m`.
    pub fn emit(&self, m: &mut Message) {
        m.push_u32(self.total);
        m.push_u32(self.offset);
        m.push_u16(self.count);
        m.push_u16(self.index);
        m.push_u32(self.id);
        m.push_u8(TYPE_FRAGMENT);
    }
}

impl Segment {
    /// Pops a segment's header from `m` (a fragment's bytes stay in `m`).
    ///
    /// # Errors
    /// [`Error`] when `m` holds no valid header (then `m` may have lost some bytes: the caller
    /// drops it).
    pub fn parse(m: &mut Message) -> Result<Segment, Error> {
        match m.pop_u8()? {
            TYPE_FRAGMENT => {
                m.peek(HEADER_LEN - 1)?;
                Ok(Segment::Fragment(Header {
                    id: m.pop_u32()?,
                    index: m.pop_u16()?,
                    count: m.pop_u16()?,
                    offset: m.pop_u32()?,
                    total: m.pop_u32()?,
                }))
            }
            TYPE_REFUSED => {
                let id = m.pop_u32()?;
                if !m.is_empty() {
                    return Err(Error::Trailing);
                }
                Ok(Segment::Refused(id))
            }
            other => Err(Error::UnknownType(other)),
        }
    }

    /// A REFUSED segment for message `id`, with headroom for the lower layers.
    pub fn refused(id: u32) -> Message {
        let mut m = Message::new();
        m.push_u32(id);
        m.push_u8(TYPE_REFUSED);
        m
    }
}

type Key = (ChannelId, NodeId, u32);

/// One message under reassembly.
#[derive(Debug)]
struct Partial {
    gen: u64,
    /// When it is dropped (over a best-effort path); None over a reliable one.
    deadline: Option<Instant>,
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
    /// The tags of the last split messages per (channel, destination), to name a refused one.
    sent: FnvHashMap<(ChannelId, Dest), VecDeque<(u32, Tag)>>,
    partial: FnvHashMap<Key, Partial>,
    /// Over a reliable FIFO path: the one message under reassembly per (channel, source).
    current: FnvHashMap<(ChannelId, NodeId), u32>,
    /// Over a reliable FIFO path: the message refused last per (channel, source), whose later
    /// fragments are dropped.
    refused: FnvHashMap<(ChannelId, NodeId), u32>,
    /// Best-effort messages by arrival of their first fragment (oldest first); entries whose
    /// generation no longer matches are stale and skipped.
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
            sent: FnvHashMap::default(),
            partial: FnvHashMap::default(),
            current: FnvHashMap::default(),
            refused: FnvHashMap::default(),
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
            if let Some(notice) = refusal(channel, s.dest, s.tag) {
                ctx.go(notice);
            }
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
        let (source, dest, tag) = (s.source, s.dest, s.tag);
        if count > 1 {
            ctx.count_n("fragments", u64::from(count));
            if tag != Tag::NONE {
                let sent = self.sent.entry((channel, dest)).or_default();
                if sent.len() == REMEMBERED_TAGS {
                    sent.pop_front();
                }
                sent.push_back((id, tag));
            }
        }
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
                Sendable::new(source, dest, m).with_tag(tag),
            ));
        }
    }

    fn receive(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let channel = event.channel();
        let Some(s) = event.sendable_mut() else {
            return;
        };
        let h = match Segment::parse(&mut s.message) {
            Ok(Segment::Fragment(h)) => h,
            Ok(Segment::Refused(id)) => {
                let source = s.source;
                self.on_refused(channel, source, id, ctx);
                return;
            }
            Err(e) => {
                ctx.count(e.counter());
                return;
            }
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
        let source = s.source;
        let reliable = ctx.delivery_below().is_reliable_fifo();
        if h.count == 1 {
            if reliable {
                self.abandon_current(channel, source, ctx);
            }
            ctx.go(event);
            return;
        }
        let key = (channel, source, h.id);
        if let Some(p) = self.partial.get(&key) {
            if p.count != h.count || p.buf.len() != total {
                ctx.count("inconsistent");
                return;
            }
        } else if !self.admit(key, h, reliable, ctx) {
            return;
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
        let Some(p) = self.remove(&key) else {
            return;
        };
        self.compact_order();
        ctx.count("reassembled");
        s.message = Message::from_wire(p.buf);
        ctx.go(event);
    }

    /// Starts reassembling message `key`, whose first fragment (header `h`) just arrived, or
    /// refuses it (false).
    fn admit(&mut self, key: Key, h: Header, reliable: bool, ctx: &mut Context<'_>) -> bool {
        let (channel, source, id) = key;
        let cost = h.total as usize + usize::from(h.count).div_ceil(64) * 8 + ENTRY_OVERHEAD;
        let max = self.config.max_reassembly_bytes;
        let deadline = if reliable {
            if self.refused.get(&(channel, source)) == Some(&id) {
                return false; // a later fragment of a message refused (and counted) already
            }
            self.abandon_current(channel, source, ctx);
            None
        } else {
            if cost > max {
                ctx.count("too_large");
                return false;
            }
            Some(ctx.now() + self.config.reassembly_timeout)
        };
        // Best-effort messages make room; reliable ones are never evicted (they will complete).
        while self.bytes + cost > max && self.evict_oldest() {
            ctx.count("evicted");
        }
        if self.bytes + cost > max {
            if reliable {
                ctx.count("refused");
                self.refused.insert((channel, source), id);
                ctx.go(Event::sendable(
                    SENDABLE.id(),
                    Direction::Down,
                    channel,
                    Sendable::new(ctx.node(), Dest::Node(source), Segment::refused(id)),
                ));
            } else {
                ctx.count("no_room"); // reliable messages of other channels fill the bound
            }
            return false;
        }
        self.gen += 1;
        self.partial.insert(
            key,
            Partial {
                gen: self.gen,
                deadline,
                count: h.count,
                buf: vec![0; h.total as usize],
                have: vec![0; usize::from(h.count).div_ceil(64)],
                received: 0,
                cost,
            },
        );
        self.bytes += cost;
        match deadline {
            None => {
                self.current.insert((channel, source), id);
                self.refused.remove(&(channel, source));
            }
            Some(deadline) => {
                self.order.push_back((key, self.gen));
                self.compact_order();
                // The oldest message's deadline (the timer may have been lost with a closed
                // channel).
                let first = self
                    .order
                    .front()
                    .and_then(|(k, _)| self.partial.get(k))
                    .and_then(|p| p.deadline)
                    .unwrap_or(deadline);
                self.arm(first, ctx);
            }
        }
        true
    }

    /// Message `id` of `channel`, sent by this node to `peer`, was refused there: its tag goes
    /// up in a `SendRefused` notice.
    fn on_refused(&mut self, channel: ChannelId, peer: NodeId, id: u32, ctx: &mut Context<'_>) {
        let tag = [Dest::Node(peer), Dest::Broadcast].iter().find_map(|d| {
            self.sent
                .get(&(channel, *d))
                .and_then(|q| q.iter().rev().find(|(i, _)| *i == id))
                .map(|(_, t)| *t)
        });
        ctx.count("refused_by_peer");
        if tag.is_none() {
            ctx.count("refused_unknown");
        }
        ctx.go(failure(&SEND_REFUSED, channel, peer, tag));
    }

    /// Over a reliable FIFO path, a message from `source` arrived: the one under reassembly
    /// before it will never complete (its sender abandoned it, and was told so by its reliable
    /// layer).
    fn abandon_current(&mut self, channel: ChannelId, source: NodeId, ctx: &mut Context<'_>) {
        if let Some(old) = self.current.remove(&(channel, source)) {
            if self.remove(&(channel, source, old)).is_some() {
                ctx.count("abandoned");
            }
        }
    }

    /// Forgets message `key`'s reassembly state, returning it.
    fn remove(&mut self, key: &Key) -> Option<Partial> {
        let p = self.partial.remove(key)?;
        self.bytes -= p.cost;
        let (channel, source, id) = *key;
        if self.current.get(&(channel, source)) == Some(&id) {
            self.current.remove(&(channel, source));
        }
        Some(p)
    }

    /// Drops the oldest incomplete best-effort message; false if there is none.
    fn evict_oldest(&mut self) -> bool {
        while let Some((key, gen)) = self.order.pop_front() {
            if self.partial.get(&key).is_some_and(|p| p.gen == gen) {
                self.remove(&key);
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
            let Some(deadline) = self
                .partial
                .get(&key)
                .filter(|p| p.gen == gen)
                .and_then(|p| p.deadline)
            else {
                self.order.pop_front();
                continue;
            };
            if deadline > now {
                self.arm(deadline, ctx);
                break;
            }
            self.order.pop_front();
            self.remove(&key);
            ctx.count("timeout");
        }
    }
}

/// A `SendRefused` notice for a message this layer cannot send (more than 65,535 fragments or
/// 4 GiB): to a node its tag comes back; a broadcast is only counted.
fn refusal(channel: ChannelId, dest: Dest, tag: Tag) -> Option<Event> {
    match dest {
        Dest::Node(peer) => Some(failure(&SEND_REFUSED, channel, peer, [tag])),
        Dest::Broadcast => None,
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
            self.sent.retain(|(c, _), _| *c != channel);
            self.current.retain(|(c, _), _| *c != channel);
            self.refused.retain(|(c, _), _| *c != channel);
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
    fn segments_roundtrip() {
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
            [0x11, 1, 2, 3, 4, 0, 5, 0, 9, 0, 0, 0x1b, 0x58, 0, 0, 0x30, 0x39]
        );
        assert_eq!(Segment::parse(&mut m), Ok(Segment::Fragment(h)));
        assert_eq!(m.as_slice(), b"xy");
        let mut r = Segment::refused(0x0a0b_0c0d);
        assert_eq!(r.as_slice(), [0x12, 0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(Segment::parse(&mut r), Ok(Segment::Refused(0x0a0b_0c0d)));
        let parse = |b: &[u8]| Segment::parse(&mut Message::from_wire(b.to_vec()));
        assert_eq!(parse(&[0x11; HEADER_LEN - 1]), Err(Error::Truncated));
        assert_eq!(parse(&[0x12, 0, 0, 0, 1, 0]), Err(Error::Trailing));
        assert_eq!(parse(&[0x21, 0, 0, 0, 1]), Err(Error::UnknownType(0x21)));
        assert_eq!(parse(&[]), Err(Error::Truncated));
    }
}
