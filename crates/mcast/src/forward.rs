//! Multicast forwarding, sans-IO: seed 004's "Multicast Forward" component of the Basic
//! Multicast composite protocol, with its TTL, and the wire format of multicast data.
//!
//! A router receiving (S, G) data on interface `i` from neighbour `n`:
//! 1. **reverse-path check** against the source tree (built from the routing table): `i` must
//!    be the interface towards S's network and, when the network is not attached, `n` the
//!    upstream neighbour — anything else is dropped (`rpf_failed`), which is what keeps
//!    forwarding loop-free and duplicate-free on LANs;
//! 2. **TTL**: data arriving with TTL ≤ 1 goes no further (`ttl_expired`);
//! 3. **replication** to the child interfaces that want it ([`crate::prune::downstream`]:
//!    members in the group table, or dependents that have not pruned), with TTL − 1;
//! 4. nothing wants it and there is an upstream: the caller tells pruning
//!    ([`crate::prune::Pruner::data_unwanted`]).
//!
//! # Wire (`docs/WIRE.md`, "Multicast data")
//! 16-byte header, big-endian: type `0x30` (1), TTL (1), two reserved zero bytes, source
//! address (4), group (4, class D), sequence number (4); then the payload. Vectors in
//! `testdata/vectors/mcast.json`, fuzz target `mcast`.

use viastack_kernel::Instant;

use crate::addr::{Addr, Prefix};
use crate::memory::GlobalMemory;

/// Type byte of a multicast data packet.
pub const TYPE_DATA: u8 = 0x30;
/// Header length.
pub const HEADER_LEN: usize = 16;
/// TTL a source gives its data (the seed's receivers are four hops away; 32 as mrouted's
/// threshold-free default scope).
pub const DEFAULT_TTL: u8 = 32;

/// Why bytes are not multicast data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// Shorter than the header.
    #[error("truncated: {0} bytes, need 16")]
    Truncated(usize),
    /// Another type byte.
    #[error("invalid type {0:#04x}")]
    Type(u8),
    /// Reserved bytes not zero.
    #[error("invalid reserved field")]
    Reserved,
    /// The group is not a multicast address.
    #[error("invalid group: not a class D address")]
    Group,
}

/// A parsed data header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    /// Hops left.
    pub ttl: u8,
    /// The sending host.
    pub source: Addr,
    /// The group.
    pub group: Addr,
    /// The source's sequence number.
    pub seq: u32,
}

impl DataHeader {
    /// Check and parse the header of `bytes`; the payload is `&bytes[HEADER_LEN..]`.
    ///
    /// # Errors
    /// [`DataError`].
    pub fn parse(bytes: &[u8]) -> Result<Self, DataError> {
        let Some(h) = bytes.get(..HEADER_LEN) else {
            return Err(DataError::Truncated(bytes.len()));
        };
        let w = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        if h[0] != TYPE_DATA {
            return Err(DataError::Type(h[0]));
        }
        if h[2] != 0 || h[3] != 0 {
            return Err(DataError::Reserved);
        }
        let group = Addr(w(8));
        if !group.is_multicast() {
            return Err(DataError::Group);
        }
        Ok(DataHeader {
            ttl: h[1],
            source: Addr(w(4)),
            group,
            seq: w(12),
        })
    }

    /// The header followed by `payload`.
    ///
    /// # Errors
    /// [`DataError::Group`] for a group that is not multicast.
    pub fn to_vec(&self, payload: &[u8]) -> Result<Vec<u8>, DataError> {
        if !self.group.is_multicast() {
            return Err(DataError::Group);
        }
        let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
        v.extend_from_slice(&[TYPE_DATA, self.ttl, 0, 0]);
        v.extend_from_slice(&self.source.0.to_be_bytes());
        v.extend_from_slice(&self.group.0.to_be_bytes());
        v.extend_from_slice(&self.seq.to_be_bytes());
        v.extend_from_slice(payload);
        Ok(v)
    }
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets received.
    pub received: u64,
    /// Copies sent onto child interfaces.
    pub copies: u64,
    /// Failed the reverse-path check.
    pub rpf_failed: u64,
    /// Arrived with TTL ≤ 1.
    pub ttl_expired: u64,
    /// Nobody downstream wanted them.
    pub unwanted: u64,
    /// Did not parse.
    pub malformed: u64,
}

/// What to do with one data packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Send `bytes` on each of these interfaces (link-local broadcast).
    pub out: Vec<u16>,
    /// The packet with its TTL decremented (empty when `out` is).
    pub bytes: Vec<u8>,
    /// Nothing downstream wants (S, G): the source network and group to prune.
    pub unwanted: Option<(Prefix, Addr)>,
}

/// The multicast forwarding component of one router.
#[derive(Debug, Default)]
pub struct Forwarder {
    stats: Stats,
}

impl Forwarder {
    /// A forwarder.
    pub fn new() -> Self {
        Forwarder::default()
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Data from `from` arrived on `iface` at `now`.
    pub fn handle_data(
        &mut self,
        now: Instant,
        iface: u16,
        from: Addr,
        bytes: &[u8],
        mem: &GlobalMemory,
    ) -> Verdict {
        let h = match DataHeader::parse(bytes) {
            Ok(h) => h,
            Err(_) => {
                self.stats.malformed += 1;
                return Verdict::default();
            }
        };
        self.stats.received += 1;
        let Some(tree) = mem.tree.lookup(h.source) else {
            self.stats.rpf_failed += 1;
            return Verdict::default();
        };
        if tree.upstream_iface != iface || tree.upstream.is_some_and(|u| u != from) {
            self.stats.rpf_failed += 1;
            return Verdict::default();
        }
        if h.ttl <= 1 {
            self.stats.ttl_expired += 1;
            return Verdict::default();
        }
        let out = crate::prune::downstream(mem, tree.source, h.group, now);
        if out.is_empty() {
            self.stats.unwanted += 1;
            return Verdict {
                unwanted: tree.upstream.map(|_| (tree.source, h.group)),
                ..Verdict::default()
            };
        }
        let mut b = bytes.to_vec();
        if let Some(t) = b.get_mut(1) {
            *t = h.ttl - 1;
        }
        self.stats.copies += out.len() as u64;
        Verdict {
            out,
            bytes: b,
            unwanted: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_errors() {
        let h = DataHeader {
            ttl: 32,
            source: Addr(0x0a00_0001),
            group: Addr(0xe000_0001),
            seq: 7,
        };
        let b = h.to_vec(b"hi").unwrap_or_default();
        assert_eq!(b.len(), 18);
        assert_eq!(DataHeader::parse(&b), Ok(h));
        assert_eq!(DataHeader::parse(&b[..5]), Err(DataError::Truncated(5)));
        let mut bad = b.clone();
        bad[0] = 1;
        assert_eq!(DataHeader::parse(&bad), Err(DataError::Type(1)));
        let mut bad = b.clone();
        bad[8] = 10;
        assert_eq!(DataHeader::parse(&bad), Err(DataError::Group));
        let mut bad = b;
        bad[3] = 1;
        assert_eq!(DataHeader::parse(&bad), Err(DataError::Reserved));
    }
}
