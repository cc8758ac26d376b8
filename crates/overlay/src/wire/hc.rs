//! Hypercube protocol messages on the wire (the messages of [`crate::hypercube`]).
//!
//! ```text
//!  offset  size  field
//!  0       1     version (4 bits, 1) | kind (4 bits, 2 = hypercube control)
//!  1       1     type: 1 Beacon, 2 Ping, 3 Lookup, 4 Join, 5 Assign, 6 Leave, 7 Hole,
//!                8 Duplicate, 9 Rejoin
//!  2       1     hops left (Lookup); 0 otherwise
//!  3       1     flags: bit 0 a substrate address follows; bit 1 a cube identifier follows;
//!                other bits 0
//!  4       4     label: Beacon the HRoot's, Ping/Leave the sender's, Lookup the target,
//!                Assign the label given, Hole the missing one, Duplicate the contested one
//!  8       4     value: Beacon its sequence number, Lookup the origin's label; 0 otherwise
//!  12      …     substrate address (Beacon: the HRoot's, Lookup: the origin's, Join: the
//!                joining node's, Duplicate: the other holder's, Rejoin: where to join):
//!                kind (1), length (1), bytes
//!  …       4     cube identifier (Beacon, Assign: the sender's cube; Rejoin: the cube that
//!                dissolves), if flagged
//! ```
//!
//! Unknown types are kept as [`MessageKind::Unknown`].

use super::{Reader, SubstrateRepr, WireError, WireSubstrate, Writer, VERSION};
use crate::addr::HcLabel;
use crate::hypercube::Message;

/// Length of the fixed part.
pub const FIXED_LEN: usize = 12;

const HAS_SUBSTRATE: u8 = 0x01;
const HAS_CUBE: u8 = 0x02;

/// The type byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// The HRoot's periodic beacon, relayed through the cube.
    Beacon,
    /// Neighbour heartbeat.
    Ping,
    /// Find the node holding a label (greedy bit-fixing routing).
    Lookup,
    /// A node without a label asks for one.
    Join,
    /// The HRoot gives a label.
    Assign,
    /// The sender leaves.
    Leave,
    /// A label below the HRoot's is missing.
    Hole,
    /// Two nodes hold one label: the receiver must give it up.
    Duplicate,
    /// A cube lost a merge: its nodes join again.
    Rejoin,
    /// Any other type.
    Unknown(u8),
}

impl MessageKind {
    /// From the byte.
    pub fn from_u8(v: u8) -> Self {
        use MessageKind::*;
        match v {
            1 => Beacon,
            2 => Ping,
            3 => Lookup,
            4 => Join,
            5 => Assign,
            6 => Leave,
            7 => Hole,
            8 => Duplicate,
            9 => Rejoin,
            n => Unknown(n),
        }
    }
    /// The byte.
    pub fn to_u8(self) -> u8 {
        use MessageKind::*;
        match self {
            Beacon => 1,
            Ping => 2,
            Lookup => 3,
            Join => 4,
            Assign => 5,
            Leave => 6,
            Hole => 7,
            Duplicate => 8,
            Rejoin => 9,
            Unknown(n) => n,
        }
    }
}

/// A parsed hypercube message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// The type.
    pub kind: MessageKind,
    /// Hops left (Lookup).
    pub hops: u8,
    /// The label field (meaning by type, see the module documentation).
    pub label: HcLabel,
    /// The value field (meaning by type).
    pub value: u32,
    /// The substrate address, for the types that carry one.
    pub substrate: Option<SubstrateRepr>,
    /// The cube identifier, for the types that carry one.
    pub cube: Option<u32>,
}

/// A checked view of a hypercube message.
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
        Repr::parse_bytes(buffer.as_ref())?;
        Ok(Packet { buffer })
    }
    /// The message type.
    pub fn kind(&self) -> MessageKind {
        MessageKind::from_u8(self.buffer.as_ref()[1])
    }
    /// The label field.
    pub fn label(&self) -> HcLabel {
        let b = self.buffer.as_ref();
        HcLabel::new(u32::from_be_bytes([b[4], b[5], b[6], b[7]]))
    }
}

impl Repr {
    /// Parses a checked packet.
    ///
    /// # Errors
    /// None for a view from [`Packet::new_checked`].
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Self, WireError> {
        Self::parse_bytes(packet.buffer.as_ref())
    }

