//! Substrate addresses on the wire: a kind byte, a length byte and the address bytes (seed 000
//! §3.1.1: a substrate address names the realm and protocol besides the underlay address).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{Reader, WireError, Writer};
use crate::addr::SimAddr;

/// Longest substrate address carried.
pub const MAX_SUBSTRATE: usize = 32;

/// What kind of substrate address follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SubstrateKind {
    /// A simulated node number: 4 bytes.
    Sim,
    /// UDP over IPv4: address (4) and port (2).
    Udp4,
    /// UDP over IPv6: address (16) and port (2).
    Udp6,
    /// Any other kind, kept with its bytes.
    Unknown(u8),
}

impl SubstrateKind {
    /// From the kind byte.
    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => SubstrateKind::Sim,
            2 => SubstrateKind::Udp4,
            3 => SubstrateKind::Udp6,
            n => SubstrateKind::Unknown(n),
        }
    }
    /// The kind byte.
    pub fn to_u8(self) -> u8 {
        match self {
            SubstrateKind::Sim => 1,
            SubstrateKind::Udp4 => 2,
            SubstrateKind::Udp6 => 3,
            SubstrateKind::Unknown(n) => n,
        }
    }
    fn fixed_len(self) -> Option<usize> {
        match self {
            SubstrateKind::Sim => Some(4),
            SubstrateKind::Udp4 => Some(6),
            SubstrateKind::Udp6 => Some(18),
            SubstrateKind::Unknown(_) => None,
        }
    }
}

/// A substrate address as carried on the wire (owned, at most [`MAX_SUBSTRATE`] bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubstrateRepr {
    kind: SubstrateKind,
    len: u8,
    bytes: [u8; MAX_SUBSTRATE],
}

impl SubstrateRepr {
    /// A substrate address of `kind` with `bytes`.
    ///
    /// # Errors
    /// [`WireError::Substrate`] if `bytes` is longer than [`MAX_SUBSTRATE`] or of the wrong
    /// length for a known kind.
    pub fn new(kind: SubstrateKind, bytes: &[u8]) -> Result<Self, WireError> {
        let bad = WireError::Substrate {
            kind: kind.to_u8(),
            len: bytes.len(),
        };
        if bytes.len() > MAX_SUBSTRATE || kind.fixed_len().is_some_and(|l| l != bytes.len()) {
            return Err(bad);
        }
        let mut b = [0u8; MAX_SUBSTRATE];
        b[..bytes.len()].copy_from_slice(bytes);
        Ok(SubstrateRepr {
            kind,
            len: bytes.len() as u8,
            bytes: b,
        })
    }
    /// The kind.
    pub fn kind(&self) -> SubstrateKind {
        self.kind
    }
    /// The address bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
    pub(crate) fn wire_len(&self) -> usize {
        2 + usize::from(self.len)
    }
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let kind = SubstrateKind::from_u8(r.u8()?);
        let len = usize::from(r.u8()?);
        let b = r.take(len)?;
        SubstrateRepr::new(kind, b)
    }
    pub(crate) fn write(&self, w: &mut Writer<'_>) {
        w.put(&[self.kind.to_u8(), self.len]);
        w.put(self.bytes());
    }
}

/// A substrate address type that can travel in control messages.
pub trait WireSubstrate: Sized {
    /// This address on the wire.
    fn to_wire(&self) -> SubstrateRepr;
    /// The address from the wire; `None` if it is of another kind.
    fn from_wire(r: &SubstrateRepr) -> Option<Self>;
}

/// Wire substrate addresses as they are (a rendezvous server that stores whatever kind its
/// clients use, `viastack overlay rendezvous`).
impl WireSubstrate for SubstrateRepr {
    fn to_wire(&self) -> SubstrateRepr {
        *self
    }
    fn from_wire(r: &SubstrateRepr) -> Option<Self> {
        Some(*r)
    }
}

impl WireSubstrate for SimAddr {
    fn to_wire(&self) -> SubstrateRepr {
        let mut bytes = [0u8; MAX_SUBSTRATE];
        bytes[..4].copy_from_slice(&self.0.to_be_bytes());
        SubstrateRepr {
            kind: SubstrateKind::Sim,
            len: 4,
            bytes,
        }
    }
    fn from_wire(r: &SubstrateRepr) -> Option<Self> {
        match (r.kind, r.bytes()) {
            (SubstrateKind::Sim, &[a, b, c, d]) => Some(SimAddr(u32::from_be_bytes([a, b, c, d]))),
            _ => None,
        }
    }
}

/// A kernel node id (a device address in a stack) travels as a simulated node number: in a
/// stack the device maps node ids to where they are.
impl WireSubstrate for viastack_kernel::NodeId {
    fn to_wire(&self) -> SubstrateRepr {
        SimAddr(self.0).to_wire()
    }
    fn from_wire(r: &SubstrateRepr) -> Option<Self> {
        SimAddr::from_wire(r).map(|a| viastack_kernel::NodeId(a.0))
    }
}

impl WireSubstrate for SocketAddr {
    fn to_wire(&self) -> SubstrateRepr {
        let mut bytes = [0u8; MAX_SUBSTRATE];
        let (kind, len) = match self.ip() {
            IpAddr::V4(ip) => {
                bytes[..4].copy_from_slice(&ip.octets());
                bytes[4..6].copy_from_slice(&self.port().to_be_bytes());
                (SubstrateKind::Udp4, 6)
            }
            IpAddr::V6(ip) => {
                bytes[..16].copy_from_slice(&ip.octets());
                bytes[16..18].copy_from_slice(&self.port().to_be_bytes());
                (SubstrateKind::Udp6, 18)
            }
        };
        SubstrateRepr { kind, len, bytes }
    }
    fn from_wire(r: &SubstrateRepr) -> Option<Self> {
        let b = r.bytes();
        match r.kind {
            SubstrateKind::Udp4 if b.len() == 6 => Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
                u16::from_be_bytes([b[4], b[5]]),
            )),
            SubstrateKind::Udp6 if b.len() == 18 => {
                let mut ip = [0u8; 16];
                ip.copy_from_slice(&b[..16]);
                Some(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(ip)),
                    u16::from_be_bytes([b[16], b[17]]),
                ))
            }
            _ => None,
        }
    }
}
