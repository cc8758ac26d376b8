//! Zero-copy messages: headers pushed into headroom and popped over one buffer (seed 001 §4,
//! §5.2 "Message class"; DESIGN.md §4.4).
//!
//! A [`Message`] is one contiguous buffer with a movable start. Sending layers `push` their
//! headers in front of the payload, into headroom reserved when the message was created, so the
//! payload is written once and never copied between layers. Receiving layers `pop` headers by
//! advancing the start, and `peek` reads without removing. When a push does not fit the
//! remaining headroom the buffer is reallocated once with generous headroom (amortised, and
//! counted by [`Message::reallocations`] in tests).
//!
//! All integers are big-endian (network byte order). Every `pop`/`peek` of bytes that are not
//! there returns [`Truncated`]; nothing here panics on short input.

use std::fmt;

/// Headroom reserved in front of a payload for headers (bytes).
pub const DEFAULT_HEADROOM: usize = 128;

/// Room reserved behind the payload for trailers (bytes): an AEAD tag (16) and a checksum fit
/// without growing — and so copying — a 64 KiB buffer.
pub const DEFAULT_TAILROOM: usize = 32;

/// A header was read past the end of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("message truncated: wanted {wanted} bytes, {available} available")]
pub struct Truncated {
    /// Bytes asked for.
    pub wanted: usize,
    /// Bytes left in the message.
    pub available: usize,
}

/// Headers and payload over one buffer with headroom.
#[derive(Default, PartialEq, Eq)]
pub struct Message {
    buf: Vec<u8>,
    start: usize,
    reallocations: u32,
}

impl Message {
    /// An empty message with the default headroom.
    pub fn new() -> Self {
        Self::with_headroom(DEFAULT_HEADROOM, &[])
    }

    /// A message holding `payload`, with the default headroom for headers.
    pub fn from_payload(payload: &[u8]) -> Self {
        Self::with_headroom(DEFAULT_HEADROOM, payload)
    }

    /// A message holding `payload` with `headroom` bytes reserved in front.
    pub fn with_headroom(headroom: usize, payload: &[u8]) -> Self {
        let mut buf = Vec::with_capacity(headroom + payload.len() + DEFAULT_TAILROOM);
        buf.resize(headroom, 0);
        buf.extend_from_slice(payload);
        Message {
            buf,
            start: headroom,
            reallocations: 0,
        }
    }

    /// An empty message with `headroom` bytes in front and room for `capacity` bytes of data
    /// appended with [`Message::extend_from_slice`] without reallocating (a layer building a
    /// datagram from several messages writes each byte once).
    pub fn with_capacity(headroom: usize, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(headroom + capacity + DEFAULT_TAILROOM);
        buf.resize(headroom, 0);
        Message {
            buf,
            start: headroom,
            reallocations: 0,
        }
    }

    /// A message over bytes received from the wire (no headroom: it will be popped, not pushed).
    pub fn from_wire(bytes: Vec<u8>) -> Self {
        Message {
            buf: bytes,
            start: 0,
            reallocations: 0,
        }
    }

    /// Bytes in the message (headers pushed so far plus payload).
    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether the message holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Free bytes in front of the data.
    pub fn headroom(&self) -> usize {
        self.start
    }

    /// How many times a push had to grow the buffer (0 when headroom sufficed).
    pub fn reallocations(&self) -> u32 {
        self.reallocations
    }

    /// The message's bytes, first header first.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The message's bytes, mutably (for checksums filled in place).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }

    /// The bytes as an owned vector (moves the data to the front; no copy when no headroom).
    pub fn into_vec(mut self) -> Vec<u8> {
        if self.start > 0 {
            self.buf.drain(..self.start);
        }
        self.buf
    }

    /// Pushes `header` in front of the current data.
    pub fn push(&mut self, header: &[u8]) {
        let n = header.len();
        if n > self.start {
            self.grow_headroom(n);
        }
        self.start -= n;
        self.buf[self.start..self.start + n].copy_from_slice(header);
    }

    fn grow_headroom(&mut self, need: usize) {
        let headroom = need.max(DEFAULT_HEADROOM) * 2;
        let mut buf = Vec::with_capacity(headroom + self.len() + DEFAULT_TAILROOM);
        buf.resize(headroom, 0);
        buf.extend_from_slice(self.as_slice());
        self.buf = buf;
        self.start = headroom;
        self.reallocations += 1;
    }

    /// Appends bytes at the end (a trailer, or payload being built).
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Removes and returns the first `n` bytes.
    ///
    /// # Errors
    /// [`Truncated`] if fewer than `n` bytes remain; the message is unchanged.
    pub fn pop(&mut self, n: usize) -> Result<&[u8], Truncated> {
        self.check(n)?;
        let s = self.start;
        self.start += n;
        Ok(&self.buf[s..s + n])
    }

    /// Returns the first `n` bytes without removing them.
    ///
    /// # Errors
    /// [`Truncated`] if fewer than `n` bytes remain.
    pub fn peek(&self, n: usize) -> Result<&[u8], Truncated> {
        self.check(n)?;
        Ok(&self.buf[self.start..self.start + n])
    }

    /// Removes `n` bytes from the end (a trailer).
    ///
    /// # Errors
    /// [`Truncated`] if fewer than `n` bytes remain.
    pub fn truncate_back(&mut self, n: usize) -> Result<(), Truncated> {
        self.check(n)?;
        self.buf.truncate(self.buf.len() - n);
        Ok(())
    }

