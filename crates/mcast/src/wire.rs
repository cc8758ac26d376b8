//! DVMRP wire format, viastack version (draft-ietf-idmr-dvmrp-v3, its Probe and Route Report
//! messages and their packet formats: the same fields, carried here directly over a
//! link instead of inside IGMP). Documented byte by byte in `docs/WIRE.md` ("DVMRP"); hex
//! vectors in `testdata/vectors/dvmrp.json`; fuzz target `fuzz/fuzz_targets/dvmrp.rs`.
//!
//! Every message starts with a 4-byte header: type (1 probe, 2 report, 7 prune, 8 graft, 9 graft
//! ack: the draft's codes), major version 3, minor
//! version 0xFF (the draft's values), a reserved zero byte. All integers are big-endian.
//!
//! - **Probe**: generation id (4 bytes), then the addresses (4 bytes each) of the neighbours
//!   heard on the interface the probe is sent on.
//! - **Report**: route entries of 6 bytes each: prefix length (1, `0..=32`), network address
//!   (4, host bits zero), metric (1, `1..=63`: `1..=31` reachable, 32 infinity, `33..=63` a
//!   poison-reverse metric + 32). The draft packs several origins per mask; one entry per
//!   route keeps every entry the same size.
//! - **Prune** (16 bytes of body): source network address (4), group (4, class D), lifetime in
//!   milliseconds (4; the draft has seconds: milliseconds let scaled timers prune for less than
//!   a second), source prefix length (1), sequence number (2), a reserved zero byte.
//! - **Graft** and **Graft Ack** (12 bytes of body): source network address (4), group (4),
//!   prefix length (1), sequence number (2), a reserved zero byte.
//!
//! The sequence number is viastack's addition: every prune and graft a router sends takes the
//! next value of its counter, and a graft ack echoes its graft's. The upstream ignores a prune
//! or graft older (serial-number arithmetic) than the last it took from that neighbour, so a
//! prune overtaken by a later graft cannot cut a branch that was grafted back; the draft's
//! messages, without it, can (for a whole prune lifetime).
//!
//! As in smoltcp, [`Packet`] is a checked view (after `new_checked` no accessor can panic) and
//! [`Repr`] the parsed form with `parse`, `emit` and `buffer_len`.

use crate::addr::{Addr, Prefix};

/// Message type of a probe.
pub const TYPE_PROBE: u8 = 1;
/// Message type of a route report.
pub const TYPE_REPORT: u8 = 2;
/// Message type of a prune.
pub const TYPE_PRUNE: u8 = 7;
/// Message type of a graft.
pub const TYPE_GRAFT: u8 = 8;
/// Message type of a graft acknowledgement.
pub const TYPE_GRAFT_ACK: u8 = 9;
/// Body length of a prune.
pub const PRUNE_LEN: usize = 16;
/// Body length of a graft or graft ack.
pub const GRAFT_LEN: usize = 12;
/// Major version (draft-ietf-idmr-dvmrp-v3: 3).
pub const MAJOR: u8 = 3;
/// Minor version (draft-ietf-idmr-dvmrp-v3: 0xFF).
pub const MINOR: u8 = 0xFF;
/// Header length.
pub const HEADER_LEN: usize = 4;
/// Length of one report entry.
pub const ENTRY_LEN: usize = 6;
/// Highest metric on the wire (infinity 32 + 31, a poisoned reverse of the longest route).
pub const MAX_METRIC: u8 = 63;