    /// Checks and parses bytes.
    ///
    /// # Errors
    /// The first [`WireError`] found.
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let vk = r.u8()?;
        if vk >> 4 != VERSION {
            return Err(WireError::Version(vk >> 4));
        }
        if vk & 0x0f != 2 {
            return Err(WireError::Kind(vk & 0x0f));
        }
        let kind = MessageKind::from_u8(r.u8()?);
        let hops = r.u8()?;
        let flags = r.u8()?;
        if flags & !(HAS_SUBSTRATE | HAS_CUBE) != 0 {
            return Err(WireError::Reserved(flags));
        }
        let label = HcLabel::new(r.u32()?);
        let value = r.u32()?;
        let substrate = if flags & HAS_SUBSTRATE != 0 {
            Some(SubstrateRepr::read(&mut r)?)
        } else {
            None
        };
        let cube = if flags & HAS_CUBE != 0 {
            Some(r.u32()?)
        } else {
            None
        };
        r.finish()?;
        Ok(Repr {
            kind,
            hops,
            label,
            value,
            substrate,
            cube,
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN
            + self.substrate.as_ref().map_or(0, |s| s.wire_len())
            + if self.cube.is_some() { 4 } else { 0 }
    }

    /// Writes the message into `buf`; returns the bytes written.
    ///
    /// # Errors
    /// [`WireError::Buffer`] if `buf` is shorter than [`Repr::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let need = self.buffer_len();
        let mut w = Writer::new(buf, need)?;
        let flags = if self.substrate.is_some() {
            HAS_SUBSTRATE
        } else {
            0
        } | if self.cube.is_some() { HAS_CUBE } else { 0 };
        w.put(&[VERSION << 4 | 2, self.kind.to_u8(), self.hops, flags]);
        w.put(&self.label.value().to_be_bytes());
        w.put(&self.value.to_be_bytes());
        if let Some(s) = &self.substrate {
            s.write(&mut w);
        }
        if let Some(c) = self.cube {
            w.put(&c.to_be_bytes());
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
}

impl Repr {
    /// The wire form of a protocol message.
    pub fn from_message<S: WireSubstrate>(m: &Message<S>) -> Repr {
        let r = |kind, label, value, substrate: Option<&S>| Repr {
            kind,
            hops: 0,
            label,
            value,
            substrate: substrate.map(WireSubstrate::to_wire),
            cube: None,
        };
        match m {
            Message::Beacon {
                root,
                seq,
                root_substrate,
                cube,
            } => Repr {
                cube: Some(*cube),
                ..r(MessageKind::Beacon, *root, *seq, Some(root_substrate))
            },
            Message::Ping { src } => r(MessageKind::Ping, *src, 0, None),
            Message::Lookup {
                target,
                origin,
                origin_substrate,
                hops,
            } => Repr {
                hops: *hops,
                ..r(
                    MessageKind::Lookup,
                    *target,
                    origin.value(),
                    Some(origin_substrate),
                )
            },
            Message::Join { joiner } => r(MessageKind::Join, HcLabel::new(0), 0, Some(joiner)),
            Message::Assign { label, cube } => Repr {
                cube: Some(*cube),
                ..r(MessageKind::Assign, *label, 0, None)
            },
            Message::Leave { src } => r(MessageKind::Leave, *src, 0, None),
            Message::Hole { label } => r(MessageKind::Hole, *label, 0, None),
            Message::Duplicate { label, holder } => {
                r(MessageKind::Duplicate, *label, 0, Some(holder))
            }
            Message::Rejoin { cube, via } => Repr {
                cube: Some(*cube),
                ..r(MessageKind::Rejoin, HcLabel::new(0), 0, Some(via))
            },
        }
    }

    /// The protocol message, or `None` for an unknown type, a missing substrate address or one
    /// of a kind `S` cannot hold, a Rejoin without its cube (the caller counts and drops it).
    /// A Beacon or Assign without a cube identifier is of cube 0.
    pub fn to_message<S: WireSubstrate>(&self) -> Option<Message<S>> {
        let sub = || self.substrate.as_ref().and_then(S::from_wire);
        Some(match self.kind {
            MessageKind::Beacon => Message::Beacon {
                root: self.label,
                seq: self.value,
                root_substrate: sub()?,
                cube: self.cube.unwrap_or(0),
            },
            MessageKind::Ping => Message::Ping { src: self.label },
            MessageKind::Lookup => Message::Lookup {
                target: self.label,
                origin: HcLabel::new(self.value),
                origin_substrate: sub()?,
                hops: self.hops,
            },
            MessageKind::Join => Message::Join { joiner: sub()? },
            MessageKind::Assign => Message::Assign {
                label: self.label,
                cube: self.cube.unwrap_or(0),
            },
            MessageKind::Leave => Message::Leave { src: self.label },
            MessageKind::Hole => Message::Hole { label: self.label },
            MessageKind::Duplicate => Message::Duplicate {
                label: self.label,
                holder: sub()?,
            },
            MessageKind::Rejoin => Message::Rejoin {
                cube: self.cube?,
                via: sub()?,
            },
            MessageKind::Unknown(_) => return None,
        })
    }
}
