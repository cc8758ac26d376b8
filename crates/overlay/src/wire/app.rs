//! The overlay application message (seed 000 §3.1.1.4, Figure 3.2): the overlay header —
//! version, delivery mode, hop limit, source, previous-hop and destination logical addresses —
//! followed by a chain of extensions, each naming the type of the next (0x00 ends the chain).
//! The payload is an extension; so is the MessageStore extension (ServiceID, MessageID,
//! MessageType) that marks a message for an enhanced delivery service (Figure 3.2(b)); a
//! MessageStore control message carries it without a payload (Figure 3.2(c)).
//!
//! ```text
//!  offset  size  field
//!  0       1     version (4 bits, 1) | kind (4 bits, 0 = application)
//!  1       1     delivery mode: 0 unicast, 1 multicast, 2 flood
//!  2       1     hop limit
//!  3       1     address type: 1 DT (L = 8: x i32, y i32), 2 hypercube (L = 4: label u32)
//!  4       1     next header: type of the first extension, 0 = none
//!  5       1     reserved, 0
//!  6       L     source logical address
//!  6+L     L     previous-hop logical address
//!  6+2L    L     destination logical address (ignored for multicast and flood)
//!  then per extension: next header (1), body length (2), body
//! ```
//!
//! Extension types: 1 payload (any length), 2 MessageStore (13 bytes: ServiceID u32, MessageID
//! u64, MessageType u8 — 0x80 data, 0xFF service request, others the service's own). Other types
//! are kept as [`Extension::Unknown`] and skipped by their length.

use super::{Reader, WireError, Writer, VERSION};
use crate::addr::{DtAddr, HcLabel};

/// Length of the fixed part before the addresses.
pub const FIXED_LEN: usize = 6;

/// How a message travels (seed 000 §3.1.1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryMode {
    /// Up the tree rooted at the destination.
    Unicast,
    /// Down the tree rooted at the source.
    Multicast,
    /// To every neighbour, with duplicate suppression.
    Flood,
    /// Any other value.
    Unknown(u8),
}

impl DeliveryMode {
    /// From the byte.
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => DeliveryMode::Unicast,
            1 => DeliveryMode::Multicast,
            2 => DeliveryMode::Flood,
            n => DeliveryMode::Unknown(n),
        }
    }
    /// The byte.
    pub fn to_u8(self) -> u8 {
        match self {
            DeliveryMode::Unicast => 0,
            DeliveryMode::Multicast => 1,
            DeliveryMode::Flood => 2,
            DeliveryMode::Unknown(n) => n,
        }
    }
}

/// A logical address in a message: all three of a message's addresses have one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Address {
    /// A DT point.
    Dt(DtAddr),
    /// A hypercube label.
    Hc(HcLabel),
}

impl Address {
    fn type_byte(self) -> u8 {
        match self {
            Address::Dt(_) => 1,
            Address::Hc(_) => 2,
        }
    }
    fn len_of(type_byte: u8) -> Result<usize, WireError> {
        match type_byte {
            1 => Ok(8),
            2 => Ok(4),
            n => Err(WireError::AddressType(n)),
        }
    }
    fn read(r: &mut Reader<'_>, type_byte: u8) -> Result<Self, WireError> {
        match type_byte {
            1 => Ok(Address::Dt(r.dt_addr()?)),
            2 => Ok(Address::Hc(HcLabel::new(r.u32()?))),
            n => Err(WireError::AddressType(n)),
        }
    }
    fn write(self, w: &mut Writer<'_>) {
        match self {
            Address::Dt(a) => w.dt_addr(a),
            Address::Hc(l) => w.put(&l.value().to_be_bytes()),
        }
    }
}

/// The MessageStore MessageType (seed 000 §5.2: data messages are 0x80; the service request,
/// "−1", is 0xFF).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// A data message (carries the payload).
    Data,
    /// A request for a service's specification, handled by the MessageStore itself.
    ServiceRequest,
    /// A type defined by the service (ACK, NACK, …).
    Service(u8),
}

impl MessageType {
    /// From the byte.
    pub fn from_u8(v: u8) -> Self {
        match v {
            0x80 => MessageType::Data,
            0xff => MessageType::ServiceRequest,
            n => MessageType::Service(n),
        }
    }
    /// The byte.
    pub fn to_u8(self) -> u8 {
        match self {
            MessageType::Data => 0x80,
            MessageType::ServiceRequest => 0xff,
            MessageType::Service(n) => n,
        }
    }
}

/// Extension type numbers.
pub mod ext {
    /// Ends the chain.
    pub const NONE: u8 = 0;
    /// The application payload.
    pub const PAYLOAD: u8 = 1;
    /// The MessageStore extension.
    pub const MESSAGE_STORE: u8 = 2;
    /// Body length of the MessageStore extension.
    pub const MESSAGE_STORE_LEN: usize = 13;
    /// The message id the forwarding engine ([`crate::forward`]) gives every message it
    /// originates: a u64 per source, for duplicate suppression. Parsed as
    /// [`super::Extension::Unknown`] (its body is the engine's business).
    pub const MESSAGE_ID: u8 = 3;
}

