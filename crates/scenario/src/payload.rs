//! The workload's message format: what the simulated application sends, so that every delivery
//! can be attributed to its stream and checked for order, duplication and integrity.
//!
//! Layout (network byte order), padded with filler to the workload's size:
//!
//! | bytes | field |
//! | --- | --- |
//! | 2 | workload index |
//! | 4 | source node |
//! | 4 | destination node |
//! | 8 | sequence number within the (workload, source, destination) stream |
//! | 8 | send time, ns of virtual time |
//! | n | filler: byte *i* is `(seq + i) mod 251` |
//! | 4 | FNV-1a (32-bit) of everything before it |
//!
//! A payload whose digest does not match was corrupted somewhere the stack did not notice.

use std::hash::Hasher;

use viastack_kernel::{Instant, NodeId};

/// Fixed bytes of a payload (header + digest); smaller workload sizes are rounded up to this.
pub const MIN_SIZE: usize = 2 + 4 + 4 + 8 + 8 + 4;

/// Identity of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Index of the workload in the scenario.
    pub workload: u16,
    /// Sender.
    pub src: NodeId,
    /// Addressee.
    pub dst: NodeId,
    /// Sequence number in the stream (from 0).
    pub seq: u64,
    /// When it was sent.
    pub sent_at: Instant,
}

fn digest(bytes: &[u8]) -> u32 {
    let mut h = fnv::FnvHasher::with_key(0x811c_9dc5);
    h.write(bytes);
    // Fold the 64-bit FNV state into 32 bits.
    let v = h.finish();
    (v ^ (v >> 32)) as u32
}

/// The payload of `stamp`, `size` bytes long (at least [`MIN_SIZE`]).
pub fn encode(stamp: &Stamp, size: usize) -> Vec<u8> {
    let size = size.max(MIN_SIZE);
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&stamp.workload.to_be_bytes());
    out.extend_from_slice(&stamp.src.0.to_be_bytes());
    out.extend_from_slice(&stamp.dst.0.to_be_bytes());
    out.extend_from_slice(&stamp.seq.to_be_bytes());
    out.extend_from_slice(&stamp.sent_at.as_nanos().to_be_bytes());
    let filler = size - MIN_SIZE;
    out.extend((0..filler).map(|i| ((stamp.seq.wrapping_add(i as u64)) % 251) as u8));
    let d = digest(&out);
    out.extend_from_slice(&d.to_be_bytes());
    out
}

/// The stamp of a delivered payload, or `None` if it is not an intact payload.
pub fn decode(bytes: &[u8]) -> Option<Stamp> {
    if bytes.len() < MIN_SIZE {
        return None;
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    let want = u32::from_be_bytes(tail.try_into().ok()?);
    if digest(body) != want {
        return None;
    }
    let u16_at = |i: usize| {
        body.get(i..i + 2)
            .and_then(|s| s.try_into().ok())
            .map(u16::from_be_bytes)
    };
    let u32_at = |i: usize| {
        body.get(i..i + 4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_be_bytes)
    };
    let u64_at = |i: usize| {
        body.get(i..i + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_be_bytes)
    };
    Some(Stamp {
        workload: u16_at(0)?,
        src: NodeId(u32_at(2)?),
        dst: NodeId(u32_at(6)?),
        seq: u64_at(10)?,
        sent_at: Instant::from_nanos(u64_at(18)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp() -> Stamp {
        Stamp {
            workload: 3,
            src: NodeId(1),
            dst: NodeId(2),
            seq: 77,
            sent_at: Instant::from_millis(5),
        }
    }

    #[test]
    fn roundtrip_and_size() {
        let p = encode(&stamp(), 100);
        assert_eq!(p.len(), 100);
        assert_eq!(decode(&p), Some(stamp()));
        assert_eq!(encode(&stamp(), 1).len(), MIN_SIZE);
    }

    #[test]
    fn any_single_bit_flip_is_detected() {
        let p = encode(&stamp(), 64);
        for bit in 0..p.len() * 8 {
            let mut q = p.clone();
            q[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(decode(&q), None, "bit {bit}");
        }
        assert_eq!(decode(&p[..10]), None);
    }
}
