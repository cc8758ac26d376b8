//! `bundle`: packs the messages queued for one destination in one flush into one datagram, and
//! splits them again on receipt (issue 13 §5; the transport bundling JGroups does, as a layer).
//!
//! Small messages cost a system call, a datagram and a wake-up each; packed together they share
//! them. Going down, a session holds each message for its destination until the kernel's
//! [`FLUSH`]: the kernel hands it out as soon as it has no more work for the driver's current
//! input (one application send, one datagram, the timers due now, or a batch the driver opened
//! with `Kernel::begin_batch`). Nothing waits for a timer or for more traffic (no Nagle): an idle
//! sender's message leaves in the same kernel call, with a 1-byte header. What queues up while
//! the stack is busy — segments a reliable layer releases when an ACK opens its window, ACKs of
//! a burst, messages an application hands over in one batch — leaves as one bundle per
//! destination, up to `max_bytes`.
//!
//! Where it sits: right above the transport (and `checksum`), below `reliable-fifo`, so one
//! datagram carries many segments and ACKs; a lost bundle loses all of them and the reliable
//! layer repairs each. It loses nothing a datagram would not, so it keeps the promise of the
//! layers below ([`Layer::delivery`]).
//!
//! # Wire format (network byte order; documented in docs/WIRE.md)
//!
//! | bytes | field | meaning |
//! | --- | --- | --- |
//! | 1 | `kind` | 1 = SINGLE: the rest of the datagram is one message; 2 = BUNDLE |
//! | 2 | `count` | BUNDLE only: messages in the bundle, at least 2 |
//! | 2 + n | `len`, bytes | BUNDLE only, `count` times: a message's length and its bytes |
//!
//! A BUNDLE must end exactly after its last message. Any other kind is a later version and is
//! dropped. A datagram that is damaged (no kind byte, a count below 2, a length past the end,
//! bytes after the last message) is dropped whole and counted; no part of it is ever handed up.
//!
//! # Counters
//!
//! `bundle.bundles` (BUNDLE datagrams sent), `bundle.bundled` (messages sent inside them),
//! `bundle.singles` (SINGLE datagrams sent), `bundle.received_bundles`, and the drops:
//! `bundle.truncated`, `bundle.bad_kind`, `bundle.bad_count`, `bundle.bad_length`,
//! `bundle.trailing`.
//!
//! # Memory
//!
//! Messages are held only between a send and the end of the same kernel call: at most what one
//! driver input makes the stack send.

use viastack_kernel::event::{Body, ChannelId, Sendable, CHANNEL_CLOSE, FLUSH, INBOUND, SENDABLE};
use viastack_kernel::message::DEFAULT_HEADROOM;
use viastack_kernel::{
    Context, Delivery, Dest, Direction, Event, EventType, Layer, Message, Session,
};

/// `kind` of a datagram carrying one message.
pub const SINGLE: u8 = 1;
/// `kind` of a datagram carrying several.
pub const BUNDLE: u8 = 2;
/// Bytes of a BUNDLE's header (`kind`, `count`).
pub const BUNDLE_HEADER: usize = 3;
/// Bytes before each message in a BUNDLE (`len`).
pub const ENTRY_HEADER: usize = 2;
/// Default `max_bytes`: a bundle's bytes, headers of the layers above included, that fit with
/// IPv4 + UDP, the device tag and a checksum in Ethernet's 1500-byte MTU.
pub const DEFAULT_MAX_BYTES: usize = 1400;

/// Why a received datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// Empty datagram, or a BUNDLE too short for its count.
    #[error("truncated")]
    Truncated,
    /// A `kind` this version does not know.
    #[error("unknown kind {0}")]
    BadKind(u8),
    /// A BUNDLE of fewer than 2 messages.
    #[error("bundle of {0} messages")]
    BadCount(u16),
    /// A message's length runs past the end of the datagram.
    #[error("message length past the end")]
    BadLength,
    /// Bytes after the last message.
    #[error("{0} bytes after the last message")]
    Trailing(usize),
}

impl BundleError {
    /// The counter a drop for this reason adds to.
    pub fn counter(self) -> &'static str {
        match self {
            BundleError::Truncated => "truncated",
            BundleError::BadKind(_) => "bad_kind",
            BundleError::BadCount(_) => "bad_count",
            BundleError::BadLength => "bad_length",
            BundleError::Trailing(_) => "trailing",
        }
    }
}

/// What a datagram holds, as ranges of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// One message: the bytes from 1 on.
    Single,
    /// Several: each message's byte range.
    Bundle(Vec<std::ops::Range<usize>>),
}