/// One extension of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Extension<'a> {
    /// The application payload.
    Payload(&'a [u8]),
    /// Marks the message for a delivery service.
    MessageStore {
        /// The service.
        service_id: u32,
        /// The message, unique at its source.
        message_id: u64,
        /// The message's type within the service.
        message_type: MessageType,
    },
    /// An extension this implementation does not know, kept with its body.
    Unknown {
        /// Its type (never 0).
        kind: u8,
        /// Its body.
        body: &'a [u8],
    },
}

impl<'a> Extension<'a> {
    /// The type number.
    pub fn kind(&self) -> u8 {
        match self {
            Extension::Payload(_) => ext::PAYLOAD,
            Extension::MessageStore { .. } => ext::MESSAGE_STORE,
            Extension::Unknown { kind, .. } => *kind,
        }
    }
    fn body_len(&self) -> usize {
        match self {
            Extension::Payload(b) | Extension::Unknown { body: b, .. } => b.len(),
            Extension::MessageStore { .. } => ext::MESSAGE_STORE_LEN,
        }
    }
    fn decode(kind: u8, body: &'a [u8]) -> Result<Self, WireError> {
        Ok(match kind {
            ext::PAYLOAD => Extension::Payload(body),
            ext::MESSAGE_STORE => {
                let mut r = Reader::new(body);
                let e = Extension::MessageStore {
                    service_id: r.u32()?,
                    message_id: r.u64()?,
                    message_type: MessageType::from_u8(r.u8()?),
                };
                if r.rest() != 0 || body.len() != ext::MESSAGE_STORE_LEN {
                    return Err(WireError::ExtensionLength {
                        kind,
                        len: body.len(),
                    });
                }
                e
            }
            kind => Extension::Unknown { kind, body },
        })
    }
}

/// Walks the chain after the header: calls `f` with each extension. Shared by the view's
/// validation and the parser, so they cannot disagree.
fn walk<'a>(
    r: &mut Reader<'a>,
    mut next: u8,
    mut f: impl FnMut(Extension<'a>),
) -> Result<(), WireError> {
    while next != ext::NONE {
        let following = r.u8()?;
        let len = usize::from(r.u16()?);
        let body = r.take(len)?;
        f(Extension::decode(next, body).map_err(|e| match e {
            WireError::Truncated { .. } => WireError::ExtensionLength { kind: next, len },
            e => e,
        })?);
        next = following;
    }
    r.finish()
}

/// A checked view of an application message.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validates the whole message (header, addresses, every extension, no trailing bytes).
    ///
    /// # Errors
    /// The first [`WireError`] found.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        let mut r = Reader::new(b);
        let vk = r.u8()?;
        if vk >> 4 != VERSION {
            return Err(WireError::Version(vk >> 4));
        }
        if vk & 0x0f != 0 {
            return Err(WireError::Kind(vk & 0x0f));
        }
        let _mode = r.u8()?;
        let _hops = r.u8()?;
        let at = r.u8()?;
        let next = r.u8()?;
        let reserved = r.u8()?;
        let _ = Address::len_of(at)?;
        if reserved != 0 {
            return Err(WireError::Reserved(reserved));
        }
        for _ in 0..3 {
            Address::read(&mut r, at)?;
        }
        walk(&mut r, next, |_| {})?;
        Ok(Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn addr_len(&self) -> usize {
        Address::len_of(self.b()[3]).unwrap_or(0)
    }
    fn addr_at(&self, i: usize) -> Address {
        let l = self.addr_len();
        let start = FIXED_LEN + i * l;
        let mut r = Reader::new(&self.b()[start..start + l]);
        // Validated by `new_checked`; the fallback is unreachable.
        Address::read(&mut r, self.b()[3]).unwrap_or(Address::Hc(HcLabel::new(0)))
    }

    /// The delivery mode.
    pub fn mode(&self) -> DeliveryMode {
        DeliveryMode::from_u8(self.b()[1])
    }
    /// The hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[2]
    }
    /// The source's logical address.
    pub fn src(&self) -> Address {
        self.addr_at(0)
    }
    /// The previous hop's logical address.
    pub fn prev_hop(&self) -> Address {
        self.addr_at(1)
    }
    /// The destination's logical address.
    pub fn dest(&self) -> Address {
        self.addr_at(2)
    }
    /// Length of the header (fixed part and addresses).
    pub fn header_len(&self) -> usize {
        FIXED_LEN + 3 * self.addr_len()
    }
    /// The extensions, in chain order.
    pub fn extensions(&self) -> Vec<Extension<'_>> {
        let mut v = Vec::new();
        let mut r = Reader::new(&self.b()[self.header_len()..]);
        let _ = walk(&mut r, self.b()[4], |e| v.push(e));
        v
    }
    /// The underlying bytes.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the hop limit in place (forwarding).
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[2] = v;
    }
    /// Sets the previous hop in place (forwarding). Ignored if `a` is of the other type.
    pub fn set_prev_hop(&mut self, a: Address) {
        let at = self.buffer.as_ref()[3];
        if a.type_byte() != at {
            return;
        }
        let l = self.addr_len();
        let mut tmp = [0u8; 8];
        if let Ok(mut w) = Writer::new(&mut tmp[..l], l) {
            a.write(&mut w);
        }
        self.buffer.as_mut()[FIXED_LEN + l..FIXED_LEN + 2 * l].copy_from_slice(&tmp[..l]);
    }
}

