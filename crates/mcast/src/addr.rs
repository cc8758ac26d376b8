//! IPv4-style addresses and prefixes of the multicast service: router addresses (a neighbour's
//! identity in DVMRP) and source networks (the keys of the routing table).
//!
//! Part of seed 004's multicast service (global memory objects hold these).

use std::fmt;

/// A 32-bit address, shown dotted (`10.255.0.3`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Addr(pub u32);

impl Addr {
    /// Whether this is a multicast (class D, `224.0.0.0/4`) address: a group.
    pub fn is_multicast(self) -> bool {
        self.0 >> 28 == 0xe
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.0.to_be_bytes();
        write!(f, "{a}.{b}.{c}.{d}")
    }
}

/// A network prefix: an address whose bits past `len` are zero, and a length `0..=32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    addr: u32,
    len: u8,
}

/// Why a prefix is not valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// A length over 32.
    #[error("prefix length {0} is over 32")]
    Length(u8),
    /// Bits set past the length.
    #[error("{addr}/{len} has host bits set")]
    HostBits {
        /// The address.
        addr: Addr,
        /// The length.
        len: u8,
    },
}

impl Prefix {
    /// `addr/len`, refused if `len > 32` or host bits are set.
    ///
    /// # Errors
    /// [`PrefixError`].
    pub fn new(addr: u32, len: u8) -> Result<Self, PrefixError> {
        if len > 32 {
            return Err(PrefixError::Length(len));
        }
        if addr & !Self::mask_of(len) != 0 {
            return Err(PrefixError::HostBits {
                addr: Addr(addr),
                len,
            });
        }
        Ok(Prefix { addr, len })
    }

    fn mask_of(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(len.min(32)))
        }
    }

    /// The network address.
    pub fn addr(self) -> u32 {
        self.addr
    }

    /// The prefix length.
    pub fn len(self) -> u8 {
        self.len
    }

    /// Whether this is the default route `0.0.0.0/0`.
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// Whether `a` is inside this prefix.
    pub fn contains(self, a: Addr) -> bool {
        a.0 & Self::mask_of(self.len) == self.addr
    }

    /// The conventional subnet of simulated link `index` in viastack's multi-hop networks:
    /// `10.x.y.0/24` with `x.y` the index (so up to 65,536 links).
    pub fn of_link(index: u16) -> Self {
        Prefix {
            addr: 0x0a00_0000 | (u32::from(index) << 8),
            len: 24,
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Addr(self.addr), self.len)
    }
}

/// The conventional address of simulated node `id` in viastack's multi-hop networks:
/// `10.255.x.y`.
pub fn node_addr(id: u16) -> Addr {
    Addr(0x0aff_0000 | u32::from(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_checked_and_shown() {
        let p = Prefix::new(0x0a01_0200, 24).unwrap_or(Prefix::of_link(0));
        assert_eq!(p.to_string(), "10.1.2.0/24");
        assert!(p.contains(Addr(0x0a01_02ff)));
        assert!(!p.contains(Addr(0x0a01_0300)));
        assert_eq!(
            Prefix::new(1, 24),
            Err(PrefixError::HostBits {
                addr: Addr(1),
                len: 24
            })
        );
        assert_eq!(Prefix::new(0, 33), Err(PrefixError::Length(33)));
        assert!(Prefix::new(0, 0).is_ok_and(Prefix::is_empty));
        assert!(Prefix::new(u32::MAX, 32).is_ok());
        assert_eq!(Prefix::of_link(258).to_string(), "10.1.2.0/24");
        assert_eq!(node_addr(3).to_string(), "10.255.0.3");
    }
}