    /// Keeps the first `len` bytes and drops the rest (no-op when shorter).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.buf.truncate(self.start + len);
        }
    }

    fn check(&self, n: usize) -> Result<(), Truncated> {
        if n > self.len() {
            Err(Truncated {
                wanted: n,
                available: self.len(),
            })
        } else {
            Ok(())
        }
    }

    fn pop_array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.pop(N)?);
        Ok(out)
    }

    fn peek_array<const N: usize>(&self) -> Result<[u8; N], Truncated> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.peek(N)?);
        Ok(out)
    }
}

macro_rules! int_access {
    ($($ty:ty => $push:ident, $pop:ident, $peek:ident;)*) => {
        impl Message {
            $(
                #[doc = concat!("Pushes a big-endian `", stringify!($ty), "`.")]
                pub fn $push(&mut self, v: $ty) {
                    self.push(&v.to_be_bytes());
                }

                #[doc = concat!("Pops a big-endian `", stringify!($ty), "`.")]
                ///
                /// # Errors
                /// [`Truncated`] when the message is too short.
                pub fn $pop(&mut self) -> Result<$ty, Truncated> {
                    Ok(<$ty>::from_be_bytes(self.pop_array()?))
                }

                #[doc = concat!("Reads a big-endian `", stringify!($ty), "` without removing it.")]
                ///
                /// # Errors
                /// [`Truncated`] when the message is too short.
                pub fn $peek(&self) -> Result<$ty, Truncated> {
                    Ok(<$ty>::from_be_bytes(self.peek_array()?))
                }
            )*
        }
    };
}

int_access! {
    u8 => push_u8, pop_u8, peek_u8;
    u16 => push_u16, pop_u16, peek_u16;
    u32 => push_u32, pop_u32, peek_u32;
    u64 => push_u64, pop_u64, peek_u64;
}

/// A clone keeps the headroom (so the copy's headers are pushed without growing) and reserves
/// [`DEFAULT_TAILROOM`] (a retransmitted copy gets its trailer without a reallocation).
/// Cloning a message is the one payload copy a retransmission buffer makes.
impl Clone for Message {
    fn clone(&self) -> Self {
        let mut buf = Vec::with_capacity(self.buf.len() + DEFAULT_TAILROOM);
        buf.extend_from_slice(&self.buf);
        Message {
            buf,
            start: self.start,
            reallocations: self.reallocations,
        }
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = &self.as_slice()[..self.len().min(16)];
        write!(f, "Message({} bytes: ", self.len())?;
        for b in shown {
            write!(f, "{b:02x}")?;
        }
        if self.len() > 16 {
            f.write_str("…")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_roundtrip_in_network_order() {
        let mut m = Message::from_payload(b"payload");
        m.push_u16(0x0102);
        m.push_u32(0xdead_beef);
        m.push_u8(7);
        assert_eq!(m.as_slice()[..7], [7, 0xde, 0xad, 0xbe, 0xef, 0x01, 0x02]);
        assert_eq!(m.peek_u8().unwrap(), 7);
        assert_eq!(m.pop_u8().unwrap(), 7);
        assert_eq!(m.pop_u32().unwrap(), 0xdead_beef);
        assert_eq!(m.pop_u16().unwrap(), 0x0102);
        assert_eq!(m.as_slice(), b"payload");
    }

    #[test]
    fn payload_is_not_copied_while_headroom_lasts() {
        let mut m = Message::from_payload(&[9u8; 1000]);
        let payload_ptr = m.as_slice().as_ptr();
        for _ in 0..(DEFAULT_HEADROOM / 8) {
            m.push_u64(1);
        }
        assert_eq!(m.reallocations(), 0);
        // The payload still sits at the same address: headers went into headroom.
        assert_eq!(m.as_slice()[DEFAULT_HEADROOM..].as_ptr(), payload_ptr);
        m.push_u8(1);
        assert_eq!(m.reallocations(), 1);
        assert_eq!(m.len(), 1000 + DEFAULT_HEADROOM + 1);
    }

    #[test]
    fn short_input_is_an_error_not_a_panic() {
        let mut m = Message::from_wire(vec![1, 2, 3]);
        let err = m.pop_u32().unwrap_err();
        assert_eq!(
            err,
            Truncated {
                wanted: 4,
                available: 3
            }
        );
        assert_eq!(m.len(), 3, "a failed pop leaves the message unchanged");
        assert!(m.peek(4).is_err());
        assert!(m.truncate_back(4).is_err());
        assert_eq!(m.pop(3).unwrap(), &[1, 2, 3]);
        assert!(m.pop_u8().is_err());
    }

    #[test]
    fn into_vec_and_trailers() {
        let mut m = Message::from_payload(b"abc");
        m.push(b"h");
        m.extend_from_slice(b"T");
        m.truncate_back(1).unwrap();
        assert_eq!(m.clone().into_vec(), b"habc");
        m.truncate(2);
        assert_eq!(m.as_slice(), b"ha");
    }

    #[test]
    fn a_clone_takes_headers_and_a_trailer_in_place() {
        let original = Message::from_payload(&[9u8; 65536]);
        let mut copy = original.clone();
        let before = copy.as_slice().as_ptr();
        copy.extend_from_slice(&[1u8; 16]);
        copy.push_u64(7);
        // Same buffer: the trailer used the tailroom and the header the headroom.
        assert_eq!(copy.as_slice()[8..].as_ptr(), before);
        assert_eq!(copy.reallocations(), 0);
        assert_eq!(copy.len(), 65536 + 16 + 8);
        assert_eq!(original.len(), 65536);
    }
}