/// Why bytes are not a DVMRP message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the header or the fixed part needs.
    #[error("truncated: {len} bytes, need {need}")]
    Truncated {
        /// Bytes present.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// A type other than probe or report.
    #[error("invalid type: {0}")]
    Type(u8),
    /// A version other than 3.0xFF.
    #[error("invalid version: {major}.{minor:#04x}, this implementation speaks 3.0xff")]
    Version {
        /// Major.
        major: u8,
        /// Minor.
        minor: u8,
    },
    /// The reserved byte is not zero.
    #[error("invalid reserved field: {0:#04x}")]
    Reserved(u8),
    /// A body that is not a whole number of entries.
    #[error("invalid length: {len} body bytes are not a multiple of {unit}")]
    Length {
        /// Body length.
        len: usize,
        /// Entry size.
        unit: usize,
    },
    /// A prefix length over 32 or host bits set.
    #[error("invalid prefix in entry {index}")]
    Prefix {
        /// Entry index.
        index: usize,
    },
    /// A metric of 0 or over 63.
    #[error("invalid metric {metric} in entry {index}")]
    Metric {
        /// Entry index.
        index: usize,
        /// The metric.
        metric: u8,
    },
    /// A prune, graft or graft ack whose body has the wrong length.
    #[error("invalid length: {len} body bytes, need {need}")]
    BodyLength {
        /// Body length.
        len: usize,
        /// Expected.
        need: usize,
    },
    /// A group that is not a multicast address.
    #[error("invalid group: not a class D address")]
    Group,
    /// A prune's, graft's or graft ack's source network is not a valid prefix, or its
    /// reserved bytes are not zero.
    #[error("invalid source network")]
    Source,
    /// The output buffer is too small (emit only).
    #[error("buffer too small: {have} bytes, need {need}")]
    Buffer {
        /// Bytes available.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
}

/// A checked view of a DVMRP message.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap and check `buffer`: header, type, version, reserved byte, body length, and for
    /// reports every entry's prefix and metric.
    ///
    /// # Errors
    /// The first problem found.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let p = Packet { buffer };
        p.check()?;
        Ok(p)
    }

    fn check(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        let [kind, major, minor, reserved, ..] = *b else {
            return Err(WireError::Truncated {
                len: b.len(),
                need: HEADER_LEN,
            });
        };
        if (major, minor) != (MAJOR, MINOR) {
            return Err(WireError::Version { major, minor });
        }
        if reserved != 0 {
            return Err(WireError::Reserved(reserved));
        }
        let body = b.get(HEADER_LEN..).unwrap_or_default();
        match kind {
            TYPE_PROBE => {
                if body.len() < 4 {
                    return Err(WireError::Truncated {
                        len: b.len(),
                        need: HEADER_LEN + 4,
                    });
                }
                if body.len() % 4 != 0 {
                    return Err(WireError::Length {
                        len: body.len() - 4,
                        unit: 4,
                    });
                }
            }
            TYPE_REPORT => {
                if body.len() % ENTRY_LEN != 0 {
                    return Err(WireError::Length {
                        len: body.len(),
                        unit: ENTRY_LEN,
                    });
                }
                for (index, e) in body.chunks_exact(ENTRY_LEN).enumerate() {
                    let (len, addr, metric) = entry_fields(e);
                    if Prefix::new(addr, len).is_err() {
                        return Err(WireError::Prefix { index });
                    }
                    if metric == 0 || metric > MAX_METRIC {
                        return Err(WireError::Metric { index, metric });
                    }
                }
            }
            TYPE_PRUNE | TYPE_GRAFT | TYPE_GRAFT_ACK => {
                let need = if kind == TYPE_PRUNE {
                    PRUNE_LEN
                } else {
                    GRAFT_LEN
                };
                if body.len() != need {
                    return Err(WireError::BodyLength {
                        len: body.len(),
                        need,
                    });
                }
                let (source, group) = sg_fields(body);
                if !group.is_multicast() {
                    return Err(WireError::Group);
                }
                if source.is_none() || body.last() != Some(&0) {
                    return Err(WireError::Source);
                }
            }
            other => return Err(WireError::Type(other)),
        }
        Ok(())
    }

    /// A prune's, graft's or graft ack's source network and group (`None` for others).
    pub fn source_group(&self) -> Option<(Prefix, Addr)> {
        if !matches!(self.kind(), TYPE_PRUNE | TYPE_GRAFT | TYPE_GRAFT_ACK) {
            return None;
        }
        let (s, g) = sg_fields(self.bytes().get(HEADER_LEN..).unwrap_or_default());
        Some((s?, g))
    }

    /// A prune's, graft's or graft ack's sequence number (0 for others).
    pub fn seq(&self) -> u16 {
        if !matches!(self.kind(), TYPE_PRUNE | TYPE_GRAFT | TYPE_GRAFT_ACK) {
            return 0;
        }
        let b = self.bytes();
        let n = b.len();
        match (b.get(n.wrapping_sub(3)), b.get(n.wrapping_sub(2))) {
            (Some(&h), Some(&l)) => u16::from_be_bytes([h, l]),
            _ => 0,
        }
    }

    /// A prune's lifetime in milliseconds (0 for others).
    pub fn lifetime_ms(&self) -> u32 {
        if self.kind() != TYPE_PRUNE {
            return 0;
        }
        self.bytes()
            .get(12..16)
            .and_then(|s| s.try_into().ok())
            .map_or(0, u32::from_be_bytes)
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The message type.
    pub fn kind(&self) -> u8 {
        self.bytes().first().copied().unwrap_or_default()
    }

    /// A probe's generation id (0 for a report).
    pub fn gen_id(&self) -> u32 {
        if self.kind() != TYPE_PROBE {
            return 0;
        }
        self.bytes()
            .get(4..8)
            .and_then(|s| s.try_into().ok())
            .map_or(0, u32::from_be_bytes)
    }

    /// A probe's neighbour list.
    pub fn neighbors(&self) -> impl Iterator<Item = Addr> + '_ {
        let body = if self.kind() == TYPE_PROBE {
            self.bytes().get(8..).unwrap_or_default()
        } else {
            &[]
        };
        body.chunks_exact(4)
            .map(|c| Addr(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
    }

    /// A report's entries.
    pub fn entries(&self) -> impl Iterator<Item = RouteEntry> + '_ {
        let body = if self.kind() == TYPE_REPORT {
            self.bytes().get(HEADER_LEN..).unwrap_or_default()
        } else {
            &[]
        };
        body.chunks_exact(ENTRY_LEN).filter_map(|e| {
            let (len, addr, metric) = entry_fields(e);
            Some(RouteEntry {
                prefix: Prefix::new(addr, len).ok()?,
                metric,
            })
        })
    }
}