/// A parsed application message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr<'a> {
    /// How it travels.
    pub mode: DeliveryMode,
    /// Hops left.
    pub hop_limit: u8,
    /// The source.
    pub src: Address,
    /// The previous hop.
    pub prev_hop: Address,
    /// The destination (unicast).
    pub dest: Address,
    /// The extension chain, in order.
    pub extensions: Vec<Extension<'a>>,
}

impl<'a> Repr<'a> {
    /// Parses a checked packet.
    ///
    /// # Errors
    /// None for a view from [`Packet::new_checked`]; kept for symmetry with other decoders.
    pub fn parse<T: AsRef<[u8]>>(packet: &'a Packet<T>) -> Result<Self, WireError> {
        Self::read(packet.b())
    }

    /// Checks and parses bytes.
    ///
    /// # Errors
    /// As [`Packet::new_checked`].
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<Self, WireError> {
        Packet::new_checked(bytes)?;
        Self::read(bytes)
    }

    fn read(bytes: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let fixed = r.take(FIXED_LEN)?;
        let (mode, hop_limit, at, next) = (fixed[1], fixed[2], fixed[3], fixed[4]);
        let src = Address::read(&mut r, at)?;
        let prev_hop = Address::read(&mut r, at)?;
        let dest = Address::read(&mut r, at)?;
        let mut extensions = Vec::new();
        walk(&mut r, next, |e| extensions.push(e))?;
        Ok(Repr {
            mode: DeliveryMode::from_u8(mode),
            hop_limit,
            src,
            prev_hop,
            dest,
            extensions,
        })
    }

    /// The payload extension's bytes, if any.
    pub fn payload(&self) -> Option<&'a [u8]> {
        self.extensions.iter().find_map(|e| match e {
            Extension::Payload(b) => Some(*b),
            _ => None,
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        let l = match self.src {
            Address::Dt(_) => 8,
            Address::Hc(_) => 4,
        };
        FIXED_LEN
            + 3 * l
            + self
                .extensions
                .iter()
                .map(|e| 3 + e.body_len())
                .sum::<usize>()
    }

    /// Writes the message into `buf` (at least [`Repr::buffer_len`] bytes).
    ///
    /// # Errors
    /// [`WireError::Buffer`] if `buf` is short; [`WireError::AddressType`] if the three
    /// addresses are not of one type; [`WireError::ExtensionTooLong`] for a body over 65,535
    /// bytes; [`WireError::ExtensionLength`] for an unknown extension numbered 0 (it would end
    /// the chain).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let at = self.src.type_byte();
        for a in [self.prev_hop, self.dest] {
            if a.type_byte() != at {
                return Err(WireError::AddressType(a.type_byte()));
            }
        }
        for e in &self.extensions {
            if e.body_len() > usize::from(u16::MAX) {
                return Err(WireError::ExtensionTooLong(e.body_len()));
            }
            if e.kind() == ext::NONE {
                return Err(WireError::ExtensionLength {
                    kind: 0,
                    len: e.body_len(),
                });
            }
        }
        let need = self.buffer_len();
        let mut w = Writer::new(buf, need)?;
        let first = self.extensions.first().map_or(ext::NONE, |e| e.kind());
        w.put(&[
            VERSION << 4,
            self.mode.to_u8(),
            self.hop_limit,
            at,
            first,
            0,
        ]);
        for a in [self.src, self.prev_hop, self.dest] {
            a.write(&mut w);
        }
        for (i, e) in self.extensions.iter().enumerate() {
            let next = self.extensions.get(i + 1).map_or(ext::NONE, |n| n.kind());
            w.put(&[next]);
            w.put(&(e.body_len() as u16).to_be_bytes());
            match e {
                Extension::Payload(b) | Extension::Unknown { body: b, .. } => w.put(b),
                Extension::MessageStore {
                    service_id,
                    message_id,
                    message_type,
                } => {
                    w.put(&service_id.to_be_bytes());
                    w.put(&message_id.to_be_bytes());
                    w.put(&[message_type.to_u8()]);
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
        match self.emit(&mut out[start..]) {
            Ok(_) => Ok(()),
            Err(e) => {
                out.truncate(start);
                Err(e)
            }
        }
    }
}