/// Decodes a datagram's bundle framing, checking all of it before anything is handed up.
///
/// # Errors
/// [`BundleError`] for a damaged or unknown datagram.
pub fn decode(bytes: &[u8]) -> Result<Decoded, BundleError> {
    match bytes.first() {
        None => Err(BundleError::Truncated),
        Some(&SINGLE) => Ok(Decoded::Single),
        Some(&BUNDLE) => {
            let count = match bytes.get(1..BUNDLE_HEADER) {
                Some(&[a, b]) => u16::from_be_bytes([a, b]),
                _ => return Err(BundleError::Truncated),
            };
            if count < 2 {
                return Err(BundleError::BadCount(count));
            }
            let mut at = BUNDLE_HEADER;
            let mut ranges = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                let len = match bytes.get(at..at + ENTRY_HEADER) {
                    Some(&[a, b]) => usize::from(u16::from_be_bytes([a, b])),
                    _ => return Err(BundleError::Truncated),
                };
                let start = at + ENTRY_HEADER;
                let end = start + len;
                if end > bytes.len() {
                    return Err(BundleError::BadLength);
                }
                ranges.push(start..end);
                at = end;
            }
            if at != bytes.len() {
                return Err(BundleError::Trailing(bytes.len() - at));
            }
            Ok(Decoded::Bundle(ranges))
        }
        Some(&other) => Err(BundleError::BadKind(other)),
    }
}

/// Encodes messages as one BUNDLE (`messages.len()` ≥ 2, each at most 65,535 bytes).
pub fn encode_bundle<'a>(messages: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Message::with_capacity(0, 64);
    write_bundle(&mut out, messages);
    out.into_vec()
}

/// Appends the BUNDLE of `messages` to `out`.
fn write_bundle<'a>(out: &mut Message, messages: impl ExactSizeIterator<Item = &'a [u8]>) {
    out.extend_from_slice(&[BUNDLE]);
    out.extend_from_slice(&(messages.len() as u16).to_be_bytes());
    for m in messages {
        out.extend_from_slice(&(m.len() as u16).to_be_bytes());
        out.extend_from_slice(m);
    }
}

/// The `bundle` layer.
#[derive(Debug, Clone)]
pub struct Bundle {
    name: String,
    max_bytes: usize,
}

impl Bundle {
    /// A bundle layer named `name` packing up to `max_bytes` per datagram (its own headers
    /// included; at least 8, at most 65,507).
    pub fn new(name: impl Into<String>, max_bytes: usize) -> Self {
        Bundle {
            name: name.into(),
            max_bytes: max_bytes.clamp(8, 65_507),
        }
    }
}

impl Layer for Bundle {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id(), CHANNEL_CLOSE.id()]
    }
    /// A path to the network: a transport below.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// Loses, copies and reorders nothing a datagram would not: the promise below holds.
    fn delivery(&self, below: Delivery) -> Delivery {
        below
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(BundleSession {
            max_bytes: self.max_bytes,
            pending: Vec::new(),
        })
    }
}

/// Messages held for one destination of one channel, in send order.
#[derive(Debug)]
struct Group {
    channel: ChannelId,
    dest: Dest,
    /// Each message with the event type it came down as (a SINGLE keeps it).
    messages: Vec<(EventType, Sendable)>,
    /// Bytes the group would take as a BUNDLE.
    bytes: usize,
}

/// Session of [`Bundle`].
#[derive(Debug)]
pub struct BundleSession {
    max_bytes: usize,
    pending: Vec<Group>,
}

impl BundleSession {
    fn on_down(&mut self, ty: EventType, s: Sendable, channel: ChannelId, ctx: &mut Context<'_>) {
        let entry = ENTRY_HEADER + s.message.len();
        let fits_a_bundle = BUNDLE_HEADER + 2 * ENTRY_HEADER + s.message.len() < self.max_bytes
            && s.message.len() <= usize::from(u16::MAX);
        let at = self
            .pending
            .iter()
            .position(|g| g.channel == channel && g.dest == s.dest);
        if !fits_a_bundle {
            // Too large to share a datagram: what waits for its destination leaves first, so
            // the order of the destination's messages holds.
            if let Some(i) = at {
                let g = self.pending.remove(i);
                emit(g, ctx);
            }
            emit_single(channel, ty, s, ctx);
            return;
        }
        match at {
            Some(i) if self.pending[i].bytes + entry <= self.max_bytes => {
                let g = &mut self.pending[i];
                g.bytes += entry;
                g.messages.push((ty, s));
            }
            Some(i) => {
                let full = std::mem::replace(
                    &mut self.pending[i],
                    Group {
                        channel,
                        dest: s.dest,
                        messages: vec![(ty, s)],
                        bytes: BUNDLE_HEADER + entry,
                    },
                );
                emit(full, ctx);
            }
            None => {
                self.pending.push(Group {
                    channel,
                    dest: s.dest,
                    messages: vec![(ty, s)],
                    bytes: BUNDLE_HEADER + entry,
                });
                ctx.request_flush();
            }
        }
    }