/// Source network and group of a prune/graft body: source (4), group (4), [lifetime (4)],
/// prefix length, reserved (3). The length byte is the 4th-last.
fn sg_fields(body: &[u8]) -> (Option<Prefix>, Addr) {
    let word = |i: usize| {
        body.get(i..i + 4)
            .and_then(|s| s.try_into().ok())
            .map_or(0, u32::from_be_bytes)
    };
    let len = body
        .len()
        .checked_sub(4)
        .and_then(|i| body.get(i))
        .copied()
        .unwrap_or(u8::MAX);
    (Prefix::new(word(0), len).ok(), Addr(word(4)))
}

fn entry_fields(e: &[u8]) -> (u8, u32, u8) {
    match *e {
        [len, a, b, c, d, metric] => (len, u32::from_be_bytes([a, b, c, d]), metric),
        _ => (0, 0, 0),
    }
}

/// One route of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteEntry {
    /// The source network.
    pub prefix: Prefix,
    /// Its metric, `1..=63`.
    pub metric: u8,
}

/// A parsed DVMRP message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repr {
    /// A neighbour probe.
    Probe {
        /// The sender's generation id (changes when it restarts).
        gen_id: u32,
        /// The neighbours it has heard on this interface.
        neighbors: Vec<Addr>,
    },
    /// A route report.
    Report {
        /// The routes.
        entries: Vec<RouteEntry>,
    },
    /// A prune: the sender wants no (source, group) data for `lifetime_ms`.
    Prune {
        /// The source network.
        source: Prefix,
        /// The group.
        group: Addr,
        /// How long the prune holds, in milliseconds.
        lifetime_ms: u32,
        /// The sender's sequence number.
        seq: u16,
    },
    /// A graft: the sender wants (source, group) data again.
    Graft {
        /// The source network.
        source: Prefix,
        /// The group.
        group: Addr,
        /// The sender's sequence number.
        seq: u16,
    },
    /// The acknowledgement of a graft.
    GraftAck {
        /// The source network.
        source: Prefix,
        /// The group.
        group: Addr,
        /// The acknowledged graft's sequence number.
        seq: u16,
    },
}

