//! DT protocol messages on the wire (the messages of [`crate::dt`]).
//!
//! ```text
//!  offset  size  field
//!  0       1     version (4 bits, 1) | kind (4 bits, 1 = DT control)
//!  1       1     type: 1 HelloNeighbor, 2 HelloNotNeighbor, 3 Goodbye, 4 NewNode
//!  2       1     flags: bit 0 CW present, bit 1 CCW present (hellos); 0 otherwise
//!  3       1     hops left (NewNode); 0 otherwise
//!  4       8     x i32, y i32: the sender (hellos, Goodbye) or the joining node (NewNode)
//!  12      …     hellos: [CW: x, y, substrate] [CCW: x, y, substrate], each if flagged
//!                NewNode: the joining node's substrate address
//!  substrate address: kind (1: sim u32, 2: UDP/IPv4 addr+port, 3: UDP/IPv6 addr+port),
//!                     length (1), bytes
//! ```
//!
//! Unknown types are kept as [`Repr::Unknown`] with the bytes after offset 4.

use super::{Reader, SubstrateRepr, WireError, WireSubstrate, Writer, VERSION};
use crate::addr::DtAddr;
use crate::dt::{Message, Peer};

/// Length of the fixed part.
pub const FIXED_LEN: usize = 4;

const CW: u8 = 0x01;
const CCW: u8 = 0x02;

/// The type byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// HelloNeighbor.
    HelloNeighbor,
    /// HelloNotNeighbor.
    HelloNotNeighbor,
    /// Goodbye.
    Goodbye,
    /// NewNode.
    NewNode,
    /// Any other type.
    Unknown(u8),
}

impl MessageKind {
    /// From the byte.
    pub fn from_u8(v: u8) -> Self {
        match v {
            1 => MessageKind::HelloNeighbor,
            2 => MessageKind::HelloNotNeighbor,
            3 => MessageKind::Goodbye,
            4 => MessageKind::NewNode,
            n => MessageKind::Unknown(n),
        }
    }
    /// The byte.
    pub fn to_u8(self) -> u8 {
        match self {
            MessageKind::HelloNeighbor => 1,
            MessageKind::HelloNotNeighbor => 2,
            MessageKind::Goodbye => 3,
            MessageKind::NewNode => 4,
            MessageKind::Unknown(n) => n,
        }
    }
}

/// A node as carried in a message: logical and substrate address.
pub type WirePeer = (DtAddr, SubstrateRepr);

/// A parsed DT message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repr<'a> {
    /// See [`Message::HelloNeighbor`].
    HelloNeighbor {
        /// The sender.
        src: DtAddr,
        /// The sender's neighbour clockwise of the receiver.
        cw: Option<WirePeer>,
        /// The sender's neighbour counter-clockwise of the receiver.
        ccw: Option<WirePeer>,
    },
    /// See [`Message::HelloNotNeighbor`].
    HelloNotNeighbor {
        /// The sender.
        src: DtAddr,
        /// The sender's neighbour clockwise of the receiver.
        cw: Option<WirePeer>,
        /// The sender's neighbour counter-clockwise of the receiver.
        ccw: Option<WirePeer>,
    },
    /// See [`Message::Goodbye`].
    Goodbye {
        /// The sender.
        src: DtAddr,
    },
    /// See [`Message::NewNode`].
    NewNode {
        /// The joining node.
        node: WirePeer,
        /// Hops left.
        hops: u8,
    },
    /// A type this implementation does not know.
    Unknown {
        /// The type byte.
        kind: u8,
        /// The bytes from offset 2 on.
        body: &'a [u8],
    },
}

/// A checked view of a DT message.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates the whole message.
    ///
    /// # Errors
    /// The first [`WireError`] found.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        Repr::read(buffer.as_ref())?;
        Ok(Packet { buffer })
    }
    /// The message type.
    pub fn kind(&self) -> MessageKind {
        MessageKind::from_u8(self.buffer.as_ref()[1])
    }
    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[2]
    }
    /// The underlying bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

fn read_peer(r: &mut Reader<'_>) -> Result<WirePeer, WireError> {
    Ok((r.dt_addr()?, SubstrateRepr::read(r)?))
}

fn peer_len(p: &Option<WirePeer>) -> usize {
    p.as_ref().map_or(0, |(_, s)| 8 + s.wire_len())
}

impl<'a> Repr<'a> {
    /// Parses a checked packet.
    ///
    /// # Errors
    /// None for a view from [`Packet::new_checked`].
    pub fn parse<T: AsRef<[u8]>>(packet: &'a Packet<T>) -> Result<Self, WireError> {
        Self::read(packet.buffer.as_ref())
    }

    /// Checks and parses bytes.
    ///
    /// # Errors
    /// The first [`WireError`] found.
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<Self, WireError> {
        Self::read(bytes)
    }