    /// Sends everything held for `channel`.
    fn flush(&mut self, channel: ChannelId, ctx: &mut Context<'_>) {
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].channel == channel {
                let g = self.pending.remove(i);
                emit(g, ctx);
            } else {
                i += 1;
            }
        }
    }

    fn on_up(&mut self, event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        let channel = event.channel();
        let Body::Sendable(mut s) = event.body else {
            return;
        };
        match decode(s.message.as_slice()) {
            Err(e) => ctx.count(e.counter()),
            Ok(Decoded::Single) => {
                // Checked above: the kind byte is there.
                let _ = s.message.pop_u8();
                ctx.go(Event::new(ty, Direction::Up, channel, Body::Sendable(s)));
            }
            Ok(Decoded::Bundle(ranges)) => {
                ctx.count("received_bundles");
                let bytes = s.message.as_slice();
                for r in ranges {
                    let inner = Sendable::new(s.source, s.dest, Message::from_payload(&bytes[r]));
                    ctx.go(Event::sendable(ty, Direction::Up, channel, inner));
                }
            }
        }
    }
}

/// Sends a group: one message as a SINGLE, several as a BUNDLE.
fn emit(mut g: Group, ctx: &mut Context<'_>) {
    if g.messages.len() == 1 {
        if let Some((ty, s)) = g.messages.pop() {
            emit_single(g.channel, ty, s, ctx);
        }
        return;
    }
    ctx.count("bundles");
    ctx.count_n("bundled", g.messages.len() as u64);
    // Written once, straight into the datagram's buffer, headroom left for the layers below.
    let mut message = Message::with_capacity(DEFAULT_HEADROOM, g.bytes);
    write_bundle(
        &mut message,
        g.messages.iter().map(|(_, s)| s.message.as_slice()),
    );
    ctx.go(Event::sendable(
        SENDABLE.id(),
        Direction::Down,
        g.channel,
        Sendable::new(ctx.node(), g.dest, message),
    ));
}

/// Sends one message on its own, behind a SINGLE byte (its tag kept).
fn emit_single(channel: ChannelId, ty: EventType, mut s: Sendable, ctx: &mut Context<'_>) {
    ctx.count("singles");
    s.message.push_u8(SINGLE);
    ctx.go(Event::sendable(ty, Direction::Down, channel, s));
}

impl Session for BundleSession {
    fn handle(&mut self, event: Event, ctx: &mut Context<'_>) {
        let ty = event.ty();
        if ty == FLUSH.id() {
            self.flush(event.channel(), ctx);
            return;
        }
        if ty == CHANNEL_CLOSE.id() {
            self.flush(event.channel(), ctx);
            ctx.go(event);
            return;
        }
        match event.dir() {
            Direction::Down => {
                let channel = event.channel();
                match event.body {
                    Body::Sendable(s) => self.on_down(ty, *s, channel, ctx),
                    _ => ctx.go(event),
                }
            }
            Direction::Up => {
                if event.sendable_ref().is_some() {
                    self.on_up(event, ctx);
                } else {
                    ctx.go(event);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_checks_every_length_before_handing_anything_up() {
        let two = encode_bundle([&b"ab"[..], &b"cde"[..]].into_iter());
        assert_eq!(two, [2, 0, 2, 0, 2, b'a', b'b', 0, 3, b'c', b'd', b'e']);
        assert_eq!(decode(&two), Ok(Decoded::Bundle(vec![5..7, 9..12])));
        assert_eq!(decode(&two[..11]), Err(BundleError::BadLength));
        assert_eq!(decode(&two[..8]), Err(BundleError::Truncated));
        let mut long = two.clone();
        long.push(0);
        assert_eq!(decode(&long), Err(BundleError::Trailing(1)));
        assert_eq!(decode(&[2, 0, 1, 0, 0]), Err(BundleError::BadCount(1)));
        assert_eq!(decode(&[]), Err(BundleError::Truncated));
        assert_eq!(decode(&[9, 1]), Err(BundleError::BadKind(9)));
        assert_eq!(decode(&[1]), Ok(Decoded::Single));
    }

    #[test]
    fn what_decodes_re_encodes_to_the_same_bytes() {
        // The fuzz target's property, over bundles with one byte changed or cut short.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut accepted, mut refused) = (0, 0);
        for _ in 0..50_000 {
            let count = 2 + next() % 4;
            let messages: Vec<Vec<u8>> = (0..count)
                .map(|_| vec![0xab; (next() % 5) as usize])
                .collect();
            let mut bytes = encode_bundle(messages.iter().map(Vec::as_slice));
            let r = next();
            let at = (r >> 8) as usize % bytes.len();
            match r % 3 {
                0 => bytes[at] = (r >> 32) as u8,
                1 => bytes.truncate(at),
                _ => {}
            }
            match decode(&bytes) {
                Ok(Decoded::Bundle(ranges)) => {
                    accepted += 1;
                    let again = encode_bundle(ranges.iter().map(|r| &bytes[r.clone()]));
                    assert_eq!(again, bytes);
                }
                Ok(Decoded::Single) => assert_eq!(bytes[0], SINGLE),
                Err(_) => refused += 1,
            }
        }
        assert!(
            accepted > 10_000 && refused > 10_000,
            "{accepted} {refused}"
        );
    }
}