impl Repr {
    /// Parse a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Self {
        let sg = p.source_group();
        match (p.kind(), sg) {
            (TYPE_PROBE, _) => Repr::Probe {
                gen_id: p.gen_id(),
                neighbors: p.neighbors().collect(),
            },
            (TYPE_PRUNE, Some((source, group))) => Repr::Prune {
                source,
                group,
                lifetime_ms: p.lifetime_ms(),
                seq: p.seq(),
            },
            (TYPE_GRAFT, Some((source, group))) => Repr::Graft {
                source,
                group,
                seq: p.seq(),
            },
            (TYPE_GRAFT_ACK, Some((source, group))) => Repr::GraftAck {
                source,
                group,
                seq: p.seq(),
            },
            _ => Repr::Report {
                entries: p.entries().collect(),
            },
        }
    }

    /// Check and parse `bytes`.
    ///
    /// # Errors
    /// See [`Packet::new_checked`].
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        Ok(Self::parse(&Packet::new_checked(bytes)?))
    }

    /// Encoded length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Repr::Probe { neighbors, .. } => 4 + 4 * neighbors.len(),
                Repr::Report { entries } => ENTRY_LEN * entries.len(),
                Repr::Prune { .. } => PRUNE_LEN,
                Repr::Graft { .. } | Repr::GraftAck { .. } => GRAFT_LEN,
            }
    }

    /// Encode into `buf` (at least `buffer_len` bytes); returns the length written.
    ///
    /// # Errors
    /// [`WireError::Buffer`] when `buf` is too small, [`WireError::Metric`] for a metric
    /// outside `1..=63`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let need = self.buffer_len();
        let Some(out) = buf.get_mut(..need) else {
            return Err(WireError::Buffer {
                have: buf.len(),
                need,
            });
        };
        let kind = match self {
            Repr::Probe { .. } => TYPE_PROBE,
            Repr::Report { .. } => TYPE_REPORT,
            Repr::Prune { .. } => TYPE_PRUNE,
            Repr::Graft { .. } => TYPE_GRAFT,
            Repr::GraftAck { .. } => TYPE_GRAFT_ACK,
        };
        let mut w = Vec::with_capacity(need);
        w.extend_from_slice(&[kind, MAJOR, MINOR, 0]);
        match self {
            Repr::Probe { gen_id, neighbors } => {
                w.extend_from_slice(&gen_id.to_be_bytes());
                for n in neighbors {
                    w.extend_from_slice(&n.0.to_be_bytes());
                }
            }
            Repr::Report { entries } => {
                for (index, e) in entries.iter().enumerate() {
                    if e.metric == 0 || e.metric > MAX_METRIC {
                        return Err(WireError::Metric {
                            index,
                            metric: e.metric,
                        });
                    }
                    w.push(e.prefix.len());
                    w.extend_from_slice(&e.prefix.addr().to_be_bytes());
                    w.push(e.metric);
                }
            }
            Repr::Prune {
                source,
                group,
                lifetime_ms,
                seq,
            } => {
                if !group.is_multicast() {
                    return Err(WireError::Group);
                }
                let [h, l] = seq.to_be_bytes();
                w.extend_from_slice(&source.addr().to_be_bytes());
                w.extend_from_slice(&group.0.to_be_bytes());
                w.extend_from_slice(&lifetime_ms.to_be_bytes());
                w.extend_from_slice(&[source.len(), h, l, 0]);
            }
            Repr::Graft { source, group, seq } | Repr::GraftAck { source, group, seq } => {
                if !group.is_multicast() {
                    return Err(WireError::Group);
                }
                let [h, l] = seq.to_be_bytes();
                w.extend_from_slice(&source.addr().to_be_bytes());
                w.extend_from_slice(&group.0.to_be_bytes());
                w.extend_from_slice(&[source.len(), h, l, 0]);
            }
        }
        out.copy_from_slice(&w);
        Ok(need)
    }

    /// Encode into a new vector.
    ///
    /// # Errors
    /// As [`Repr::emit`].
    pub fn to_vec(&self) -> Result<Vec<u8>, WireError> {
        let mut v = vec![0; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let probe = Repr::Probe {
            gen_id: 0xdead_beef,
            neighbors: vec![Addr(0x0aff_0001), Addr(0x0aff_0002)],
        };
        let b = probe.to_vec().unwrap_or_default();
        assert_eq!(b.len(), 16);
        assert_eq!(Repr::parse_bytes(&b), Ok(probe));
        let report = Repr::Report {
            entries: vec![RouteEntry {
                prefix: Prefix::of_link(3),
                metric: 34,
            }],
        };
        let b = report.to_vec().unwrap_or_default();
        assert_eq!(Repr::parse_bytes(&b), Ok(report));
        let g = Addr(0xe000_0001);
        for m in [
            Repr::Prune {
                source: Prefix::of_link(3),
                group: g,
                lifetime_ms: 7_200_000,
                seq: 0xfffe,
            },
            Repr::Graft {
                source: Prefix::of_link(3),
                group: g,
                seq: 1,
            },
            Repr::GraftAck {
                source: Prefix::of_link(3),
                group: g,
                seq: 0x0100,
            },
        ] {
            let b = m.to_vec().unwrap_or_default();
            assert_eq!(b.len(), m.buffer_len());
            assert_eq!(Repr::parse_bytes(&b), Ok(m));
        }
        assert_eq!(
            Repr::Graft {
                source: Prefix::of_link(3),
                group: Addr(1),
                seq: 0
            }
            .to_vec(),
            Err(WireError::Group)
        );
        assert!(matches!(
            Repr::parse_bytes(&[1, 3, 0xff]),
            Err(WireError::Truncated { .. })
        ));
        assert_eq!(Repr::parse_bytes(&[6, 3, 0xff, 0]), Err(WireError::Type(6)));
        let bad_metric = Repr::Report {
            entries: vec![RouteEntry {
                prefix: Prefix::of_link(3),
                metric: 64,
            }],
        };
        assert!(matches!(bad_metric.to_vec(), Err(WireError::Metric { .. })));
        assert!(matches!(
            Repr::Probe {
                gen_id: 1,
                neighbors: vec![]
            }
            .emit(&mut [0; 3]),
            Err(WireError::Buffer { have: 3, need: 8 })
        ));
    }
}