    fn read(bytes: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let vk = r.u8()?;
        if vk >> 4 != VERSION {
            return Err(WireError::Version(vk >> 4));
        }
        if vk & 0x0f != 1 {
            return Err(WireError::Kind(vk & 0x0f));
        }
        let kind = MessageKind::from_u8(r.u8()?);
        if let MessageKind::Unknown(k) = kind {
            return Ok(Repr::Unknown {
                kind: k,
                body: &bytes[2..],
            });
        }
        let flags = r.u8()?;
        let hops = r.u8()?;
        let reserved_flags = match kind {
            MessageKind::HelloNeighbor | MessageKind::HelloNotNeighbor => flags & !(CW | CCW),
            _ => flags,
        };
        if reserved_flags != 0 {
            return Err(WireError::Reserved(reserved_flags));
        }
        if kind != MessageKind::NewNode && hops != 0 {
            return Err(WireError::Reserved(hops));
        }
        let src = r.dt_addr()?;
        let repr = match kind {
            MessageKind::HelloNeighbor | MessageKind::HelloNotNeighbor => {
                let cw = if flags & CW != 0 {
                    Some(read_peer(&mut r)?)
                } else {
                    None
                };
                let ccw = if flags & CCW != 0 {
                    Some(read_peer(&mut r)?)
                } else {
                    None
                };
                if kind == MessageKind::HelloNeighbor {
                    Repr::HelloNeighbor { src, cw, ccw }
                } else {
                    Repr::HelloNotNeighbor { src, cw, ccw }
                }
            }
            MessageKind::Goodbye => Repr::Goodbye { src },
            _ => Repr::NewNode {
                node: (src, SubstrateRepr::read(&mut r)?),
                hops,
            },
        };
        r.finish()?;
        Ok(repr)
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        match self {
            Repr::HelloNeighbor { cw, ccw, .. } | Repr::HelloNotNeighbor { cw, ccw, .. } => {
                FIXED_LEN + 8 + peer_len(cw) + peer_len(ccw)
            }
            Repr::Goodbye { .. } => FIXED_LEN + 8,
            Repr::NewNode { node, .. } => FIXED_LEN + 8 + node.1.wire_len(),
            Repr::Unknown { body, .. } => 2 + body.len(),
        }
    }

    /// Writes the message into `buf`; returns the bytes written.
    ///
    /// # Errors
    /// [`WireError::Buffer`] if `buf` is shorter than [`Repr::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let need = self.buffer_len();
        let mut w = Writer::new(buf, need)?;
        let head = VERSION << 4 | 1;
        match self {
            Repr::HelloNeighbor { src, cw, ccw } | Repr::HelloNotNeighbor { src, cw, ccw } => {
                let kind = if matches!(self, Repr::HelloNeighbor { .. }) {
                    MessageKind::HelloNeighbor
                } else {
                    MessageKind::HelloNotNeighbor
                };
                let flags = if cw.is_some() { CW } else { 0 } | if ccw.is_some() { CCW } else { 0 };
                w.put(&[head, kind.to_u8(), flags, 0]);
                w.dt_addr(*src);
                for (a, s) in [cw, ccw].into_iter().flatten() {
                    w.dt_addr(*a);
                    s.write(&mut w);
                }
            }
            Repr::Goodbye { src } => {
                w.put(&[head, MessageKind::Goodbye.to_u8(), 0, 0]);
                w.dt_addr(*src);
            }
            Repr::NewNode { node, hops } => {
                w.put(&[head, MessageKind::NewNode.to_u8(), 0, *hops]);
                w.dt_addr(node.0);
                node.1.write(&mut w);
            }
            Repr::Unknown { kind, body } => {
                w.put(&[head, *kind]);
                w.put(body);
            }
        }
        Ok(need)
    }

    /// Appends the message to `out`.
    ///
    /// # Errors
    /// As [`Repr::emit`] (never, in practice: `out` grows to fit).
    pub fn emit_into(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        let start = out.len();
        out.resize(start + self.buffer_len(), 0);
        self.emit(&mut out[start..]).map(|_| ())
    }

    /// The wire form of a protocol message.
    pub fn from_message<S: WireSubstrate>(m: &Message<S>) -> Repr<'static> {
        let peer = |p: &Option<Peer<S>>| p.as_ref().map(|p| (p.addr, p.substrate.to_wire()));
        match m {
            Message::HelloNeighbor { src, cw, ccw } => Repr::HelloNeighbor {
                src: *src,
                cw: peer(cw),
                ccw: peer(ccw),
            },
            Message::HelloNotNeighbor { src, cw, ccw } => Repr::HelloNotNeighbor {
                src: *src,
                cw: peer(cw),
                ccw: peer(ccw),
            },
            Message::Goodbye { src } => Repr::Goodbye { src: *src },
            Message::NewNode { node, hops } => Repr::NewNode {
                node: (node.addr, node.substrate.to_wire()),
                hops: *hops,
            },
        }
    }

    /// The protocol message, or `None` for an unknown type or a substrate address of a kind
    /// `S` cannot hold (the caller counts and drops it).
    pub fn to_message<S: WireSubstrate>(&self) -> Option<Message<S>> {
        let peer = |p: &Option<WirePeer>| -> Option<Option<Peer<S>>> {
            match p {
                None => Some(None),
                Some((a, s)) => Some(Some(Peer {
                    addr: *a,
                    substrate: S::from_wire(s)?,
                })),
            }
        };
        Some(match self {
            Repr::HelloNeighbor { src, cw, ccw } => Message::HelloNeighbor {
                src: *src,
                cw: peer(cw)?,
                ccw: peer(ccw)?,
            },
            Repr::HelloNotNeighbor { src, cw, ccw } => Message::HelloNotNeighbor {
                src: *src,
                cw: peer(cw)?,
                ccw: peer(ccw)?,
            },
            Repr::Goodbye { src } => Message::Goodbye { src: *src },
            Repr::NewNode { node, hops } => Message::NewNode {
                node: Peer {
                    addr: node.0,
                    substrate: S::from_wire(&node.1)?,
                },
                hops: *hops,
            },
            Repr::Unknown { .. } => return None,
        })
    }
}
