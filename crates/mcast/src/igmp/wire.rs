//! IGMPv2 wire format (RFC 2236 §2, "IGMP Message Format"), as a checked view plus a parsed
//! form. Documented in `docs/WIRE.md` ("IGMPv2"); vectors in `testdata/vectors/igmp.json`;
//! fuzz target `igmp`.
//!
//! Eight bytes, big-endian: type (1: `0x11` membership query, `0x16` version 2 membership
//! report, `0x17` leave group, `0x12` version 1 membership report), max response time (1, in
//! tenths of a second, meaningful in queries only), checksum (2: the 16-bit one's complement of
//! the one's complement sum of the message, computed with this field zero), group address (4:
//! zero in a general query, a class D address otherwise). As RFC 2236 §2.5 says, longer
//! messages are accepted and only their first 8 bytes are read; unknown types are kept as
//! [`Repr::Unknown`] (RFC 2236 §2.1: ignored by the receiver).

use crate::addr::Addr;

/// Membership query.
pub const TYPE_QUERY: u8 = 0x11;
/// Version 2 membership report.
pub const TYPE_REPORT_V2: u8 = 0x16;
/// Leave group.
pub const TYPE_LEAVE: u8 = 0x17;
/// Version 1 membership report (accepted as a report, RFC 2236 §4).
pub const TYPE_REPORT_V1: u8 = 0x12;
/// Message length.
pub const LEN: usize = 8;

/// Why bytes are not an IGMPv2 message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than 8 bytes.
    #[error("truncated: {0} bytes, need 8")]
    Truncated(usize),
    /// The checksum does not match.
    #[error("invalid checksum")]
    Checksum,
    /// A report or leave for a non-multicast group, or a query for a group that is neither
    /// zero nor multicast.
    #[error("invalid group {0}")]
    Group(Addr),
}

/// The RFC 1071 Internet checksum of `b`.
pub fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A parsed IGMPv2 message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repr {
    /// A membership query: general (`group` `None`) or group-specific.
    Query {
        /// Max response time in tenths of a second.
        max_resp: u8,
        /// The group asked about, or `None` for all.
        group: Option<Addr>,
    },
    /// A membership report (version 2, or 1 when `v1`).
    Report {
        /// The group.
        group: Addr,
        /// Whether it was a version 1 report.
        v1: bool,
    },
    /// A leave.
    Leave {
        /// The group.
        group: Addr,
    },
    /// A type this implementation does not know (ignored).
    Unknown(u8),
}

impl Repr {
    /// Check and parse the first 8 bytes of `bytes`.
    ///
    /// # Errors
    /// [`WireError`].
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let Some(m) = bytes.get(..LEN) else {
            return Err(WireError::Truncated(bytes.len()));
        };
        if checksum(m) != 0 {
            return Err(WireError::Checksum);
        }
        let group = Addr(u32::from_be_bytes([m[4], m[5], m[6], m[7]]));
        let need_group = |g: Addr| {
            if g.is_multicast() {
                Ok(g)
            } else {
                Err(WireError::Group(g))
            }
        };
        Ok(match m[0] {
            TYPE_QUERY => Repr::Query {
                max_resp: m[1],
                group: if group.0 == 0 {
                    None
                } else {
                    Some(need_group(group)?)
                },
            },
            TYPE_REPORT_V2 | TYPE_REPORT_V1 => Repr::Report {
                group: need_group(group)?,
                v1: m[0] == TYPE_REPORT_V1,
            },
            TYPE_LEAVE => Repr::Leave {
                group: need_group(group)?,
            },
            other => Repr::Unknown(other),
        })
    }

    /// The 8 bytes of the message, checksum filled in.
    pub fn to_bytes(&self) -> [u8; LEN] {
        let (kind, max_resp, group) = match *self {
            Repr::Query { max_resp, group } => (TYPE_QUERY, max_resp, group.unwrap_or_default()),
            Repr::Report { group, v1 } => {
                (if v1 { TYPE_REPORT_V1 } else { TYPE_REPORT_V2 }, 0, group)
            }
            Repr::Leave { group } => (TYPE_LEAVE, 0, group),
            Repr::Unknown(k) => (k, 0, Addr(0)),
        };
        let g = group.0.to_be_bytes();
        let mut m = [kind, max_resp, 0, 0, g[0], g[1], g[2], g[3]];
        let c = checksum(&m).to_be_bytes();
        m[2] = c[0];
        m[3] = c[1];
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_checksum_and_errors() {
        let g = Addr(0xe000_0001);
        for r in [
            Repr::Query {
                max_resp: 100,
                group: None,
            },
            Repr::Query {
                max_resp: 10,
                group: Some(g),
            },
            Repr::Report {
                group: g,
                v1: false,
            },
            Repr::Report { group: g, v1: true },
            Repr::Leave { group: g },
        ] {
            let b = r.to_bytes();
            assert_eq!(Repr::parse(&b), Ok(r));
        }
        // RFC 2236 general query: 11 64 ee 9b 00 00 00 00.
        assert_eq!(
            Repr::Query {
                max_resp: 100,
                group: None
            }
            .to_bytes(),
            [0x11, 0x64, 0xee, 0x9b, 0, 0, 0, 0]
        );
        let mut b = Repr::Leave { group: g }.to_bytes();
        b[7] ^= 1;
        assert_eq!(Repr::parse(&b), Err(WireError::Checksum));
        assert_eq!(Repr::parse(&b[..3]), Err(WireError::Truncated(3)));
        let bad = Repr::Report {
            group: Addr(0x0a00_0001),
            v1: false,
        }
        .to_bytes();
        assert_eq!(Repr::parse(&bad), Err(WireError::Group(Addr(0x0a00_0001))));
        assert_eq!(
            Repr::parse(&Repr::Unknown(0x22).to_bytes()),
            Ok(Repr::Unknown(0x22))
        );
    }
}
