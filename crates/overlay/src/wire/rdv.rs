//! Rendezvous messages on the wire (the messages of [`crate::rendezvous`]): a joining node asks
//! the rendezvous server who is there; members and leaders register with it.
//!
//! ```text
//!  offset  size  field
//!  0       1     version (4 bits, 1) | kind (4 bits, 3 = rendezvous)
//!  1       1     type: 1 Register, 2 Query, 3 Members; others refused
//!  2       1     flags: Register bit 0 the registrant is a leader (DT leader, hypercube
//!                HRoot); other bits, and other types, 0
//!  3       1     count: Members the number of entries (at most MAX_MEMBERS); others 0
//!  4       …     Register: the registrant's substrate address; Query: where to answer;
//!                Members: `count` entries, each a flags byte (bit 0 leader) then a substrate
//!                address (kind (1), length (1), bytes)
//! ```
//!
//! A message ends exactly after its last field ("invalid length" otherwise).

use super::{Reader, SubstrateRepr, WireError, WireSubstrate, Writer, VERSION};
use crate::rendezvous::{Member, Message};

/// The kind nibble of a rendezvous datagram.
pub const KIND: u8 = 3;

/// At most this many entries in one `Members` answer.
pub const MAX_MEMBERS: usize = 32;

const LEADER: u8 = 0x01;

/// A parsed rendezvous message, substrate addresses kept in wire form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repr {
    /// A node registers (and refreshes its registration).
    Register {
        /// Whether it is a leader.
        leader: bool,
        /// Where it is.
        node: SubstrateRepr,
    },
    /// A node asks who is there.
    Query {
        /// Where to answer.
        node: SubstrateRepr,
    },
    /// The server's answer: members, leaders first.
    Members(Vec<(bool, SubstrateRepr)>),
}

impl Repr {
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
        if vk & 0x0f != KIND {
            return Err(WireError::Kind(vk & 0x0f));
        }
        let ty = r.u8()?;
        let flags = r.u8()?;
        let count = r.u8()?;
        let repr = match ty {
            1 => {
                if flags & !LEADER != 0 || count != 0 {
                    return Err(WireError::Reserved(flags | count));
                }
                Repr::Register {
                    leader: flags & LEADER != 0,
                    node: SubstrateRepr::read(&mut r)?,
                }
            }
            2 => {
                if flags != 0 || count != 0 {
                    return Err(WireError::Reserved(flags | count));
                }
                Repr::Query {
                    node: SubstrateRepr::read(&mut r)?,
                }
            }
            3 => {
                if flags != 0 {
                    return Err(WireError::Reserved(flags));
                }
                if usize::from(count) > MAX_MEMBERS {
                    return Err(WireError::Reserved(count));
                }
                let mut v = Vec::with_capacity(usize::from(count));
                for _ in 0..count {
                    let f = r.u8()?;
                    if f & !LEADER != 0 {
                        return Err(WireError::Reserved(f));
                    }
                    v.push((f & LEADER != 0, SubstrateRepr::read(&mut r)?));
                }
                Repr::Members(v)
            }
            t => return Err(WireError::Kind(t)),
        };
        r.finish()?;
        Ok(repr)
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        4 + match self {
            Repr::Register { node, .. } | Repr::Query { node } => node.wire_len(),
            Repr::Members(v) => v.iter().map(|(_, s)| 1 + s.wire_len()).sum(),
        }
    }

    /// Writes the message into `buf`; returns the bytes written.
    ///
    /// # Errors
    /// [`WireError::Buffer`] if `buf` is shorter than [`Repr::buffer_len`];
    /// [`WireError::Reserved`] for more than [`MAX_MEMBERS`] members.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if let Repr::Members(v) = self {
            if v.len() > MAX_MEMBERS {
                return Err(WireError::Reserved(
                    u8::try_from(v.len()).unwrap_or(u8::MAX),
                ));
            }
        }
        let need = self.buffer_len();
        let mut w = Writer::new(buf, need)?;
        match self {
            Repr::Register { leader, node } => {
                w.put(&[VERSION << 4 | KIND, 1, if *leader { LEADER } else { 0 }, 0]);
                node.write(&mut w);
            }
            Repr::Query { node } => {
                w.put(&[VERSION << 4 | KIND, 2, 0, 0]);
                node.write(&mut w);
            }
            Repr::Members(v) => {
                // At most MAX_MEMBERS (checked above), so the count fits a byte.
                w.put(&[VERSION << 4 | KIND, 3, 0, v.len() as u8]);
                for (leader, s) in v {
                    w.put(&[if *leader { LEADER } else { 0 }]);
                    s.write(&mut w);
                }
            }
        }
        Ok(need)
    }

    /// Appends the message to `out`.
    ///
    /// # Errors
    /// As [`Repr::emit`].
    pub fn emit_into(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        let start = out.len();
        out.resize(start + self.buffer_len(), 0);
        let r = self.emit(&mut out[start..]).map(|_| ());
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    /// The wire form of a rendezvous message (members beyond [`MAX_MEMBERS`] are left out).
    pub fn from_message<S: WireSubstrate>(m: &Message<S>) -> Repr {
        match m {
            Message::Register { leader, node } => Repr::Register {
                leader: *leader,
                node: node.to_wire(),
            },
            Message::Query { node } => Repr::Query {
                node: node.to_wire(),
            },
            Message::Members(v) => Repr::Members(
                v.iter()
                    .take(MAX_MEMBERS)
                    .map(|m| (m.leader, m.node.to_wire()))
                    .collect(),
            ),
        }
    }

    /// The message, or `None` if a substrate address is of a kind `S` cannot hold (members
    /// of another kind are left out of a `Members`).
    pub fn to_message<S: WireSubstrate>(&self) -> Option<Message<S>> {
        Some(match self {
            Repr::Register { leader, node } => Message::Register {
                leader: *leader,
                node: S::from_wire(node)?,
            },
            Repr::Query { node } => Message::Query {
                node: S::from_wire(node)?,
            },
            Repr::Members(v) => Message::Members(
                v.iter()
                    .filter_map(|(leader, s)| {
                        Some(Member {
                            leader: *leader,
                            node: S::from_wire(s)?,
                        })
                    })
                    .collect(),
            ),
        })
    }
}
