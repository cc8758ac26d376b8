//! Logical addresses, one type per topology, kept apart from substrate addresses (seed 000
//! §3.1.1: "each overlay socket defines two types of identifiers": the *logical address*, which
//! names a node in the overlay and drives naming, routing and topology, and the *substrate
//! address*, where its messages are actually sent).
//!
//! - [`DtAddr`]: a point with integer coordinates, the logical address of the Delaunay
//!   triangulation (seed 000 §3.1.1 "(x, y) (Delaunay Triangulation)"). Coordinates are bounded
//!   by [`DtAddr::MAX_COORD`] so that the exact predicates of [`crate::geometry`] never
//!   overflow `i128`; [`DtAddr::new`] refuses anything else with a typed error.
//! - [`HcLabel`]: a hypercube label, a bit string of at most [`HcLabel::MAX_BITS`] bits.
//! - Substrate addresses are a type parameter `S` of every protocol engine (a simulator's node
//!   index, a `SocketAddr`, a device address in a stack); [`SimAddr`] is the one the tests and
//!   the wire vectors use. The two kinds never share a type, so one cannot be passed for the
//!   other.

use std::fmt;

use thiserror::Error;

/// Why a value is not a logical address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AddrError {
    /// A DT coordinate outside `-MAX_COORD..=MAX_COORD`.
    #[error("invalid coordinate: {0} is outside ±{max}", max = DtAddr::MAX_COORD)]
    Coordinate(i32),
    /// A hypercube label longer than [`HcLabel::MAX_BITS`].
    #[error("invalid label: {0} bits, at most {max}", max = HcLabel::MAX_BITS)]
    LabelBits(u8),
}

/// The logical address of a node in a Delaunay triangulation overlay: a point of the plane with
/// integer coordinates. Ordered by `(x, y)`; the order decides the leader (the node with no
/// neighbour greater than itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DtAddr {
    x: i32,
    y: i32,
}

impl DtAddr {
    /// Largest coordinate magnitude, 2^29 − 1: differences then fit 30 bits and the in-circle
    /// determinant 124 bits, so every predicate is exact in `i128`.
    pub const MAX_COORD: i32 = (1 << 29) - 1;

    /// The point `(x, y)`.
    ///
    /// # Errors
    /// [`AddrError::Coordinate`] if a coordinate's magnitude exceeds [`Self::MAX_COORD`].
    pub fn new(x: i32, y: i32) -> Result<Self, AddrError> {
        for c in [x, y] {
            if !(-Self::MAX_COORD..=Self::MAX_COORD).contains(&c) {
                return Err(AddrError::Coordinate(c));
            }
        }
        Ok(DtAddr { x, y })
    }

    /// The x coordinate.
    pub const fn x(self) -> i32 {
        self.x
    }

    /// The y coordinate.
    pub const fn y(self) -> i32 {
        self.y
    }
}

impl fmt::Display for DtAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.x, self.y)
    }
}

/// The logical address of a node in a hypercube overlay: a label of `bits` bits (the low bits
/// of `value`). In a compact hypercube of N nodes the labels are the Gray codes G(0) … G(N−1)
/// (see [`crate::hypercube`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HcLabel {
    value: u32,
}

impl HcLabel {
    /// Labels have at most 32 bits (a hypercube of up to 2^32 nodes).
    pub const MAX_BITS: u8 = 32;

    /// The label with value `value`.
    pub const fn new(value: u32) -> Self {
        HcLabel { value }
    }

    /// The label's bits as an integer.
    pub const fn value(self) -> u32 {
        self.value
    }

    /// The reflected binary Gray code of `i`.
    pub const fn gray(i: u32) -> Self {
        HcLabel {
            value: i ^ (i >> 1),
        }
    }

    /// The index `i` whose Gray code this label is (inverse of [`Self::gray`]).
    pub const fn gray_index(self) -> u32 {
        let mut v = self.value;
        let mut shift = 1;
        while shift < 32 {
            v ^= v >> shift;
            shift <<= 1;
        }
        v
    }

    /// The label with bit `bit` flipped.
    pub const fn flip(self, bit: u32) -> Self {
        HcLabel {
            value: self.value ^ (1 << (bit & 31)),
        }
    }
}

impl fmt::Display for HcLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#b}", self.value)
    }
}

/// A substrate address in a simulation or a test vector: a node number. Real deployments use
/// their own substrate type (`SocketAddr`, a device address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimAddr(pub u32);

impl fmt::Display for SimAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sim:{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_are_bounded() {
        assert!(DtAddr::new(DtAddr::MAX_COORD, -DtAddr::MAX_COORD).is_ok());
        assert_eq!(
            DtAddr::new(DtAddr::MAX_COORD + 1, 0),
            Err(AddrError::Coordinate(DtAddr::MAX_COORD + 1))
        );
        assert_eq!(
            DtAddr::new(0, i32::MIN),
            Err(AddrError::Coordinate(i32::MIN))
        );
    }

    #[test]
    fn gray_codes_round_trip_and_differ_in_one_bit() {
        for i in 0..5000u32 {
            let g = HcLabel::gray(i);
            assert_eq!(g.gray_index(), i);
            let next = HcLabel::gray(i + 1);
            assert_eq!((g.value() ^ next.value()).count_ones(), 1);
        }
        assert_eq!(HcLabel::gray(u32::MAX).gray_index(), u32::MAX);
    }
}
