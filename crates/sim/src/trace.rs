//! The trace hash: a running FNV-1a digest of every event the simulator processes.
//!
//! Part of the deterministic simulator, which realizes DESIGN.md §4.2 "deterministic simulation
//! first". Two runs with the same seed and the same node behaviour produce the same hash; a
//! different hash means the runs diverged somewhere. Each record is encoded with fixed-width
//! fields and a length prefix before the datagram bytes, so distinct traces do not collide by
//! construction (only by FNV chance).

use std::hash::Hasher;

use fnv::FnvHasher;
use viastack_kernel::Instant;

/// The kind of a traced event; its discriminant is part of the hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum TraceKind {
    /// A datagram handed to the destination node (bytes included).
    Delivered = 1,
    /// A datagram that arrived at a down node.
    DroppedDown = 2,
    /// A datagram that arrived while a partition separated its ends.
    DroppedPartition = 3,
    /// A wake-up that called `handle_timeout`.
    Timeout = 4,
    /// A wake-up whose node no longer wanted a timeout (deadline moved or cancelled).
    WakeSkipped = 5,
    /// A superseded wake-up, or one for a down node.
    WakeStale = 6,
    Crash = 7,
    Restart = 8,
    PartitionStart = 9,
    PartitionHeal = 10,
    /// A datagram dropped because its link was down (at arrival).
    DroppedLinkDown = 11,
    /// A link event (down, up or new conditions).
    LinkEvent = 12,
    /// A datagram that arrived at a paused node (it is delivered at the resumption).
    HeldPaused = 13,
    /// A wake-up of a paused node (handled at the resumption).
    WakePaused = 14,
    Pause = 15,
    Resume = 16,
}

/// Running FNV-1a hash of processed events.
#[derive(Default)]
pub(crate) struct TraceHash {
    hasher: FnvHasher,
}

impl TraceHash {
    /// Fold one event into the hash. `from`/`to` are node ids (or a partition index),
    /// `u32::MAX` where not applicable.
    pub fn record(
        &mut self,
        time: Instant,
        kind: TraceKind,
        from: u32,
        to: u32,
        port: u16,
        bytes: &[u8],
    ) {
        // Explicit little-endian encoding: `Hasher::write_u64` and friends use native byte
        // order, which would make the hash differ between platforms.
        let h = &mut self.hasher;
        h.write(&time.as_nanos().to_le_bytes());
        h.write(&[kind as u8]);
        h.write(&from.to_le_bytes());
        h.write(&to.to_le_bytes());
        h.write(&port.to_le_bytes());
        h.write(&(bytes.len() as u64).to_le_bytes());
        h.write(bytes);
    }

    /// The digest so far.
    pub fn value(&self) -> u64 {
        self.hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(records: &[(u64, TraceKind, u32, &[u8])]) -> u64 {
        let mut t = TraceHash::default();
        for &(time, kind, node, bytes) in records {
            t.record(Instant::from_nanos(time), kind, node, 0, 7, bytes);
        }
        t.value()
    }

    #[test]
    fn every_field_matters() {
        let base = hash(&[(1, TraceKind::Delivered, 2, b"ab")]);
        assert_eq!(base, hash(&[(1, TraceKind::Delivered, 2, b"ab")]));
        assert_ne!(base, hash(&[(2, TraceKind::Delivered, 2, b"ab")]));
        assert_ne!(base, hash(&[(1, TraceKind::DroppedDown, 2, b"ab")]));
        assert_ne!(base, hash(&[(1, TraceKind::Delivered, 3, b"ab")]));
        assert_ne!(base, hash(&[(1, TraceKind::Delivered, 2, b"ac")]));
        // Length prefix: splitting bytes differently changes the hash.
        assert_ne!(
            hash(&[
                (1, TraceKind::Delivered, 2, b"a"),
                (1, TraceKind::Delivered, 2, b"b")
            ]),
            hash(&[
                (1, TraceKind::Delivered, 2, b"ab"),
                (1, TraceKind::Delivered, 2, b"")
            ]),
        );
        assert_ne!(base, TraceHash::default().value());
    }
}
