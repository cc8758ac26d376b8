//! `checksum`: CRC32C over everything the upper layers wrote (headers and payload), so that a
//! datagram damaged on the way is dropped before any upper header decoder reads it.
//!
//! Wire format (network byte order), pushed in front of the upper layers' bytes:
//!
//! | bytes | field |
//! | --- | --- |
//! | 4 | CRC32C (Castagnoli polynomial, RFC 3720 §B.4, as iSCSI, SCTP (RFC 9260 App. B) and ext4 use it) of every byte that follows |
//!
//! CRC32C detects every error of up to 3 flipped bits in messages up to 2^31 bits and every
//! burst of up to 32 bits (Castagnoli 1993); the simulator flips 1–3 bits. It is not a MAC: a
//! deliberate forgery passes (that is `encrypt`'s job). Computed with the `crc32c` crate (SSE4.2
//! or ARMv8 CRC instructions when present).
//!
//! Going down, one pass over the bytes and a 4-byte push into headroom (no payload copy). Going
//! up, the CRC is checked over the bytes after it and popped.
//!
//! Counters: `checksum.bad` (the CRC does not match: dropped), `checksum.truncated` (fewer than
//! 4 bytes: dropped).
//!
//! Memory: none per peer; the session is stateless.

use viastack_kernel::event::{INBOUND, SENDABLE};
use viastack_kernel::{Context, Delivery, Direction, Event, EventType, Layer, Session};

/// Bytes of the header.
pub const HEADER_LEN: usize = 4;

/// The CRC32C of `bytes`, as the header carries it.
pub fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The `checksum` layer.
#[derive(Debug, Clone)]
pub struct Checksum {
    name: String,
}

impl Checksum {
    /// A checksum layer named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Checksum { name: name.into() }
    }
}

impl Layer for Checksum {
    fn name(&self) -> &str {
        &self.name
    }
    fn accepts(&self) -> Vec<EventType> {
        vec![SENDABLE.id()]
    }
    /// A path to the network: a transport below (a device), which provides `Inbound`.
    fn requires(&self) -> Vec<EventType> {
        vec![INBOUND.id()]
    }
    /// Drops only what arrives damaged: what the layers below promise holds above it.
    fn delivery(&self, below: Delivery) -> Delivery {
        below
    }
    fn create_session(&self) -> Box<dyn Session> {
        Box::new(ChecksumSession)
    }
}

/// Session of [`Checksum`] (stateless).
#[derive(Debug, Default)]
pub struct ChecksumSession;

impl Session for ChecksumSession {
    fn handle(&mut self, mut event: Event, ctx: &mut Context<'_>) {
        let dir = event.dir();
        let Some(s) = event.sendable_mut() else {
            ctx.go(event);
            return;
        };
        match dir {
            Direction::Down => {
                let sum = crc(s.message.as_slice());
                s.message.push_u32(sum);
            }
            Direction::Up => {
                let Ok(sum) = s.message.pop_u32() else {
                    ctx.count("truncated");
                    return;
                };
                if crc(s.message.as_slice()) != sum {
                    ctx.count("bad");
                    return;
                }
            }
        }
        ctx.go(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        // RFC 3720 §B.4: 32 bytes of zeros → 0x8a9136aa; "123456789" → 0xe3069283 (the
        // standard check value of CRC-32C).
        assert_eq!(crc(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc(&[0xffu8; 32]), 0x62a8_ab43);
        assert_eq!(crc(b"123456789"), 0xe306_9283);
        assert_eq!(crc(b""), 0);
    }
}
